import { describe, expect, it, vi } from "vitest";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { runStoreContract } from "./contract.js";
import { at, escrowedReceipt, hex64, receipt } from "./fixtures.js";

runStoreContract("memory", async () => createMemoryStore());

describe("memory store: reading a user's receipts", () => {
  // A page or a lookup by receipt id must not sort or copy everything the user has: at 50,000 receipts
  // that cost the event loop 21-27 ms per page and 79 ms per lookup. The store reads each receipt's
  // time with `getTime` (to order, and to copy its Date), so the calls count the receipts it touched.
  it("touches about a page of receipts per page, not all of them", async () => {
    const store = createMemoryStore();
    await store.init();
    const count = 5_000;
    for (let i = 0; i < count; i++) {
      // Three receipts per second, so equal times are ordered by id too.
      await store.receipts.insert(receipt("usr_1", { createdAt: at(Math.floor(i / 3)) }));
    }
    const getTime = vi.spyOn(Date.prototype, "getTime");
    try {
      const first = await store.receipts.listByUser("usr_1", 20);
      const second = await store.receipts.listByUser("usr_1", 20, first.nextCursor);
      const found = await store.receipts.findByReceiptId(second.receipts[0]?.receiptId ?? "", "usr_1");
      expect(first.receipts).toHaveLength(20);
      expect(second.receipts).toHaveLength(20);
      expect(found).toEqual([second.receipts[0]]);
      // Copies of 41 receipts, two cursors and two binary searches over 5,000 (13 steps each).
      expect(getTime.mock.calls.length).toBeLessThan(200);
    } finally {
      getTime.mockRestore();
      await store.close();
    }
  });
});

describe("memory store: expired escrow", () => {
  // The spec deletes unreleased escrow after its retention (a TTL index in MongoDB); the memory store
  // deletes it when it next stores a receipt, at most once a minute of store time.
  it("is deleted, freeing its ids, once a receipt is stored after it expired", async () => {
    const store = createMemoryStore();
    await store.init();
    try {
      const panHash = hex64();
      const expiring = escrowedReceipt(panHash, at(100), { createdAt: at(0), paymentId: "pay_e" });
      const lasting = escrowedReceipt(panHash, at(1_000), { createdAt: at(1) });
      for (const r of [expiring, lasting]) expect(await store.receipts.insert(r)).toBe(true);
      await store.receipts.insert(receipt("usr_1", { createdAt: at(50) }));
      // Not yet expired at 50: still there.
      expect(await store.receipts.listEscrowed(panHash, at(0))).toEqual([expiring, lasting]);

      await store.receipts.insert(receipt("usr_1", { createdAt: at(120) }));
      // Gone, not merely filtered: asked as of time 0, only the unexpired one is left.
      expect(await store.receipts.listEscrowed(panHash, at(0))).toEqual([lasting]);
      expect(
        await store.receipts.findByTransaction(expiring.merchantTenantId, expiring.transactionId),
      ).toEqual([]);
      expect(await store.receipts.findByPaymentId("pay_e")).toBeUndefined();
      const again = receipt("usr_1", { merchantId: expiring.merchantId, receiptId: expiring.receiptId });
      expect(await store.receipts.insert(again)).toBe(true);
    } finally {
      await store.close();
    }
  });
});
