import { describe, expect, it } from "vitest";
import type { EscrowQuery, ReceiptRecord, Store } from "../../src/store/types.js";
import { at, escrowedReceipt, hex64, owner, receipt } from "./fixtures.js";

/** Escrowed receipts sorted as `findEscrowed` must answer: oldest first, then by id. */
function oldestFirst(records: ReceiptRecord[]): ReceiptRecord[] {
  return [...records].sort(
    (a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
  );
}

/** The escrow rules of `ReceiptStore`: owners, escrow key versions, counts, look-ups. */
export function escrowContract(store: () => Store): void {
  describe("receipts: escrow owners and key versions", () => {
    const to = {
      userId: "usr_1",
      issuerTenantId: "tnt_a",
      keyBundle: { keyId: "k-user", algorithm: "RSA-OAEP-256" as const, encryptedAesKey: "d3JhcHBlZA==" },
    };

    /** One card's escrow: unowned, owned by tnt_a (two keys), owned by tnt_b, one expiring early. */
    async function seed() {
      const panHash = hex64();
      const far = at(10_000);
      const records = {
        unowned: escrowedReceipt(panHash, far, { createdAt: at(10), escrowKeyId: "esc_1" }),
        aOld: escrowedReceipt(panHash, far, {
          createdAt: at(5),
          escrowKeyId: "esc_2",
          escrowOwnerTenantId: "tnt_a",
        }),
        aNew: escrowedReceipt(panHash, far, {
          createdAt: at(20),
          escrowKeyId: "esc_1",
          escrowOwnerTenantId: "tnt_a",
        }),
        aExpiring: escrowedReceipt(panHash, at(50), {
          createdAt: at(30),
          escrowKeyId: "esc_1",
          escrowOwnerTenantId: "tnt_a",
        }),
        b: escrowedReceipt(panHash, far, {
          createdAt: at(15),
          escrowKeyId: "esc_1",
          escrowOwnerTenantId: "tnt_b",
        }),
        otherCard: escrowedReceipt(hex64(), far, { escrowKeyId: "esc_1", escrowOwnerTenantId: "tnt_a" }),
        delivered: receipt("usr_9", { panHash }),
      };
      for (const r of Object.values(records)) expect(await store().receipts.insert(r)).toBe(true);
      return { panHash, ...records };
    }

    const find = async (query: EscrowQuery, now = at(60), limit = 100) =>
      (await store().receipts.findEscrowed(query, now, limit)).receipts;

    it("keeps a key bundle's aadBound mark, escrowed and after release", async () => {
      const panHash = hex64();
      const bound = escrowedReceipt(panHash, at(10_000));
      bound.keyBundle.aadBound = true;
      const unbound = escrowedReceipt(panHash, at(10_000));
      for (const r of [bound, unbound]) await store().receipts.insert(r);
      const read = (r: ReceiptRecord) => store().receipts.findByMerchantReceipt(r.merchantId, r.receiptId);
      expect((await read(bound))?.keyBundle).toEqual(bound.keyBundle);
      expect((await read(unbound))?.keyBundle).toEqual(unbound.keyBundle);
      const boundTo = { ...to, keyBundle: { ...to.keyBundle, aadBound: true as const } };
      expect(await store().receipts.release(unbound, boundTo)).toBe(true);
      expect(await store().receipts.release(bound, to)).toBe(true);
      expect((await read(unbound))?.keyBundle).toEqual(boundTo.keyBundle);
      expect((await read(bound))?.keyBundle).toEqual(to.keyBundle);
    });

    it("marks a receipt held, which a query that excludes held ones skips, until it is released", async () => {
      const panHash = hex64();
      const [first, second] = [at(1), at(2)].map((createdAt) =>
        escrowedReceipt(panHash, at(10_000), { createdAt }),
      );
      if (first === undefined || second === undefined) throw new Error("no receipt");
      for (const r of [first, second]) await store().receipts.insert(r);
      await store().receipts.markHeld(hex64(), first.id);
      expect(
        (await store().receipts.findByMerchantReceipt(first.merchantId, first.receiptId))?.escrowHeld,
      ).toBeUndefined();
      await store().receipts.markHeld(panHash, first.id);
      const query = { panHash, ownerTenantId: "tnt_a", includeUnowned: true };
      const ids = async (excludeHeld: boolean) =>
        (await store().receipts.findEscrowed({ ...query, excludeHeld }, at(0), 10)).receipts.map((r) => r.id);
      expect(await ids(false)).toEqual([first.id, second.id]);
      expect(await ids(true)).toEqual([second.id]);
      expect(
        (await store().receipts.findByMerchantReceipt(first.merchantId, first.receiptId))?.escrowHeld,
      ).toBe(true);
      // A released receipt loses the mark; marking a receipt that is not escrowed changes nothing.
      expect(await store().receipts.release(first, to)).toBe(true);
      const released = await store().receipts.findByMerchantReceipt(first.merchantId, first.receiptId);
      expect(released?.escrowHeld).toBeUndefined();
      await store().receipts.markHeld(panHash, first.id);
      expect(await store().receipts.findByMerchantReceipt(first.merchantId, first.receiptId)).toEqual(
        released,
      );
    });

    it("finds the owner's escrow, with or without the unowned, never another tenant's, oldest first", async () => {
      const s = await seed();
      const base = { panHash: s.panHash, ownerTenantId: "tnt_a" };
      expect(await find({ ...base, includeUnowned: true })).toEqual([s.aOld, s.unowned, s.aNew]);
      expect(await find({ ...base, includeUnowned: false })).toEqual([s.aOld, s.aNew]);
      expect(await find({ ...base, ownerTenantId: "tnt_b", includeUnowned: false })).toEqual([s.b]);
      expect(await find({ ...base, ownerTenantId: "tnt_c", includeUnowned: true })).toEqual([s.unowned]);
      expect(await find({ ...base, ownerTenantId: "tnt_c", includeUnowned: false })).toEqual([]);
      expect(await find({ ...base, panHash: hex64(), includeUnowned: true })).toEqual([]);
    });

    it("filters by escrow key id, to take or to leave out", async () => {
      const s = await seed();
      const base = { panHash: s.panHash, ownerTenantId: "tnt_a", includeUnowned: true };
      expect(await find({ ...base, escrowKeyIds: ["esc_2"] })).toEqual([s.aOld]);
      expect(await find({ ...base, escrowKeyIds: ["esc_1", "esc_2"] })).toEqual([s.aOld, s.unowned, s.aNew]);
      expect(await find({ ...base, escrowKeyIds: ["esc_9"] })).toEqual([]);
      expect(await find({ ...base, excludeEscrowKeyIds: ["esc_2"] })).toEqual([s.unowned, s.aNew]);
      expect(await find({ ...base, excludeEscrowKeyIds: ["esc_1", "esc_2"] })).toEqual([]);
    });

    it("leaves out escrow expired at `now`", async () => {
      const s = await seed();
      const query = { panHash: s.panHash, ownerTenantId: "tnt_a", includeUnowned: false };
      expect(await find(query, at(49))).toEqual([s.aOld, s.aNew, s.aExpiring]);
      expect(await find(query, at(50))).toEqual([s.aOld, s.aNew]);
    });

    it("pages oldest first without gaps or repeats, across equal timestamps", async () => {
      const panHash = hex64();
      const seconds = [40, 10, 20, 20, 20, 5, 30];
      const mine = seconds.map((s) =>
        escrowedReceipt(panHash, at(10_000), { createdAt: at(s), escrowOwnerTenantId: "tnt_a" }),
      );
      const theirs = escrowedReceipt(panHash, at(10_000), {
        createdAt: at(20),
        escrowOwnerTenantId: "tnt_b",
      });
      for (const r of [...mine, theirs]) await store().receipts.insert(r);
      const query = { panHash, ownerTenantId: "tnt_a", includeUnowned: true };
      const pages: ReceiptRecord[][] = [];
      let cursor: string | undefined;
      do {
        const page = await store().receipts.findEscrowed(query, at(0), 3, cursor);
        pages.push(page.receipts);
        cursor = page.nextCursor;
      } while (cursor !== undefined && pages.length < 10);
      expect(pages.map((p) => p.length)).toEqual([3, 3, 1]);
      expect(pages.flat()).toEqual(oldestFirst(mine));
      // A full last page has no cursor after it.
      const exact = await store().receipts.findEscrowed(query, at(0), 7);
      expect(exact.receipts).toHaveLength(7);
      expect(exact.nextCursor).toBeUndefined();
    });

    it("finds a receipt by (merchantId, receiptId), escrowed or delivered", async () => {
      const s = await seed();
      expect(await store().receipts.findByMerchantReceipt(s.aNew.merchantId, s.aNew.receiptId)).toEqual(
        s.aNew,
      );
      expect(
        await store().receipts.findByMerchantReceipt(s.delivered.merchantId, s.delivered.receiptId),
      ).toEqual(s.delivered);
      expect(await store().receipts.findByMerchantReceipt("m-other", s.aNew.receiptId)).toBeUndefined();
      expect(await store().receipts.findByMerchantReceipt(s.aNew.merchantId, "R-none")).toBeUndefined();
    });

    it("releases only while sealed to the expected escrow key: a wrong key changes nothing", async () => {
      const s = await seed();
      expect(await store().receipts.release(s.aOld, to, "esc_1")).toBe(false);
      expect(await store().receipts.findByMerchantReceipt(s.aOld.merchantId, s.aOld.receiptId)).toEqual(
        s.aOld,
      );
      expect((await store().receipts.listByUser(owner("usr_1", s.panHash), 10)).receipts).toEqual([]);

      expect(await store().receipts.release(s.aOld, to, "esc_2")).toBe(true);
      const { escrowKeyId: _k, expiresAt: _e, escrowOwnerTenantId: _o, ...kept } = s.aOld;
      const released = { ...kept, ...to, isEscrowed: false };
      expect(await store().receipts.findByMerchantReceipt(s.aOld.merchantId, s.aOld.receiptId)).toEqual(
        released,
      );
      expect((await store().receipts.listByUser(owner("usr_1", s.panHash), 10)).receipts).toEqual([released]);
      // Released once: the second try, with the right key or none, is refused.
      expect(await store().receipts.release(s.aOld, { ...to, userId: "usr_2" }, "esc_2")).toBe(false);
      expect(await store().receipts.release(s.aOld, { ...to, userId: "usr_2" })).toBe(false);
      expect(await find({ panHash: s.panHash, ownerTenantId: "tnt_a", includeUnowned: false })).toEqual([
        s.aNew,
      ]);
    });

    it("orders the counts by owner, then key, whatever order the escrow was stored in", async () => {
      for (const [key, owner] of [
        ["esc_3", undefined],
        ["esc_2", "tnt_b"],
        ["esc_2", undefined],
        ["esc_1", "tnt_b"],
        ["esc_1", undefined],
      ] as const) {
        const overrides =
          owner === undefined ? { escrowKeyId: key } : { escrowKeyId: key, escrowOwnerTenantId: owner };
        await store().receipts.insert(escrowedReceipt(hex64(), at(10_000), overrides));
      }
      expect(
        (await store().receipts.countEscrowed(at(0))).map(
          (c) => `${c.ownerTenantId ?? "-"}/${c.escrowKeyId}`,
        ),
      ).toEqual(["-/esc_1", "-/esc_2", "-/esc_3", "tnt_b/esc_1", "tnt_b/esc_2"]);
    });

    it("counts unexpired escrow by owner tenant and escrow key", async () => {
      await seed();
      const second = hex64();
      await store().receipts.insert(escrowedReceipt(second, at(10_000), { escrowKeyId: "esc_2" }));
      // Ordered by owner (the unowned first), then key; an unowned count has no ownerTenantId at all.
      expect(await store().receipts.countEscrowed(at(60))).toStrictEqual([
        { escrowKeyId: "esc_1", count: 1 },
        { escrowKeyId: "esc_2", count: 1 },
        // aNew and otherCard; aExpiring has expired at 60.
        { ownerTenantId: "tnt_a", escrowKeyId: "esc_1", count: 2 },
        { ownerTenantId: "tnt_a", escrowKeyId: "esc_2", count: 1 },
        { ownerTenantId: "tnt_b", escrowKeyId: "esc_1", count: 1 },
      ]);
      const before = await store().receipts.countEscrowed(at(0));
      expect(before.find((c) => c.ownerTenantId === "tnt_a" && c.escrowKeyId === "esc_1")?.count).toBe(3);
      // Expired at the very instant it expires, as findEscrowed says.
      expect(
        (await store().receipts.countEscrowed(at(50))).find(
          (c) => c.ownerTenantId === "tnt_a" && c.escrowKeyId === "esc_1",
        )?.count,
      ).toBe(2);
      expect(await store().receipts.countEscrowed(at(20_000))).toEqual([]);
    });
  });
}
