import { describe, expect, it } from "vitest";
import {
  DELETE_PAGE_MAX,
  MAX_REFUNDS_PER_PAYMENT,
  type PaymentRecord,
  type ReceiptRecord,
  type RefundRecord,
  type Store,
} from "../../src/store/types.js";
import { at, owner, payment, receipt, uid } from "./fixtures.js";

/**
 * The payment rules every store keeps: declined payments, listing a tenant's payments
 * page by page without skipping, and refunds whose held amount never exceeds the payment's, however
 * many run at once.
 */
export function paymentsContract(store: () => Store): void {
  describe("payments: declines", () => {
    it("keeps a declined payment without a receipt, and lets a later attempt with another card replace it", async () => {
      const declined = payment({
        transactionId: "T-d",
        status: "declined",
        declineCode: "insufficient_funds",
      });
      expect(await store().payments.recordDecline(declined)).toBe("recorded");
      expect(await store().payments.findById(declined.paymentId)).toEqual(declined);
      // A second decline of the same transaction replaces the first.
      const again = { ...declined, declineCode: "expired_card" };
      expect(await store().payments.recordDecline(again)).toBe("recorded");
      expect(await store().payments.findByTransaction("m-1", "T-d")).toEqual(again);

      const paid = payment({ paymentId: declined.paymentId, transactionId: "T-d" });
      const rec = receipt("usr_1", { paymentId: paid.paymentId, transactionId: "T-d" });
      expect(await store().payments.createWithReceipt(paid, rec)).toEqual({ kind: "created" });
      expect(await store().payments.findByTransaction("m-1", "T-d")).toEqual(paid);
      // A decline never replaces a payment that was charged.
      expect(await store().payments.recordDecline({ ...declined, paymentId: uid("pay") })).toBe(
        "duplicate_transaction",
      );
      expect(await store().payments.findByTransaction("m-1", "T-d")).toEqual(paid);
    });
  });

  describe("payments: listing a tenant's", () => {
    it("pages newest first without skipping or repeating, even among payments of one instant", async () => {
      const made: PaymentRecord[] = [];
      for (let i = 0; i < 7; i++) {
        // Three share a time: the paymentId orders them.
        const pay = payment({ merchantTenantId: "tnt_list", createdAt: at(i < 3 ? 5 : 10 + i) });
        made.push(pay);
        await store().payments.createWithReceipt(pay, receipt("usr_1", { paymentId: pay.paymentId }));
      }
      await store().payments.recordDecline(payment({ merchantTenantId: "tnt_other", status: "declined" }));
      const seen: PaymentRecord[] = [];
      let cursor: string | undefined;
      do {
        const page = await store().payments.listByTenant("tnt_list", 3, cursor);
        expect(page.payments.length).toBeLessThanOrEqual(3);
        seen.push(...page.payments);
        cursor = page.nextCursor;
      } while (cursor !== undefined);
      const expected = [...made].sort(
        (a, b) => b.createdAt.getTime() - a.createdAt.getTime() || (a.paymentId < b.paymentId ? 1 : -1),
      );
      expect(seen).toEqual(expected);
    });

    it("shows a payment made while paging on no later page, and skips none that were there", async () => {
      const first = payment({ merchantTenantId: "tnt_live", createdAt: at(1) });
      const second = payment({ merchantTenantId: "tnt_live", createdAt: at(2) });
      for (const pay of [first, second]) {
        await store().payments.createWithReceipt(pay, receipt("usr_1", { paymentId: pay.paymentId }));
      }
      const page = await store().payments.listByTenant("tnt_live", 1);
      expect(page.payments).toEqual([second]);
      const newer = payment({ merchantTenantId: "tnt_live", createdAt: at(3) });
      await store().payments.createWithReceipt(newer, receipt("usr_1", { paymentId: newer.paymentId }));
      const next = await store().payments.listByTenant("tnt_live", 5, page.nextCursor);
      expect(next.payments).toEqual([first]);
      expect(next.nextCursor).toBeUndefined();
    });

    it("lists only the given merchantIds when asked", async () => {
      const mine = payment({ merchantTenantId: "tnt_ids", merchantId: "m-a", createdAt: at(1) });
      const other = payment({ merchantTenantId: "tnt_ids", merchantId: "m-b", createdAt: at(2) });
      for (const pay of [mine, other]) {
        const rec = receipt("usr_1", { merchantId: pay.merchantId, paymentId: pay.paymentId });
        await store().payments.createWithReceipt(pay, rec);
      }
      expect((await store().payments.listByTenant("tnt_ids", 10, undefined, ["m-a"])).payments).toEqual([
        mine,
      ]);
    });
  });

  describe("payments: refunds", () => {
    /** A charged payment of `amount`, stored with its receipt. */
    async function charged(amount: number): Promise<PaymentRecord> {
      const pay = payment({ amount, transactionId: uid("txn") });
      await store().payments.createWithReceipt(pay, receipt("usr_1", { paymentId: pay.paymentId }));
      return pay;
    }
    const refundOf = (amount: number, rec: ReceiptRecord): RefundRecord => ({
      refundId: uid("ref"),
      amount,
      status: "pending",
      receiptId: rec.receiptId,
      createdAt: at(60),
    });
    const refundReceipt = () => receipt("usr_1", { merchantId: "m-1", receiptId: uid("R-refund") });

    it("holds partial refunds up to the amount charged and refuses the one beyond, writing nothing for it", async () => {
      const pay = await charged(1000);
      for (const amount of [300, 500]) {
        const rec = refundReceipt();
        const outcome = await store().payments.holdRefund(pay, refundOf(amount, rec), rec);
        expect(outcome.kind).toBe("held");
      }
      const tooMuch = refundReceipt();
      expect(await store().payments.holdRefund(pay, refundOf(201, tooMuch), tooMuch)).toEqual({
        kind: "over_amount",
        refundable: 200,
      });
      expect(await store().receipts.findByMerchantReceipt("m-1", tooMuch.receiptId)).toBeUndefined();
      const stored = await store().payments.findById(pay.paymentId);
      expect(stored?.refundedAmount).toBe(800);
      expect(stored?.refunds?.map((r) => [r.amount, r.status])).toEqual([
        [300, "pending"],
        [500, "pending"],
      ]);
    });

    it("completes a refund, and releases another with its receipt", async () => {
      const pay = await charged(1000);
      const [a, b] = [refundReceipt(), refundReceipt()];
      const [first, second] = [refundOf(400, a), refundOf(600, b)];
      await store().payments.holdRefund(pay, first, a);
      await store().payments.holdRefund(pay, second, b);
      const after = await store().payments.completeRefund(pay, first.refundId, "re_1");
      expect(after?.refunds?.[0]).toEqual({ ...first, status: "succeeded", gatewayRefundId: "re_1" });
      await store().payments.releaseRefund(pay, second.refundId, b);
      const stored = await store().payments.findById(pay.paymentId);
      expect(stored?.refundedAmount).toBe(400);
      expect(stored?.refunds?.map((r) => r.refundId)).toEqual([first.refundId]);
      expect(await store().receipts.findByMerchantReceipt("m-1", b.receiptId)).toBeUndefined();
      expect(await store().receipts.findByMerchantReceipt("m-1", a.receiptId)).toEqual(a);
      // Only the released refund's receipt and claim went: the payment's own receipt and the other
      // refund's stay, their pairs still taken; the released pair is free for the next attempt.
      expect(await store().receipts.findByPaymentId(pay.paymentId, owner("usr_1"))).toBeDefined();
      expect(
        (await store().receipts.listByUser(owner("usr_1"), 10)).receipts.map((r) => r.id).sort(),
      ).toEqual([a.id, (await store().receipts.findByPaymentId(pay.paymentId, owner("usr_1")))?.id].sort());
      expect(
        await store().receipts.insert(receipt("usr_1", { merchantId: "m-1", receiptId: a.receiptId })),
      ).toBe(false);
      expect(
        await store().receipts.insert(receipt("usr_1", { merchantId: "m-1", receiptId: b.receiptId })),
      ).toBe(true);
      // A succeeded refund is never released.
      await store().payments.releaseRefund(pay, first.refundId, a);
      expect((await store().payments.findById(pay.paymentId))?.refundedAmount).toBe(400);
    });

    it("gives a refused refund back even when erasure deleted its receipt meanwhile", async () => {
      const pay = await charged(1000);
      const rec = refundReceipt();
      const refund = refundOf(400, rec);
      expect((await store().payments.holdRefund(pay, refund, rec)).kind).toBe("held");
      // The cardholder is erased while the gateway answers; then the gateway refuses the refund.
      expect(await store().receipts.deleteByUser(owner("usr_1"), DELETE_PAGE_MAX)).toBe(2);
      await store().payments.releaseRefund(pay, refund.refundId, rec);
      const stored = await store().payments.findById(pay.paymentId);
      expect(stored?.refundedAmount).toBeUndefined();
      expect(stored?.refunds).toBeUndefined();
    });

    it("deletes a previous owner's payment whose receipt erasure already deleted", async () => {
      const old = payment({ merchantTenantId: "tnt_old", merchantId: "m-1", transactionId: "T-e" });
      await store().payments.createWithReceipt(
        old,
        receipt("usr_1", { merchantTenantId: "tnt_old", paymentId: old.paymentId }),
      );
      expect(await store().receipts.deleteByUser(owner("usr_1"), DELETE_PAGE_MAX)).toBe(1);
      expect(await store().payments.deleteByPreviousOwner("m-1", "T-e", "tnt_new")).toBe(true);
      expect(await store().payments.findById(old.paymentId)).toBeUndefined();
    });

    it("refuses a refund of a declined payment, of an unknown one, and with a receipt that exists", async () => {
      const declined = payment({ status: "declined", transactionId: uid("txn") });
      await store().payments.recordDecline(declined);
      const rec = refundReceipt();
      expect(await store().payments.holdRefund(declined, refundOf(1, rec), rec)).toEqual({
        kind: "not_refundable",
      });
      const unknown = { ...declined, paymentId: uid("pay") };
      expect(await store().payments.holdRefund(unknown, refundOf(1, rec), rec)).toEqual({
        kind: "not_found",
      });
      const pay = await charged(1000);
      const existing = refundReceipt();
      await store().receipts.insert(existing);
      expect(await store().payments.holdRefund(pay, refundOf(10, existing), existing)).toEqual({
        kind: "duplicate_receipt",
      });
      expect((await store().payments.findById(pay.paymentId))?.refundedAmount ?? 0).toBe(0);
      expect(await store().receipts.findByMerchantReceipt("m-1", rec.receiptId)).toBeUndefined();
    });

    it(`takes at most ${MAX_REFUNDS_PER_PAYMENT} refunds of one payment`, async () => {
      const pay = await charged(1000);
      for (let i = 0; i < MAX_REFUNDS_PER_PAYMENT; i++) {
        const rec = refundReceipt();
        expect((await store().payments.holdRefund(pay, refundOf(1, rec), rec)).kind).toBe("held");
      }
      const rec = refundReceipt();
      expect(await store().payments.holdRefund(pay, refundOf(1, rec), rec)).toEqual({ kind: "too_many" });
    });

    it("holds no more than the amount charged when 12 refunds race for it", async () => {
      const pay = await charged(1000);
      const attempts = Array.from({ length: 12 }, () => {
        const rec = refundReceipt();
        return { rec, refund: refundOf(250, rec) };
      });
      const outcomes = await Promise.all(
        attempts.map(({ rec, refund }) => store().payments.holdRefund(pay, refund, rec)),
      );
      const held = outcomes.filter((o) => o.kind === "held");
      expect(held).toHaveLength(4);
      expect(outcomes.filter((o) => o.kind === "over_amount")).toHaveLength(8);
      const stored = await store().payments.findById(pay.paymentId);
      expect(stored?.refundedAmount).toBe(1000);
      expect(stored?.refunds).toHaveLength(4);
      // Exactly the held refunds' receipts were kept.
      for (const [i, { rec }] of attempts.entries()) {
        const kept = await store().receipts.findByMerchantReceipt("m-1", rec.receiptId);
        expect(kept !== undefined, `receipt ${i}`).toBe(outcomes[i]?.kind === "held");
      }
    });
  });
}
