import { describe, expect, it } from "vitest";
import type { KeyRecord, RegisterOutcome, Store } from "../../src/store/types.js";
import { at, hex64, pendingKey, receipt, uid } from "./fixtures.js";

/**
 * The rules of a card registered by both its references (hashed PAN and PAR): one user holds both,
 * either finds it, receipts placed by either are the user's, and no reference ever names two users.
 * Written from the side of whoever tries to make a reference name a second user.
 */
export function cardAliasesContract(store: () => Store): void {
  describe("users: one card by two references", () => {
    const issuer = "tnt_issuer";
    const register = (
      panHash: string,
      aliasPanHash: string | undefined,
      key: KeyRecord,
      options: { tenantId?: string; ownsBin?: boolean; now?: Date } = {},
    ): Promise<RegisterOutcome> =>
      store().users.register({
        panHash,
        ...(aliasPanHash === undefined ? {} : { aliasPanHash }),
        tenantId: options.tenantId ?? issuer,
        newUserId: uid("usr"),
        key,
        now: options.now ?? at(0),
        ...(options.ownsBin === undefined ? {} : { ownsBin: options.ownsBin }),
      });
    const userIdOf = (outcome: RegisterOutcome): string => {
      if (!("user" in outcome)) throw new Error(`expected a user, got ${outcome.kind}`);
      return outcome.user.userId;
    };
    const holder = async (ref: string) => (await store().users.findByPanHash(ref))?.userId;

    it("creates one user holding both references, found by either", async () => {
      const [pan, par] = [hex64(), hex64()];
      const outcome = await register(pan, par, pendingKey());
      expect(outcome.kind).toBe("created");
      const userId = userIdOf(outcome);
      expect(await holder(pan)).toBe(userId);
      expect(await holder(par)).toBe(userId);
      expect(await store().users.findById(userId)).toMatchObject({ panHash: pan, aliasPanHash: par });
    });

    it("adds the missing reference to the user holding the other, with or without a new key", async () => {
      const [pan, par] = [hex64(), hex64()];
      const key = pendingKey();
      const userId = userIdOf(await register(pan, undefined, key));
      expect(await holder(par)).toBeUndefined();
      const same = await register(pan, par, key, { now: at(5) });
      expect(same).toMatchObject({ kind: "unchanged", aliasAdded: true });
      expect(await holder(par)).toBe(userId);
      // Registered by PAR first: its hashed PAN becomes the alias, and a new key rotates.
      const [pan2, par2] = [hex64(), hex64()];
      const first = await register(par2, undefined, pendingKey());
      const rotated = await register(pan2, par2, pendingKey(), { now: at(5) });
      expect(rotated).toMatchObject({ kind: "rotated", aliasAdded: true });
      expect(await holder(pan2)).toBe(userIdOf(first));
      // The same call again changes nothing and adds nothing.
      expect(await register(pan, par, key, { now: at(9) })).not.toHaveProperty("aliasAdded");
    });

    it("refuses another tenant's reference, either one, writing nothing", async () => {
      const [pan, par] = [hex64(), hex64()];
      const victim = userIdOf(await register(pan, par, pendingKey()));
      for (const [p, a] of [
        [par, undefined],
        [pan, undefined],
        [hex64(), par],
        [pan, hex64()],
      ] as const) {
        expect(await register(p, a, pendingKey(), { tenantId: "tnt_intruder" })).toEqual({
          kind: "pan_taken",
        });
      }
      expect(await holder(pan)).toBe(victim);
      expect(await holder(par)).toBe(victim);
    });

    it("refuses to join two users, or to give one user a third reference: card_split, nothing written", async () => {
      const [pan, par] = [hex64(), hex64()];
      const byPan = userIdOf(await register(pan, undefined, pendingKey()));
      const byPar = userIdOf(await register(par, undefined, pendingKey()));
      expect(await register(pan, par, pendingKey())).toEqual({ kind: "card_split" });
      expect(await holder(pan)).toBe(byPan);
      expect(await holder(par)).toBe(byPar);
      expect((await store().users.findById(byPan))?.aliasPanHash).toBeUndefined();

      const [pan2, par2, otherPar] = [hex64(), hex64(), hex64()];
      const both = userIdOf(await register(pan2, par2, pendingKey()));
      expect(await register(pan2, otherPar, pendingKey())).toEqual({ kind: "card_split" });
      expect(await register(otherPar, par2, pendingKey())).toEqual({ kind: "card_split" });
      expect(await holder(otherPar)).toBeUndefined();
      expect(await store().users.findById(both)).toMatchObject({ panHash: pan2, aliasPanHash: par2 });
    });

    it("lets the BIN's owner take both references from another tenant's user; its receipts stay its own", async () => {
      const [pan, par] = [hex64(), hex64()];
      const squatter = userIdOf(await register(pan, par, pendingKey(), { tenantId: "tnt_squatter" }));
      await store().receipts.insert(receipt(squatter, { panHash: par, issuerTenantId: "tnt_squatter" }));
      const outcome = await register(pan, par, pendingKey({ tenantId: "tnt_owner" }), {
        tenantId: "tnt_owner",
        ownsBin: true,
        now: at(3),
      });
      expect(outcome.kind).toBe("superseded");
      expect(await holder(pan)).toBe(userIdOf(outcome));
      expect(await holder(par)).toBe(userIdOf(outcome));
      const previous = await store().users.findById(squatter);
      expect(previous).toMatchObject({ formerPanHash: pan, formerAliasPanHash: par, supersededAt: at(3) });
      expect(previous?.aliasPanHash).toBeUndefined();
      expect(await store().receipts.countByUser({ userId: squatter, panHash: pan, aliasPanHash: par })).toBe(
        1,
      );
    });

    it("reads, counts and deletes a user's receipts placed by either reference", async () => {
      const [pan, par] = [hex64(), hex64()];
      const userId = userIdOf(await register(pan, par, pendingKey()));
      const onPan = receipt(userId, { panHash: pan, createdAt: at(1) });
      const onPar = receipt(userId, { panHash: par, createdAt: at(2), paymentId: uid("pay") });
      // Another user's receipt with the same receiptId on an unrelated card never shows.
      const foreign = receipt(uid("usr"), { receiptId: onPar.receiptId, merchantId: "m-2" });
      for (const r of [onPan, onPar, foreign]) expect(await store().receipts.insert(r)).toBe(true);
      const owner = { userId, panHash: pan, aliasPanHash: par };
      const page = await store().receipts.listByUser(owner, 10);
      expect(page.receipts.map((r) => r.id)).toEqual([onPar.id, onPan.id]);
      expect((await store().receipts.findByReceiptId(onPar.receiptId, owner)).map((r) => r.id)).toEqual([
        onPar.id,
      ]);
      expect((await store().receipts.findByPaymentId(onPar.paymentId ?? "", owner))?.id).toBe(onPar.id);
      // Without the alias the receipt placed by the PAR is out of reach: the alias is what finds it.
      expect(await store().receipts.countByUser({ userId, panHash: pan })).toBe(1);
      expect(await store().receipts.countByUser(owner)).toBe(2);
      expect(await store().receipts.deleteByUser(owner, 1)).toBe(1);
      expect(await store().receipts.deleteByUser(owner, 10)).toBe(1);
      expect(await store().receipts.countByUser(owner)).toBe(0);
      // A page spans both references and stops at its limit: 2 on the card, then 1 of the 2 by the PAR.
      const more = [pan, pan, par, par].map((panHash, i) =>
        receipt(userId, { panHash, createdAt: at(10 + i) }),
      );
      for (const r of more) expect(await store().receipts.insert(r)).toBe(true);
      expect(await store().receipts.deleteByUser(owner, 3)).toBe(3);
      expect(await store().receipts.countByUser(owner)).toBe(1);
      expect(
        await store().receipts.findByMerchantReceipt(foreign.merchantId, foreign.receiptId),
      ).toBeDefined();
    });

    it("frees both references when the user is erased", async () => {
      const [pan, par] = [hex64(), hex64()];
      const userId = userIdOf(await register(pan, par, pendingKey()));
      expect(await store().users.erase(userId)).toMatchObject({ deletedKeys: 1 });
      expect(await holder(pan)).toBeUndefined();
      expect(await holder(par)).toBeUndefined();
      const again = await register(par, undefined, pendingKey({ tenantId: "tnt_next" }), {
        tenantId: "tnt_next",
      });
      expect(again.kind).toBe("created");
    });

    it("never lets one reference name two users, whatever concurrent registrations race for it", async () => {
      const [pan, par] = [hex64(), hex64()];
      const calls = Array.from({ length: 12 }, (_, i) =>
        i % 3 === 0
          ? register(pan, par, pendingKey())
          : i % 3 === 1
            ? register(par, undefined, pendingKey())
            : register(pan, undefined, pendingKey()),
      );
      const outcomes = await Promise.all(calls);
      const created = outcomes.filter((o) => o.kind === "created").map(userIdOf);
      const byPan = await holder(pan);
      const byPar = await holder(par);
      expect(byPar).toBeDefined();
      expect(byPan).toBeDefined();
      // Two users at most (one per reference, when the single-reference calls came first), and when the
      // call with both won, one user holds both.
      expect(created.length).toBeGreaterThanOrEqual(1);
      expect(created.length).toBeLessThanOrEqual(2);
      const holders = new Set([byPan, byPar]);
      expect(holders.size).toBe(created.length);
      for (const userId of holders) {
        const user = await store().users.findById(userId ?? "");
        for (const ref of [user?.panHash, user?.aliasPanHash]) {
          if (ref !== undefined) expect(await holder(ref)).toBe(userId);
        }
      }
    });
  });
}
