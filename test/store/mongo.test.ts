import { randomBytes } from "node:crypto";
import { MongoClient } from "mongodb";
import { afterAll, describe } from "vitest";
import { createMongoStore } from "../../src/store/mongo/index.js";
import { runStoreContract } from "./contract.js";

/**
 * The store contract against a real MongoDB, when `MONGODB_URI` points at one (a replica set: the
 * store uses transactions). Each test gets a database of its own, dropped at the end.
 */
const uri = process.env.MONGODB_URI || undefined;

describe.skipIf(uri === undefined)("MongoDB store (MONGODB_URI)", () => {
  const databases: string[] = [];

  runStoreContract("mongodb", async () => {
    const dbName = `receipts_test_${randomBytes(6).toString("hex")}`;
    databases.push(dbName);
    const store = await createMongoStore({ uri: uri ?? "", dbName, operationTimeoutMs: 5_000 });
    await store.init();
    return store;
  });

  afterAll(async () => {
    const client = new MongoClient(uri ?? "", { serverSelectionTimeoutMS: 5_000 });
    try {
      for (const name of databases) await client.db(name).dropDatabase();
    } finally {
      await client.close();
    }
  });
});
