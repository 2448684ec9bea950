import { randomUUID } from "node:crypto";
import { describe, expect, it } from "vitest";
import type { KeyRecord, Store } from "../../src/store/types.js";
import { at, hex64, pendingKey, uid } from "./fixtures.js";

/** The rules of `UserStore`: pending keys, and every outcome of `register`. */
export function usersContract(store: () => Store): void {
  describe("users", () => {
    const issuer = "tnt_issuer";
    const register = (
      panHash: string,
      key: KeyRecord,
      now = at(0),
      tenantId = issuer,
      newUserId = uid("usr"),
    ) => store().users.register({ panHash, tenantId, newUserId, key, now });
    /** What the store holds for a card and some keyIds, read back through the interface. */
    const readBack = async (panHash: string, keyIds: string[]) => {
      const user = await store().users.findByPanHash(panHash);
      return {
        user,
        keys: await Promise.all(keyIds.map((keyId) => store().users.findKey(keyId))),
        userKeys: user === undefined ? [] : await store().users.listKeys(user.userId),
      };
    };

    it("stores a pending key once and finds it by keyId", async () => {
      const key = pendingKey();
      expect(await store().users.insertPendingKey(key)).toBe(true);
      expect(await store().users.insertPendingKey(pendingKey({ keyId: key.keyId }))).toBe(false);
      expect(await store().users.findKey(key.keyId)).toEqual(key);
      expect(await store().users.findKey(randomUUID())).toBeUndefined();
    });

    it("creates a user with an active key for a new panHash", async () => {
      const panHash = hex64();
      const key = pendingKey();
      const outcome = await store().users.register({
        panHash,
        tenantId: issuer,
        newUserId: "usr_new",
        key,
        now: at(5),
      });
      const user = {
        userId: "usr_new",
        tenantId: issuer,
        panHash,
        activeKeyId: key.keyId,
        keyVersion: 1,
        createdAt: at(5),
        updatedAt: at(5),
      };
      const active = { ...key, userId: "usr_new", status: "active", registeredAt: at(5) };
      expect(outcome).toEqual({ kind: "created", user, key: active });
      expect(await store().users.findById("usr_new")).toEqual(user);
      expect(await store().users.findByPanHash(panHash)).toEqual(user);
      expect(await store().users.findKey(key.keyId)).toEqual(active);
    });

    it("promotes a pending key of the same tenant, keeping its public key and creation time", async () => {
      const pending = pendingKey({ createdAt: at(0) });
      await store().users.insertPendingKey(pending);
      const outcome = await register(hex64(), { ...pending, createdAt: at(9) }, at(10));
      expect(outcome.kind).toBe("created");
      const stored = await store().users.findKey(pending.keyId);
      expect(stored).toMatchObject({
        status: "active",
        publicKey: pending.publicKey,
        createdAt: at(0),
        registeredAt: at(10),
      });
      expect(stored?.userId).toBe(outcome.kind === "created" ? outcome.user.userId : "");
    });

    it("refuses a pending key made for another tenant", async () => {
      const pending = pendingKey({ tenantId: "tnt_other_issuer" });
      await store().users.insertPendingKey(pending);
      const panHash = hex64();
      expect(await register(panHash, pending)).toEqual({ kind: "key_taken" });
      expect(await store().users.findByPanHash(panHash)).toBeUndefined();
      expect(await store().users.findKey(pending.keyId)).toEqual(pending);
    });

    it("reports an identical registration as unchanged, touching nothing", async () => {
      const panHash = hex64();
      const key = pendingKey();
      const created = await register(panHash, key, at(0));
      const again = await register(panHash, key, at(30));
      expect(again.kind).toBe("unchanged");
      if (again.kind !== "unchanged" || created.kind !== "created") throw new Error("unexpected outcomes");
      expect(again.user).toEqual(created.user);
      expect(again.key).toEqual(created.key);
      expect(await store().users.findByPanHash(panHash)).toEqual(created.user);
    });

    it("rotates to a new key: same userId, new key active, old key rotated", async () => {
      const panHash = hex64();
      const [oldKey, newKey] = [pendingKey(), pendingKey()];
      const created = await register(panHash, oldKey, at(0));
      if (created.kind !== "created") throw new Error(`expected created, got ${created.kind}`);
      const userId = created.user.userId;
      const unusedUserId = uid("usr");
      const rotated = await register(panHash, newKey, at(60), issuer, unusedUserId);
      expect(rotated).toEqual({
        kind: "rotated",
        user: { ...created.user, activeKeyId: newKey.keyId, keyVersion: 2, updatedAt: at(60) },
        key: { ...newKey, userId, status: "active", registeredAt: at(60) },
        previousKeyId: oldKey.keyId,
      });
      expect(await store().users.findKey(oldKey.keyId)).toEqual({
        ...created.key,
        status: "rotated",
        rotatedAt: at(60),
      });
      expect((await store().users.findKey(newKey.keyId))?.status).toBe("active");
      expect((await store().users.findByPanHash(panHash))?.activeKeyId).toBe(newKey.keyId);
      expect(await store().users.findById(unusedUserId)).toBeUndefined();
    });

    it("never makes a rotated key active again (it may be a lost device's), changing nothing", async () => {
      const panHash = hex64();
      const [first, second] = [pendingKey(), pendingKey()];
      await register(panHash, first, at(0));
      await register(panHash, second, at(10));
      const before = await readBack(panHash, [first.keyId, second.keyId]);
      expect(await register(panHash, first, at(20))).toEqual({ kind: "key_rotated" });
      expect(await readBack(panHash, [first.keyId, second.keyId])).toEqual(before);
      expect(before.user?.activeKeyId).toBe(second.keyId);
      expect((await store().users.findKey(first.keyId))?.status).toBe("rotated");
      // A new key rotates as before.
      const third = pendingKey();
      expect(await register(panHash, third, at(30))).toMatchObject({
        kind: "rotated",
        previousKeyId: second.keyId,
      });
    });

    it("refuses a panHash registered by another tenant, storing nothing", async () => {
      const panHash = hex64();
      const created = await register(panHash, pendingKey(), at(0), "tnt_issuer_a");
      const intruderKey = pendingKey({ tenantId: "tnt_issuer_b" });
      expect(await register(panHash, intruderKey, at(10), "tnt_issuer_b")).toEqual({ kind: "pan_taken" });
      expect(await store().users.findByPanHash(panHash)).toEqual(
        created.kind === "created" ? created.user : null,
      );
      expect(await store().users.findKey(intruderKey.keyId)).toBeUndefined();
    });

    it("refuses a keyId that belongs to another user, storing nothing", async () => {
      const key = pendingKey();
      await register(hex64(), key, at(0));
      const otherPan = hex64();
      expect(await register(otherPan, key, at(10))).toEqual({ kind: "key_taken" });
      expect(await store().users.findByPanHash(otherPan)).toBeUndefined();
    });

    it("refuses a rotated keyId sent with another public key, changing nothing", async () => {
      const panHash = hex64();
      const [first, second] = [pendingKey(), pendingKey()];
      await register(panHash, first, at(0));
      await register(panHash, second, at(10));
      const before = await readBack(panHash, [first.keyId, second.keyId]);
      // The old keyId with someone else's public key: once this made the old key active again.
      const forged = { ...first, publicKey: pendingKey().publicKey };
      expect(await register(panHash, forged, at(20))).toEqual({ kind: "key_mismatch" });
      expect(await readBack(panHash, [first.keyId, second.keyId])).toEqual(before);
      expect(before.user?.activeKeyId).toBe(second.keyId);
    });

    it("refuses the active keyId or a pending keyId sent with another public key, changing nothing", async () => {
      const panHash = hex64();
      const active = pendingKey();
      await register(panHash, active, at(0));
      const pending = pendingKey();
      await store().users.insertPendingKey(pending);
      const otherPan = hex64();
      const before = await readBack(panHash, [active.keyId, pending.keyId]);
      const stranger = pendingKey().publicKey;
      expect(await register(panHash, { ...active, publicKey: stranger }, at(5))).toEqual({
        kind: "key_mismatch",
      });
      expect(await register(otherPan, { ...pending, publicKey: stranger }, at(5))).toEqual({
        kind: "key_mismatch",
      });
      expect(await readBack(panHash, [active.keyId, pending.keyId])).toEqual(before);
      expect(await store().users.findByPanHash(otherPan)).toBeUndefined();
    });

    it("lets the BIN's owner supersede another tenant's user: a new user holds the card, the old keeps its keys", async () => {
      const panHash = hex64();
      const squatterKey = pendingKey({ tenantId: "tnt_squatter" });
      const squatted = await register(panHash, squatterKey, at(0), "tnt_squatter");
      if (squatted.kind !== "created") throw new Error(`expected created, got ${squatted.kind}`);
      const ownerKey = pendingKey({ tenantId: "tnt_owner" });
      const newUserId = uid("usr");
      const outcome = await store().users.register({
        panHash,
        tenantId: "tnt_owner",
        newUserId,
        key: ownerKey,
        now: at(10),
        ownsBin: true,
      });
      const previous = {
        ...squatted.user,
        panHash: `superseded:${squatted.user.userId}`,
        formerPanHash: panHash,
        supersededAt: at(10),
        updatedAt: at(10),
      };
      const user = {
        userId: newUserId,
        tenantId: "tnt_owner",
        panHash,
        activeKeyId: ownerKey.keyId,
        keyVersion: 1,
        createdAt: at(10),
        updatedAt: at(10),
      };
      const key = { ...ownerKey, userId: newUserId, status: "active", registeredAt: at(10) };
      expect(outcome).toEqual({ kind: "superseded", user, key, previous });
      expect(await store().users.findByPanHash(panHash)).toEqual(user);
      expect(await store().users.findById(squatted.user.userId)).toEqual(previous);
      // The superseded user keeps its key, and its card's panHash no longer finds it.
      expect(await store().users.listKeys(squatted.user.userId)).toEqual([squatted.key]);
      expect(await store().users.findKey(squatterKey.keyId)).toEqual(squatted.key);
      // The squatter registering again without owning the BIN is refused, and changes nothing.
      expect(
        await register(panHash, pendingKey({ tenantId: "tnt_squatter" }), at(20), "tnt_squatter"),
      ).toEqual({
        kind: "pan_taken",
      });
      expect(await store().users.findByPanHash(panHash)).toEqual(user);
      // Erasing the superseded user leaves the card's new user alone.
      await store().users.erase(squatted.user.userId);
      expect(await store().users.findByPanHash(panHash)).toEqual(user);
    });

    it("refuses a BIN owner's registration with the other tenant's keyId, changing nothing", async () => {
      const panHash = hex64();
      const theirs = pendingKey({ tenantId: "tnt_squatter" });
      await register(panHash, theirs, at(0), "tnt_squatter");
      const before = await readBack(panHash, [theirs.keyId]);
      const outcome = await store().users.register({
        panHash,
        tenantId: "tnt_owner",
        newUserId: uid("usr"),
        key: { ...theirs, tenantId: "tnt_owner" },
        now: at(10),
        ownsBin: true,
      });
      expect(outcome).toEqual({ kind: "key_taken" });
      expect(await readBack(panHash, [theirs.keyId])).toEqual(before);
    });

    it("supersedes once when the BIN's owner registers one card 10 times at once", async () => {
      const panHash = hex64();
      const squatted = await register(
        panHash,
        pendingKey({ tenantId: "tnt_squatter" }),
        at(0),
        "tnt_squatter",
      );
      const keys = Array.from({ length: 10 }, () => pendingKey({ tenantId: "tnt_owner" }));
      const outcomes = await Promise.all(
        keys.map((key) =>
          store().users.register({
            panHash,
            tenantId: "tnt_owner",
            newUserId: uid("usr"),
            key,
            now: at(5),
            ownsBin: true,
          }),
        ),
      );
      expect(outcomes.filter((o) => o.kind === "superseded")).toHaveLength(1);
      expect(outcomes.filter((o) => o.kind === "rotated")).toHaveLength(9);
      const user = await store().users.findByPanHash(panHash);
      expect(user?.tenantId).toBe("tnt_owner");
      expect(new Set(outcomes.map((o) => ("user" in o ? o.user.userId : "")))).toEqual(
        new Set([user?.userId]),
      );
      if (squatted.kind !== "created") throw new Error("expected created");
      expect((await store().users.findById(squatted.user.userId))?.supersededAt).toEqual(at(5));
    });

    it("makes exactly one user for 20 concurrent registrations of one panHash with different keys", async () => {
      const panHash = hex64();
      const keys = Array.from({ length: 20 }, () => pendingKey());
      const outcomes = await Promise.all(keys.map((key) => register(panHash, key)));
      expect(outcomes.filter((o) => o.kind === "created")).toHaveLength(1);
      expect(outcomes.filter((o) => o.kind === "rotated")).toHaveLength(19);
      const user = await store().users.findByPanHash(panHash);
      const userIds = new Set(outcomes.map((o) => ("user" in o ? o.user.userId : "")));
      expect([...userIds]).toEqual([user?.userId]);
      const stored = await Promise.all(keys.map((key) => store().users.findKey(key.keyId)));
      const active = stored.filter((key) => key?.status === "active");
      expect(active.map((key) => key?.keyId)).toEqual([user?.activeKeyId]);
      expect(stored.filter((key) => key?.status === "rotated")).toHaveLength(19);
    });

    it("makes exactly one user for 20 concurrent identical registrations", async () => {
      const panHash = hex64();
      const key = pendingKey();
      const outcomes = await Promise.all(Array.from({ length: 20 }, () => register(panHash, key)));
      expect(outcomes.filter((o) => o.kind === "created")).toHaveLength(1);
      expect(outcomes.filter((o) => o.kind === "unchanged")).toHaveLength(19);
      const userIds = new Set(outcomes.map((o) => ("user" in o ? o.user.userId : "")));
      expect(userIds.size).toBe(1);
    });

    it("returns copies: mutating an outcome changes nothing stored", async () => {
      const panHash = hex64();
      const outcome = await register(panHash, pendingKey());
      if (outcome.kind !== "created") throw new Error(`expected created, got ${outcome.kind}`);
      const before = structuredClone(outcome);
      outcome.user.activeKeyId = "tampered";
      outcome.key.status = "rotated";
      expect(await store().users.findByPanHash(panHash)).toEqual(before.user);
      expect(await store().users.findKey(before.key.keyId)).toEqual(before.key);
    });
  });
}
