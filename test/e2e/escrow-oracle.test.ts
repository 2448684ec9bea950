import {
  constants,
  createPrivateKey,
  createPublicKey,
  privateDecrypt,
  publicEncrypt,
  randomBytes,
  randomUUID,
} from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createReceiptsClient, type MerchantReceipt, sealAndStoreReceipt } from "../../src/client/index.js";
import { openReceipt } from "../../src/client/webcrypto.js";
import { decryptBody, encryptBody, receiptAad, sealedFromText } from "../../src/crypto/envelope.js";
import { escrowKeyOf } from "../../src/crypto/escrow-keys.js";
import { panHashOf } from "../../src/domain/pan.js";
import { ESCROW_FIXTURE, fixtureRsaKeyPair } from "../support/fixture-keys.js";
import { get, hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";

/**
 * The escrow key as a decryption oracle (issue 31, item 2), attacked over the API as a stranger would:
 * Mallory holds one stored escrow envelope of another tenant's receipt (a database copy, a backup, a
 * logged encrypt response), one merchant key and one issuer key of her own. She plants a receipt
 * around the victim's wrapped AES key, addressed to a card she makes up, then registers that card:
 * before the fix, release unwrapped the victim's key with the service escrow key and re-wrapped it to
 * her, and she decrypted the victim's receipt. Every variant must now leave her with nothing.
 */

interface Stolen {
  version: string;
  receiptId: string;
  merchantId: string;
  transactionId: string;
  ciphertext: string;
  iv: string;
  authTag: string;
  isEscrowed: boolean;
  keyBundle: { keyId: string; algorithm: string; encryptedAesKey: string };
}

describe("the service escrow key is not a decryption oracle", { timeout: 120_000 }, () => {
  let svc: TestService;
  let malloryShop: string;
  let malloryBank: string;
  let stolen: Stolen;
  const victimCard = hashPan(`4000${Date.now()}`);
  const victimReceipt = receiptBody({
    merchantId: "victim-pharmacy",
    merchantName: "Pharmacy on the corner",
    recipientHashedPan: victimCard,
    currency: "EUR",
  });

  beforeAll(async () => {
    svc = await startService();
    malloryShop = await svc.newKey({ role: "merchant", tier: "standard", tenantId: "mallory-shop" });
    malloryBank = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "mallory-bank" });
    const encrypted = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, victimReceipt);
    expect(encrypted.status).toBe(200);
    stolen = encrypted.body.data;
    expect(stolen.isEscrowed).toBe(true);
  });
  afterAll(() => svc.close());

  /** Mallory's whole attempt; returns what she learnt: the victim's plaintext, or undefined. */
  async function attack(variant: {
    name: string;
    victimCiphertext: boolean;
    claimBinding: boolean;
    viaPayment?: boolean;
  }): Promise<{ planted: number; released?: number; held?: number; plaintext?: string }> {
    const card = randomBytes(32).toString("hex");
    const ids = {
      version: "1.0",
      receiptId: `fake-${variant.name}`,
      merchantId: "mallory-m",
      transactionId: `t-${variant.name}`,
    };
    const keyBundle = {
      keyId: stolen.keyBundle.keyId,
      algorithm: stolen.keyBundle.algorithm,
      encryptedAesKey: stolen.keyBundle.encryptedAesKey,
      ...(variant.claimBinding ? { aadBound: true } : {}),
    };
    const parts = variant.victimCiphertext
      ? { ciphertext: stolen.ciphertext, iv: stolen.iv, authTag: stolen.authTag }
      : {
          ciphertext: randomBytes(64).toString("base64"),
          iv: randomBytes(12).toString("base64"),
          authTag: randomBytes(16).toString("base64"),
        };
    const planted = variant.viaPayment
      ? await post(svc, "/api/v1/payments/gateway_a/create", malloryShop, {
          merchantId: ids.merchantId,
          transactionId: ids.transactionId,
          recipientHashedPan: card,
          currency: "EUR",
          amount: 100,
          sealedReceipt: { version: ids.version, receiptId: ids.receiptId, keyBundle, ...parts },
        })
      : await post(svc, "/api/v1/receipts/sealed", malloryShop, {
          recipientHashedPan: card,
          ...ids,
          keyBundle,
          ...parts,
        });
    if (planted.status !== 200) return { planted: planted.status };

    const mallory = await fixtureRsaKeyPair();
    const reg = await post(svc, "/api/v1/onboarding/register", malloryBank, {
      hashedPan: card,
      publicKey: mallory.publicKey,
      keyId: randomUUID(),
    });
    expect(reg.status).toBe(200);
    const outcome = {
      planted: planted.status,
      released: reg.body.data.releasedReceipts as number,
      held: reg.body.data.heldReceipts as number,
    };
    const listing = await get(svc, `/api/v1/receipts/${reg.body.data.userId}`, malloryBank);
    const mine = (listing.body.data.receipts as Stolen[]).find((r) => r.receiptId === ids.receiptId);
    if (mine === undefined) return outcome;
    const wrapped = Buffer.from(mine.keyBundle.encryptedAesKey, "base64");
    for (const oaepLabel of [undefined, receiptAad(ids)]) {
      try {
        const aesKey = privateDecrypt(
          {
            key: createPrivateKey({
              key: Buffer.from(mallory.privateKey, "base64"),
              format: "der",
              type: "pkcs8",
            }),
            padding: constants.RSA_PKCS1_OAEP_PADDING,
            oaepHash: "sha256",
            ...(oaepLabel === undefined ? {} : { oaepLabel }),
          },
          wrapped,
        );
        const victimSealed = sealedFromText({ ...stolen, encryptedAesKey: "" });
        const plaintext = decryptBody(aesKey, victimSealed, receiptAad(stolen));
        return { ...outcome, plaintext: plaintext.toString("utf8") };
      } catch {
        // Not with this label, or not the victim's key.
      }
    }
    return outcome;
  }

  const variants = [
    { name: "garbage", victimCiphertext: false, claimBinding: false },
    { name: "garbage-claiming-binding", victimCiphertext: false, claimBinding: true },
    { name: "victim-ciphertext", victimCiphertext: true, claimBinding: false },
    { name: "victim-ciphertext-claiming-binding", victimCiphertext: true, claimBinding: true },
    { name: "payment", victimCiphertext: false, claimBinding: false, viaPayment: true },
    { name: "payment-claiming-binding", victimCiphertext: true, claimBinding: true, viaPayment: true },
  ];

  for (const variant of variants) {
    it(`recovers nothing: ${variant.name}`, async () => {
      const outcome = await attack(variant);
      expect(outcome.plaintext, JSON.stringify(outcome)).toBeUndefined();
      if (variant.claimBinding) {
        // Stored (the service cannot tell a lie about the label), then held at release, never released.
        expect(outcome).toMatchObject({ planted: 200, released: 0, held: 1 });
      } else {
        // An unbound wrap to an escrow key is refused at the door.
        expect(outcome.planted).toBe(400);
      }
    });
  }

  it("the client library seals escrow in the bound form look-up asks for, and it releases", async () => {
    const merchant = createReceiptsClient({ baseUrl: svc.baseUrl, apiKey: svc.merchantKey });
    const card = hashPan(`4000${Date.now()}9`);
    const fields = receiptBody({ merchantId: "merchant-001", merchantName: "Sealed Aside" });
    const stored = await sealAndStoreReceipt(
      merchant,
      { ...(fields as unknown as MerchantReceipt), recipientHashedPan: card },
      { trust: "unverified" },
    );
    if (stored.kind !== "receipt") throw new Error("expected a stored receipt");
    expect(stored.receipt.isEscrowed).toBe(true);
    expect(stored.receipt.keyBundle?.aadBound).toBe(true);
    const holder = await fixtureRsaKeyPair();
    const reg = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      hashedPan: card,
      publicKey: holder.publicKey,
      keyId: randomUUID(),
    });
    expect(reg.body.data).toMatchObject({ releasedReceipts: 1, heldReceipts: 0 });
    const listing = await get(svc, `/api/v1/receipts/${reg.body.data.userId}`, svc.issuerKey);
    expect((await openReceipt(listing.body.data.receipts[0], holder.privateKey)).merchantName).toBe(
      "Sealed Aside",
    );
  });

  it("still releases the victim's receipt to the victim's own registration, which opens it", async () => {
    const victim = await fixtureRsaKeyPair();
    const reg = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      hashedPan: victimCard,
      publicKey: victim.publicKey,
      keyId: randomUUID(),
    });
    expect(reg.body.data).toMatchObject({ releasedReceipts: 1, heldReceipts: 0 });
    const listing = await get(svc, `/api/v1/receipts/${reg.body.data.userId}`, svc.issuerKey);
    const [released] = listing.body.data.receipts;
    expect(released.ciphertext).toBe(stolen.ciphertext);
    const opened = await openReceipt(released, victim.privateKey);
    expect(opened.merchantName).toBe("Pharmacy on the corner");
  });

  it("releases an escrowed receipt stored before the binding existed (an unbound wrap): v1 stays readable", async () => {
    const legacy = await legacyEscrowedReceipt(svc);
    const holder = await fixtureRsaKeyPair();
    const reg = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      hashedPan: legacy.card,
      publicKey: holder.publicKey,
      keyId: randomUUID(),
    });
    expect(reg.body.data).toMatchObject({ releasedReceipts: 1, heldReceipts: 0 });
    const listing = await get(svc, `/api/v1/receipts/${reg.body.data.userId}`, svc.issuerKey);
    const opened = await openReceipt(listing.body.data.receipts[0], holder.privateKey);
    expect(opened).toMatchObject({ receiptId: legacy.receiptId, merchantName: "Legacy Lunch" });
  });
});

/**
 * An escrowed receipt as the service stored one before `aadBound` existed: sealed to the service
 * escrow key with an RSA-OAEP wrap without a label, written straight to the store.
 */
async function legacyEscrowedReceipt(svc: TestService): Promise<{ card: string; receiptId: string }> {
  const card = hashPan(`4111${Date.now()}`);
  const ids = {
    version: "1.0",
    receiptId: `legacy-${Date.now()}`,
    merchantId: "legacy-m",
    transactionId: "lt-1",
  };
  const aesKey = randomBytes(32);
  const body = encryptBody(
    aesKey,
    Buffer.from(JSON.stringify({ ...ids, merchantName: "Legacy Lunch" })),
    receiptAad(ids),
  );
  const escrow = escrowKeyOf(ESCROW_FIXTURE.privateKey);
  const wrapped = publicEncrypt(
    {
      key: createPublicKey({ key: Buffer.from(escrow.spki, "base64"), format: "der", type: "spki" }),
      padding: constants.RSA_PKCS1_OAEP_PADDING,
      oaepHash: "sha256",
    },
    aesKey,
  );
  const now = new Date();
  await svc.store.receipts.insert({
    id: `rcp_legacy${Date.now()}`,
    ...ids,
    merchantTenantId: "merchant-1",
    panHash: panHashOf(svc.config.hashedPanPepper, card),
    keyBundle: {
      keyId: escrow.keyId,
      algorithm: "RSA-OAEP-256",
      encryptedAesKey: wrapped.toString("base64"),
    },
    ciphertext: body.ciphertext.toString("base64"),
    iv: body.iv.toString("base64"),
    authTag: body.authTag.toString("base64"),
    createdAt: now,
    isEscrowed: true,
    escrowKeyId: escrow.keyId,
    expiresAt: new Date(now.getTime() + 86_400_000),
  });
  return { card, receiptId: ids.receiptId };
}
