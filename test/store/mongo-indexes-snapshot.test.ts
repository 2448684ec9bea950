import { describe, expect, it } from "vitest";
import { createMongoStore } from "../../src/store/mongo/index.js";
import { SHARD_KEYS } from "../../src/store/mongo/indexes.js";
import { SCATTER_GATHER, TRANSACTIONS } from "../../src/store/mongo/sharding.js";
import { FakeMongo } from "./fake-mongo/index.js";

/**
 * Every index `init` makes on an empty database, as the server lists them afterwards (names, keys,
 * uniqueness, TTLs, partial filters, in the order made), by collection; with a receipt retention and
 * without one.
 */
async function indexesMadeByInit(receiptRetentionDays?: number): Promise<Record<string, unknown[]>> {
  const fake = new FakeMongo();
  const store = await createMongoStore({
    uri: "mongodb://fake.invalid/",
    dbName: "receipts",
    createClient: fake.createClient,
    ...(receiptRetentionDays === undefined ? {} : { receiptRetentionDays }),
  });
  try {
    await store.init();
    const db = fake.createClient("mongodb://fake.invalid/", {}).db("receipts");
    const made = fake.operations
      .filter((op) => op.name.startsWith("createIndexes "))
      .map((op) => op.name.slice("createIndexes ".length));
    const found: Record<string, unknown[]> = {};
    for (const name of [...new Set(made)].sort()) {
      found[name] = await db.collection(name).listIndexes({ maxTimeMS: 1_000 }).toArray();
    }
    return found;
  } finally {
    await store.close();
  }
}

/** The shard keys as `sh.shardCollection` takes them, by collection (the reasons are prose, not kept). */
function shardKeys(): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(SHARD_KEYS)
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([name, declared]) => [name, { key: declared.key, unique: declared.unique === true }]),
  );
}

/**
 * What the MongoDB adapter asks of a database, held to a snapshot taken before its collections were
 * declared beside their code: the indexes `init` makes (with and without a receipt retention), every
 * collection's shard key, and the declared scatter-gathers and transactions. A change here changes
 * what runs on every deployment: update the snapshot (`npx vitest run <this file> -u`) only on purpose.
 */
describe("MongoDB collections as declared", () => {
  it("make the same indexes and shard keys as the snapshot", async () => {
    const declared = {
      indexes: await indexesMadeByInit(30),
      indexesWithoutRetention: await indexesMadeByInit(),
      shardKeys: shardKeys(),
      scatterGather: Object.fromEntries(Object.entries(SCATTER_GATHER).map(([id, d]) => [id, d.collection])),
      transactions: Object.fromEntries(Object.entries(TRANSACTIONS).map(([id, d]) => [id, d.maxShards])),
    };
    await expect(`${JSON.stringify(declared, null, 2)}\n`).toMatchFileSnapshot(
      "./mongo-indexes-snapshot.json",
    );
  });
});
