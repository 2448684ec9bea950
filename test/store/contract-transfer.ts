import { describe, expect, it } from "vitest";
import type { KtPendingTransfer } from "../../src/store/kt-types.js";
import type { TransferOutcome } from "../../src/store/register.js";
import type { RegisterOutcome, Store } from "../../src/store/types.js";
import { event } from "./contract-events.js";
import { at, hex64, pendingKey, receipt, uid } from "./fixtures.js";

/**
 * The operator's card transfer (`UserStore.transfer`): the card (both references) moves to a new user
 * of the receiving tenant, with no key; the previous user keeps its keys and receipts and holds no
 * reference. Written from the side of whoever wants the card's next receipts: the previous issuer, a
 * racing registration, or a transfer replayed.
 */
export function transferContract(store: () => Store): void {
  describe("users: the operator's card transfer", () => {
    const [from, to] = ["tnt_from", "tnt_to"];
    const registered = async (pan: string, par?: string, tenantId = from): Promise<string> => {
      const outcome = await store().users.register({
        panHash: pan,
        ...(par === undefined ? {} : { aliasPanHash: par }),
        tenantId,
        newUserId: uid("usr"),
        key: pendingKey({ tenantId }),
        now: at(0),
      });
      if (!("user" in outcome)) throw new Error(`expected a user, got ${outcome.kind}`);
      return outcome.user.userId;
    };
    const transfer = (userId: string, toTenantId = to, now = at(10)): Promise<TransferOutcome> =>
      store().users.transfer({ userId, toTenantId, newUserId: uid("usr"), now });
    const holder = async (ref: string) => (await store().users.findByPanHash(ref))?.userId;

    it("moves both references to a keyless user of the receiving tenant; the previous user keeps its keys and receipts", async () => {
      const [pan, par] = [hex64(), hex64()];
      const previousId = await registered(pan, par);
      await store().receipts.insert(receipt(previousId, { panHash: pan, issuerTenantId: from }));
      const keysBefore = await store().users.listKeys(previousId);

      const outcome = await transfer(previousId);
      if (outcome.kind !== "transferred") throw new Error(`expected transferred, got ${outcome.kind}`);
      const newId = outcome.user.userId;
      expect(newId).not.toBe(previousId);
      expect(await holder(pan)).toBe(newId);
      expect(await holder(par)).toBe(newId);
      const moved = await store().users.findById(newId);
      expect(moved).toMatchObject({ tenantId: to, panHash: pan, aliasPanHash: par, keyVersion: 0 });
      expect(await store().users.listKeys(newId)).toEqual([]);

      const previous = await store().users.findById(previousId);
      expect(previous).toMatchObject({ tenantId: from, formerPanHash: pan, formerAliasPanHash: par });
      expect(previous?.supersededAt).toEqual(at(10));
      expect(previous?.panHash).not.toBe(pan);
      expect(previous?.aliasPanHash).toBeUndefined();
      expect(await store().users.listKeys(previousId)).toEqual(keysBefore);
      expect(await store().receipts.countByUser({ userId: previousId, panHash: pan })).toBe(1);
    });

    it("writes the key-log entries in the move's step; an entry out of order or of another card writes neither", async () => {
      const entry = (cardKey: string, version: number, userId: string): KtPendingTransfer => ({
        kind: "transfer",
        id: uid("ktp"),
        order: { sequence: `card:${cardKey}`, type: "receipts.v1/card-transfer", version },
        transfer: `trf_${hex64().slice(0, 32)}`,
        fromTenant: from,
        toTenant: to,
        cardKey,
        opening: "AAAAAAAAAAAAAAAAAAAAAA==",
        userId,
        createdAt: at(10),
      });
      const [pan, par] = [hex64(), hex64()];
      const userId = await registered(pan, par);
      const move = (kt: KtPendingTransfer[]) =>
        store().users.transfer({ userId, toTenantId: to, newUserId: uid("usr"), now: at(10), kt });
      const pendingIds = async () => (await store().ktLog.pending(10_000)).map((p) => p.id);
      const before = await pendingIds();
      // Version 2 for a card with no statement yet, or one reference left out: refused, nothing moved.
      for (const kt of [
        [entry(pan, 2, "u"), entry(par, 1, "u")],
        [entry(pan, 1, "u")],
        [entry(pan, 1, "u"), entry(hex64(), 1, "u")],
      ]) {
        expect((await move(kt)).kind).toBe("log_refused");
        expect(await holder(pan)).toBe(userId);
        expect(await store().ktLog.sequenceState(`card:${pan}`)).toBeUndefined();
        expect(await pendingIds()).toEqual(before);
      }
      const kt = [entry(pan, 1, "u"), entry(par, 1, "u")];
      const outcome = await move(kt);
      expect(outcome.kind).toBe("transferred");
      expect(await holder(pan)).not.toBe(userId);
      expect(await pendingIds()).toEqual(expect.arrayContaining(kt.map((e) => e.id)));
      expect(await store().ktLog.sequenceState(`card:${par}`)).toMatchObject({ version: 1, active: null });
    });

    it("writes nothing for an unknown user, a user already moved, or a move to the tenant holding the card", async () => {
      const pan = hex64();
      const userId = await registered(pan);
      expect(await transfer(uid("usr"))).toEqual({ kind: "not_found" });
      expect(await transfer(userId, from)).toEqual({ kind: "same_tenant" });
      expect(await holder(pan)).toBe(userId);
      expect((await store().users.findById(userId))?.supersededAt).toBeUndefined();

      const first = await transfer(userId);
      expect(first.kind).toBe("transferred");
      const holderAfter = await holder(pan);
      // Replayed: the superseded user holds nothing to move, and the card stays where the first put it.
      expect(await transfer(userId, "tnt_third")).toEqual({ kind: "not_found" });
      expect(await holder(pan)).toBe(holderAfter);
      expect((await store().users.findById(holderAfter ?? ""))?.tenantId).toBe(to);
    });

    it("lets the receiving tenant's registration activate the reserved user; the previous issuer's is refused", async () => {
      const pan = hex64();
      const previousId = await registered(pan);
      const outcome = await transfer(previousId);
      if (outcome.kind !== "transferred") throw new Error(`expected transferred, got ${outcome.kind}`);
      const back = await store().users.register({
        panHash: pan,
        tenantId: from,
        newUserId: uid("usr"),
        key: pendingKey({ tenantId: from }),
        now: at(20),
      });
      expect(back).toEqual({ kind: "pan_taken" });
      const key = pendingKey({ tenantId: to });
      const taken: RegisterOutcome = await store().users.register({
        panHash: pan,
        tenantId: to,
        newUserId: uid("usr"),
        key,
        now: at(30),
      });
      expect(taken).toMatchObject({
        kind: "created",
        user: { userId: outcome.user.userId, activeKeyId: key.keyId },
      });
      expect(await holder(pan)).toBe(outcome.user.userId);
    });

    it("writes the events the outcome asks for in the same step as the move", async () => {
      const pan = hex64();
      const userId = await registered(pan);
      const moved = event(to, 0);
      const refused = event(from, 0);
      const events = (o: TransferOutcome) => (o.kind === "transferred" ? [moved] : []);
      const same = await store().users.transfer({
        userId,
        toTenantId: from,
        newUserId: uid("usr"),
        now: at(5),
        events: (o) => (o.kind === "transferred" ? [refused] : []),
      });
      expect(same.kind).toBe("same_tenant");
      const outcome = await store().users.transfer({
        userId,
        toTenantId: to,
        newUserId: uid("usr"),
        now: at(6),
        events,
      });
      expect(outcome.kind).toBe("transferred");
      const sequenced = await store().events.sequence({ lease: "events", token: 1 }, 10);
      if (!Array.isArray(sequenced)) throw new Error("fenced out");
      expect(sequenced.map((e) => e.id)).toEqual([moved.id]);
    });

    it("leaves the card with exactly one holder whatever transfers and registrations race for it", async () => {
      const [pan, par] = [hex64(), hex64()];
      const userId = await registered(pan, par);
      // Transfers, the holder's own registrations, and the BIN owner's registration (which supersedes
      // the holder too): whichever wins, the card ends with one holder.
      const racers = Array.from({ length: 12 }, (_, i) => {
        if (i % 4 === 0) return transfer(userId, `tnt_to${i}`, at(10 + i));
        const tenantId = i % 4 === 3 ? "tnt_owner" : from;
        return store().users.register({
          panHash: i % 4 === 1 ? pan : par,
          ...(i % 4 === 3 ? { aliasPanHash: pan, ownsBin: true } : {}),
          tenantId,
          newUserId: uid("usr"),
          key: pendingKey({ tenantId }),
          now: at(10 + i),
        });
      });
      const outcomes = await Promise.all(racers);
      const moves = outcomes.filter((o) => o.kind === "transferred" || o.kind === "superseded");
      // The first move wins; every later transfer finds the user superseded.
      expect(moves.filter((o) => o.kind === "transferred").length).toBeLessThanOrEqual(1);
      expect(moves.length).toBeGreaterThanOrEqual(1);
      const byPan = await holder(pan);
      const byPar = await holder(par);
      expect(byPan).toBeDefined();
      expect(byPan).toBe(byPar);
      const holderRecord = await store().users.findById(byPan ?? "");
      expect(holderRecord?.supersededAt).toBeUndefined();
      expect([holderRecord?.panHash, holderRecord?.aliasPanHash].sort()).toEqual([pan, par].sort());
      // No superseded user holds a reference.
      const previous = await store().users.findById(userId);
      expect(previous?.supersededAt).toBeDefined();
      expect([previous?.panHash, previous?.aliasPanHash]).not.toContain(pan);
    });
  });
}
