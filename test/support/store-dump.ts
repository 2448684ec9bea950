import { createMongoStore } from "../../src/store/mongo/index.js";
import type { Store } from "../../src/store/types.js";
import { FakeMongo, keyOf } from "../store/fake-mongo/index.js";

/**
 * Everything a store holds, as plain data, to prove that a refused call changed nothing: read the
 * dump before the call and after it, and compare. For the memory store, its own fields (every map,
 * index and record, as the store keeps them); for the MongoDB adapter on the fake driver, every
 * document of every collection, as the fake server holds them. Left out: housekeeping that is not
 * data (the memory store's time of its last sweep of expired escrow), and the rate-limit counters,
 * which count refused calls on purpose (requests per key and address, escrow intake per card).
 */
export interface DumpableStore {
  store: Store;
  dump(): unknown;
  /** The dump without the event outbox and feed (docs/events.md), for a refusal that is itself an event. */
  dumpWithoutEvents(): unknown;
  /** Events written so far (none is sequenced here: no worker runs on these stores). */
  eventsWritten(): number;
}

/** Fields of the memory store's objects that are housekeeping, not data. */
const HOUSEKEEPING: ReadonlySet<string> = new Set(["lastSweepMs", "rateLimits"]);

/** The memory store `store` with a dump of its fields. */
export function dumpableMemory(store: Store): DumpableStore {
  return {
    store,
    dump: () => plain(store, new Set()),
    // The outbox is one object that the stores writing events share: seeded as an "ancestor", it
    // reads as "(cycle)" wherever it appears, before and after alike.
    dumpWithoutEvents: () => plain(store, new Set([store.events])),
    eventsWritten: () => (store.events as unknown as { outbox: unknown[] }).outbox.length,
  };
}

/** A new MongoDB adapter on a new fake server (initialised), with a dump of every document. */
export async function dumpableMongo(): Promise<DumpableStore> {
  const fake = new FakeMongo();
  const store = await createMongoStore({
    uri: "mongodb://fake.invalid/",
    dbName: "receipts_dump",
    createClient: fake.createClient,
  });
  await store.init();
  const dump = (skip: ReadonlySet<string>) => {
    const out: Record<string, string[]> = {};
    const db = fake.database("receipts_dump");
    for (const name of [...db.collections.keys()].sort()) {
      if (HOUSEKEEPING.has(name) || skip.has(name)) continue;
      const docs = db.collections.get(name)?.docs ?? new Map();
      out[name] = [...docs.entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([, doc]) => keyOf(doc));
    }
    return out;
  };
  return {
    store,
    dump: () => dump(new Set()),
    dumpWithoutEvents: () => dump(new Set(["events", "eventState"])),
    eventsWritten: () => fake.database("receipts_dump").collections.get("events")?.docs.size ?? 0,
  };
}

/** A value as plain, comparable data: maps and sets as sorted entries, dates as numbers, no functions. */
function plain(value: unknown, ancestors: Set<object>): unknown {
  if (typeof value === "function") return undefined;
  if (typeof value !== "object" || value === null) return value;
  if (value instanceof Date) return { date: value.getTime() };
  if (ancestors.has(value)) return "(cycle)";
  ancestors.add(value);
  try {
    if (Array.isArray(value)) return value.map((v) => plain(v, ancestors));
    if (value instanceof Map) {
      return [...value.entries()]
        .map(([k, v]) => [JSON.stringify(plain(k, ancestors)), plain(v, ancestors)] as const)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    }
    if (value instanceof Set) return [...value].map((v) => JSON.stringify(plain(v, ancestors))).sort();
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value).sort()) {
      if (!HOUSEKEEPING.has(key)) out[key] = plain((value as Record<string, unknown>)[key], ancestors);
    }
    return out;
  } finally {
    ancestors.delete(value);
  }
}
