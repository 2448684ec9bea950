import { randomInt } from "node:crypto";
import { describe } from "vitest";
import { createMongoStore } from "../../src/store/mongo/index.js";
import type { Store } from "../../src/store/types.js";
import { runStoreContract } from "./contract.js";
import { fakeFaults } from "./fake-faults.js";
import { FakeMongo } from "./fake-mongo/index.js";

/**
 * The store contract against the MongoDB adapter on a driver-level fake (`fake-mongo/`), on every
 * run: the adapter's own queries, updates, unique indexes and transactions, with no server. What the
 * fake cannot prove is listed in its header; `mongo.test.ts` runs the same suite on a real server.
 * `MONGO_FAKE_SEED` repeats a run's latencies (the seed is printed).
 */
const seed = Number(process.env.MONGO_FAKE_SEED ?? randomInt(2 ** 31));
console.info(`fake MongoDB latency seed: MONGO_FAKE_SEED=${seed}`);

describe("MongoDB adapter on the fake driver", () => {
  let made = 0;
  const fakes = new WeakMap<Store, FakeMongo>();
  runStoreContract(
    "mongodb (fake driver)",
    async () => {
      const fake = new FakeMongo({ seed: seed + made++ });
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
