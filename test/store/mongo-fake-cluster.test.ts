import { randomInt } from "node:crypto";
import type { Db } from "mongodb";
import { describe } from "vitest";
import { createMongoStore } from "../../src/store/mongo/index.js";
import type { Store } from "../../src/store/types.js";
import { DECLARATIONS, shardAsDeclared } from "./cluster-setup.js";
import { runStoreContract } from "./contract.js";
import { fakeFaults } from "./fake-faults.js";
import { FakeMongo } from "./fake-mongo/index.js";

/**
 * The whole store contract against the MongoDB adapter on the driver fake in cluster mode, every
 * collection sharded as `SHARD_KEYS` declares before `init` (as an operator following docs/scaling.md):
 * uniqueness per shard only, and any query that would reach every shard undeclared, any upsert or
 * single-document write a cluster refuses, and any transaction over its declared shards fails the test.
 * `MONGO_FAKE_SEED` repeats a run's latencies (the seed is printed).
 */
const seed = Number(process.env.MONGO_FAKE_SEED ?? randomInt(2 ** 31));
console.info(`fake MongoDB cluster latency seed: MONGO_FAKE_SEED=${seed}`);

describe("MongoDB adapter on the fake driver, as a sharded cluster", () => {
  let made = 0;
  const fakes = new WeakMap<Store, FakeMongo>();
  runStoreContract(
    "mongodb (fake driver, sharded)",
    async () => {
      const fake = new FakeMongo({ seed: seed + made++, cluster: { declarations: DECLARATIONS } });
      await shardAsDeclared(
        fake.createClient("mongodb://fake.invalid/", {}).db("admin") as Db,
        "receipts_fake",
      );
      const store = await createMongoStore({
        uri: "mongodb://fake.invalid/",
        dbName: "receipts_fake",
        createClient: fake.createClient,
      });
      await store.init();
      fakes.set(store, fake);
      return store;
    },
    (store) => {
      const fake = fakes.get(store);
      if (fake === undefined) throw new Error("no fake driver for this store");
      return fakeFaults(fake, "receipts_fake");
    },
  );
});
