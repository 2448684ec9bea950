import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { KtPendingDirectoryChange } from "../../src/store/kt-types.js";
import type { IssuerEscrowKeyRecord, Store } from "../../src/store/types.js";
import { pendingBinding } from "./contract-kt-log.js";
import { at, hex64, uid } from "./fixtures.js";

const KEY_A = "11111111-1111-4111-a111-111111111111";
const KEY_B = "22222222-2222-4222-a222-222222222222";

/** A directory change for the key log, as the domain hands one to the store with the change it logs. */
function directoryChange(tenantId: string, reason: string): KtPendingDirectoryChange {
  return { kind: "directory", id: uid("ktp"), tenantId, reason, createdAt: at(0) };
}

/**
 * A statement the log must refuse: version 1 again of a card whose version 1 is already enqueued. A
 * change handed with it must not be written either (a BIN claimed or an escrow key stored with no
 * record in the log would be a directory the log never saw).
 */
async function refusedStatement(store: Store) {
  const card = hex64();
  expect(await store.ktLog.enqueue([pendingBinding(card, 1, KEY_A)])).toEqual({ kind: "enqueued" });
  return pendingBinding(card, 1, KEY_B);
}

/**
 * The ownership rules of `src/store/types.ts`: BIN prefixes of issuer tenants,
 * merchantId owners, and issuer escrow keys.
 */
export function ownershipContract(store: () => Store): void {
  describe("bins", () => {
    it("sets a tenant's prefixes, lists them sorted, and names the owner of a card BIN", async () => {
      expect(await store().bins.set("tnt_a", ["555555", "41111111", "400000"], at(0))).toEqual({
        kind: "set",
      });
      expect(await store().bins.list("tnt_a")).toEqual(["400000", "41111111", "555555"]);
      expect(await store().bins.list("tnt_b")).toEqual([]);
      // A 6-digit prefix owns every card under it, given as 6 or 8 digits.
      expect(await store().bins.ownerOf("555555")).toBe("tnt_a");
      expect(await store().bins.ownerOf("55555512")).toBe("tnt_a");
      // An 8-digit prefix owns its cards; a neighbour under the same 6 digits is nobody's.
      expect(await store().bins.ownerOf("41111111")).toBe("tnt_a");
      expect(await store().bins.ownerOf("41111112")).toBeUndefined();
      expect(await store().bins.ownerOf("999999")).toBeUndefined();
    });

    it("prefers the 8-digit owner over the 6-digit one of the same tenant's neighbour", async () => {
      await store().bins.set("tnt_a", ["411111"], at(0));
      await store().bins.set("tnt_b", ["42222222"], at(0));
      expect(await store().bins.ownerOf("41111199")).toBe("tnt_a");
      expect(await store().bins.ownerOf("42222222")).toBe("tnt_b");
      expect(await store().bins.ownerOf("42222223")).toBeUndefined();
    });

    it("refuses a prefix another tenant owns, or one overlapping it, and changes nothing", async () => {
      await store().bins.set("tnt_a", ["411111", "52222222"], at(0));
      await store().bins.set("tnt_b", ["600000"], at(0));
      const refusals: Array<[string[], string]> = [
        // The same prefix.
        [["600001", "411111"], "411111"],
        // An 8-digit prefix under tnt_a's 6-digit one.
        [["41111122"], "41111122"],
        // A 6-digit prefix over tnt_a's 8-digit one.
        [["522222"], "522222"],
      ];
      for (const [bins, bin] of refusals) {
        expect(await store().bins.set("tnt_b", bins, at(10)), bins.join(",")).toEqual({
          kind: "conflict",
          bin,
        });
        // Atomic: tnt_b keeps its old list (600001 was not added), tnt_a keeps its own.
        expect(await store().bins.list("tnt_b")).toEqual(["600000"]);
        expect(await store().bins.list("tnt_a")).toEqual(["411111", "52222222"]);
      }
      expect(await store().bins.ownerOf("41111122")).toBe("tnt_a");
      expect(await store().bins.ownerOf("52222222")).toBe("tnt_a");
      expect(await store().bins.ownerOf("600001")).toBeUndefined();
    });

    it("knows when 6 digits cover an owned 8-digit prefix, so that they name no owner for sure", async () => {
      await store().bins.set("tnt_a", ["41111111"], at(0));
      await store().bins.set("tnt_b", ["555555", "55555512"], at(0));
      expect(await store().bins.hasOwnedPrefixUnder("411111")).toBe(true);
      expect(await store().bins.ownerOf("411111")).toBeUndefined();
      // A 6-digit prefix a tenant owns is an owner whatever lies under it.
      expect(await store().bins.hasOwnedPrefixUnder("555555")).toBe(true);
      expect(await store().bins.ownerOf("555555")).toBe("tnt_b");
      expect(await store().bins.hasOwnedPrefixUnder("411112")).toBe(false);
      // A 6-digit prefix owned with nothing under it: its owner is known, no 8-digit prefix hides one.
      await store().bins.set("tnt_c", ["600000"], at(0));
      expect(await store().bins.hasOwnedPrefixUnder("600000")).toBe(false);
      expect(await store().bins.ownerOf("600000")).toBe("tnt_c");
      expect(await store().bins.hasOwnedPrefixUnder("41111")).toBe(false);
      await store().bins.set("tnt_a", [], at(10));
      expect(await store().bins.hasOwnedPrefixUnder("411111")).toBe(false);
    });

    it("replaces a tenant's whole list, freeing the prefixes it dropped", async () => {
      await store().bins.set("tnt_a", ["411111", "555555"], at(0));
      expect(await store().bins.set("tnt_a", ["400000", "411111"], at(10))).toEqual({ kind: "set" });
      expect(await store().bins.list("tnt_a")).toEqual(["400000", "411111"]);
      expect(await store().bins.ownerOf("555555")).toBeUndefined();
      // The dropped prefix is free for another tenant now; the kept one is not.
      expect(await store().bins.set("tnt_b", ["555555"], at(20))).toEqual({ kind: "set" });
      expect(await store().bins.ownerOf("555555")).toBe("tnt_b");
      expect(await store().bins.set("tnt_b", ["411111"], at(30))).toEqual({
        kind: "conflict",
        bin: "411111",
      });
      expect(await store().bins.list("tnt_b")).toEqual(["555555"]);
      // An empty list gives every prefix up.
      expect(await store().bins.set("tnt_a", [], at(40))).toEqual({ kind: "set" });
      expect(await store().bins.list("tnt_a")).toEqual([]);
      expect(await store().bins.ownerOf("411111")).toBeUndefined();
    });

    it("leaves one owner when two tenants race for one prefix", async () => {
      const outcomes = await Promise.all(
        ["tnt_a", "tnt_b", "tnt_c", "tnt_d"].map((tenant) => store().bins.set(tenant, ["411111"], at(0))),
      );
      expect(outcomes.filter((o) => o.kind === "set")).toHaveLength(1);
      const owner = await store().bins.ownerOf("411111");
      const lists = await Promise.all(["tnt_a", "tnt_b", "tnt_c", "tnt_d"].map((t) => store().bins.list(t)));
      expect(lists.flat()).toEqual(["411111"]);
      expect(owner).toBeDefined();
    });

    it("leaves one owner of a card when two tenants race for overlapping 6- and 8-digit prefixes", async () => {
      const [six, eight] = await Promise.all([
        store().bins.set("tnt_a", ["411111"], at(0)),
        store().bins.set("tnt_b", ["41111111"], at(0)),
      ]);
      const lists = [await store().bins.list("tnt_a"), await store().bins.list("tnt_b")];
      // Whoever won, the card 41111111 has one owner and the loser stored nothing.
      expect([six.kind, eight.kind].sort()).toEqual(["conflict", "set"]);
      expect(lists.flat()).toHaveLength(1);
      expect(await store().bins.ownerOf("41111111")).toBe(six.kind === "set" ? "tnt_a" : "tnt_b");
    });

    it("leaves one owner of a card when tenants race for overlapping prefixes another tenant gave up", async () => {
      // Every 6-digit prefix a set touches has a lock document, left behind when the prefix is given
      // up: a race over a freed prefix must serialize on it as well as a race over a new one.
      for (let round = 0; round < 8; round++) {
        const six = `4${String(round).padStart(2, "0")}111`.padEnd(6, "1");
        const eight = `${six}22`;
        expect(await store().bins.set("tnt_c", [six, eight], at(0))).toEqual({ kind: "set" });
        expect(await store().bins.set("tnt_c", [], at(1))).toEqual({ kind: "set" });
        const [a, b] = await Promise.all([
          store().bins.set(`tnt_a${round}`, [six], at(2)),
          store().bins.set(`tnt_b${round}`, [eight], at(2)),
        ]);
        expect([a.kind, b.kind].sort(), six).toEqual(["conflict", "set"]);
        const lists = [await store().bins.list(`tnt_a${round}`), await store().bins.list(`tnt_b${round}`)];
        expect(lists.flat(), six).toHaveLength(1);
      }
    });

    it("names no owner under a BIN that is not 6 digits: pattern characters are not a pattern", async () => {
      await store().bins.set("tnt_a", ["41111111"], at(0));
      expect(await store().bins.hasOwnedPrefixUnder("411111")).toBe(true);
      for (const probe of ["|411111", "411111|", "41111.", ".*", "4111\\d", "4111111", "41111", "^41111"]) {
        expect(await store().bins.hasOwnedPrefixUnder(probe), probe).toBe(false);
      }
    });

    it("claims BINs and writes the key log's record in one step, or neither", async () => {
      const change = directoryChange("tnt_a", "bins.set");
      expect(await store().bins.set("tnt_a", ["411111"], at(0), [change])).toEqual({ kind: "set" });
      expect(await store().ktLog.findPending(change.id)).toEqual(change);
      const stale = await refusedStatement(store());
      expect(await store().bins.set("tnt_a", ["555555"], at(10), [stale])).toEqual({
        kind: "log_refused",
        pendingId: stale.id,
        reason: "version must be 2, the last + 1",
      });
      // The refused set changed nothing: the old list, the old owners, no record.
      expect(await store().bins.list("tnt_a")).toEqual(["411111"]);
      expect(await store().bins.ownerOf("555555")).toBeUndefined();
      expect(await store().ktLog.findPending(stale.id)).toBeUndefined();
    });
  });

  describe("bins of two kinds, several lists in one step", () => {
    it("keeps token BINs and card BINs apart, in one numbering space with one owner per prefix", async () => {
      const s = store();
      expect(await s.bins.set("tnt_a", ["411111"], at(0))).toEqual({ kind: "set" });
      const token = [{ tenantId: "tnt_a", kind: "token-bin" as const, bins: ["49999999"] }];
      expect(await s.bins.setLists(token, at(1))).toEqual({ kind: "set" });
      expect(await s.bins.list("tnt_a")).toEqual(["411111"]);
      expect(await s.bins.list("tnt_a", "bin")).toEqual(["411111"]);
      expect(await s.bins.list("tnt_a", "token-bin")).toEqual(["49999999"]);
      // A tap's first 8 token digits route like a card BIN.
      expect(await s.bins.ownerOf("49999999")).toBe("tnt_a");
      // Replacing one kind leaves the other.
      expect(await s.bins.set("tnt_a", [], at(2))).toEqual({ kind: "set" });
      expect(await s.bins.list("tnt_a", "token-bin")).toEqual(["49999999"]);
      // The same digits, or a 6-digit prefix over them, for another tenant of either kind; or the same
      // digits as the other kind for the owner: each refused, nothing changed.
      const refusals = [
        { tenantId: "tnt_b", kind: "bin" as const, bins: ["49999999"] },
        { tenantId: "tnt_b", kind: "token-bin" as const, bins: ["499999"] },
        { tenantId: "tnt_b", kind: "bin" as const, bins: ["499999"] },
        { tenantId: "tnt_a", kind: "bin" as const, bins: ["49999999"] },
      ];
      for (const list of refusals) {
        expect((await s.bins.setLists([list], at(3))).kind, JSON.stringify(list)).toBe("conflict");
      }
      expect(await s.bins.list("tnt_a", "bin")).toEqual([]);
      expect(await s.bins.list("tnt_b", "bin")).toEqual([]);
      expect(await s.bins.list("tnt_b", "token-bin")).toEqual([]);
      expect(await s.bins.ownerOf("49999999")).toBe("tnt_a");
    });

    it("never refuses a tenant's prefixes for overlapping its own: a BIN over its token BIN, a prefix named twice", async () => {
      const s = store();
      const token = [{ tenantId: "tnt_a", kind: "token-bin" as const, bins: ["49999999"] }];
      expect(await s.bins.setLists(token, at(0))).toEqual({ kind: "set" });
      // A 6-digit card BIN over the tenant's own 8-digit token BIN, and an 8-digit prefix given before
      // the tenant's own 6-digit one over it, named twice: all the tenant's, so set.
      expect(await s.bins.set("tnt_a", ["499999", "41111122", "411111", "41111122"], at(1))).toEqual({
        kind: "set",
      });
      expect(await s.bins.list("tnt_a")).toEqual(["411111", "41111122", "499999"]);
      expect(await s.bins.list("tnt_a", "token-bin")).toEqual(["49999999"]);
      // Another tenant still gets none of them, nor a prefix under them.
      for (const bins of [["41111133"], ["49999999"], ["411111"]]) {
        expect((await s.bins.set("tnt_b", bins, at(2))).kind, bins.join(",")).toBe("conflict");
      }
      expect(await s.bins.ownerOf("41111133")).toBe("tnt_a");
      // Its own token BIN as a card BIN is refused, naming that prefix (not the first one asked for).
      expect(await s.bins.set("tnt_a", ["400000", "49999999"], at(3))).toEqual({
        kind: "conflict",
        bin: "49999999",
      });
      expect(await s.bins.list("tnt_a")).toEqual(["411111", "41111122", "499999"]);
    });

    it("moves a prefix from one tenant to another in one step, with both records, or not at all", async () => {
      const s = store();
      await s.bins.set("tnt_a", ["411111", "422222"], at(0));
      const moved = [directoryChange("tnt_a", "bins.moved_away"), directoryChange("tnt_b", "bins.moved_in")];
      const move = [
        { tenantId: "tnt_a", kind: "bin" as const, bins: ["422222"] },
        { tenantId: "tnt_b", kind: "bin" as const, bins: ["411111"] },
      ];
      expect(await s.bins.setLists(move, at(1), moved)).toEqual({ kind: "set" });
      expect(await s.bins.ownerOf("41111100")).toBe("tnt_b");
      expect(await s.bins.list("tnt_a")).toEqual(["422222"]);
      for (const change of moved) expect(await s.ktLog.findPending(change.id)).toEqual(change);
      // Back again, with a record the log refuses: neither list changes.
      const stale = await refusedStatement(s);
      const back = [
        { tenantId: "tnt_b", kind: "bin" as const, bins: [] },
        { tenantId: "tnt_a", kind: "bin" as const, bins: ["411111", "422222"] },
      ];
      expect((await s.bins.setLists(back, at(2), [stale])).kind).toBe("log_refused");
      // Taken from b by c, while a prefix c also asks for is a's: refused, and b keeps its prefix.
      const taken = [
        { tenantId: "tnt_b", kind: "bin" as const, bins: [] },
        { tenantId: "tnt_c", kind: "bin" as const, bins: ["411111", "422222"] },
      ];
      expect(await s.bins.setLists(taken, at(3))).toEqual({ kind: "conflict", bin: "422222" });
      expect(await s.bins.list("tnt_b")).toEqual(["411111"]);
      expect(await s.bins.list("tnt_a")).toEqual(["422222"]);
      expect(await s.bins.list("tnt_c")).toEqual([]);
      expect(await s.bins.ownerOf("41111100")).toBe("tnt_b");
    });
  });

  describe("merchants", () => {
    it("gives a merchantId to its first user; later claims get that owner back", async () => {
      const first = await store().merchants.claim("m-1", "tnt_a", at(0));
      expect(first).toEqual({ merchantId: "m-1", tenantId: "tnt_a", source: "first_use", at: at(0) });
      expect(await store().merchants.claim("m-1", "tnt_b", at(10))).toEqual(first);
      expect(await store().merchants.claim("m-1", "tnt_a", at(20))).toEqual(first);
      expect(await store().merchants.find("m-1")).toEqual(first);
      expect(await store().merchants.find("m-2")).toBeUndefined();
    });

    it("hands out copies: changing what it returned, or the date it was given, changes nothing stored", async () => {
      const owner = (tenantId: string, source: string, seconds: number) => ({
        merchantId: "m-1",
        tenantId,
        source,
        at: at(seconds),
      });
      const given = at(0);
      const claimed = await store().merchants.claim("m-1", "tnt_a", given);
      given.setTime(0);
      claimed.tenantId = "tnt_x";
      claimed.at.setTime(1);
      const found = await store().merchants.find("m-1");
      expect(found).toEqual(owner("tnt_a", "first_use", 0));
      if (found === undefined) return;
      found.tenantId = "tnt_y";
      found.at.setTime(2);
      const again = await store().merchants.claim("m-1", "tnt_b", at(5));
      expect(again).toEqual(owner("tnt_a", "first_use", 0));
      again.at.setTime(3);
      expect(await store().merchants.find("m-1")).toEqual(owner("tnt_a", "first_use", 0));
      const { record } = await store().merchants.assign("m-1", "tnt_b", at(10));
      record.tenantId = "tnt_z";
      record.at.setTime(4);
      expect(await store().merchants.find("m-1")).toEqual(owner("tnt_b", "operator", 10));
    });

    it("leaves one owner when 10 tenants claim one merchantId at once", async () => {
      const claims = await Promise.all(
        Array.from({ length: 10 }, (_, i) => store().merchants.claim("m-1", `tnt_${i}`, at(0))),
      );
      const owners = new Set(claims.map((c) => c.tenantId));
      expect(owners.size).toBe(1);
      expect((await store().merchants.find("m-1"))?.tenantId).toBe(claims[0]?.tenantId);
    });

    it("lets the operator's assignment override the first use, and keeps it against later claims", async () => {
      await store().merchants.claim("m-1", "tnt_a", at(0));
      const assigned = await store().merchants.assign("m-1", "tnt_b", at(10));
      const record = { merchantId: "m-1", tenantId: "tnt_b", source: "operator", at: at(10) };
      expect(assigned).toEqual({ record, previousTenantId: "tnt_a" });
      expect(await store().merchants.find("m-1")).toEqual(record);
      expect(await store().merchants.claim("m-1", "tnt_a", at(20))).toEqual(record);
      expect(await store().merchants.assign("m-1", "tnt_c", at(25))).toMatchObject({
        previousTenantId: "tnt_b",
      });
      // Assigning an unused merchantId works too (no previous owner), and a first use then finds it.
      const fresh = await store().merchants.assign("m-2", "tnt_a", at(30));
      expect(fresh.previousTenantId).toBeUndefined();
      expect(await store().merchants.claim("m-2", "tnt_b", at(40))).toEqual(fresh.record);
    });
  });

  describe("issuerEscrowKeys", () => {
    const escrowKey = (tenantId: string, seconds: number): IssuerEscrowKeyRecord => ({
      escrowKeyId: uid("iek"),
      tenantId,
      algorithm: "HPKE-P256-SHA256-A256GCM",
      publicKey: randomBytes(91).toString("base64"),
      createdAt: at(seconds),
    });

    it("makes the newest key current and lists a tenant's keys newest first", async () => {
      expect(await store().issuerEscrowKeys.current("tnt_a")).toBeUndefined();
      expect(await store().issuerEscrowKeys.list("tnt_a")).toEqual([]);
      const [k1, other, k2, k3] = [
        escrowKey("tnt_a", 0),
        escrowKey("tnt_b", 5),
        escrowKey("tnt_a", 10),
        { ...escrowKey("tnt_a", 20), algorithm: "RSA-OAEP-256" as const },
      ];
      for (const key of [k1, other, k2, k3]) await store().issuerEscrowKeys.insert(key);
      expect(await store().issuerEscrowKeys.current("tnt_a")).toEqual(k3);
      expect(await store().issuerEscrowKeys.list("tnt_a")).toEqual([k3, k2, k1]);
      expect(await store().issuerEscrowKeys.current("tnt_b")).toEqual(other);
      expect(await store().issuerEscrowKeys.list("tnt_c")).toEqual([]);
    });

    it("revokes a key of the tenant: the newest unrevoked one is current; another tenant's id changes nothing", async () => {
      const [k1, k2, other] = [escrowKey("tnt_a", 0), escrowKey("tnt_a", 10), escrowKey("tnt_b", 5)];
      for (const key of [k1, k2, other]) await store().issuerEscrowKeys.insert(key);
      // Another tenant's key, an unknown id: nothing changes.
      expect(await store().issuerEscrowKeys.revoke("tnt_a", other.escrowKeyId, at(20))).toBeUndefined();
      expect(await store().issuerEscrowKeys.revoke("tnt_a", uid("iek"), at(20))).toBeUndefined();
      expect(await store().issuerEscrowKeys.list("tnt_b")).toEqual([other]);
      expect(await store().issuerEscrowKeys.list("tnt_a")).toEqual([k2, k1]);

      expect(await store().issuerEscrowKeys.revoke("tnt_a", k2.escrowKeyId, at(30))).toEqual({
        ...k2,
        revokedAt: at(30),
      });
      expect(await store().issuerEscrowKeys.current("tnt_a")).toEqual(k1);
      // Twice keeps the first time.
      await store().issuerEscrowKeys.revoke("tnt_a", k2.escrowKeyId, at(40));
      expect(await store().issuerEscrowKeys.list("tnt_a")).toEqual([{ ...k2, revokedAt: at(30) }, k1]);
      await store().issuerEscrowKeys.revoke("tnt_a", k1.escrowKeyId, at(50));
      expect(await store().issuerEscrowKeys.current("tnt_a")).toBeUndefined();
      expect(await store().issuerEscrowKeys.current("tnt_b")).toEqual(other);
    });

    it("stores a key and the key log's record in one step, or neither", async () => {
      const key = escrowKey("tnt_a", 0);
      const change = directoryChange("tnt_a", "escrow-key.set");
      expect(await store().issuerEscrowKeys.insert(key, [change])).toBeUndefined();
      expect(await store().ktLog.findPending(change.id)).toEqual(change);
      expect(await store().issuerEscrowKeys.current("tnt_a")).toEqual(key);
      // A key the log refuses is not stored: release never wraps to a key the log does not hold.
      const stale = await refusedStatement(store());
      const unlogged = escrowKey("tnt_a", 10);
      expect(await store().issuerEscrowKeys.insert(unlogged, [stale])).toEqual({
        kind: "log_refused",
        pendingId: stale.id,
        reason: "version must be 2, the last + 1",
      });
      expect(await store().issuerEscrowKeys.current("tnt_a")).toEqual(key);
      expect(await store().issuerEscrowKeys.list("tnt_a")).toEqual([key]);
      expect(await store().ktLog.findPending(stale.id)).toBeUndefined();
      // With no record (or an empty list), a plain insert.
      const plain = escrowKey("tnt_a", 20);
      expect(await store().issuerEscrowKeys.insert(plain, [])).toBeUndefined();
      expect(await store().issuerEscrowKeys.current("tnt_a")).toEqual(plain);
    });

    it("refuses an escrowKeyId any tenant holds (an issuer's statement names it), writing nothing", async () => {
      const first = escrowKey("tnt_a", 0);
      expect(await store().issuerEscrowKeys.insert(first)).toBeUndefined();
      const sameId = { ...escrowKey("tnt_b", 5), escrowKeyId: first.escrowKeyId };
      expect(await store().issuerEscrowKeys.insert(sameId)).toEqual({ kind: "id_taken" });
      expect(await store().issuerEscrowKeys.insert({ ...sameId, tenantId: "tnt_a" })).toEqual({
        kind: "id_taken",
      });
      expect(await store().issuerEscrowKeys.list("tnt_b")).toEqual([]);
      expect(await store().issuerEscrowKeys.list("tnt_a")).toEqual([first]);
      // Among several keys of a tenant too.
      const second = escrowKey("tnt_a", 10);
      expect(await store().issuerEscrowKeys.insert(second)).toBeUndefined();
      expect(
        await store().issuerEscrowKeys.insert({ ...escrowKey("tnt_c", 20), escrowKeyId: second.escrowKeyId }),
      ).toEqual({
        kind: "id_taken",
      });
      expect(await store().issuerEscrowKeys.list("tnt_c")).toEqual([]);
    });

    it("revokes nothing, and does not fail, for a tenant that has no escrow key", async () => {
      const key = escrowKey("tnt_a", 0);
      await store().issuerEscrowKeys.insert(key);
      expect(await store().issuerEscrowKeys.revoke("tnt_nobody", key.escrowKeyId, at(10))).toBeUndefined();
      expect(await store().issuerEscrowKeys.current("tnt_a")).toEqual(key);
    });
  });
}
