import type { Filter } from "mongodb";
import {
  AUDIT_PAGE_MAX,
  type AuditEvent,
  type AuditPage,
  type AuditQuery,
  type AuditStore,
  auditCursorOf,
  auditSeqOf,
} from "../types.js";
import { declareCollection } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey, storeUnavailable } from "./errors.js";
import { scatterGather } from "./sharding.js";

/** The audit log, `_id` each event's number. */
export const AUDIT = declareCollection({
  name: "audit",
  indexes: [
    // The key of `list` ({at: -1}) did not match its sort {at: -1, _id: -1}; a new name (the key of an
    // existing name cannot change).
    { key: { at: -1, _id: -1 }, name: "list_at_id" },
    // A tenant's events in the order they were numbered (`_id`), for its audit pages.
    { key: { tenantId: 1, _id: 1 }, name: "page_tenant" },
  ],
  shardKey: {
    key: { _id: "hashed" },
    why:
      "Appended on every grant, decrypt and key change, each event numbered by the `counters` document " +
      "(its `_id`, growing): a hashed `_id` spreads the inserts over every shard, and `_id` is unique " +
      "whatever the key. Reads (operators, an issuer's own audit) are rare and declared scatter-gather.",
  },
});

/** Counters: `audit` numbers audit events, `auditStable` is how far readers may read (see `MongoAudit`). */
export const COUNTERS = declareCollection({
  name: "counters",
  indexes: [],
  shardKey: {
    key: "unsharded",
    why:
      "Two small documents: the number of the last audit event (one `$inc` per event) and the number " +
      "below which readers have seen every event.",
  },
});

/**
 * The audit log in `audit`, numbered so that a reader that pages through it never skips an event.
 *
 * An append takes the next number from a counter (`counters`, document `audit`) and inserts the event
 * with that number as its `_id`. Two appends can take numbers 7 and 8 and write 8 first, so a reader
 * that saw 8 and moved on would never see 7. Readers therefore only return events up to the "stable"
 * number (`counters`, document `auditStable`): the highest number below which every number is either
 * an event that a majority read sees, or a hole that will never be written. A reader advances it by
 * looking at the numbers after it: a number with no event is claimed with a `hole` document (an
 * insert under the same `_id`); if that insert succeeds, the append that took the number fails on
 * the duplicate `_id` and takes a new number, past anything a reader has read; if it fails, the event
 * is there (perhaps not yet visible to a majority read), and the reader stops before it this time.
 * No clock is involved, so neither clock skew nor a slow writer can make a reader skip an event.
 */
export class MongoAudit implements AuditStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [AUDIT, COUNTERS] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<AuditDoc>(AUDIT.name);
  }

  private get counters() {
    return this.ctx.collection<{ _id: string; seq: number }>(COUNTERS.name);
  }

  append(event: AuditEvent): Promise<void> {
    return this.ctx.run(async () => {
      for (let attempt = 1; attempt <= APPEND_ATTEMPTS; attempt++) {
        const seq = await this.next(COUNTER);
        try {
          await this.collection.insertOne({ ...event, _id: seq }, this.ctx.limit);
          return;
        } catch (err) {
          // A reader gave this number up as a hole while the event was on its way: take another.
          if (!isDuplicateKey(err)) throw err;
        }
      }
      throw storeUnavailable(new Error(`audit.append lost its number ${APPEND_ATTEMPTS} times in a row.`));
    });
  }

  /** Newest first by `at`; events with the same time, the last numbered first. */
  list(limit: number, query: AuditQuery = {}): Promise<AuditEvent[]> {
    if (limit < 1) return Promise.resolve([]);
    const filter: Filter<AuditDoc> = { hole: { $exists: false } };
    if (query.tenantId !== undefined) filter.tenantId = query.tenantId;
    if (query.after !== undefined) filter.at = { $gt: query.after };
    return this.ctx.run(() =>
      this.collection
        .find<AuditEvent>(filter, { ...this.ctx.read, ...SCATTER })
        .sort({ at: -1, _id: -1 })
        .limit(limit)
        .toArray(),
    );
  }

  async page(query: AuditQuery, limit: number, cursor?: string): Promise<AuditPage> {
    const start = cursor === undefined ? undefined : auditSeqOf(cursor);
    return this.ctx.run(async () => {
      const stable = await this.advanceStable();
      const from = start ?? (query.after === undefined ? 0 : await this.startAfter(query.after, stable));
      if (stable <= from) return { events: [], cursor: auditCursorOf(from) };
      const filter: Filter<AuditDoc> = { _id: { $gt: from, $lte: stable }, hole: { $exists: false } };
      if (query.tenantId !== undefined) filter.tenantId = query.tenantId;
      const max = Math.min(Math.max(1, limit), AUDIT_PAGE_MAX);
      const docs = await this.collection
        .find<AuditDoc>(filter, { ...this.ctx.limit, ...SCATTER })
        .sort({ _id: 1 })
        .limit(max)
        .toArray();
      const last = docs.length === max ? (docs.at(-1)?._id ?? stable) : stable;
      return { events: docs.map(eventOf), cursor: auditCursorOf(last) };
    });
  }

  /** The next number of `counter`. */
  private async next(counter: string): Promise<number> {
    const doc = await this.counters.findOneAndUpdate(
      { _id: counter },
      { $inc: { seq: 1 } },
      { ...this.ctx.limit, upsert: true, returnDocument: "after" },
    );
    if (doc === null) throw new Error(`The ${counter} counter did not answer its number.`);
    return doc.seq;
  }

  /** The number before the first event written after `after`, else `stable`. */
  private async startAfter(after: Date, stable: number): Promise<number> {
    const [first] = await this.collection
      .find<AuditDoc>({ at: { $gt: after }, hole: { $exists: false } }, { ...this.ctx.limit, ...SCATTER })
      .sort({ at: 1, _id: 1 })
      .limit(1)
      .toArray();
    return first === undefined ? stable : first._id - 1;
  }

  /**
   * Moves the stable number forward over the numbers after it and returns it: over each number that
   * has its event, and over each hole this call claims. It looks at up to {@link STABLE_SCAN} numbers
   * at a time, at most {@link STABLE_SCANS} times a call, so that a reader catches up at once with
   * however many events were written since anyone last read (up to that bound).
   */
  private async advanceStable(): Promise<number> {
    const [stableDoc, counterDoc] = await Promise.all([
      this.counters.findOne({ _id: STABLE }, this.ctx.limit),
      this.counters.findOne({ _id: COUNTER }, this.ctx.limit),
    ]);
    const stable = this.stableOf(stableDoc);
    const counter = this.stableOf(counterDoc);
    let reached = stable;
    for (let scan = 0; scan < STABLE_SCANS && reached < counter; scan++) {
      const upTo = Math.min(counter, reached + STABLE_SCAN);
      const next = await this.scanFrom(reached, upTo);
      reached = next;
      if (next < upTo) break;
    }
    if (reached > stable) {
      await this.counters.updateOne(
        { _id: STABLE },
        { $max: { seq: reached } },
        { ...this.ctx.limit, upsert: true },
      );
    }
    return reached;
  }

  /**
   * The highest number up to `upTo` that the numbers after `from` reach without a gap: every one has
   * its event or a hole, or is claimed as a hole now. One count when all are there (the usual case);
   * else a walk of the numbers, stopping before the first one whose event is on its way.
   */
  private async scanFrom(from: number, upTo: number): Promise<number> {
    const range = { _id: { $gt: from, $lte: upTo } };
    if ((await this.collection.countDocuments(range, { ...this.ctx.limit, ...SCATTER })) === upTo - from) {
      return upTo;
    }
    const written = new Set(
      (
        await this.collection
          .find<{ _id: number }>(range, { ...this.ctx.limit, ...SCATTER, projection: { _id: 1 } })
          .toArray()
      ).map((doc) => doc._id),
    );
    let reached = from;
    for (let seq = from + 1; seq <= upTo; seq++) {
      if (!written.has(seq) && !(await this.claimHole(seq))) break;
      reached = seq;
    }
    return reached;
  }

  /** Claims `seq` as a hole; false when its event was written meanwhile. */
  private async claimHole(seq: number): Promise<boolean> {
    try {
      await this.collection.insertOne({ _id: seq, hole: true }, this.ctx.limit);
      return true;
    } catch (err) {
      if (isDuplicateKey(err)) return false;
      throw err;
    }
  }

  private stableOf(doc: { seq: number } | null): number {
    return doc?.seq ?? 0;
  }
}

/** Reads of audit that name no whole `_id` (its hashed shard key) go to every shard: declared. */
const SCATTER = scatterGather("audit.list");

/** The counter of event numbers, and the stable number readers have reached. */
const COUNTER = "audit";
const STABLE = "auditStable";
/** How often an append takes a new number after a reader claimed its number as a hole. */
const APPEND_ATTEMPTS = 5;
/** How many numbers a reader looks at in one go to move the stable number. */
const STABLE_SCAN = 5_000;
/** How many such looks one read makes at most: it catches up with 100,000 events at once. */
const STABLE_SCANS = 20;

/** An audit event as stored, its number the `_id`; or a hole, a number no event will have. */
type AuditDoc = (AuditEvent & { _id: number; hole?: undefined }) | { _id: number; hole: true };

/** The event of a stored document (never a hole: every query that returns events excludes them). */
function eventOf(doc: AuditDoc): AuditEvent {
  if (doc.hole === true) throw new Error("An audit hole was read as an event.");
  const { _id: _seq, hole: _hole, ...event } = doc;
  return event;
}
