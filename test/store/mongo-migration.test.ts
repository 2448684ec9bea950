import { Binary, type Db } from "mongodb";
import { afterEach, describe, expect, it } from "vitest";
import { createMongoStore } from "../../src/store/mongo/index.js";
import { CLAIMS_BACKFILL } from "../../src/store/mongo/receipts.js";
import type { ReceiptRecord, Store } from "../../src/store/types.js";
import { DECLARATIONS, shardAsDeclared } from "./cluster-setup.js";
import { FakeMongo } from "./fake-mongo/index.js";
import { at, escrowedReceipt, hex64, owner, payment, receipt } from "./fixtures.js";

const limit = { maxTimeMS: 1000 };

/** The receipts' and payments' indexes of the version before receipt claims, as it created them. */
async function earlierVersionIndexes(db: Db): Promise<void> {
  await db.collection("receipts").createIndexes(
    [
      { key: { id: 1 }, name: "uniq_id", unique: true },
      { key: { merchantId: 1, receiptId: 1 }, name: "uniq_merchantId_receiptId", unique: true },
      { key: { userId: 1, createdAt: -1, id: -1 }, name: "listByUser" },
      { key: { userId: 1, receiptId: 1 }, name: "findByReceiptId" },
      { key: { merchantTenantId: 1, transactionId: 1 }, name: "findByTransaction" },
      {
        key: { paymentId: 1 },
        name: "findByPaymentId",
        partialFilterExpression: { paymentId: { $exists: true } },
      },
      { key: { panHash: 1, isEscrowed: 1, createdAt: 1, id: 1 }, name: "listEscrowed_byTime" },
      { key: { expiresAt: 1 }, name: "ttl_expiresAt", expireAfterSeconds: 0 },
    ],
    limit,
  );
  await db.collection("payments").createIndexes(
    [
      { key: { paymentId: 1 }, name: "uniq_paymentId", unique: true },
      { key: { merchantId: 1, transactionId: 1 }, name: "uniq_merchantId_transactionId", unique: true },
    ],
    limit,
  );
}

/**
 * Upgrading a database an earlier version made (receipts without claims, bytes as base64 text), and
 * starting on a cluster an operator sharded first: docs/scaling.md's steps, on the driver fake.
 */
describe("MongoDB adapter: upgrades and clusters sharded first", () => {
  const stores: Store[] = [];
  const storeOn = async (fake: FakeMongo, receiptRetentionDays?: number) => {
    const store = await createMongoStore({
      uri: "mongodb://fake.invalid/",
      dbName: "receipts",
      createClient: fake.createClient,
      receiptRetentionDays,
    });
    stores.push(store);
    return store;
  };
  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close();
  });

  it("keeps an earlier version's receipts readable and unique, then migrates them to claims", async () => {
    const fake = new FakeMongo({ maxLatencyMs: 1 });
    const db = fake.createClient("mongodb://fake.invalid/", {}).db("receipts") as Db;
    await earlierVersionIndexes(db);
    // As the earlier version stored it: bytes as base64 text, no key suite, no claim.
    const legacy: ReceiptRecord = escrowedReceipt(hex64(), at(999), { createdAt: at(0) });
    const { algorithm: _none, ...bundle } = legacy.keyBundle;
    await db.collection("receipts").insertOne({ ...legacy, keyBundle: bundle }, limit);
    const legacyDelivered: ReceiptRecord = receipt("usr_2", { createdAt: at(1) });
    const { algorithm: _none2, ...deliveredBundle } = legacyDelivered.keyBundle;
    await db.collection("receipts").insertOne({ ...legacyDelivered, keyBundle: deliveredBundle }, limit);

    const store = await storeOn(fake);
    await store.init();
    expect(await store.receipts.findByMerchantReceipt(legacy.merchantId, legacy.receiptId)).toEqual(legacy);
    // A pair nobody used finds nothing, not some other receipt of the unmigrated collection.
    expect(await store.receipts.findByMerchantReceipt(legacy.merchantId, "R-nobody")).toBeUndefined();
    const again = receipt("usr_1", { merchantId: legacy.merchantId, receiptId: legacy.receiptId });
    expect(await store.receipts.insert(again)).toBe(false);
    // New receipts are stored with binary bytes and read back the same.
    const fresh = receipt("usr_1");
    expect(await store.receipts.insert(fresh)).toBe(true);
    const stored = await db.collection("receipts").findOne({ id: fresh.id }, limit);
    expect(stored?.ciphertext).toBeInstanceOf(Binary);
    expect(await store.receipts.findByReceiptId(fresh.receiptId, owner("usr_1"))).toEqual([fresh]);

    // docs/scaling.md: claims for the earlier receipts, then the earlier unique indexes go.
    await db.collection("receipts").aggregate(CLAIMS_BACKFILL, limit).toArray();
    // The claim the backfill made carries the escrow's expiry, so it expires with its receipt; the
    // claim a receipt already had is kept as it was (a delivered receipt's claim never expires).
    const claims = db.collection("receiptClaims");
    expect(
      await claims.findOne(
        { _id: { merchantId: legacy.merchantId, receiptId: legacy.receiptId } } as object,
        limit,
      ),
    ).toStrictEqual({
      _id: { merchantId: legacy.merchantId, receiptId: legacy.receiptId },
      panHash: legacy.panHash,
      id: legacy.id,
      createdAt: legacy.createdAt,
      expiresAt: legacy.expiresAt,
    });
    expect(
      await claims.findOne(
        { _id: { merchantId: fresh.merchantId, receiptId: fresh.receiptId } } as object,
        limit,
      ),
    ).toStrictEqual({
      _id: { merchantId: fresh.merchantId, receiptId: fresh.receiptId },
      panHash: fresh.panHash,
      id: fresh.id,
      createdAt: fresh.createdAt,
    });
    // A delivered receipt's claim has no expiry: it lasts as long as the receipt.
    expect(
      await claims.findOne(
        { _id: { merchantId: legacyDelivered.merchantId, receiptId: legacyDelivered.receiptId } } as object,
        limit,
      ),
    ).toStrictEqual({
      _id: { merchantId: legacyDelivered.merchantId, receiptId: legacyDelivered.receiptId },
      panHash: legacyDelivered.panHash,
      id: legacyDelivered.id,
      createdAt: legacyDelivered.createdAt,
    });
    expect(await claims.countDocuments({}, limit)).toBe(3);
    for (const [collection, index] of [
      ["receipts", "uniq_id"],
      ["receipts", "uniq_merchantId_receiptId"],
      ["payments", "uniq_paymentId"],
    ] as const) {
      await db.collection(collection).dropIndex(index, limit);
    }
    const migrated = await storeOn(fake);
    await migrated.init();
    expect(await migrated.receipts.findByMerchantReceipt(legacy.merchantId, legacy.receiptId)).toEqual(
      legacy,
    );
    expect(await migrated.receipts.insert(again)).toBe(false);
    expect(await migrated.receipts.findByMerchantReceipt(fresh.merchantId, fresh.receiptId)).toEqual(fresh);
  });

  it("starts on a cluster whose operator sharded every collection first, as docs/scaling.md says", async () => {
    for (const order of ["shard, then init", "init, then shard"] as const) {
      const fake = new FakeMongo({ maxLatencyMs: 1, cluster: { declarations: DECLARATIONS } });
      const admin = fake.createClient("mongodb://fake.invalid/", {}).db("admin") as Db;
      const store = await storeOn(fake);
      if (order === "shard, then init") await shardAsDeclared(admin, "receipts");
      await store.init();
      if (order === "init, then shard") await shardAsDeclared(admin, "receipts");
      await store.init();
      // The unique rules hold across shards.
      const paid = payment({ merchantId: "m-1", transactionId: "T-1" });
      const first = receipt("usr_1", { merchantId: "m-1", receiptId: "R-1", paymentId: paid.paymentId });
      expect(await store.payments.createWithReceipt(paid, first)).toEqual({ kind: "created" });
      const second = payment({ merchantId: "m-1", transactionId: "T-1" });
      expect(await store.payments.createWithReceipt(second, receipt("usr_2"))).toEqual({
        kind: "duplicate_transaction",
      });
      const sameReceipt = receipt("usr_2", { merchantId: "m-1", receiptId: "R-1" });
      expect(await store.receipts.insert(sameReceipt), order).toBe(false);
      expect(fake.transactions.map((t) => [t.name, t.targets])).toContainEqual([
        "payments.createWithReceipt",
        3,
      ]);
    }
  });

  it("follows RECEIPT_RETENTION_DAYS: TTL indexes made when set, changed in place, dropped when unset", async () => {
    const fake = new FakeMongo({ maxLatencyMs: 1 });
    const db = fake.createClient("mongodb://fake.invalid/", {}).db("receipts") as Db;
    const retention = async (collection: string) =>
      (await db.collection(collection).listIndexes(limit).toArray()).find((i) => i.name === "ttl_retention");
    await (await storeOn(fake, 400)).init();
    expect(await retention("receipts")).toMatchObject({
      key: { createdAt: 1 },
      expireAfterSeconds: 400 * 86_400,
      partialFilterExpression: { isEscrowed: false },
    });
    expect(await retention("receiptClaims")).toMatchObject({
      key: { createdAt: 1 },
      expireAfterSeconds: 400 * 86_400,
    });
    await (await storeOn(fake, 800)).init();
    expect((await retention("receipts"))?.expireAfterSeconds).toBe(800 * 86_400);
    expect((await retention("receiptClaims"))?.expireAfterSeconds).toBe(800 * 86_400);
    expect(fake.operations.filter((op) => op.name === "command collMod")).toHaveLength(2);
    await (await storeOn(fake)).init();
    expect(await retention("receipts")).toBeUndefined();
    expect(await retention("receiptClaims")).toBeUndefined();
    // A claim carries its receipt's time, which the claims' retention counts from.
    const store = await storeOn(fake, 400);
    const kept = receipt("usr_1", { createdAt: at(7) });
    await store.receipts.insert(kept);
    const claim = await db.collection("receiptClaims").findOne({}, limit);
    expect(claim?.createdAt).toEqual(at(7));
  });

  it("refuses to start, saying what to do, where the operator sharded a unique key without unique: true", async () => {
    const fake = new FakeMongo({ maxLatencyMs: 1, cluster: { declarations: DECLARATIONS } });
    await fake.shardCollection("receipts.payments", { merchantId: 1, transactionId: 1 });
    const store = await storeOn(fake);
    const failure = await store.init().catch((err: unknown) => err);
    expect(String(failure)).toMatch(
      /payments\.merchantId_1_transactionId_1 has the keys of uniq_merchantId_transactionId but is not unique.*unique: true/,
    );
  });
});
