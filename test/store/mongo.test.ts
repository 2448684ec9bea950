import { randomBytes } from "node:crypto";
import { MongoClient } from "mongodb";
import { afterAll, describe } from "vitest";
import { createMongoStore } from "../../src/store/mongo/index.js";
import { COLLECTIONS } from "../../src/store/mongo/indexes.js";
import { shardAsDeclared } from "./cluster-setup.js";
import { runStoreContract } from "./contract.js";

/**
 * The store contract against a real MongoDB, when `MONGODB_URI` points at one (a replica set or a
 * mongos: the store uses transactions). Each test gets a database of its own, dropped at the end.
 *
 * When `MONGODB_URI` is a sharded cluster's mongos, the contract runs once more on a database whose
 * collections are sharded as `SHARD_KEYS` declares, before `init`, as an operator following
 * docs/scaling.md would: the real counterpart of the fake's cluster mode (mongo-fake-cluster.test.ts).
 */
const uri = process.env.MONGODB_URI || undefined;

/** Whether `uri` reaches a mongos (the router of a sharded cluster); false when it answers nothing. */
async function isMongos(at: string): Promise<boolean> {
  const client = new MongoClient(at, { serverSelectionTimeoutMS: 5_000 });
  try {
    const hello = await client.db("admin").command({ hello: 1 });
    return hello.msg === "isdbgrid";
  } catch {
    // The replica-set run below then fails, saying why.
    return false;
  } finally {
    await client.close();
  }
}

const sharded = uri !== undefined && (await isMongos(uri));
if (uri !== undefined && !sharded) {
  console.info(
    "MONGODB_URI is not a sharded cluster's mongos (or did not answer): the sharded-cluster contract run is skipped.",
  );
}

async function dropAll(databases: string[]): Promise<void> {
  const client = new MongoClient(uri ?? "", { serverSelectionTimeoutMS: 5_000 });
  try {
    for (const name of databases) await client.db(name).dropDatabase();
  } finally {
    await client.close();
  }
}

describe.skipIf(uri === undefined)("MongoDB store (MONGODB_URI)", () => {
  const databases: string[] = [];

  runStoreContract("mongodb", async () => {
    const dbName = `receipts_test_${randomBytes(6).toString("hex")}`;
    databases.push(dbName);
    const store = await createMongoStore({ uri: uri ?? "", dbName, operationTimeoutMs: 5_000 });
    await store.init();
    return store;
  });

  afterAll(() => dropAll(databases));
});

describe.skipIf(!sharded)("MongoDB store on a sharded cluster (MONGODB_URI is a mongos)", () => {
  // Sharding takes seconds a collection: one database is sharded once, and emptied before each test.
  const dbName = `receipts_sharded_${randomBytes(6).toString("hex")}`;
  let prepared = false;

  runStoreContract("mongodb, sharded as declared", async () => {
    const client = new MongoClient(uri ?? "", { serverSelectionTimeoutMS: 5_000 });
    try {
      if (!prepared) {
        await shardAsDeclared(client.db("admin"), dbName);
        prepared = true;
      }
      for (const name of Object.values(COLLECTIONS)) await client.db(dbName).collection(name).deleteMany({});
    } finally {
      await client.close();
    }
    const store = await createMongoStore({ uri: uri ?? "", dbName, operationTimeoutMs: 5_000 });
    await store.init();
    return store;
  });

  afterAll(() => dropAll([dbName]));
});
