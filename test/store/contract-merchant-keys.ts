import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { MERCHANT_KEY_HISTORY, type MerchantKeyRecord, type Store } from "../../src/store/types.js";
import { at, uid } from "./fixtures.js";

/** A current signing key as the domain puts it (no history). */
function signingKey(
  overrides: Partial<Omit<MerchantKeyRecord, "previousKeys">> = {},
): Omit<MerchantKeyRecord, "previousKeys"> {
  return {
    merchantKeyId: uid("mk"),
    merchantId: "m-1",
    tenantId: "tnt_merchant",
    algorithm: "Ed25519",
    publicKey: `MCowBQYDK2VwAyEA${randomBytes(32).toString("base64").slice(0, 43)}=`,
    registeredAt: at(0),
    ...overrides,
  };
}

/** The `merchantKeys` rules of `src/store/types.ts`. */
export function merchantKeysContract(store: () => Store): void {
  describe("merchantKeys", () => {
    it("stores a first key with an empty history, and finds nothing for another merchantId", async () => {
      const key = signingKey();
      expect(await store().merchantKeys.put(key)).toEqual({ kind: "created" });
      expect(await store().merchantKeys.findByMerchantId("m-1")).toEqual({ ...key, previousKeys: [] });
      expect(await store().merchantKeys.findByMerchantId("m-2")).toBeUndefined();
    });

    it("rotates: the same tenant's new key replaces the current one, which moves to the history", async () => {
      const first = signingKey({ registeredAt: at(0) });
      const second = signingKey({ registeredAt: at(60) });
      const third = signingKey({ registeredAt: at(120) });
      await store().merchantKeys.put(first);
      expect(await store().merchantKeys.put(second)).toEqual({
        kind: "replaced",
        previousKeyId: first.merchantKeyId,
      });
      expect(await store().merchantKeys.put(third)).toEqual({
        kind: "replaced",
        previousKeyId: second.merchantKeyId,
      });
      const history = (k: typeof first, replacedAt: Date) => ({
        merchantKeyId: k.merchantKeyId,
        publicKey: k.publicKey,
        registeredAt: k.registeredAt,
        replacedAt,
      });
      expect(await store().merchantKeys.findByMerchantId("m-1")).toEqual({
        ...third,
        previousKeys: [history(first, at(60)), history(second, at(120))],
      });
    });

    it(`keeps only the newest ${MERCHANT_KEY_HISTORY} replaced keys`, async () => {
      const keys = Array.from({ length: MERCHANT_KEY_HISTORY + 3 }, (_, i) =>
        signingKey({ registeredAt: at(i) }),
      );
      for (const key of keys) await store().merchantKeys.put(key);
      const found = await store().merchantKeys.findByMerchantId("m-1");
      expect(found?.merchantKeyId).toBe(keys.at(-1)?.merchantKeyId);
      expect(found?.previousKeys.map((k) => k.merchantKeyId)).toEqual(
        keys.slice(2, -1).map((k) => k.merchantKeyId),
      );
    });

    it("refuses another tenant's key for a merchantId and changes nothing", async () => {
      const mine = signingKey();
      await store().merchantKeys.put(mine);
      expect(
        await store().merchantKeys.put(signingKey({ tenantId: "tnt_other", registeredAt: at(5) })),
      ).toEqual({ kind: "taken" });
      expect(await store().merchantKeys.findByMerchantId("m-1")).toEqual({ ...mine, previousKeys: [] });
      // Other merchantIds are free for the other tenant.
      expect(
        await store().merchantKeys.put(signingKey({ tenantId: "tnt_other", merchantId: "m-2" })),
      ).toEqual({
        kind: "created",
      });
    });

    it("keeps one record when 10 tenants race for a new merchantId: one wins, the rest are refused", async () => {
      const outcomes = await Promise.all(
        Array.from({ length: 10 }, (_, i) => store().merchantKeys.put(signingKey({ tenantId: `tnt_${i}` }))),
      );
      expect(outcomes.filter((o) => o.kind === "created")).toHaveLength(1);
      expect(outcomes.filter((o) => o.kind === "taken")).toHaveLength(9);
    });

    it("keeps every key when one tenant's puts race: one creates, each other one replaces", async () => {
      const keys = Array.from({ length: 8 }, () => signingKey());
      const outcomes = await Promise.all(keys.map((key) => store().merchantKeys.put(key)));
      expect(outcomes.filter((o) => o.kind === "created")).toHaveLength(1);
      expect(outcomes.filter((o) => o.kind === "replaced")).toHaveLength(7);
      const found = await store().merchantKeys.findByMerchantId("m-1");
      const ids = [found?.merchantKeyId, ...(found?.previousKeys ?? []).map((k) => k.merchantKeyId)];
      expect(ids.sort()).toEqual(keys.map((k) => k.merchantKeyId).sort());
    });

    it("revokes the tenant's current or an older key, keeps the declaration, and carries both into the history", async () => {
      const first = signingKey({ registeredAt: at(0), allReceiptsSigned: true });
      const second = signingKey({ registeredAt: at(60) });
      await store().merchantKeys.put(first);
      await store().merchantKeys.put(second);
      // Another tenant, another merchantId, an unknown id: nothing changes.
      const before = await store().merchantKeys.findByMerchantId("m-1");
      expect(
        await store().merchantKeys.revoke("tnt_other", "m-1", first.merchantKeyId, at(70)),
      ).toBeUndefined();
      expect(
        await store().merchantKeys.revoke("tnt_merchant", "m-2", first.merchantKeyId, at(70)),
      ).toBeUndefined();
      expect(await store().merchantKeys.revoke("tnt_merchant", "m-1", uid("mk"), at(70))).toBeUndefined();
      expect(await store().merchantKeys.findByMerchantId("m-1")).toEqual(before);

      const older = await store().merchantKeys.revoke("tnt_merchant", "m-1", first.merchantKeyId, at(80));
      expect(older?.previousKeys[0]).toEqual({
        merchantKeyId: first.merchantKeyId,
        publicKey: first.publicKey,
        registeredAt: at(0),
        replacedAt: at(60),
        allReceiptsSigned: true,
        revokedAt: at(80),
      });
      expect(older?.revokedAt).toBeUndefined();
      const current = await store().merchantKeys.revoke("tnt_merchant", "m-1", second.merchantKeyId, at(90));
      expect(current).toMatchObject({ merchantKeyId: second.merchantKeyId, revokedAt: at(90) });
      // Twice keeps the first time.
      await store().merchantKeys.revoke("tnt_merchant", "m-1", second.merchantKeyId, at(95));
      expect((await store().merchantKeys.findByMerchantId("m-1"))?.revokedAt).toEqual(at(90));

      // A new key replaces the revoked one: it is current and unrevoked, the revoked one in the history.
      const third = signingKey({ registeredAt: at(120) });
      await store().merchantKeys.put(third);
      const found = await store().merchantKeys.findByMerchantId("m-1");
      expect(found).toMatchObject({ merchantKeyId: third.merchantKeyId });
      expect(found?.revokedAt).toBeUndefined();
      expect(found?.allReceiptsSigned).toBeUndefined();
      expect(found?.previousKeys.map((k) => [k.merchantKeyId, k.revokedAt, k.allReceiptsSigned])).toEqual([
        [first.merchantKeyId, at(80), true],
        [second.merchantKeyId, at(90), undefined],
      ]);
    });

    it("keeps what was stored when the caller mutates its objects", async () => {
      const key = signingKey();
      const stored = { ...structuredClone(key), previousKeys: [] };
      await store().merchantKeys.put(key);
      key.publicKey = "changed";
      const found = await store().merchantKeys.findByMerchantId("m-1");
      expect(found).toEqual(stored);
      if (found === undefined) return;
      found.publicKey = "changed";
      found.previousKeys.push({
        merchantKeyId: "mk_x",
        publicKey: "x",
        registeredAt: at(0),
        replacedAt: at(0),
      });
      expect(await store().merchantKeys.findByMerchantId("m-1")).toEqual(stored);
    });
  });
}
