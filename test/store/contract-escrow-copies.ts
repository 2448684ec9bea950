import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { ReceiptRecord, Store, StoredKeyBundle } from "../../src/store/types.js";
import { at, escrowedReceipt, hex64, owner } from "./fixtures.js";

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
