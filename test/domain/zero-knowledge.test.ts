import { generateKeyPairSync } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { KeyBundleSchema, ReceiptSchema, SealedReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import {
  openListing,
  openReceipt,
  rewrapKeyBundle,
  type SealedEnvelope,
  sealReceipt,
} from "../../src/client/index.js";
import { receiptAad, sealedFromText } from "../../src/crypto/envelope.js";
import { deleteUser } from "../../src/domain/erasure.js";
import { grantAccess } from "../../src/domain/grants.js";
import { listPendingEscrow, registerEscrowKey, releaseByIssuer } from "../../src/domain/issuer-escrow.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { createPayment, decryptPayment } from "../../src/domain/payments.js";
import {
  decryptReceipt,
  encryptReceipt,
  listReceipts,
  storeSealedReceipt,
} from "../../src/domain/receipts.js";
import { lookupKey } from "../../src/domain/routing.js";
import { AppError } from "../../src/errors.js";
import { encryptedReceiptOf } from "../../src/rpc/convert.js";
import type { ReceiptRecord } from "../../src/store/types.js";
import {
  type DomainFixture,
  domainFixture,
  principal,
  receiptMessage,
  rejection,
} from "../support/domain.js";
import { hashPan } from "../support/harness.js";

/**
 * Sections 15-17 and 19 at the domain level: P-256 device keys beside RSA, merchant-side sealing,
 * escrow that only the issuer can open, erasure. The client library (WebCrypto only) plays the device,
 * the merchant's point of sale and the issuer's back office.
 */

const P256 = "HPKE-P256-SHA256-A256GCM";
const issuer = principal("issuer", "bank-a");
const merchant = principal("merchant", "shop-1");

/** The JSON envelope of a stored receipt, as a listing gives it to the device. */
function envelopeOf(record: ReceiptRecord) {
  const m = encryptedReceiptOf(record);
  return { ...m, keyBundle: m.keyBundle };
}

/** The plaintext receipt fields a merchant seals on its side. */
function receiptJson(receiptId: string, transactionId: string) {
  return {
    version: "1.0",
    receiptId,
    merchantId: "m-1",
    merchantName: "Zero Knowledge Cafe",
    transactionId,
    transactionDate: "2026-03-01T11:00:00Z",
    currency: "EUR",
    items: [
      { lineItemId: "1", name: "Secret Espresso", quantity: 1, unitPrice: 300, totalPrice: 300, taxes: [] },
    ],
  };
}

/** The request fields of a sealed envelope, as /receipts/sealed takes them (bytes as bytes). */
function sealedInput(envelope: SealedEnvelope, pan: string, extra: { cardBin?: string } = {}) {
  const b = (text: string) => Buffer.from(text, "base64");
  return {
    recipientHashedPan: hashPan(pan),
    ...extra,
    version: envelope.version,
    receiptId: envelope.receiptId,
    merchantId: envelope.merchantId,
    transactionId: envelope.transactionId,
    keyBundle: create(KeyBundleSchema, {
      keyId: envelope.keyBundle.keyId,
      algorithm: envelope.keyBundle.algorithm,
      encryptedAesKey: b(envelope.keyBundle.encryptedAesKey),
      encapsulatedKey: b(envelope.keyBundle.encapsulatedKey ?? ""),
    }),
    ciphertext: b(envelope.ciphertext),
    iv: b(envelope.iv),
    authTag: b(envelope.authTag),
  };
}

describe("zero-knowledge receipts (domain)", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    await f.close();
  });

  async function onboard(pan: string, algorithm = P256, who = issuer) {
    const keys = await generateKeys(f.deps, who, { algorithm });
    const reg = await register(f.deps, who, {
      hashedPan: hashPan(pan),
      publicKey: keys.publicKey,
      keyId: keys.keyId,
    });
    return { ...keys, ...reg };
  }

  it("registers a P-256 key, seals to it with HPKE, and the device opens the listing with WebCrypto", async () => {
    const user = await onboard("4000000000000001");
    expect(user.algorithm).toBe(P256);
    const record = await encryptReceipt(f.deps, merchant, receiptMessage("4000000000000001"));
    expect(record.keyBundle.algorithm).toBe(P256);
    expect(Buffer.from(record.keyBundle.encapsulatedKey ?? "", "base64")).toHaveLength(65);
    expect(Buffer.from(record.keyBundle.encryptedAesKey, "base64")).toHaveLength(48);
    const page = await listReceipts(f.deps, issuer, { userId: user.userId, pageSize: 0, pageToken: "" });
    const opened = await openReceipt(envelopeOf(page.receipts[0] as ReceiptRecord), user.privateKey);
    expect(opened.receiptId).toBe(record.receiptId);
    expect(opened.merchantName).toBe("Corner Coffee");
  });

  it("decrypts server-side with a P-256 private key and a grant, as the seed's callers do", async () => {
    const user = await onboard("4000000000000002");
    const created = await createPayment(f.deps, merchant, {
      gateway: "gateway_a",
      receipt: receiptMessage("4000000000000002", { amount: 300n }),
    });
    const grant = await grantAccess(
      f.deps,
      issuer,
      { userId: user.userId, keyId: user.keyId },
      { requestId: "r", sourceIp: "" },
    );
    const receipt = await decryptPayment(
      f.deps,
      issuer,
      {
        paymentId: created.payment.paymentId,
        tokenId: grant.tokenId,
        accessTokenId: "",
        privateKey: user.privateKey,
      },
      { requestId: "r", sourceIp: "" },
    );
    expect(receipt.receiptId).toBe(created.receipt.receiptId);
  });

  it("rotates RSA to P-256: old receipts open with the old key, new ones with the new, through a key ring", async () => {
    const rsa = await onboard("4000000000000003", "RSA-OAEP-256");
    const before = await encryptReceipt(f.deps, merchant, receiptMessage("4000000000000003"));
    const p256 = await generateKeys(f.deps, issuer, { algorithm: P256 });
    const rotated = await register(f.deps, issuer, {
      hashedPan: hashPan("4000000000000003"),
      publicKey: p256.publicKey,
      keyId: p256.keyId,
    });
    expect(rotated.userId).toBe(rsa.userId);
    const after = await encryptReceipt(f.deps, merchant, receiptMessage("4000000000000003"));
    expect([before.keyBundle.algorithm, after.keyBundle.algorithm]).toEqual(["RSA-OAEP-256", P256]);
    const page = await listReceipts(f.deps, issuer, { userId: rsa.userId, pageSize: 0, pageToken: "" });
    const opened = await openListing(page.receipts.map(envelopeOf), {
      [rsa.keyId]: rsa.privateKey,
      [p256.keyId]: p256.privateKey,
    });
    expect(opened.map((o) => ("receipt" in o ? o.receipt.receiptId : "failed")).sort()).toEqual(
      [before.receiptId, after.receiptId].sort(),
    );
  });

  it("releases escrow across suites: RSA escrow re-wrapped to a P-256 key, ciphertext unchanged", async () => {
    const escrowed = await encryptReceipt(f.deps, merchant, receiptMessage("4000000000000004"));
    expect(escrowed.isEscrowed).toBe(true);
    const user = await onboard("4000000000000004");
    expect(user.releasedReceipts).toBe(1);
    const [released] = (
      await listReceipts(f.deps, issuer, { userId: user.userId, pageSize: 0, pageToken: "" })
    ).receipts;
    expect(released?.ciphertext).toBe(escrowed.ciphertext);
    expect(released?.keyBundle.algorithm).toBe(P256);
    expect((await openReceipt(envelopeOf(released as ReceiptRecord), user.privateKey)).receiptId).toBe(
      escrowed.receiptId,
    );
  });

  describe("merchant-side sealing", () => {
    it("looks up the key, seals on the merchant's side, and the service stores what it cannot read", async () => {
      const user = await onboard("4000000000000005");
      const key = await lookupKey(
        f.deps,
        merchant,
        { recipientHashedPan: hashPan("4000000000000005") },
        {
          requestId: "r",
          sourceIp: "",
        },
      );
      expect(key).toEqual({
        keyId: user.keyId,
        algorithm: P256,
        publicKey: user.publicKey,
        isEscrowed: false,
        // HPKE wraps are always bound to the receipt's AAD.
        aadBound: true,
      });
      const envelope = await sealReceipt(receiptJson("zk-1", "zt-1"), key.publicKey, { keyId: key.keyId });
      const record = await storeSealedReceipt(f.deps, merchant, sealedInput(envelope, "4000000000000005"), {
        requestId: "r",
        sourceIp: "",
      });
      expect(record.userId).toBe(user.userId);
      const opened = await openReceipt(envelopeOf(record), user.privateKey);
      expect(opened.merchantName).toBe("Zero Knowledge Cafe");
    });

    it("answers conflict for a bundle sealed to a key that is no longer the card's", async () => {
      const stale = await lookupKey(
        f.deps,
        merchant,
        { recipientHashedPan: hashPan("4000000000000006") },
        {
          requestId: "r",
          sourceIp: "",
        },
      );
      expect(stale.isEscrowed).toBe(true);
      await onboard("4000000000000006");
      const envelope = await sealReceipt(receiptJson("zk-2", "zt-2"), stale.publicKey, {
        keyId: stale.keyId,
      });
      const err = await rejection(
        storeSealedReceipt(f.deps, merchant, sealedInput(envelope, "4000000000000006"), {
          requestId: "r",
          sourceIp: "",
        }),
      );
      expect(err.code).toBe("conflict");
      expect(err.message).toContain("look it up again");
      expect(await f.store.receipts.findByMerchantReceipt("m-1", "zk-2")).toBeUndefined();
    });

    it("refuses wrong sizes, a missing bundle and the other suite's bundle, naming each field", async () => {
      const user = await onboard("4000000000000007");
      const envelope = await sealReceipt(receiptJson("zk-3", "zt-3"), user.publicKey, { keyId: user.keyId });
      const input = sealedInput(envelope, "4000000000000007");
      const bad = { ...input, iv: new Uint8Array(11), authTag: new Uint8Array(15) };
      bad.keyBundle = create(KeyBundleSchema, { ...input.keyBundle, encapsulatedKey: new Uint8Array(64) });
      const err = await rejection(
        storeSealedReceipt(f.deps, merchant, bad, { requestId: "r", sourceIp: "" }),
      );
      expect(err.code).toBe("invalid_request");
      expect(err.violations.map((v) => v.field).sort()).toEqual(["authTag", "iv"]);
      const sized = await rejection(
        storeSealedReceipt(
          f.deps,
          merchant,
          {
            ...input,
            keyBundle: create(KeyBundleSchema, { ...input.keyBundle, encapsulatedKey: new Uint8Array(64) }),
          },
          { requestId: "r", sourceIp: "" },
        ),
      );
      expect(sized.violations.map((v) => v.field)).toEqual(["keyBundle.encapsulatedKey"]);
      const suite = await rejection(
        storeSealedReceipt(
          f.deps,
          merchant,
          { ...input, keyBundle: create(KeyBundleSchema, { ...input.keyBundle, algorithm: "RSA-OAEP-256" }) },
          { requestId: "r", sourceIp: "" },
        ),
      );
      expect(suite.violations.map((v) => v.field)).toEqual(["keyBundle.algorithm"]);
      const { keyBundle: _missing, ...noBundle } = input;
      const missing = await rejection(
        storeSealedReceipt(f.deps, merchant, noBundle, { requestId: "r", sourceIp: "" }),
      );
      expect(missing.violations.map((v) => v.field)).toEqual(["keyBundle"]);
    });

    it("creates a payment that carries a sealed receipt, and refuses plaintext fields beside it", async () => {
      const user = await onboard("4000000000000008");
      const envelope = await sealReceipt(receiptJson("zk-4", "zt-4"), user.publicKey, { keyId: user.keyId });
      const input = sealedInput(envelope, "4000000000000008");
      const sealedReceipt = create(SealedReceiptSchema, {
        version: input.version,
        receiptId: input.receiptId,
        keyBundle: input.keyBundle,
        ciphertext: input.ciphertext,
        iv: input.iv,
        authTag: input.authTag,
      });
      const base = {
        merchantId: "m-1",
        transactionId: "zt-4",
        recipientHashedPan: hashPan("4000000000000008"),
        currency: "eur",
        amount: 300n,
        sealedReceipt,
      };
      const mixed = await rejection(
        createPayment(f.deps, merchant, {
          gateway: "gateway_a",
          receipt: create(ReceiptSchema, { ...base, merchantName: "Leaked Name", receiptId: "zk-4" }),
        }),
      );
      expect(mixed.code).toBe("invalid_request");
      expect(mixed.violations.map((v) => v.field).sort()).toEqual(["merchantName", "receiptId"]);
      const { amount: _amount, ...noAmount } = base;
      const unpriced = await rejection(
        createPayment(f.deps, merchant, { gateway: "gateway_b", receipt: create(ReceiptSchema, noAmount) }),
      );
      expect(unpriced.violations.map((v) => v.field)).toEqual(["amount"]);

      const created = await createPayment(f.deps, merchant, {
        gateway: "gateway_b",
        receipt: create(ReceiptSchema, base),
      });
      expect(created.payment).toMatchObject({
        amount: 300,
        currency: "EUR",
        receiptId: "zk-4",
        transactionId: "zt-4",
      });
      expect(created.receipt.userId).toBe(user.userId);
      expect((await openReceipt(envelopeOf(created.receipt), user.privateKey)).merchantName).toBe(
        "Zero Knowledge Cafe",
      );
    });
  });

  describe("issuer escrow keys", () => {
    it("seals escrow for the BIN's owner to the issuer's key: nothing the service holds opens it", async () => {
      await f.store.bins.set("bank-a", ["400000"], f.clock.now());
      const escrowPair = generateKeyPairSync("ec", { namedCurve: "P-256" });
      const escrowPublic = escrowPair.publicKey.export({ type: "spki", format: "der" }).toString("base64");
      const escrowPrivate = escrowPair.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64");
      const iek = await registerEscrowKey(f.deps, issuer, { publicKey: escrowPublic });
      expect(iek.escrowKeyId).toMatch(/^iek_/);

      const record = await encryptReceipt(
        f.deps,
        merchant,
        receiptMessage("4000000000000009", { cardBin: "40000000" }),
      );
      expect(record).toMatchObject({
        isEscrowed: true,
        escrowKeyId: iek.escrowKeyId,
        escrowOwnerTenantId: "bank-a",
      });

      // Every key the service holds: its escrow keys (configuration) cannot re-wrap it.
      for (const key of f.deps.escrowKeys) {
        await expect(
          f.pool.rewrapFromEscrow({
            escrowKeyId: key.keyId,
            encryptedAesKey: Buffer.from(record.keyBundle.encryptedAesKey, "base64"),
            encapsulatedKey: Buffer.from(record.keyBundle.encapsulatedKey ?? "", "base64"),
            sealed: sealedFromText({ ...record, encryptedAesKey: "" }),
            aad: receiptAad(record),
            target: { keyId: key.keyId, spki: key.spki, algorithm: key.algorithm },
          }),
        ).rejects.toThrow();
      }
      // ...nor the escrow key the receipt names, which the service never had.
      await expect(
        f.pool.rewrapFromEscrow({
          escrowKeyId: iek.escrowKeyId,
          encryptedAesKey: Buffer.from(record.keyBundle.encryptedAesKey, "base64"),
          sealed: sealedFromText({ ...record, encryptedAesKey: "" }),
          aad: receiptAad(record),
          target: { keyId: "x", spki: escrowPublic, algorithm: P256 },
        }),
      ).rejects.toThrow();

      // The card registers with bank-a: the receipt stays escrowed (held), for the issuer to release.
      const user = await onboard("4000000000000009");
      expect([user.releasedReceipts, user.heldReceipts]).toEqual([0, 1]);
      const pending = await listPendingEscrow(f.deps, issuer, {
        hashedPan: hashPan("4000000000000009"),
        pageSize: 0,
        pageToken: "",
      });
      expect(pending.receipts.map((r) => r.receiptId)).toEqual([record.receiptId]);

      // The issuer re-wraps on its side, with its escrow private key, to the user's key.
      const bundle = await rewrapKeyBundle(envelopeOf(record), escrowPrivate, {
        keyId: user.keyId,
        publicKey: user.publicKey,
      });
      const other = principal("issuer", "bank-b");
      const release = {
        merchantId: record.merchantId,
        receiptId: record.receiptId,
        keyBundle: create(KeyBundleSchema, {
          keyId: bundle.keyId,
          algorithm: bundle.algorithm,
          encryptedAesKey: Buffer.from(bundle.encryptedAesKey, "base64"),
          encapsulatedKey: Buffer.from(bundle.encapsulatedKey ?? "", "base64"),
        }),
      };
      const refused = await rejection(
        releaseByIssuer(
          f.deps,
          other,
          { userId: user.userId, receipts: [release] },
          { requestId: "r", sourceIp: "" },
        ),
      );
      expect(refused.code).toBe("not_found");
      expect((await f.store.receipts.findByMerchantReceipt("m-1", record.receiptId))?.isEscrowed).toBe(true);
      const result = await releaseByIssuer(
        f.deps,
        issuer,
        {
          userId: user.userId,
          receipts: [release, { merchantId: "m-1", receiptId: "nope", keyBundle: undefined }],
        },
        { requestId: "r", sourceIp: "" },
      );
      expect(result).toEqual({
        released: 1,
        failed: [{ merchantId: "m-1", receiptId: "nope", reason: "not_found" }],
      });
      const [listed] = (
        await listReceipts(f.deps, issuer, { userId: user.userId, pageSize: 0, pageToken: "" })
      ).receipts;
      expect(listed?.ciphertext).toBe(record.ciphertext);
      expect((await openReceipt(envelopeOf(listed as ReceiptRecord), user.privateKey)).receiptId).toBe(
        record.receiptId,
      );
    });
  });

  describe("erasure", () => {
    it("deletes the user, its keys, grants and receipts; payments keep their record; a second call is not_found", async () => {
      const user = await onboard("4000000000000010");
      const payment = await createPayment(f.deps, merchant, {
        gateway: "gateway_a",
        receipt: receiptMessage("4000000000000010", { amount: 300n }),
      });
      const receipt = await encryptReceipt(f.deps, merchant, receiptMessage("4000000000000010"));
      const grant = await grantAccess(
        f.deps,
        issuer,
        { userId: user.userId, keyId: user.keyId },
        { requestId: "r", sourceIp: "" },
      );

      const otherIssuer = principal("issuer", "bank-b");
      expect(
        (
          await rejection(
            deleteUser(f.deps, otherIssuer, { userId: user.userId }, { requestId: "r", sourceIp: "" }),
          )
        ).code,
      ).toBe("not_found");
      expect(await f.store.users.findById(user.userId)).toBeDefined();

      expect(
        await deleteUser(f.deps, issuer, { userId: user.userId }, { requestId: "r", sourceIp: "" }),
      ).toEqual({
        deletedReceipts: 2,
        deletedKeys: 1,
        receiptsLeft: 0,
      });
      expect(await f.store.users.findById(user.userId)).toBeUndefined();
      expect(await f.store.users.findKey(user.keyId)).toBeUndefined();
      expect(await f.store.receipts.findByMerchantReceipt("m-1", receipt.receiptId)).toBeUndefined();
      expect(await f.store.payments.findById(payment.payment.paymentId)).toMatchObject({ amount: 300 });
      const decrypt = await rejection(
        decryptReceipt(
          f.deps,
          issuer,
          {
            receiptId: receipt.receiptId,
            merchantId: "",
            tokenId: grant.tokenId,
            accessTokenId: "",
            privateKey: user.privateKey,
          },
          { requestId: "r", sourceIp: "" },
        ),
      );
      expect(["not_found", "forbidden"]).toContain(decrypt.code);
      expect(
        (
          await rejection(
            deleteUser(f.deps, issuer, { userId: user.userId }, { requestId: "r", sourceIp: "" }),
          )
        ).code,
      ).toBe("not_found");
      const audit = await f.store.audit.list(10, { tenantId: "bank-a" });
      expect(audit.find((e) => e.action === "user.erased")).toMatchObject({ userId: user.userId });
      // Later receipts for the card route as for an unregistered card.
      expect((await encryptReceipt(f.deps, merchant, receiptMessage("4000000000000010"))).isEscrowed).toBe(
        true,
      );
    });
  });
});

describe("registration is atomic for the caller", () => {
  it("answers the userId of the user it created even when escrow release then hits a store outage", async () => {
    const f = await domainFixture();
    try {
      await encryptReceipt(f.deps, merchant, receiptMessage("4000000000000011"));
      const findEscrowed = f.store.receipts.findEscrowed.bind(f.store.receipts);
      f.store.receipts.findEscrowed = async () => {
        throw new AppError("service_unavailable", "The store is unreachable.");
      };
      const keys = await generateKeys(f.deps, issuer, { algorithm: P256 });
      const reg = await register(f.deps, issuer, {
        hashedPan: hashPan("4000000000000011"),
        publicKey: keys.publicKey,
        keyId: keys.keyId,
      });
      expect(reg).toMatchObject({ releasedReceipts: 0, heldReceipts: 0 });
      expect((await f.store.users.findById(reg.userId))?.activeKeyId).toBe(keys.keyId);
      // Once the store answers again, registering the same key again releases what was left.
      f.store.receipts.findEscrowed = findEscrowed;
      const again = await register(f.deps, issuer, {
        hashedPan: hashPan("4000000000000011"),
        publicKey: keys.publicKey,
        keyId: keys.keyId,
      });
      expect(again).toMatchObject({ userId: reg.userId, releasedReceipts: 1 });
    } finally {
      await f.close();
    }
  });
});
