import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { KeyRecord, Store } from "../../src/store/types.js";
import { DELETE_PAGE_MAX } from "../../src/store/types.js";
import {
  apiKey,
  at,
  auditEvent,
  escrowedReceipt,
  grant,
  hex64,
  owner,
  payment,
  pendingKey,
  receipt,
  uid,
} from "./fixtures.js";

/**
 * Erasure and the operator's reads in `src/store/types.ts`: a user's keys,
 * receipts and grants deleted; API keys of one tenant; the audit log by tenant and time; a signing
 * key removed when a merchantId changes hands.
 */
export function erasureContract(store: () => Store): void {
  describe("erasure", () => {
    /** Registers `key` for a new card of tnt_issuer and returns the user id. */
    async function registered(key: KeyRecord, panHash = hex64(), now = at(0)): Promise<string> {
      const outcome = await store().users.register({
        panHash,
        tenantId: "tnt_issuer",
        newUserId: uid("usr"),
        key,
        now,
      });
      if (outcome.kind !== "created" && outcome.kind !== "rotated") throw new Error(outcome.kind);
      return outcome.user.userId;
    }

    it("lists a user's keys, active and rotated, oldest first, and no one else's", async () => {
      const panHash = hex64();
      const [k1, k2] = [pendingKey(), pendingKey()];
      const userId = await registered(k1, panHash, at(0));
      await registered(k2, panHash, at(60));
      const otherUser = await registered(pendingKey());
      const keys = await store().users.listKeys(userId);
      expect(keys.map((k) => [k.keyId, k.status, k.userId])).toEqual([
        [k1.keyId, "rotated", userId],
        [k2.keyId, "active", userId],
      ]);
      expect(keys[0]).toEqual(await store().users.findKey(k1.keyId));
      expect(await store().users.listKeys(otherUser)).toHaveLength(1);
      expect(await store().users.listKeys(uid("usr"))).toEqual([]);
    });

    it("erases a user and its keys once, freeing its card for a new registration", async () => {
      const panHash = hex64();
      const [k1, k2] = [pendingKey(), pendingKey()];
      const userId = await registered(k1, panHash, at(0));
      await registered(k2, panHash, at(60));
      const user = await store().users.findById(userId);
      const bystanderKey = pendingKey();
      const bystander = await registered(bystanderKey);
      const pending = pendingKey();
      await store().users.insertPendingKey(pending);

      expect(await store().users.erase(userId)).toEqual({ user, deletedKeys: 2 });
      expect(await store().users.findById(userId)).toBeUndefined();
      expect(await store().users.findByPanHash(panHash)).toBeUndefined();
      expect(await store().users.findKey(k1.keyId)).toBeUndefined();
      expect(await store().users.findKey(k2.keyId)).toBeUndefined();
      expect(await store().users.listKeys(userId)).toEqual([]);
      expect(await store().users.erase(userId)).toBeUndefined();
      // Nobody else's user or keys went with it.
      expect((await store().users.findById(bystander))?.activeKeyId).toBe(bystanderKey.keyId);
      expect((await store().users.findKey(pending.keyId))?.status).toBe("pending");
      // The card registers again as a new user.
      const again = await store().users.register({
        panHash,
        tenantId: "tnt_other",
        newUserId: "usr_again",
        key: pendingKey({ tenantId: "tnt_other" }),
        now: at(120),
      });
      expect(again.kind).toBe("created");
    });

    it("deletes every receipt of a user, freeing their ids; payments keep their record", async () => {
      const pay = payment({ merchantId: "m-1" });
      const paid = receipt("usr_1", {
        merchantId: "m-1",
        paymentId: pay.paymentId,
        transactionId: pay.transactionId,
      });
      expect(await store().payments.createWithReceipt(pay, paid)).toEqual({ kind: "created" });
      const mine = [receipt("usr_1", { createdAt: at(1) }), receipt("usr_1", { createdAt: at(2) }), paid];
      for (const r of mine.slice(0, 2)) await store().receipts.insert(r);
      const theirs = receipt("usr_2");
      const escrowed = escrowedReceipt(hex64(), at(10_000));
      for (const r of [theirs, escrowed]) await store().receipts.insert(r);

      expect(await store().receipts.deleteByUser(owner("usr_1"), DELETE_PAGE_MAX)).toBe(3);
      expect((await store().receipts.listByUser(owner("usr_1"), 10)).receipts).toEqual([]);
      for (const r of mine) {
        expect(await store().receipts.findByMerchantReceipt(r.merchantId, r.receiptId)).toBeUndefined();
        expect(await store().receipts.findByTransaction(r.merchantTenantId, r.transactionId)).toEqual([]);
      }
      expect(await store().receipts.findByPaymentId(pay.paymentId, owner("usr_1"))).toBeUndefined();
      expect(await store().payments.findById(pay.paymentId)).toEqual(pay);
      expect((await store().receipts.listByUser(owner("usr_2"), 10)).receipts).toEqual([theirs]);
      expect(await store().receipts.findByMerchantReceipt(escrowed.merchantId, escrowed.receiptId)).toEqual(
        escrowed,
      );
      expect(await store().receipts.deleteByUser(owner("usr_1"), DELETE_PAGE_MAX)).toBe(0);
      // The ids are free again.
      const first = mine[0];
      if (first === undefined) throw new Error("no receipt");
      expect(
        await store().receipts.insert(
          receipt("usr_3", { merchantId: first.merchantId, receiptId: first.receiptId }),
        ),
      ).toBe(true);
    });

    it("deletes a user's receipts, and a card's escrow for a tenant, in pages of at most `limit`", async () => {
      const mine = Array.from({ length: 5 }, (_, i) => receipt("usr_1", { createdAt: at(i) }));
      const card = hex64();
      const held = Array.from({ length: 3 }, () =>
        escrowedReceipt(card, at(10_000), { escrowOwnerTenantId: "tnt_a" }),
      );
      for (const r of [...mine, ...held, receipt("usr_2")]) await store().receipts.insert(r);
      expect(await store().receipts.countByUser(owner("usr_1"))).toBe(5);
      expect(await store().receipts.deleteByUser(owner("usr_1"), 2)).toBe(2);
      expect(await store().receipts.countByUser(owner("usr_1"))).toBe(3);
      expect(await store().receipts.deleteByUser(owner("usr_1"), 2)).toBe(2);
      expect(await store().receipts.deleteByUser(owner("usr_1"), 2)).toBe(1);
      expect(await store().receipts.deleteByUser(owner("usr_1"), 2)).toBe(0);
      expect(await store().receipts.countByUser(owner("usr_1"))).toBe(0);
      for (const r of mine) {
        expect(await store().receipts.findByMerchantReceipt(r.merchantId, r.receiptId)).toBeUndefined();
      }
      expect(await store().receipts.countByUser(owner("usr_2"))).toBe(1);
      expect(await store().receipts.countEscrowedFor(card, "tnt_a")).toBe(3);
      expect(await store().receipts.deleteEscrowedFor(card, "tnt_a", 2)).toBe(2);
      expect(await store().receipts.countEscrowedFor(card, "tnt_a")).toBe(1);
      expect(await store().receipts.deleteEscrowedFor(card, "tnt_a", 2)).toBe(1);
      await expect(store().receipts.deleteByUser(owner("usr_2"), 0)).rejects.toThrow(RangeError);
    });

    it("counts and deletes only the named tenant's escrow of a card, and an erased escrow cannot be released", async () => {
      const card = hex64();
      const a = escrowedReceipt(card, at(10_000), { escrowOwnerTenantId: "tnt_a" });
      const b = escrowedReceipt(card, at(10_000), { escrowOwnerTenantId: "tnt_b" });
      for (const r of [a, b]) await store().receipts.insert(r);
      expect(await store().receipts.countEscrowedFor(card, "tnt_a")).toBe(1);
      expect(await store().receipts.countEscrowedFor(card, "tnt_c")).toBe(0);
      expect(await store().receipts.deleteEscrowedFor(card, "tnt_a", DELETE_PAGE_MAX)).toBe(1);
      expect(await store().receipts.countEscrowedFor(card, "tnt_a")).toBe(0);
      expect(await store().receipts.countEscrowedFor(card, "tnt_b")).toBe(1);
      // Deleted is gone: releasing it by its card and id afterwards finds nothing to release.
      const to = { userId: "usr_1", issuerTenantId: "tnt_a", keyBundle: a.keyBundle };
      expect(await store().receipts.release(a, to)).toBe(false);
      expect((await store().receipts.listByUser(owner("usr_1", card), 10)).receipts).toEqual([]);
    });

    it("deletes a user's receipts only on the card it names, never another user's by its userId", async () => {
      const mine = receipt("usr_1");
      await store().receipts.insert(mine);
      // The right userId with another card: nothing of usr_1's goes.
      expect(await store().receipts.deleteByUser(owner("usr_1", hex64()), 10)).toBe(0);
      expect(await store().receipts.countByUser(owner("usr_1"))).toBe(1);
      expect(await store().receipts.findByMerchantReceipt(mine.merchantId, mine.receiptId)).toEqual(mine);
    });

    it("keeps a transaction's other receipts when one of them is deleted", async () => {
      const [first, second] = ["R-a", "R-b"].map((receiptId, i) =>
        receipt("usr_1", {
          receiptId,
          transactionId: "T-shared",
          merchantTenantId: "tnt_m",
          createdAt: at(i),
        }),
      );
      if (first === undefined || second === undefined) throw new Error("no receipts");
      for (const r of [first, second]) await store().receipts.insert(r);
      expect(
        await store().receipts.deleteIfSealedTo(
          first.panHash,
          first.merchantId,
          first.receiptId,
          first.keyBundle.keyId,
        ),
      ).toBe(true);
      expect(await store().receipts.findByTransaction("tnt_m", "T-shared")).toEqual([second]);
    });

    it("deletes a card's escrow held for one tenant, whatever its key, and nothing else", async () => {
      const card = hex64();
      const later = at(10_000);
      const mine = [
        escrowedReceipt(card, later, { escrowOwnerTenantId: "tnt_a" }),
        escrowedReceipt(card, later, { escrowOwnerTenantId: "tnt_a", escrowKeyId: "iek_1" }),
      ];
      const others = [
        escrowedReceipt(card, later, { escrowOwnerTenantId: "tnt_b" }),
        escrowedReceipt(card, later),
        escrowedReceipt(hex64(), later, { escrowOwnerTenantId: "tnt_a" }),
        receipt("usr_1", { panHash: card }),
      ];
      for (const r of [...mine, ...others]) expect(await store().receipts.insert(r)).toBe(true);
      expect(await store().receipts.deleteEscrowedFor(card, "tnt_a", DELETE_PAGE_MAX)).toBe(2);
      for (const r of mine) {
        expect(await store().receipts.findByMerchantReceipt(r.merchantId, r.receiptId)).toBeUndefined();
      }
      for (const r of others) {
        expect(await store().receipts.findByMerchantReceipt(r.merchantId, r.receiptId)).toEqual(r);
      }
      const left = await store().receipts.findEscrowed(
        { panHash: card, ownerTenantId: "tnt_a", includeUnowned: true },
        at(0),
        10,
      );
      expect(left.receipts.map((r) => r.id)).toEqual([others[1]?.id]);
      expect(await store().receipts.deleteEscrowedFor(card, "tnt_a", DELETE_PAGE_MAX)).toBe(0);
    });

    it("deletes a receipt only while it is sealed to the key named, out of every listing", async () => {
      const [older, target, newer] = [at(1), at(2), at(3)].map((createdAt) =>
        receipt("usr_1", { createdAt }),
      );
      for (const r of [older, target, newer]) if (r !== undefined) await store().receipts.insert(r);
      if (older === undefined || target === undefined || newer === undefined) throw new Error("no receipt");
      const { panHash, merchantId, receiptId } = target;
      expect(await store().receipts.deleteIfSealedTo(panHash, merchantId, receiptId, "another-key")).toBe(
        false,
      );
      expect(
        await store().receipts.deleteIfSealedTo(hex64(), merchantId, receiptId, target.keyBundle.keyId),
      ).toBe(false);
      expect(await store().receipts.findByMerchantReceipt(merchantId, receiptId)).toEqual(target);
      expect(
        await store().receipts.deleteIfSealedTo(panHash, merchantId, receiptId, target.keyBundle.keyId),
      ).toBe(true);
      expect(await store().receipts.findByMerchantReceipt(merchantId, receiptId)).toBeUndefined();
      expect(await store().receipts.findByTransaction(target.merchantTenantId, target.transactionId)).toEqual(
        [],
      );
      expect((await store().receipts.listByUser(owner("usr_1"), 10)).receipts).toEqual([newer, older]);
      expect(
        await store().receipts.deleteIfSealedTo(panHash, merchantId, receiptId, target.keyBundle.keyId),
      ).toBe(false);
    });

    it("keeps an erasure's record from its first begin until finish", async () => {
      const userId = uid("usr");
      const first = { userId, tenantId: "tnt_a", panHash: hex64(), startedAt: at(5) };
      expect(await store().erasures.find(userId)).toBeUndefined();
      expect(await store().erasures.begin(first)).toEqual(first);
      expect(await store().erasures.begin({ ...first, startedAt: at(60) })).toEqual(first);
      const both = await Promise.all([
        store().erasures.begin({ ...first, userId: `${userId}x` }),
        store().erasures.begin({ ...first, userId: `${userId}x`, startedAt: at(9) }),
      ]);
      expect(both[0]).toEqual(both[1]);
      expect(await store().erasures.find(userId)).toEqual(first);
      await store().erasures.finish(userId);
      expect(await store().erasures.find(userId)).toBeUndefined();
      await store().erasures.finish(userId);
      expect(await store().erasures.find(`${userId}x`)).toEqual(both[0]);
    });

    it("deletes every grant of a user, freeing its cap, and no one else's", async () => {
      const mine = [grant("usr_1", at(0)), grant("usr_1", at(1)), grant("usr_1", at(2))];
      const theirs = grant("usr_2", at(0));
      for (const g of [...mine, theirs])
        expect(await store().grants.create(g, 3, at(2))).toEqual({ kind: "created" });
      expect((await store().grants.create(grant("usr_1", at(3)), 3, at(3))).kind).toBe("cap_reached");

      expect(await store().grants.deleteByUser("usr_1")).toBe(3);
      for (const g of mine) expect(await store().grants.findByHash(g.tokenHash)).toBeUndefined();
      expect(await store().grants.findByHash(theirs.tokenHash)).toEqual(theirs);
      expect(await store().grants.create(grant("usr_1", at(4)), 3, at(4))).toEqual({ kind: "created" });
      expect(await store().grants.deleteByUser("usr_9")).toBe(0);
    });
  });

  describe("operator reads", () => {
    it("lists one tenant's API keys, oldest first", async () => {
      const a2 = apiKey({ tenantId: "tnt_a", createdAt: at(20) });
      const a1 = apiKey({ tenantId: "tnt_a", createdAt: at(10), role: "issuer", merchantIds: [] });
      const b = apiKey({ tenantId: "tnt_b", createdAt: at(15) });
      for (const k of [a2, b, a1]) await store().apiKeys.insert(k);
      expect(await store().apiKeys.list("tnt_a")).toEqual([a1, a2]);
      expect(await store().apiKeys.list("tnt_b")).toEqual([b]);
      expect(await store().apiKeys.list("tnt_c")).toEqual([]);
      expect(await store().apiKeys.list()).toEqual([a1, b, a2]);
    });

    it("reads the audit log by tenant and strictly after a time, newest first, at most `limit`", async () => {
      const events = [
        auditEvent({ at: at(1), tenantId: "tnt_a", action: "grant.created" }),
        auditEvent({
          at: at(2),
          tenantId: "tnt_b",
          action: "card_binding_conflict",
          subject: "merchant tenant m",
        }),
        auditEvent({ at: at(3), tenantId: "tnt_a", action: "escrow.held", userId: "usr_1", keyId: "esc_1" }),
        auditEvent({ at: at(4), tenantId: "tnt_a", action: "user.erased" }),
        auditEvent({ at: at(5), tenantId: "tnt_b", action: "grant.created" }),
      ];
      const [e1, e2, e3, e4, e5] = events;
      for (const e of [e3, e1, e5, e2, e4]) if (e) await store().audit.append(e);
      expect(await store().audit.list(10, { tenantId: "tnt_a" })).toEqual([e4, e3, e1]);
      expect(await store().audit.list(2, { tenantId: "tnt_a" })).toEqual([e4, e3]);
      expect(await store().audit.list(10, { after: at(3) })).toEqual([e5, e4]);
      expect(await store().audit.list(10, { tenantId: "tnt_b", after: at(2) })).toEqual([e5]);
      expect(await store().audit.list(10, { tenantId: "tnt_c" })).toEqual([]);
      expect(await store().audit.list(10, {})).toEqual([e5, e4, e3, e2, e1]);
    });

    it("removes a merchantId's signing key unless it belongs to the tenant to keep", async () => {
      const key = {
        merchantKeyId: uid("mk"),
        merchantId: "m-1",
        tenantId: "tnt_a",
        algorithm: "Ed25519" as const,
        publicKey: randomBytes(44).toString("base64"),
        registeredAt: at(0),
      };
      await store().merchantKeys.put(key);
      expect(await store().merchantKeys.removeUnlessOwnedBy("m-1", "tnt_a")).toBe(false);
      expect(await store().merchantKeys.findByMerchantId("m-1")).toEqual({ ...key, previousKeys: [] });
      expect(await store().merchantKeys.removeUnlessOwnedBy("m-1", "tnt_b")).toBe(true);
      expect(await store().merchantKeys.findByMerchantId("m-1")).toBeUndefined();
      expect(await store().merchantKeys.removeUnlessOwnedBy("m-1", "tnt_b")).toBe(false);
      expect(await store().merchantKeys.removeUnlessOwnedBy("m-none", "tnt_b")).toBe(false);
      // The new owner can register its own key now.
      const theirs = { ...key, merchantKeyId: uid("mk"), tenantId: "tnt_b", registeredAt: at(10) };
      expect(await store().merchantKeys.put(theirs)).toEqual({ kind: "created" });
    });
  });
}
