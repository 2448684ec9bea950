import { randomBytes, randomUUID } from "node:crypto";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { randomId } from "../../src/ids.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { ReceiptRecord } from "../../src/store/types.js";
import { at, hex64, owner, payment, receipt } from "./fixtures.js";

// The memory store's heap per record, in a file of its own: 60,000 inserts that prove a size, not a
// rule, so the memory store's mutation groups (scripts/mutation-groups.mjs) leave them out.

/**
 * Heap bytes kept per call of `insert` over `count` calls, after 100 calls to warm up, with a full
 * collection before and after.
 */
async function heapPerCall(count: number, insert: (i: number) => Promise<unknown>): Promise<number> {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  for (let i = 0; i < 100; i++) await insert(-1 - i);
  gc();
  const before = process.memoryUsage().heapUsed;
  for (let i = 0; i < count; i++) await insert(i);
  gc();
  return (process.memoryUsage().heapUsed - before) / count;
}

describe("memory store: heap per receipt and per payment", () => {
  // The store keeps every receipt and payment for the life of the process, so its bytes per record are
  // what a service storing thousands a second pays for, in memory and in garbage collection.
  const user = { userId: "usr_1", tenantId: "tnt_issuer", keyId: randomUUID(), panHash: hex64() };
  const sealed = {
    key: randomBytes(256),
    ciphertext: randomBytes(490),
    iv: randomBytes(12),
    tag: randomBytes(16),
  };
  /** A receipt as the service builds it: fresh ids and sealed parts, the user's strings shared. */
  const sealedReceipt = (i: number, overrides: Partial<ReceiptRecord> = {}): ReceiptRecord => ({
    ...receipt(user.userId, { createdAt: new Date(at(0).getTime() + i) }),
    id: randomId("rcp"),
    receiptId: `R-${i}`,
    transactionId: `txn-${i}`,
    panHash: user.panHash,
    issuerTenantId: user.tenantId,
    keyBundle: {
      keyId: user.keyId,
      algorithm: "RSA-OAEP-256" as const,
      encryptedAesKey: sealed.key.toString("base64"),
    },
    ciphertext: sealed.ciphertext.toString("base64"),
    iv: sealed.iv.toString("base64"),
    authTag: sealed.tag.toString("base64"),
    ...overrides,
  });

  // A copy of the ReceiptRecord held about 2,000 bytes for this receipt (a Date, a key bundle object,
  // a Set per transaction, joined index keys); the flat form about 1,550. Of those, about 1,200 are the
  // strings it must keep: the sealed parts in base64 (1,056 characters) and the receipt's own ids.
  it("keeps a receipt with a 490-byte ciphertext in under 1,700 bytes of heap", async () => {
    const store = createMemoryStore();
    await store.init();
    try {
      const perReceipt = await heapPerCall(20_000, (i) => store.receipts.insert(sealedReceipt(i)));
      expect((await store.receipts.listByUser(owner(user.userId), 1)).receipts).toHaveLength(1);
      expect(perReceipt).toBeGreaterThan(1_056);
      expect(perReceipt).toBeLessThan(1_700);
    } finally {
      await store.close();
    }
  });

  // Beyond its receipt (which holds the paymentId and is indexed by it), a payment keeps its own
  // strings (the orderId and the client secret's hash: about 100 characters, about 150 bytes), its
  // fields and two index entries (by paymentId, by (merchantId, transactionId)); its transactionId and
  // receiptId are the receipt's strings. A copy of the PaymentRecord, with its Date and a joined
  // (merchantId, transactionId) key, took about 555 bytes; the flat form about 395, and about 440
  // with the fields of declines and refunds and its place in its tenant's listing.
  it("keeps a payment in under 480 bytes of heap beyond its receipt", async () => {
    const receipts = createMemoryStore();
    const payments = createMemoryStore();
    await Promise.all([receipts.init(), payments.init()]);
    let last = "";
    try {
      const perReceipt = await heapPerCall(20_000, (i) =>
        receipts.receipts.insert(sealedReceipt(i, { paymentId: randomId("pay") })),
      );
      const perPayment = await heapPerCall(20_000, async (i) => {
        const receipt = sealedReceipt(i, { paymentId: randomId("pay") });
        last = receipt.paymentId as string;
        const outcome = await payments.payments.createWithReceipt(
          payment({
            paymentId: last,
            merchantId: receipt.merchantId,
            transactionId: receipt.transactionId,
            receiptId: receipt.receiptId,
            orderId: randomId("ord"),
            clientSecretHash: hex64(),
            createdAt: receipt.createdAt,
          }),
          receipt,
        );
        if (outcome.kind !== "created") throw new Error(`payment ${i}: ${outcome.kind}`);
      });
      expect(await payments.payments.findById(last)).toMatchObject({
        paymentId: last,
        orderId: expect.any(String),
      });
      expect(perPayment - perReceipt).toBeGreaterThan(150);
      expect(perPayment - perReceipt).toBeLessThan(480);
    } finally {
      await receipts.close();
      await payments.close();
    }
  });
});
