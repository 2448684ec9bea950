import { describe, expect, it } from "vitest";
import { AppError } from "../../src/errors.js";
import type { ReceiptRecord, Store } from "../../src/store/types.js";
import { event } from "./contract-events.js";
import {
  allEscrowed,
  at,
  cardOf,
  escrowedReceipt,
  escrowQuery,
  hex64,
  owner,
  payment,
  receipt,
  uid,
} from "./fixtures.js";

/** The rules of `ReceiptStore` and `PaymentStore`. */
export function receiptsContract(store: () => Store): void {
  describe("receipts", () => {
    it("refuses a second receipt with the same (merchantId, receiptId), not the same receiptId elsewhere", async () => {
      const first = receipt("usr_1", { merchantId: "m-1", receiptId: "R-1", createdAt: at(0) });
      expect(await store().receipts.insert(first)).toBe(true);
      expect(await store().receipts.insert(receipt("usr_1", { merchantId: "m-1", receiptId: "R-1" }))).toBe(
        false,
      );
      const otherMerchant = receipt("usr_1", { merchantId: "m-2", receiptId: "R-1", createdAt: at(1) });
      expect(await store().receipts.insert(otherMerchant)).toBe(true);
      expect(await store().receipts.findByReceiptId("R-1", owner("usr_1"))).toEqual([first, otherMerchant]);
      expect(await store().receipts.findByReceiptId("R-1", owner("usr_2"))).toEqual([]);
    });

    it("finds a merchant tenant's receipts by transaction, and a payment's receipt", async () => {
      const mine = receipt("usr_1", { merchantTenantId: "tnt_a", transactionId: "T-1", paymentId: "pay_1" });
      const theirs = receipt("usr_1", { merchantTenantId: "tnt_b", transactionId: "T-1" });
      await store().receipts.insert(mine);
      await store().receipts.insert(theirs);
      expect(await store().receipts.findByTransaction("tnt_a", "T-1")).toEqual([mine]);
      expect(await store().receipts.findByTransaction("tnt_a", "T-2")).toEqual([]);
      expect(await store().receipts.findByPaymentId("pay_1", owner("usr_1"))).toEqual(mine);
      expect(await store().receipts.findByPaymentId("pay_2", owner("usr_1"))).toBeUndefined();
      // Only among the receipts of the card named.
      expect(await store().receipts.findByPaymentId("pay_1", owner("usr_2"))).toBeUndefined();
    });

    it("pages a user's receipts newest first, without gaps or repeats, across equal timestamps", async () => {
      // Seven receipts; three share one timestamp, so the id must break the tie.
      const seconds = [10, 40, 20, 20, 70, 20, 50];
      const mine = seconds.map((s) => receipt("usr_1", { createdAt: at(s) }));
      const others = [
        receipt("usr_2", { createdAt: at(30) }),
        escrowedReceipt(hex64(), at(999), { createdAt: at(30) }),
      ];
      for (const r of [...mine, ...others]) await store().receipts.insert(r);

      const pages: ReceiptRecord[][] = [];
      let cursor: string | undefined;
      do {
        const page = await store().receipts.listByUser(owner("usr_1"), 3, cursor);
        pages.push(page.receipts);
        cursor = page.nextCursor;
      } while (cursor !== undefined && pages.length < 10);

      expect(pages.map((p) => p.length)).toEqual([3, 3, 1]);
      const expected = [...mine].sort(
        (a, b) => b.createdAt.getTime() - a.createdAt.getTime() || (a.id < b.id ? 1 : -1),
      );
      expect(pages.flat()).toEqual(expected);
    });

    it("pages through receipts of one instant two at a time, each once: the page ends inside the tie", async () => {
      const tied = Array.from({ length: 5 }, () => receipt("usr_1", { createdAt: at(30) }));
      const older = receipt("usr_1", { createdAt: at(10) });
      for (const r of [...tied, older]) await store().receipts.insert(r);
      const ids: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await store().receipts.listByUser(owner("usr_1"), 2, cursor);
        ids.push(...page.receipts.map((r) => r.id));
        cursor = page.nextCursor;
      } while (cursor !== undefined && ids.length < 20);
      expect(ids).toEqual([
        ...tied
          .map((r) => r.id)
          .sort()
          .reverse(),
        older.id,
      ]);
    });

    it("tells this process's event worker of the events it stored, and of none it did not store", async () => {
      let told = 0;
      store().events.onWritten(() => {
        told++;
      });
      const panHash = hex64();
      const first = escrowedReceipt(panHash, at(100));
      const created = event("tnt_merchant");
      expect(await store().receipts.insert(first, [created])).toBe(true);
      expect(told).toBe(1);
      // A duplicate (merchantId, receiptId) stores nothing, and its events are not announced.
      expect(
        await store().receipts.insert({ ...first, id: uid("rcp") }, [{ ...created, id: uid("evt") }]),
      ).toBe(false);
      expect(told).toBe(1);
      const to = {
        userId: "usr_1",
        issuerTenantId: "tnt_issuer",
        keyBundle: { keyId: "k", algorithm: "RSA-OAEP-256" as const, encryptedAesKey: "eA==" },
      };
      const releasedEvent = event("tnt_issuer");
      expect(await store().receipts.release(first, to, undefined, [releasedEvent])).toBe(true);
      expect(told).toBe(2);
      expect(
        await store().receipts.release(first, to, undefined, [{ ...releasedEvent, id: uid("evt") }]),
      ).toBe(false);
      expect(told).toBe(2);
      // No events, nothing to tell.
      expect(await store().receipts.insert(receipt("usr_1"))).toBe(true);
      expect(told).toBe(2);
    });

    it("ends on a full last page without an extra empty one", async () => {
      for (let i = 0; i < 6; i++) await store().receipts.insert(receipt("usr_1", { createdAt: at(i) }));
      const first = await store().receipts.listByUser(owner("usr_1"), 3);
      expect(first.nextCursor).toBeDefined();
      const second = await store().receipts.listByUser(owner("usr_1"), 3, first.nextCursor);
      expect(second.receipts).toHaveLength(3);
      expect(second.nextCursor).toBeUndefined();
      expect(await store().receipts.listByUser(owner("usr_nobody"), 3)).toEqual({ receipts: [] });
    });

    it("rejects a page token it did not make as invalid_request", async () => {
      for (const token of ["not-a-token", Buffer.from('{"a":1}').toString("base64url")]) {
        const failure = await store()
          .receipts.listByUser(owner("usr_1"), 3, token)
          .catch((err: unknown) => err);
        expect(failure).toBeInstanceOf(AppError);
        expect((failure as AppError).code).toBe("invalid_request");
      }
    });

    it("lists the escrowed receipts of a panHash that are unexpired at `now`", async () => {
      const panHash = hex64();
      const live = escrowedReceipt(panHash, at(100), { createdAt: at(0) });
      const expired = escrowedReceipt(panHash, at(50));
      const otherPan = escrowedReceipt(hex64(), at(100));
      const delivered = receipt("usr_1", { panHash });
      for (const r of [live, expired, otherPan, delivered]) await store().receipts.insert(r);
      expect(await allEscrowed(store(), panHash, at(50))).toEqual([live]);
      expect(await allEscrowed(store(), panHash, at(100))).toEqual([]);
    });

    it("pages a card's escrowed receipts oldest first, at most `limit` each, across equal timestamps", async () => {
      const panHash = hex64();
      const seconds = [30, 10, 20, 20, 40];
      const escrowed = seconds.map((s) => escrowedReceipt(panHash, at(999), { createdAt: at(s) }));
      for (const r of escrowed) await store().receipts.insert(r);
      const expected = [...escrowed].sort(
        (a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : 1),
      );
      const pages: ReceiptRecord[][] = [];
      let cursor: string | undefined;
      do {
        const page = await store().receipts.findEscrowed(escrowQuery(panHash), at(0), 2, cursor);
        pages.push(page.receipts);
        cursor = page.nextCursor;
      } while (cursor !== undefined && pages.length < 10);
      expect(pages.map((p) => p.length)).toEqual([2, 2, 1]);
      expect(pages.flat()).toEqual(expected);
      expect(await allEscrowed(store(), panHash, at(0))).toEqual(expected);
      await expect(store().receipts.findEscrowed(escrowQuery(panHash), at(0), 0)).rejects.toThrow(RangeError);
    });

    it("releases an escrowed receipt once, to the user, keeping the ciphertext", async () => {
      const panHash = hex64();
      const escrowed = escrowedReceipt(panHash, at(100));
      await store().receipts.insert(escrowed);
      const to = {
        userId: "usr_1",
        issuerTenantId: "tnt_issuer",
        keyBundle: { keyId: "k-user", algorithm: "RSA-OAEP-256" as const, encryptedAesKey: "d3JhcHBlZA==" },
      };
      expect(await store().receipts.release(escrowed, to)).toBe(true);
      expect(await store().receipts.release(escrowed, { ...to, userId: "usr_2" })).toBe(false);

      const { escrowKeyId: _k, expiresAt: _e, ...kept } = escrowed;
      const released = { ...kept, ...to, isEscrowed: false };
      // Released to the user who registered the card.
      expect((await store().receipts.listByUser(owner("usr_1", panHash), 10)).receipts).toEqual([released]);
      expect(await allEscrowed(store(), panHash, at(0))).toEqual([]);
      expect((await store().receipts.listByUser(owner("usr_2", panHash), 10)).receipts).toEqual([]);
    });

    it("lists a released receipt at its own time among the user's newer and older ones", async () => {
      const older = receipt("usr_1", { createdAt: at(10) });
      const newer = receipt("usr_1", { createdAt: at(30) });
      // Escrowed for the card usr_1 then registered.
      const escrowed = escrowedReceipt(cardOf("usr_1"), at(999), { createdAt: at(20) });
      for (const r of [older, newer, escrowed]) await store().receipts.insert(r);
      const to = { userId: "usr_1", issuerTenantId: "tnt_issuer", keyBundle: newer.keyBundle };
      expect(await store().receipts.release(escrowed, to)).toBe(true);

      const ids: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await store().receipts.listByUser(owner("usr_1"), 1, cursor);
        ids.push(...page.receipts.map((r) => r.id));
        cursor = page.nextCursor;
      } while (cursor !== undefined && ids.length < 10);
      expect(ids).toEqual([newer.id, escrowed.id, older.id]);
      // The same receipt id from another merchant, older than all of them.
      const inserted = receipt("usr_1", {
        merchantId: "m-2",
        receiptId: escrowed.receiptId,
        createdAt: at(5),
      });
      expect(await store().receipts.insert(inserted)).toBe(true);
      expect(
        (await store().receipts.findByReceiptId(escrowed.receiptId, owner("usr_1"))).map((r) => r.id),
      ).toEqual([inserted.id, escrowed.id]);
    });

    it("releases nothing by the id of an escrowed receipt given with another card", async () => {
      const panHash = hex64();
      const escrowed = escrowedReceipt(panHash, at(100));
      await store().receipts.insert(escrowed);
      const to = {
        userId: "usr_1",
        issuerTenantId: "tnt_issuer",
        keyBundle: { keyId: "k", algorithm: "RSA-OAEP-256" as const, encryptedAesKey: "eA==" },
      };
      const attackerCard = cardOf("usr_1");
      expect(await store().receipts.release({ panHash: attackerCard, id: escrowed.id }, to)).toBe(false);
      expect((await store().receipts.listByUser(owner("usr_1"), 10)).receipts).toEqual([]);
      expect(await store().receipts.findByMerchantReceipt(escrowed.merchantId, escrowed.receiptId)).toEqual(
        escrowed,
      );
      // Nor marks it held.
      await store().receipts.markHeld(attackerCard, escrowed.id);
      expect(
        (await store().receipts.findByMerchantReceipt(escrowed.merchantId, escrowed.receiptId))?.escrowHeld,
      ).toBeUndefined();
    });

    it("releases nothing that is not escrowed", async () => {
      const delivered = receipt("usr_1");
      await store().receipts.insert(delivered);
      const to = {
        userId: "usr_2",
        issuerTenantId: "tnt_issuer",
        keyBundle: { keyId: "k", algorithm: "RSA-OAEP-256" as const, encryptedAesKey: "eA==" },
      };
      expect(await store().receipts.release(delivered, to)).toBe(false);
      expect(await store().receipts.release({ panHash: delivered.panHash, id: uid("rcp") }, to)).toBe(false);
      expect(await store().receipts.findByReceiptId(delivered.receiptId, owner("usr_1"))).toEqual([
        delivered,
      ]);
    });

    it("refuses a page size that is not a positive integer, before reading anything", async () => {
      await store().receipts.insert(receipt("usr_1"));
      const refusal = new RangeError("The page size must be a positive integer.");
      for (const limit of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
        await expect(store().receipts.listByUser(owner("usr_1"), limit), String(limit)).rejects.toThrow(
          refusal,
        );
      }
      expect((await store().receipts.listByUser(owner("usr_1"), 1)).receipts).toHaveLength(1);
    });

    it("answers a lookup by receipt id or by transaction oldest first, then by id, on every store alike", async () => {
      // Three merchants reuse one receipt id and one transaction id at one instant, one a second earlier.
      const same = [0, 0, 0].map((s, i) =>
        receipt("usr_1", {
          merchantId: `m-${i}`,
          receiptId: "R-same",
          transactionId: "T-same",
          merchantTenantId: "tnt_m",
          createdAt: at(s + 10),
        }),
      );
      const earlier = receipt("usr_1", {
        merchantId: "m-9",
        receiptId: "R-same",
        transactionId: "T-same",
        merchantTenantId: "tnt_m",
        createdAt: at(5),
      });
      for (const r of [...same, earlier]) expect(await store().receipts.insert(r)).toBe(true);
      const expected = [earlier, ...[...same].sort((a, b) => (a.id < b.id ? -1 : 1))];
      expect(await store().receipts.findByReceiptId("R-same", owner("usr_1"))).toEqual(expected);
      expect(await store().receipts.findByTransaction("tnt_m", "T-same")).toEqual(expected);
    });

    it("returns each record exactly as stored: no field it did not have, escrowed, delivered or released", async () => {
      const panHash = hex64();
      const escrowed = escrowedReceipt(panHash, at(100), {
        escrowOwnerTenantId: "tnt_issuer",
        escrowCardBin: "41111111",
        paymentId: "pay_x",
      });
      const delivered = receipt("usr_1", {
        keyBundle: { ...receipt("usr_1").keyBundle, encapsulatedKey: "ZW5j" },
      });
      for (const r of [escrowed, delivered]) await store().receipts.insert(r);
      const read = (r: ReceiptRecord) => store().receipts.findByMerchantReceipt(r.merchantId, r.receiptId);
      expect(await read(escrowed)).toStrictEqual(escrowed);
      expect(await read(delivered)).toStrictEqual(delivered);
      expect((await store().receipts.listByUser(owner("usr_1"), 5)).receipts).toStrictEqual([delivered]);
      expect(await store().receipts.findByPaymentId("pay_x", owner("usr_9", panHash))).toStrictEqual(
        escrowed,
      );
      expect((await store().receipts.findEscrowed(escrowQuery(panHash), at(0), 5)).receipts).toStrictEqual([
        escrowed,
      ]);
      const to = {
        userId: "usr_9",
        issuerTenantId: "tnt_issuer",
        keyBundle: { keyId: "k", algorithm: "RSA-OAEP-256" as const, encryptedAesKey: "eA==" },
      };
      expect(await store().receipts.release(escrowed, to)).toBe(true);
      const {
        escrowKeyId: _k,
        expiresAt: _e,
        escrowOwnerTenantId: _o,
        escrowCardBin: _b,
        ...kept
      } = escrowed;
      const released = { ...kept, ...to, isEscrowed: false };
      expect(await read(escrowed)).toStrictEqual(released);
      expect((await store().receipts.listByUser(owner("usr_9", panHash), 5)).receipts).toStrictEqual([
        released,
      ]);
    });

    it("keeps what was stored when the caller mutates its objects", async () => {
      const record = receipt("usr_1", { paymentId: "pay_1" });
      const before = structuredClone(record);
      await store().receipts.insert(record);
      expect(record).toEqual(before);
      record.keyBundle.keyId = "tampered";
      const found = await store().receipts.findByPaymentId("pay_1", owner("usr_1"));
      expect(found).toEqual(before);
      if (found) found.keyBundle.encryptedAesKey = "tampered";
      expect(await store().receipts.findByPaymentId("pay_1", owner("usr_1"))).toEqual(before);
    });
  });

  describe("payments", () => {
    it("stores a payment with its receipt", async () => {
      const pay = payment();
      const rec = receipt("usr_1", { paymentId: pay.paymentId, transactionId: pay.transactionId });
      expect(await store().payments.createWithReceipt(pay, rec)).toEqual({ kind: "created" });
      expect(await store().payments.findById(pay.paymentId)).toEqual(pay);
      expect(await store().receipts.findByPaymentId(pay.paymentId, owner("usr_1"))).toEqual(rec);
      expect(await store().payments.findById(uid("pay"))).toBeUndefined();
    });

    it("refuses a second payment for (merchantId, transactionId), and keeps its receipt out", async () => {
      const first = payment({ merchantId: "m-1", transactionId: "T-1" });
      await store().payments.createWithReceipt(first, receipt("usr_1", { paymentId: first.paymentId }));
      const second = payment({ merchantId: "m-1", transactionId: "T-1" });
      const secondReceipt = receipt("usr_1", { paymentId: second.paymentId });
      expect(await store().payments.createWithReceipt(second, secondReceipt)).toEqual({
        kind: "duplicate_transaction",
      });
      expect(await store().payments.findById(second.paymentId)).toBeUndefined();
      expect(await store().receipts.findByPaymentId(second.paymentId, owner("usr_1"))).toBeUndefined();
      // The receipt was not kept, so it can still be stored on its own.
      expect(await store().receipts.insert(secondReceipt)).toBe(true);
    });

    it("finds a payment by (merchantId, transactionId), and nothing for another pair", async () => {
      const pay = payment({ merchantId: "m-5", transactionId: "T-5" });
      await store().payments.createWithReceipt(pay, receipt("usr_1", { paymentId: pay.paymentId }));
      expect(await store().payments.findByTransaction("m-5", "T-5")).toEqual(pay);
      expect(await store().payments.findByTransaction("m-5", "T-6")).toBeUndefined();
      expect(await store().payments.findByTransaction("m-6", "T-5")).toBeUndefined();
    });

    it("refuses a payment whose receipt exists, and keeps the payment out", async () => {
      const existing = receipt("usr_1", { merchantId: "m-1", receiptId: "R-1" });
      await store().receipts.insert(existing);
      const pay = payment({ merchantId: "m-1", transactionId: "T-9", receiptId: "R-1" });
      const rec = receipt("usr_1", { merchantId: "m-1", receiptId: "R-1", paymentId: pay.paymentId });
      expect(await store().payments.createWithReceipt(pay, rec)).toEqual({ kind: "duplicate_receipt" });
      expect(await store().payments.findById(pay.paymentId)).toBeUndefined();
      // The payment was not kept, so its transaction is still free.
      const retry = payment({ merchantId: "m-1", transactionId: "T-9" });
      const retryReceipt = receipt("usr_1", { merchantId: "m-1", paymentId: retry.paymentId });
      expect(await store().payments.createWithReceipt(retry, retryReceipt)).toEqual({ kind: "created" });
    });

    it("deletes a previous owner's receipt and payment of a merchantId, never the owner's own", async () => {
      const squatted = receipt("usr_1", { merchantTenantId: "tnt_old", merchantId: "m-1", receiptId: "R-1" });
      const own = receipt("usr_1", { merchantTenantId: "tnt_new", merchantId: "m-1", receiptId: "R-2" });
      const oldPay = payment({
        merchantTenantId: "tnt_old",
        merchantId: "m-1",
        transactionId: "T-1",
        receiptId: "R-3",
      });
      const oldPayReceipt = receipt("usr_1", {
        merchantTenantId: "tnt_old",
        merchantId: "m-1",
        receiptId: "R-3",
        transactionId: "T-1",
        paymentId: oldPay.paymentId,
      });
      const ownPay = payment({ merchantTenantId: "tnt_new", merchantId: "m-1", transactionId: "T-2" });
      await store().receipts.insert(squatted);
      await store().receipts.insert(own);
      await store().payments.createWithReceipt(oldPay, oldPayReceipt);
      await store().payments.createWithReceipt(ownPay, receipt("usr_1", { paymentId: ownPay.paymentId }));

      // The owner's own records, and ids nobody used, stay.
      expect(await store().receipts.deleteByPreviousOwner("m-1", "R-2", "tnt_new")).toBe(false);
      expect(await store().receipts.deleteByPreviousOwner("m-1", "R-9", "tnt_new")).toBe(false);
      expect(await store().payments.deleteByPreviousOwner("m-1", "T-2", "tnt_new")).toBe(false);
      expect(await store().payments.deleteByPreviousOwner("m-1", "T-9", "tnt_new")).toBe(false);
      expect(await store().receipts.findByMerchantReceipt("m-1", "R-2")).toEqual(own);
      expect(await store().payments.findById(ownPay.paymentId)).toEqual(ownPay);

      expect(await store().receipts.deleteByPreviousOwner("m-1", "R-1", "tnt_new")).toBe(true);
      expect(await store().receipts.findByMerchantReceipt("m-1", "R-1")).toBeUndefined();
      expect(await store().receipts.findByReceiptId("R-1", owner("usr_1"))).toEqual([]);
      expect(await store().payments.deleteByPreviousOwner("m-1", "T-1", "tnt_new")).toBe(true);
      expect(await store().payments.findById(oldPay.paymentId)).toBeUndefined();
      expect(await store().receipts.findByPaymentId(oldPay.paymentId, owner("usr_1"))).toBeUndefined();
      expect(await store().receipts.findByMerchantReceipt("m-1", "R-3")).toBeUndefined();
      // The ids are free for the owner now.
      expect(
        await store().receipts.insert(receipt("usr_2", { merchantTenantId: "tnt_new", receiptId: "R-1" })),
      ).toBe(true);
      const reuse = payment({
        merchantTenantId: "tnt_new",
        merchantId: "m-1",
        transactionId: "T-1",
        receiptId: "R-3",
      });
      const reuseReceipt = receipt("usr_2", {
        merchantTenantId: "tnt_new",
        receiptId: "R-3",
        transactionId: "T-1",
        paymentId: reuse.paymentId,
      });
      expect(await store().payments.createWithReceipt(reuse, reuseReceipt)).toEqual({ kind: "created" });
      const listed = (await store().receipts.listByUser(owner("usr_1"), 10)).receipts.map((r) => r.receiptId);
      expect(listed).toContain("R-2");
      expect(listed).not.toContain("R-1");
      expect(listed).not.toContain("R-3");
    });

    it("creates exactly one of 10 concurrent payments for one transaction", async () => {
      const attempts = Array.from({ length: 10 }, () => {
        const pay = payment({ merchantTenantId: "tnt_m", merchantId: "m-1", transactionId: "T-1" });
        return {
          pay,
          rec: receipt("usr_1", {
            merchantTenantId: "tnt_m",
            transactionId: "T-1",
            paymentId: pay.paymentId,
          }),
        };
      });
      const outcomes = await Promise.all(
        attempts.map(({ pay, rec }) => store().payments.createWithReceipt(pay, rec)),
      );
      expect(outcomes.filter((o) => o.kind === "created")).toHaveLength(1);
      expect(outcomes.filter((o) => o.kind === "duplicate_transaction")).toHaveLength(9);
      expect(await store().receipts.findByTransaction("tnt_m", "T-1")).toHaveLength(1);
    });
  });
}
