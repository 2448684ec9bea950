import type { Db } from "mongodb";
import { afterEach, describe, expect, it } from "vitest";
import { createMongoStore } from "../../src/store/mongo/index.js";
import type { Store } from "../../src/store/types.js";
import { DECLARATIONS, shardAsDeclared } from "./cluster-setup.js";
import { FakeMongo } from "./fake-mongo/index.js";
import { at, escrowedReceipt, hex64, receipt, uid } from "./fixtures.js";

/**
 * The security-core writes of the MongoDB adapter (receipts and their claims, BIN ownership, issuer
 * escrow keys) on a sharded cluster: each transaction and each query that goes to every shard names
 * its declaration in `sharding.ts`, or the fake's cluster mode fails it, as a cluster operator's
 * checks would. The whole contract runs this way in mongo-fake-cluster.test.ts; this file is the
 * fast subset the mutation groups of these files run.
 */
describe("MongoDB adapter on a sharded cluster: declared transactions and scatter-gathers", () => {
  const stores: Store[] = [];
  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close();
  });

  async function clusterStore(): Promise<Store> {
    const fake = new FakeMongo({ seed: 38, cluster: { declarations: DECLARATIONS } });
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
    stores.push(store);
    return store;
  }

  const change = () => ({ kind: "directory" as const, id: uid("ktp"), reason: "test", createdAt: at(0) });

  it("runs the receipt writes and reads of every card", async () => {
    const store = await clusterStore();
    const delivered = receipt("usr_1", { merchantTenantId: "tnt_old", transactionId: "T-1" });
    expect(await store.receipts.insert(delivered)).toBe(true);
    expect(await store.receipts.findByTransaction("tnt_old", "T-1")).toEqual([delivered]);
    const escrowed = escrowedReceipt(hex64(), at(100), { escrowOwnerTenantId: "tnt_issuer" });
    expect(await store.receipts.insert(escrowed)).toBe(true);
    expect(await store.receipts.countEscrowed(at(0))).toEqual([
      { ownerTenantId: "tnt_issuer", escrowKeyId: "escrow-1", count: 1 },
    ]);
    const to = { userId: "usr_2", issuerTenantId: "tnt_issuer", keyBundle: delivered.keyBundle };
    expect(await store.receipts.release(escrowed, to)).toBe(true);
    expect(
      await store.receipts.deleteByPreviousOwner(delivered.merchantId, delivered.receiptId, "tnt_new"),
    ).toBe(true);
  });

  it("runs an issuer release's escrow copy: kept, listed, released again, erased", async () => {
    const store = await clusterStore();
    const panHash = hex64();
    const held = escrowedReceipt(panHash, at(100), { escrowKeyId: "iek_a", escrowOwnerTenantId: "tnt_a" });
    expect(await store.receipts.insert(held)).toBe(true);
    const to = { userId: "usr_1", issuerTenantId: "tnt_a", keyBundle: { ...held.keyBundle, keyId: "k-1" } };
    expect(await store.receipts.release(held, to, "iek_a", [], true)).toBe(true);
    expect((await store.receipts.escrowCopyOf(held, at(10)))?.keyBundle).toEqual(held.keyBundle);
    const page = await store.receipts.findEscrowCopies({ panHash, ownerTenantId: "tnt_a" }, at(10), 10);
    expect(page.released.map((x) => x.receipt.id)).toEqual([held.id]);
    const again = { userId: "usr_1", keyBundle: { ...held.keyBundle, keyId: "k-2" } };
    expect(await store.receipts.releaseAgain(held, again, "tnt_a", at(10))).toBe(true);
    expect(await store.receipts.deleteByUser({ userId: "usr_1", panHash }, 10)).toBe(1);
    expect(await store.receipts.escrowCopyOf(held, at(10))).toBeUndefined();
  });

  it("runs the BIN and escrow-key writes with their key-log records", async () => {
    const store = await clusterStore();
    expect(await store.bins.set("tnt_a", ["411111"], at(0), [change()])).toEqual({ kind: "set" });
    const key = {
      escrowKeyId: uid("iek"),
      tenantId: "tnt_a",
      algorithm: "HPKE-P256-SHA256-A256GCM" as const,
      publicKey: "AAAA",
      createdAt: at(0),
    };
    expect(await store.issuerEscrowKeys.insert(key, [change()])).toBeUndefined();
    expect(await store.issuerEscrowKeys.current("tnt_a")).toEqual(key);
  });
});
