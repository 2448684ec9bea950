import { randomInt } from "node:crypto";
import { describe, expect, it } from "vitest";
import { createMongoStore } from "../../src/store/mongo/index.js";
import type { Store } from "../../src/store/types.js";
import { runStoreContract } from "./contract.js";
import { fakeFaults } from "./fake-faults.js";
import { FakeMongo } from "./fake-mongo/index.js";
import { at, escrowedReceipt, hex64 } from "./fixtures.js";

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

/**
 * Where an issuer release's escrow copy lives on MongoDB: in `escrowCopies`, whose TTL index on
 * `expiresAt` deletes the copy when the escrow would have expired (the fake records TTL indexes and
 * deletes nothing, so the documents and indexes are read here). The released receipt keeps no
 * `expiresAt` and is not escrowed, so neither receipts' TTL index (escrow's, partial on isEscrowed)
 * can take it.
 */
describe("MongoDB adapter: escrow copies under their own TTL", () => {
  it("writes the copy beside the receipt, with the escrow's expiry, under a TTL index of its own", async () => {
    const fake = new FakeMongo({ seed });
    const store = await createMongoStore({
      uri: "mongodb://fake.invalid/",
      dbName: "receipts_copies",
      createClient: fake.createClient,
    });
    try {
      await store.init();
      const held = escrowedReceipt(hex64(), at(1000), { escrowKeyId: "iek_a", escrowOwnerTenantId: "tnt_a" });
      await store.receipts.insert(held);
      const to = { userId: "usr_1", issuerTenantId: "tnt_a", keyBundle: { ...held.keyBundle, keyId: "k-1" } };
      expect(await store.receipts.release(held, to, "iek_a", [], true)).toBe(true);
      const db = fake.database("receipts_copies");
      const [receipt] = [...db.collection("receipts").docs.values()];
      expect(receipt?.isEscrowed).toBe(false);
      expect(receipt?.expiresAt).toBeUndefined();
      const [copy] = [...db.collection("escrowCopies").docs.values()];
      expect(copy).toMatchObject({
        panHash: held.panHash,
        id: held.id,
        ownerTenantId: "tnt_a",
        expiresAt: at(1000),
      });
      const ttl = db
        .collection("escrowCopies")
        .indexes.find((i) => i.description?.expireAfterSeconds !== undefined);
      expect(ttl?.description).toMatchObject({ key: { expiresAt: 1 }, expireAfterSeconds: 0 });
      expect(ttl?.partial).toBeUndefined();
      const escrowTtl = db.collection("receipts").indexes.find((i) => i.name === "ttl_escrow");
      expect(escrowTtl?.description?.partialFilterExpression).toEqual({ isEscrowed: true });
    } finally {
      await store.close();
    }
  });
  it("stores no copy of escrow without an expiry: no TTL would ever delete it", async () => {
    const fake = new FakeMongo({ seed });
    const store = await createMongoStore({
      uri: "mongodb://fake.invalid/",
      dbName: "receipts_no_expiry",
      createClient: fake.createClient,
    });
    try {
      await store.init();
      const held = escrowedReceipt(hex64(), at(1000), { escrowKeyId: "iek_a", escrowOwnerTenantId: "tnt_a" });
      delete held.expiresAt;
      await store.receipts.insert(held);
      const to = { userId: "usr_1", issuerTenantId: "tnt_a", keyBundle: { ...held.keyBundle, keyId: "k-1" } };
      expect(await store.receipts.release(held, to, "iek_a", [], true)).toBe(true);
      expect(fake.database("receipts_no_expiry").collection("escrowCopies").docs.size).toBe(0);
    } finally {
      await store.close();
    }
  });

  it("lists no copy whose receipt went between its two reads (an erasure meanwhile)", async () => {
    const fake = new FakeMongo({ seed });
    const store = await createMongoStore({
      uri: "mongodb://fake.invalid/",
      dbName: "receipts_lone_copy",
      createClient: fake.createClient,
    });
    try {
      await store.init();
      const panHash = hex64();
      const copied = (createdAt: Date) =>
        escrowedReceipt(panHash, at(1000), { createdAt, escrowKeyId: "iek_a", escrowOwnerTenantId: "tnt_a" });
      const [gone, kept] = [copied(at(1)), copied(at(2))];
      const to = { userId: "usr_1", issuerTenantId: "tnt_a", keyBundle: { ...kept.keyBundle, keyId: "k-1" } };
      for (const r of [gone, kept]) {
        await store.receipts.insert(r);
        expect(await store.receipts.release(r, to, "iek_a", [], true)).toBe(true);
      }
      // The copy is read, then its receipt is erased before the receipts are read: as if only the
      // receipt had gone.
      const receipts = fake.database("receipts_lone_copy").collection("receipts").docs;
      for (const [key, doc] of receipts) if (doc.id === gone.id) receipts.delete(key);
      const page = await store.receipts.findEscrowCopies({ panHash, ownerTenantId: "tnt_a" }, at(10), 10);
      expect(page.released.map((x) => x.receipt.id)).toEqual([kept.id]);
      expect(page.nextCursor).toBeUndefined();
    } finally {
      await store.close();
    }
  });
});
