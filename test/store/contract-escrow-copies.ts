import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { ReceiptRecord, Store, StoredKeyBundle } from "../../src/store/types.js";
import { event } from "./contract-events.js";
import { at, escrowedReceipt, hex64, owner, payment, uid } from "./fixtures.js";

/**
 * The escrow copy of an issuer's release (`EscrowCopy`): the release keeps the escrow-wrapped key
 * beside the new one until the escrow would have expired, the owner releases again while it is kept,
 * erasure takes it with the receipt, and its expiry takes it without the receipt.
 */
export function escrowCopiesContract(store: () => Store): void {
  describe("receipts: escrow copies of issuer releases", () => {
    const bundle = (keyId: string): StoredKeyBundle => ({
      keyId,
      algorithm: "RSA-OAEP-256",
      encryptedAesKey: randomBytes(16).toString("base64"),
    });
    const to = (userId: string) => ({ userId, issuerTenantId: "tnt_a", keyBundle: bundle("k-user") });

    /** A receipt escrowed for tnt_a until at(1000), on a fresh card. */
    async function escrowed(panHash = hex64(), createdAt = at(5)): Promise<ReceiptRecord> {
      const r = escrowedReceipt(panHash, at(1000), {
        createdAt,
        escrowKeyId: "iek_a1",
        escrowOwnerTenantId: "tnt_a",
        keyBundle: bundle("iek_a1"),
      });
      expect(await store().receipts.insert(r)).toBe(true);
      return r;
    }
    const read = (r: ReceiptRecord) => store().receipts.findByMerchantReceipt(r.merchantId, r.receiptId);

    it("keeps the escrowed key bundle as the copy of an issuer's release, and the receipt reads as released", async () => {
      const r = await escrowed();
      const release = to("usr_1");
      expect(await store().receipts.release(r, release, "iek_a1", [], true)).toBe(true);
      expect(await store().receipts.escrowCopyOf(r, at(10))).toEqual({
        ownerTenantId: "tnt_a",
        escrowKeyId: "iek_a1",
        keyBundle: r.keyBundle,
        expiresAt: at(1000),
      });
      const stored = await read(r);
      expect(stored).toMatchObject({ isEscrowed: false, userId: "usr_1", keyBundle: release.keyBundle });
      expect(stored?.escrowKeyId).toBeUndefined();
      expect(stored?.expiresAt).toBeUndefined();
    });

    it("keeps no copy of a release without keepEscrowCopy, nor of escrow without an owner", async () => {
      const plain = await escrowed();
      const unowned = escrowedReceipt(hex64(), at(1000), { escrowKeyId: "esc_1" });
      expect(await store().receipts.insert(unowned)).toBe(true);
      expect(await store().receipts.release(plain, to("usr_1"))).toBe(true);
      expect(await store().receipts.release(unowned, to("usr_2"), undefined, [], true)).toBe(true);
      expect(await store().receipts.escrowCopyOf(plain, at(10))).toBeUndefined();
      expect(await store().receipts.escrowCopyOf(unowned, at(10))).toBeUndefined();
      const again = { userId: "usr_1", keyBundle: bundle("k-2") };
      expect(await store().receipts.releaseAgain(plain, again, "tnt_a", at(10))).toBe(false);
    });

    it("releases again only for the copy's owner and the user it was released to", async () => {
      const r = await escrowed();
      const first = to("usr_1");
      await store().receipts.release(r, first, "iek_a1", [], true);
      const again = { userId: "usr_1", keyBundle: bundle("k-user") };
      expect(await store().receipts.releaseAgain(r, again, "tnt_b", at(10))).toBe(false);
      expect(await store().receipts.releaseAgain(r, { ...again, userId: "usr_2" }, "tnt_a", at(10))).toBe(
        false,
      );
      expect(await store().receipts.releaseAgain({ ...r, panHash: hex64() }, again, "tnt_a", at(10))).toBe(
        false,
      );
      expect((await read(r))?.keyBundle).toEqual(first.keyBundle);
      expect(await store().receipts.releaseAgain(r, again, "tnt_a", at(10))).toBe(true);
      expect((await read(r))?.keyBundle).toEqual(again.keyBundle);
      // The copy stays for another release until it expires.
      expect((await store().receipts.escrowCopyOf(r, at(11)))?.keyBundle).toEqual(r.keyBundle);
      const third = { userId: "usr_1", keyBundle: bundle("k-user") };
      expect(await store().receipts.releaseAgain(r, third, "tnt_a", at(12))).toBe(true);
      expect((await read(r))?.keyBundle).toEqual(third.keyBundle);
    });

    it("tells this process's event worker of a release again's events, and of none when it is refused", async () => {
      const r = await escrowed();
      await store().receipts.release(r, to("usr_1"), "iek_a1", [], true);
      let told = 0;
      store().events.onWritten(() => {
        told++;
      });
      const again = { userId: "usr_1", keyBundle: bundle("k-user") };
      // Refused (another owner): its event is not stored, so the worker is not woken for it.
      expect(await store().receipts.releaseAgain(r, again, "tnt_b", at(10), [event("tnt_b")])).toBe(false);
      expect(told).toBe(0);
      // Released again: the worker hears of its event at once rather than at its next poll.
      expect(await store().receipts.releaseAgain(r, again, "tnt_a", at(10), [event("tnt_a")])).toBe(true);
      expect(told).toBe(1);
    });

    it("lists the owner's copies of one card oldest first, in pages, never another owner's or card's", async () => {
      const panHash = hex64();
      const records = [];
      for (const s of [30, 10, 20]) records.push(await escrowed(panHash, at(s)));
      const otherCard = await escrowed();
      const otherOwner = escrowedReceipt(panHash, at(1000), {
        escrowKeyId: "iek_b1",
        escrowOwnerTenantId: "tnt_b",
      });
      await store().receipts.insert(otherOwner);
      const stillEscrowed = await escrowed(panHash, at(15));
      for (const r of [...records, otherCard, otherOwner]) {
        await store().receipts.release(r, to("usr_1"), undefined, [], true);
      }
      const list = (cursor?: string) =>
        store().receipts.findEscrowCopies({ panHash, ownerTenantId: "tnt_a" }, at(40), 2, cursor);
      const first = await list();
      expect(first.released.map((x) => x.receipt.id)).toEqual([records[1]?.id, records[2]?.id]);
      expect(first.released[0]?.copy.keyBundle).toEqual(records[1]?.keyBundle);
      expect(first.released[0]?.receipt.isEscrowed).toBe(false);
      const second = await list(first.nextCursor);
      expect(second.released.map((x) => x.receipt.id)).toEqual([records[0]?.id]);
      expect(second.nextCursor).toBeUndefined();
      expect(stillEscrowed.isEscrowed).toBe(true);
    });

    it("pages the copies with a token, none skipped or repeated, the last page without one", async () => {
      const panHash = hex64();
      // Two share a createdAt, so the token must order them by id as well.
      const records = [];
      for (const s of [1, 2, 2, 3, 4]) records.push(await escrowed(panHash, at(s)));
      // Another card's copy and another owner's copy of this card, released as these are.
      const otherCard = await escrowed(hex64(), at(2));
      const otherOwner = escrowedReceipt(panHash, at(1000), {
        createdAt: at(2),
        escrowKeyId: "iek_b1",
        escrowOwnerTenantId: "tnt_b",
      });
      expect(await store().receipts.insert(otherOwner)).toBe(true);
      for (const r of [...records, otherCard, otherOwner]) {
        expect(await store().receipts.release(r, to("usr_1"), undefined, [], true)).toBe(true);
      }
      const expected = [...records]
        .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : 1))
        .map((r) => r.id);
      const list = (limit: number, cursor?: string) =>
        store().receipts.findEscrowCopies({ panHash, ownerTenantId: "tnt_a" }, at(10), limit, cursor);
      for (const limit of [1, 2, 3]) {
        const seen: string[] = [];
        const tokens: (string | undefined)[] = [];
        let cursor: string | undefined;
        for (let pages = 0; pages < 10; pages++) {
          const page = await list(limit, cursor);
          expect(page.released.length).toBeLessThanOrEqual(limit);
          seen.push(...page.released.map((x) => x.receipt.id));
          tokens.push(page.nextCursor);
          cursor = page.nextCursor;
          if (cursor === undefined) break;
        }
        expect(seen).toEqual(expected);
        // Full pages carry a token, the last (short) page none.
        expect(tokens).toHaveLength(Math.ceil(expected.length / limit));
        expect(tokens.at(-1)).toBeUndefined();
        expect(tokens.slice(0, -1).every((t) => typeof t === "string")).toBe(true);
      }
      // A page that ends exactly at the last copy carries no token.
      const all = await list(5);
      expect(all.released.map((x) => x.receipt.id)).toEqual(expected);
      expect(all.nextCursor).toBeUndefined();
      const rest = await list(3, (await list(2)).nextCursor);
      expect(rest.released.map((x) => x.receipt.id)).toEqual(expected.slice(2));
      expect(rest.nextCursor).toBeUndefined();
      // Each listed copy is the one its release kept, beside the receipt as released.
      for (const x of all.released) {
        const r = records.find((y) => y.id === x.receipt.id);
        expect(x.copy).toEqual({
          ownerTenantId: "tnt_a",
          escrowKeyId: "iek_a1",
          keyBundle: r?.keyBundle,
          expiresAt: at(1000),
        });
        expect(x.receipt).toMatchObject({ isEscrowed: false, userId: "usr_1", panHash });
      }
      // The other owner sees only its own copy; the other card only its own.
      const theirs = await store().receipts.findEscrowCopies({ panHash, ownerTenantId: "tnt_b" }, at(10), 10);
      expect(theirs.released.map((x) => x.receipt.id)).toEqual([otherOwner.id]);
      expect(theirs.nextCursor).toBeUndefined();
      const card = await store().receipts.findEscrowCopies(
        { panHash: otherCard.panHash, ownerTenantId: "tnt_a" },
        at(10),
        10,
      );
      expect(card.released.map((x) => x.receipt.id)).toEqual([otherCard.id]);
    });

    it("keeps a copy only when asked, and only of escrow held for an owner", async () => {
      const panHash = hex64();
      const asked = await escrowed(panHash, at(1));
      const notAsked = await escrowed(panHash, at(2));
      const falseAsked = await escrowed(panHash, at(3));
      const unowned = escrowedReceipt(panHash, at(1000), { createdAt: at(4), escrowKeyId: "esc_1" });
      expect(await store().receipts.insert(unowned)).toBe(true);
      expect(await store().receipts.release(asked, to("usr_1"), "iek_a1", [], true)).toBe(true);
      expect(await store().receipts.release(notAsked, to("usr_1"), "iek_a1", [])).toBe(true);
      expect(await store().receipts.release(falseAsked, to("usr_1"), "iek_a1", [], false)).toBe(true);
      expect(await store().receipts.release(unowned, to("usr_1"), "esc_1", [], true)).toBe(true);
      const listed = await store().receipts.findEscrowCopies({ panHash, ownerTenantId: "tnt_a" }, at(10), 10);
      expect(listed.released.map((x) => x.receipt.id)).toEqual([asked.id]);
      for (const r of [notAsked, falseAsked, unowned]) {
        expect(await store().receipts.escrowCopyOf(r, at(10))).toBeUndefined();
        const again = { userId: "usr_1", keyBundle: bundle("k-2") };
        expect(await store().receipts.releaseAgain(r, again, "tnt_a", at(10))).toBe(false);
      }
      // Escrow for an owner but without an escrow key or without an expiry has nothing to keep a copy of.
      const noKey = escrowedReceipt(panHash, at(1000), { escrowOwnerTenantId: "tnt_a" });
      delete noKey.escrowKeyId;
      const noExpiry = escrowedReceipt(panHash, at(1000), {
        escrowKeyId: "iek_a1",
        escrowOwnerTenantId: "tnt_a",
      });
      delete noExpiry.expiresAt;
      for (const r of [noKey, noExpiry]) {
        expect(await store().receipts.insert(r)).toBe(true);
        expect(await store().receipts.release(r, to("usr_1"), undefined, [], true)).toBe(true);
        expect(await store().receipts.escrowCopyOf(r, at(10))).toBeUndefined();
      }
      const after = await store().receipts.findEscrowCopies({ panHash, ownerTenantId: "tnt_a" }, at(10), 10);
      expect(after.released.map((x) => x.receipt.id)).toEqual([asked.id]);
      // A release refused (wrong escrow key) keeps no copy either.
      const refused = await escrowed(panHash, at(5));
      expect(await store().receipts.release(refused, to("usr_1"), "iek_other", [], true)).toBe(false);
      expect(await store().receipts.escrowCopyOf(refused, at(10))).toBeUndefined();
    });

    it("releases again neither an expired copy nor a receipt without one", async () => {
      const r = await escrowed();
      const first = to("usr_1");
      expect(await store().receipts.release(r, first, "iek_a1", [], true)).toBe(true);
      const again = { userId: "usr_1", keyBundle: bundle("k-2") };
      // At and after the copy's expiry: refused, the receipt keeps the key it was released with.
      expect(await store().receipts.releaseAgain(r, again, "tnt_a", at(1000))).toBe(false);
      expect(await store().receipts.releaseAgain(r, again, "tnt_a", at(5000))).toBe(false);
      expect((await read(r))?.keyBundle).toEqual(first.keyBundle);
      // Never released with a copy, or not stored at all.
      const plain = await escrowed();
      expect(await store().receipts.release(plain, first, "iek_a1", [])).toBe(true);
      expect(await store().receipts.releaseAgain(plain, again, "tnt_a", at(10))).toBe(false);
      expect(
        await store().receipts.releaseAgain({ panHash: hex64(), id: "rcp_missing" }, again, "tnt_a", at(10)),
      ).toBe(false);
      expect((await read(plain))?.keyBundle).toEqual(first.keyBundle);
    });

    it("drops the copy (not the receipt) when the escrow would have expired", async () => {
      const panHash = hex64();
      const r = await escrowed(panHash);
      const first = to("usr_1");
      await store().receipts.release(r, first, "iek_a1", [], true);
      // Kept to the second before (a read then also sweeps the memory store: the next is within a minute).
      expect(await store().receipts.escrowCopyOf(r, at(999))).toBeDefined();
      const after = at(1000);
      expect(await store().receipts.escrowCopyOf(r, after)).toBeUndefined();
      const listed = await store().receipts.findEscrowCopies({ panHash, ownerTenantId: "tnt_a" }, after, 10);
      expect(listed.released).toEqual([]);
      const again = { userId: "usr_1", keyBundle: bundle("k-user") };
      expect(await store().receipts.releaseAgain(r, again, "tnt_a", after)).toBe(false);
      // The receipt stays, released, with the key it was released with (no escrow expiry of its own).
      const stored = await read(r);
      expect(stored).toMatchObject({ isEscrowed: false, keyBundle: first.keyBundle });
      expect(stored?.expiresAt).toBeUndefined();
      expect(await store().receipts.countByUser(owner("usr_1", panHash))).toBe(1);
    });

    it("erases a user's copies with its receipts, never another card's or user's", async () => {
      const [mine, theirs] = [hex64(), hex64()];
      const a = await escrowed(mine, at(1));
      const b = await escrowed(theirs, at(2));
      const c = await escrowed(mine, at(3));
      expect(await store().receipts.release(a, to("usr_1"), undefined, [], true)).toBe(true);
      expect(await store().receipts.release(b, to("usr_2"), undefined, [], true)).toBe(true);
      expect(await store().receipts.release(c, to("usr_3"), undefined, [], true)).toBe(true);
      expect(await store().receipts.deleteByUser(owner("usr_1", mine), 10)).toBe(1);
      expect(await store().receipts.escrowCopyOf(a, at(10))).toBeUndefined();
      expect((await store().receipts.escrowCopyOf(b, at(10)))?.keyBundle).toEqual(b.keyBundle);
      expect((await store().receipts.escrowCopyOf(c, at(10)))?.keyBundle).toEqual(c.keyBundle);
      const listed = await store().receipts.findEscrowCopies(
        { panHash: mine, ownerTenantId: "tnt_a" },
        at(10),
        10,
      );
      expect(listed.released.map((x) => x.receipt.id)).toEqual([c.id]);
    });

    it("drops the copy with a previous owner's receipt, or payment, that the merchantId's owner replaces", async () => {
      const r = await escrowed();
      await store().receipts.release(r, to("usr_1"), "iek_a1", [], true);
      expect(await store().receipts.deleteByPreviousOwner(r.merchantId, r.receiptId, "tnt_new")).toBe(true);
      expect(await read(r)).toBeUndefined();
      expect(await store().receipts.escrowCopyOf(r, at(10))).toBeUndefined();

      const paid = payment({ merchantId: r.merchantId, transactionId: uid("txn") });
      const held = escrowedReceipt(hex64(), at(1000), {
        escrowKeyId: "iek_a1",
        escrowOwnerTenantId: "tnt_a",
        keyBundle: bundle("iek_a1"),
        merchantId: paid.merchantId,
        paymentId: paid.paymentId,
        receiptId: paid.receiptId,
        transactionId: paid.transactionId,
      });
      expect(await store().payments.createWithReceipt(paid, held)).toEqual({ kind: "created" });
      await store().receipts.release(held, to("usr_1"), "iek_a1", [], true);
      expect(await store().receipts.escrowCopyOf(held, at(10))).toBeDefined();
      expect(
        await store().payments.deleteByPreviousOwner(paid.merchantId, paid.transactionId, "tnt_new"),
      ).toBe(true);
      expect(await read(held)).toBeUndefined();
      expect(await store().receipts.escrowCopyOf(held, at(10))).toBeUndefined();
    });

    it("erases the copy with its receipt", async () => {
      const panHash = hex64();
      const [a, b] = [await escrowed(panHash, at(1)), await escrowed(panHash, at(2))];
      for (const r of [a, b]) await store().receipts.release(r, to("usr_1"), undefined, [], true);
      expect(await store().receipts.deleteIfSealedTo(panHash, a.merchantId, a.receiptId, "k-user")).toBe(
        true,
      );
      expect(await store().receipts.escrowCopyOf(a, at(10))).toBeUndefined();
      expect(await store().receipts.deleteByUser(owner("usr_1", panHash), 10)).toBe(1);
      expect(await store().receipts.escrowCopyOf(b, at(10))).toBeUndefined();
      const listed = await store().receipts.findEscrowCopies({ panHash, ownerTenantId: "tnt_a" }, at(10), 10);
      expect(listed.released).toEqual([]);
      const again = { userId: "usr_1", keyBundle: bundle("k-user") };
      expect(await store().receipts.releaseAgain(b, again, "tnt_a", at(10))).toBe(false);
    });
  });
}
