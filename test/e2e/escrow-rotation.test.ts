import { randomBytes } from "node:crypto";
import { Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OnboardingService } from "../../gen/receipts/v1/onboarding_pb.js";
import { openReceipt } from "../../src/client/webcrypto.js";
import { escrowKeyOf } from "../../src/crypto/escrow-keys.js";
import { generateRsaKeyPair } from "../../src/crypto/keys.js";
import { createApiKey } from "../../src/domain/api-keys.js";
import { AppError } from "../../src/errors.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { ReceiptRecord, Store } from "../../src/store/types.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { get, hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";

/**
 * Escrow key versions across a restart: one store, the service stopped and started
 * again with a rotated list of escrow keys. A receipt escrowed under the old key is released by a
 * service that still holds it (second in the list), byte for byte; a service that no longer holds it
 * keeps the receipt escrowed and audited, and still registers the card: never a 500, and the issuer
 * always learns the userId.
 */

describe("escrow key rotation across a restart on one store", { timeout: 120_000 }, () => {
  const store: Store = createMemoryStore();
  /** One pepper for every instance: the hashed PANs must mean the same after a restart. */
  const pepper = randomBytes(32).toString("base64url");
  let k1: string;
  let k2: string;
  let issuerKey: string;
  let merchantKey: string;
  const cards = { released: "4000000000000101", held: "4000000000000202" };
  const escrowed: Record<keyof typeof cards, ReceiptRecord | undefined> = {
    released: undefined,
    held: undefined,
  };

  /** Starts the service on the shared store with these escrow keys, newest (the sealing one) first. */
  const start = (escrowKeys: string[]): Promise<TestService> =>
    startService({
      store,
      env: { HASHED_PAN_PEPPER: pepper, ESCROW_PRIVATE_KEY: escrowKeys.join(",") },
      shutdownGraceMs: 500,
    });

  /** Generates a key pair with the issuer's key and registers card `pan`. */
  async function register(svc: TestService, pan: string) {
    const keys = (await post(svc, "/api/v1/onboarding/generate-keys", issuerKey, {})).body.data;
    const reg = await post(svc, "/api/v1/onboarding/register", issuerKey, {
      hashedPan: hashPan(pan),
      publicKey: keys.publicKey,
      keyId: keys.keyId,
    });
    return { reg, keys: keys as { keyId: string; publicKey: string; privateKey: string } };
  }

  beforeAll(async () => {
    [k1, k2] = [(await generateRsaKeyPair()).privateKey, (await generateRsaKeyPair()).privateKey];
    await store.init();
    const now = new Date();
    issuerKey = (
      await createApiKey(store, "dev", { role: "issuer", tier: "standard", tenantId: "bank-r" }, now)
    ).key;
    merchantKey = (
      await createApiKey(store, "dev", { role: "merchant", tier: "standard", tenantId: "shop-r" }, now)
    ).key;

    // The first service holds k1 only and escrows one receipt for each unregistered card.
    const first = await start([k1]);
    try {
      for (const name of ["released", "held"] as const) {
        const body = receiptBody({ merchantId: "shop-r-store", recipientHashedPan: hashPan(cards[name]) });
        const sealed = await post(first, "/api/v1/receipts/encrypt", merchantKey, body);
        expect(sealed.status, JSON.stringify(sealed.body)).toBe(200);
        expect(sealed.body.data).toMatchObject({ isEscrowed: true, escrowKeyId: escrowKeyOf(k1).keyId });
        escrowed[name] = await store.receipts.findByMerchantReceipt("shop-r-store", body.receiptId as string);
      }
    } finally {
      await first.close();
    }
  }, 120_000);
  afterAll(async () => {
    await store.close();
  });

  it("releases with the old key, second in the new list: 200, releasedReceipts 1, same ciphertext", async () => {
    const svc = await start([k2, k1]);
    try {
      const before = escrowed.released;
      if (before === undefined) throw new Error("no escrowed receipt");
      const { reg, keys } = await register(svc, cards.released);
      expect(reg.status, JSON.stringify(reg.body)).toBe(200);
      expect(reg.body.data.releasedReceipts).toBe(1);
      expect(reg.body.data.heldReceipts ?? 0).toBe(0);

      const listing = await get(svc, `/api/v1/receipts/${reg.body.data.userId}`, issuerKey);
      const [listed] = listing.body.data.receipts;
      expect(listed).toMatchObject({ receiptId: before.receiptId, isEscrowed: false, keyId: keys.keyId });
      // Byte for byte the ciphertext, IV and tag sealed under k1 before the restart; only the key moved.
      const stored = await store.receipts.findByMerchantReceipt(before.merchantId, before.receiptId);
      expect(stored).toMatchObject({ ciphertext: before.ciphertext, iv: before.iv, authTag: before.authTag });
      expect(Buffer.from(listed.ciphertext, "base64").equals(Buffer.from(before.ciphertext, "base64"))).toBe(
        true,
      );
      expect(stored?.keyBundle.encryptedAesKey).not.toBe(before.keyBundle.encryptedAesKey);
      // The cardholder opens it on the device with its own private key.
      const opened = await openReceipt(listed, keys.privateKey);
      expect(opened).toMatchObject({ receiptId: before.receiptId, merchantName: "Corner Coffee" });
      // New escrow is sealed to k2, the first key now.
      const fresh = await post(
        svc,
        "/api/v1/receipts/encrypt",
        merchantKey,
        receiptBody({ merchantId: "shop-r-store", recipientHashedPan: hashPan("4000000000000303") }),
      );
      expect(fresh.body.data.escrowKeyId).toBe(escrowKeyOf(k2).keyId);
    } finally {
      await svc.close();
    }
  });

  it("without the old key: 200 with the userId, heldReceipts 1, the receipt stays escrowed and audited", async () => {
    const svc = await start([k2]);
    const before = escrowed.held;
    if (before === undefined) throw new Error("no escrowed receipt");
    const onboarding = grpcClient(OnboardingService, svc.port);
    try {
      const { reg, keys } = await register(svc, cards.held);
      expect(reg.status, JSON.stringify(reg.body)).toBe(200);
      expect(reg.body.data.userId).toMatch(/^usr_/);
      expect(reg.body.data.heldReceipts).toBe(1);
      expect(reg.body.data.releasedReceipts ?? 0).toBe(0);
      const userId: string = reg.body.data.userId;
      expect(await store.users.findById(userId)).toMatchObject({ userId, activeKeyId: keys.keyId });

      // The receipt is untouched and still escrowed under k1; the user sees nothing it could not open.
      expect(await store.receipts.findByMerchantReceipt(before.merchantId, before.receiptId)).toEqual(before);
      const listing = await get(svc, `/api/v1/receipts/${userId}`, issuerKey);
      expect(listing.status).toBe(200);
      expect(listing.body.data.receipts ?? []).toEqual([]);
      const held = (await store.audit.list(100)).filter((e) => e.action === "escrow.held");
      expect(held).toHaveLength(1);
      expect(held[0]).toMatchObject({ tenantId: "bank-r", userId, keyId: escrowKeyOf(k1).keyId });

      // Registering again, over gRPC too, still answers (the same user) and still holds it.
      const md = new Metadata();
      md.set("x-api-key", issuerKey);
      const again = await grpcUnary<{ userId: string; heldReceipts: number; releasedReceipts: number }>(
        onboarding,
        "register",
        { hashedPan: hashPan(cards.held), publicKey: keys.publicKey, keyId: keys.keyId },
        md,
      );
      expect(again.error).toBeUndefined();
      expect(again.response).toMatchObject({ userId, heldReceipts: 1, releasedReceipts: 0 });
    } finally {
      onboarding.close();
      await svc.close();
    }

    // Once a service holds k1 again, the next registration of the card releases the receipt.
    const restored = await start([k2, k1]);
    try {
      const user = await store.users.findByPanHash(
        (await store.receipts.findByMerchantReceipt(before.merchantId, before.receiptId))?.panHash ?? "",
      );
      const key = user && (await store.users.findKey(user.activeKeyId));
      const reg = await post(restored, "/api/v1/onboarding/register", issuerKey, {
        hashedPan: hashPan(cards.held),
        publicKey: key?.publicKey,
        keyId: key?.keyId,
      });
      expect(reg.status, JSON.stringify(reg.body)).toBe(200);
      expect(reg.body.data).toMatchObject({ userId: user?.userId, releasedReceipts: 1 });
      expect(
        (await store.receipts.findByMerchantReceipt(before.merchantId, before.receiptId))?.isEscrowed,
      ).toBe(false);
    } finally {
      await restored.close();
    }
  });
});

describe("a store failure while releasing escrow", { timeout: 120_000 }, () => {
  it("never fails the registration: 200 with the userId, the receipt left escrowed for the next one", async () => {
    const base = createMemoryStore();
    let failing = false;
    const receipts = new Proxy(base.receipts, {
      get(target, property) {
        if (property === "findEscrowed" && failing) {
          return async () => {
            throw new AppError("service_unavailable", "The store is unreachable.");
          };
        }
        const value = Reflect.get(target, property, target);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const store: Store = { ...base, receipts };
    const svc = await startService({ store, shutdownGraceMs: 500 });
    try {
      const body = receiptBody({
        merchantId: "shop-f-store",
        recipientHashedPan: hashPan("4000000000000404"),
      });
      const sealed = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body);
      expect(sealed.body.data.isEscrowed).toBe(true);

      failing = true;
      const keys = (await post(svc, "/api/v1/onboarding/generate-keys", svc.issuerKey, {})).body.data;
      const register = {
        hashedPan: hashPan("4000000000000404"),
        publicKey: keys.publicKey,
        keyId: keys.keyId,
      };
      const reg = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, register);
      expect(reg.status, JSON.stringify(reg.body)).toBe(200);
      const userId: string = reg.body.data.userId;
      expect(userId).toMatch(/^usr_/);
      expect(reg.body.data.releasedReceipts ?? 0).toBe(0);
      expect(await base.users.findById(userId)).toMatchObject({ activeKeyId: keys.keyId });
      expect(
        (await base.receipts.findByMerchantReceipt("shop-f-store", body.receiptId as string))?.isEscrowed,
      ).toBe(true);

      // The store is back: the same registration again releases it to the same user.
      failing = false;
      const again = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, register);
      expect(again.body.data).toMatchObject({ userId, releasedReceipts: 1 });
    } finally {
      await svc.close();
    }
  });
});
