import { generateKeyPairSync } from "node:crypto";
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { grantAccess } from "../../src/domain/grants.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { createPayment } from "../../src/domain/payments.js";
import { prepareReceipt } from "../../src/domain/prepare.js";
import { sealedPlaintextOf } from "../../src/domain/receipt-rules.js";
import { decryptReceipt, encryptReceipt } from "../../src/domain/receipts.js";
import {
  applyMerchantSignature,
  receiptJsonOf,
  receiptSigningInput,
  signedFormOf,
} from "../../src/domain/signatures.js";
import { registerSigningKey } from "../../src/domain/signing-keys.js";
import { messageToJson } from "../../src/rpc/json.js";
import { type DomainFixture, domainFixture, principal, rejection } from "../support/domain.js";
import { hashPan } from "../support/harness.js";
import {
  cardholderVerifies,
  MERCHANT_DROPS,
  type MerchantKeys,
  merchantKeys,
  signBody,
  signingInput,
} from "../support/signatures.js";

let counter = 0;

/** A REST body already in the form the service seals (upper-case currency, version, items, Z date). */
function body(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  counter += 1;
  return {
    version: "1.0",
    receiptId: `r-${counter}`,
    merchantId: "m-1",
    merchantName: "Corner Coffee",
    transactionId: `t-${counter}`,
    transactionDate: "2026-03-01T11:00:00Z",
    currency: "EUR",
    recipientHashedPan: hashPan("4111111111111111"),
    merchantCity: "Berlin",
    totalAmount: 300,
    items: [
      {
        lineItemId: "1",
        name: "Tea",
        quantity: 1,
        unitPrice: 300,
        totalPrice: 300,
        taxes: [{ name: "VAT", rate: 0.19, amount: 48 }],
      },
      { lineItemId: "2", name: "Free refill", quantity: 1, unitPrice: 0, totalPrice: 0, taxes: [] },
    ],
    mockItems: false,
    ...overrides,
  };
}

const message = (json: Record<string, unknown>) => fromJson(ReceiptSchema, json as JsonObject);

/** `b` without the member `name`. */
function without(b: Record<string, unknown>, name: string): Record<string, unknown> {
  const { [name]: _dropped, ...rest } = b;
  return rest;
}

describe("merchant signatures (domain)", () => {
  let f: DomainFixture;
  let keys: MerchantKeys;
  const merchant = principal("merchant", "shop-1");
  const otherTenant = principal("merchant", "shop-2");
  const issuer = principal("issuer", "bank-a");

  beforeEach(async () => {
    f = await domainFixture();
    keys = merchantKeys();
  });
  afterEach(async () => {
    await f.close();
  });

  describe("registerSigningKey", () => {
    it("accepts the key as base64 SPKI, PEM or raw 32 bytes, and stores one canonical SPKI", async () => {
      const spki = Buffer.from(keys.publicKey, "base64");
      const pem = keys.publicKeyObject.export({ type: "spki", format: "pem" }).toString();
      const raw = spki.subarray(-32).toString("base64");
      const first = await registerSigningKey(f.deps, merchant, {
        merchantId: "m-1",
        publicKey: keys.publicKey,
      });
      expect(first).toEqual({
        merchantKeyId: expect.stringMatching(/^mk_[A-Za-z0-9_-]{16}$/),
        merchantId: "m-1",
        algorithm: "Ed25519",
        registeredAt: f.clock.now(),
        allReceiptsSigned: false,
      });
      // The same key in another encoding is the same key: nothing changes, the id stays.
      for (const publicKey of [pem, raw]) {
        expect(await registerSigningKey(f.deps, merchant, { merchantId: "m-1", publicKey })).toEqual(first);
      }
      expect(await f.store.merchantKeys.findByMerchantId("m-1")).toMatchObject({
        merchantKeyId: first.merchantKeyId,
        tenantId: "shop-1",
        publicKey: keys.publicKey,
        previousKeys: [],
      });
    });

    it("rotates to a new key with a new id and keeps the replaced one in the history", async () => {
      const first = await registerSigningKey(f.deps, merchant, {
        merchantId: "m-1",
        publicKey: keys.publicKey,
      });
      f.clock.advance(60_000);
      const next = merchantKeys();
      const second = await registerSigningKey(f.deps, merchant, {
        merchantId: "m-1",
        publicKey: next.publicKey,
      });
      expect(second.merchantKeyId).not.toBe(first.merchantKeyId);
      const stored = await f.store.merchantKeys.findByMerchantId("m-1");
      expect(stored?.publicKey).toBe(next.publicKey);
      expect(stored?.previousKeys).toEqual([
        {
          merchantKeyId: first.merchantKeyId,
          publicKey: keys.publicKey,
          registeredAt: first.registeredAt,
          replacedAt: second.registeredAt,
        },
      ]);
    });

    it("refuses keys that are not Ed25519 public keys, naming publicKey", async () => {
      const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 }).publicKey;
      const ec = generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey;
      const ed448 = generateKeyPairSync("ed448").publicKey;
      const der = (k: typeof rsa) => k.export({ type: "spki", format: "der" }).toString("base64");
      const cases: Array<[string, string]> = [
        [der(rsa), "must be an Ed25519 key"],
        [der(ec), "must be an Ed25519 key"],
        [der(ed448), "must be an Ed25519 key"],
        [keys.privateKey.export({ type: "pkcs8", format: "pem" }).toString(), "never send a private key"],
        [
          keys.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64"),
          "never send a private key",
        ],
        ["bm90IGEga2V5", "must be an Ed25519 public key"],
        [Buffer.alloc(31, 1).toString("base64"), "must be an Ed25519 public key"],
        ["not base64 at all", "must be an Ed25519 public key"],
      ];
      for (const [publicKey, problem] of cases) {
        const err = await rejection(registerSigningKey(f.deps, merchant, { merchantId: "m-1", publicKey }));
        expect(err.code).toBe("invalid_request");
        expect(err.violations).toEqual([
          { field: "publicKey", description: expect.stringContaining(problem) },
        ]);
      }
      expect(await f.store.merchantKeys.findByMerchantId("m-1")).toBeUndefined();
    });

    it("names every bad field at once", async () => {
      const err = await rejection(registerSigningKey(f.deps, merchant, { merchantId: "a/b", publicKey: "" }));
      expect(err.code).toBe("invalid_request");
      expect(err.violations.map((v) => v.field)).toEqual(["merchantId", "publicKey"]);
    });

    it("is forbidden for a merchantId the API key may not act for", async () => {
      const limited = principal("merchant", "shop-1", ["m-2"]);
      const err = await rejection(
        registerSigningKey(f.deps, limited, { merchantId: "m-1", publicKey: keys.publicKey }),
      );
      expect(err.code).toBe("forbidden");
    });

    it("is forbidden when the merchantId belongs to another merchant tenant, and changes nothing", async () => {
      await registerSigningKey(f.deps, merchant, { merchantId: "m-1", publicKey: keys.publicKey });
      for (const publicKey of [merchantKeys().publicKey, keys.publicKey]) {
        const err = await rejection(
          registerSigningKey(f.deps, otherTenant, { merchantId: "m-1", publicKey }),
        );
        expect(err.code).toBe("forbidden");
        expect(err.message).toBe("This merchantId belongs to another tenant.");
      }
      expect((await f.store.merchantKeys.findByMerchantId("m-1"))?.tenantId).toBe("shop-1");
    });
  });

  describe("the signed form", () => {
    it("rebuilds a body in the service's form exactly, whatever its member order", () => {
      const b = body({ paymentMethod: "card", subtotal: 0 });
      const reversed = Object.fromEntries(Object.entries(b).reverse());
      expect(receiptSigningInput(receiptJsonOf(message(reversed)))).toEqual(signingInput(b, MERCHANT_DROPS));
    });

    it("drops null, empty-string and empty-list members at any depth, but keeps zeros and list elements", () => {
      const form = signedFormOf({
        version: "1.0",
        merchantCity: "",
        merchantState: null,
        items: [{ lineItemId: "1", unitPrice: 0, category: "", taxes: [] }],
        recipientHashedPan: "ab",
        keyId: "k",
        merchantSignature: "s",
      });
      expect(form).toEqual({ version: "1.0", items: [{ lineItemId: "1", unitPrice: 0 }] });
    });

    it("renders int64 as JSON integers and dates as protobuf's UTC form", () => {
      const json = receiptJsonOf(message(body({ transactionDate: "2026-03-01T12:00:00.5+01:00" })));
      expect(json.transactionDate).toBe("2026-03-01T11:00:00.500Z");
      expect(json.totalAmount).toBe(300);
      expect((json.items as JsonObject[])[0]).toMatchObject({ quantity: 1, unitPrice: 300 });
    });
  });

  describe("encrypt and create with a registered key", () => {
    beforeEach(async () => {
      await registerSigningKey(f.deps, merchant, { merchantId: "m-1", publicKey: keys.publicKey });
    });

    it("refuses a missing or malformed signature with invalid_signature, storing nothing", async () => {
      const b = body();
      for (const header of [null, "", "not-base64!", Buffer.alloc(63).toString("base64")]) {
        const err = await rejection(encryptReceipt(f.deps, merchant, message(b), header));
        expect(err.code).toBe("invalid_signature");
        expect(err.violations[0]?.field).toBe("X-Receipt-Signature");
      }
      expect(await f.store.receipts.findByTransaction("shop-1", b.transactionId as string)).toEqual([]);
    });

    it("refuses a signature over another body, by another key, or of another tenant's merchant", async () => {
      const b = body();
      const cases = [
        signBody({ ...b, merchantName: "Someone Else" }, keys.privateKey),
        signBody(b, merchantKeys().privateKey),
      ];
      for (const header of cases) {
        const err = await rejection(encryptReceipt(f.deps, merchant, message(b), header));
        expect(err.code).toBe("invalid_signature");
      }
      // A tenant allowed any merchantId cannot slip an unsigned receipt in under m-1 either: m-1 is
      // the other tenant's, which it is told before anything about m-1's signing key.
      const err = await rejection(encryptReceipt(f.deps, otherTenant, message(b)));
      expect(err.code).toBe("forbidden");
    });

    it("does not let the input-only fields or the signature fields affect what is signed", async () => {
      const b = body({ mockItems: false });
      const header = signBody(b, keys.privateKey);
      const record = await encryptReceipt(
        f.deps,
        merchant,
        message({ ...b, recipientHashedPan: hashPan("5555555555554444") }),
        header,
      );
      expect(record.isEscrowed).toBe(true);
      const err = await rejection(
        encryptReceipt(f.deps, merchant, message({ ...body(), merchantSignature: header }), header),
      );
      expect(err.code).toBe("invalid_request");
      expect(err.violations.map((v) => v.field)).toContain("merchantSignature");
    });

    it("asks for the sealed form when the service would change a signed field", async () => {
      const cases: Array<[Record<string, unknown>, string]> = [
        [body({ currency: "eur" }), "currency"],
        [without(body(), "version"), "version"],
        [without(body({ mockItems: true }), "items"), "items"],
      ];
      for (const [b, field] of cases) {
        const err = await rejection(
          encryptReceipt(f.deps, merchant, message(b), signBody(b, keys.privateKey)),
        );
        expect(err.code).toBe("invalid_request");
        expect(err.violations.map((v) => v.field)).toEqual([field]);
      }
      const b = body({ receiptId: "r-b", transactionId: "t-b" });
      const err = await rejection(
        createPayment(f.deps, merchant, {
          gateway: "gateway_b",
          receipt: message(b),
          signature: signBody(b, keys.privateKey),
        }),
      );
      expect(err.violations).toEqual([
        { field: "amount", description: expect.stringContaining("signed payment") },
      ]);
    });

    it("seals a verified signature and key id, which the cardholder verifies after decryption", async () => {
      const pair = await generateKeys(f.deps, issuer);
      const { userId } = await register(f.deps, issuer, {
        hashedPan: hashPan("4111111111111111"),
        publicKey: pair.publicKey,
        keyId: pair.keyId,
      });
      const b = body();
      const header = signBody(b, keys.privateKey);
      await encryptReceipt(f.deps, merchant, message(b), header);
      const grant = await grantAccess(
        f.deps,
        issuer,
        { userId, keyId: pair.keyId },
        { requestId: "r", sourceIp: "ip" },
      );
      const opened = await decryptReceipt(
        f.deps,
        issuer,
        {
          receiptId: b.receiptId as string,
          merchantId: "",
          tokenId: grant.tokenId,
          accessTokenId: "",
          privateKey: pair.privateKey,
        },
        { requestId: "r", sourceIp: "ip" },
      );
      const stored = await f.store.merchantKeys.findByMerchantId("m-1");
      expect(opened.merchantSignature).toBe(header);
      expect(opened.merchantKeyId).toBe(stored?.merchantKeyId);
      const asRest = messageToJson(ReceiptSchema, opened) as Record<string, unknown>;
      expect(cardholderVerifies(asRest, keys.publicKeyObject)).toBe(true);
      expect(cardholderVerifies({ ...asRest, merchantName: "Forged" }, keys.publicKeyObject)).toBe(false);
    });
  });

  it("covers the card-transaction fields: the cardholder verifies them, and a change to any is refused", async () => {
    await registerSigningKey(f.deps, merchant, { merchantId: "m-1", publicKey: keys.publicKey });
    const pair = await generateKeys(f.deps, issuer);
    const { userId } = await register(f.deps, issuer, {
      hashedPan: hashPan("4111111111111111"),
      publicKey: pair.publicKey,
      keyId: pair.keyId,
    });
    const sale = body();
    await encryptReceipt(f.deps, merchant, message(sale), signBody(sale, keys.privateKey));
    const refund = body({
      receiptType: "refund",
      originalReceiptId: sale.receiptId,
      authorizationCode: "A1B2C3",
      retrievalReferenceNumber: "633112345678",
      merchantCategoryCode: "5814",
      cardAcceptorName: "CORNER COFFEE",
      tipAmount: 0,
      totalAmount: 300,
      tenders: [
        { method: "gift_card", amount: 100 },
        { method: "card", cardBrand: "visa", cardLast4: "4242", amount: 200 },
      ],
      taxAmount: 48,
      taxBreakdown: [{ rate: 0.19, taxableAmount: 252, taxAmount: 48 }],
    });
    const header = signBody(refund, keys.privateKey);
    const changed: Array<Record<string, unknown>> = [
      { ...refund, authorizationCode: "A1B2C4" },
      { ...refund, tenders: [{ method: "card", amount: 300 }] },
      { ...refund, taxBreakdown: [{ rate: 0.2, taxableAmount: 252, taxAmount: 48 }] },
      { ...refund, receiptType: "void" },
    ];
    for (const other of changed) {
      const err = await rejection(encryptReceipt(f.deps, merchant, message(other), header));
      expect(err.code).toBe("invalid_signature");
    }
    await encryptReceipt(f.deps, merchant, message(refund), header);
    const grant = await grantAccess(
      f.deps,
      issuer,
      { userId, keyId: pair.keyId },
      { requestId: "r", sourceIp: "ip" },
    );
    const opened = await decryptReceipt(
      f.deps,
      issuer,
      {
        receiptId: refund.receiptId as string,
        merchantId: "",
        tokenId: grant.tokenId,
        accessTokenId: "",
        privateKey: pair.privateKey,
      },
      { requestId: "r", sourceIp: "ip" },
    );
    const asRest = messageToJson(ReceiptSchema, opened) as Record<string, unknown>;
    expect(asRest).toMatchObject({ receiptType: "refund", tipAmount: 0, authorizationCode: "A1B2C3" });
    expect(cardholderVerifies(asRest, keys.publicKeyObject)).toBe(true);
    const forged = { ...asRest, tenders: [{ method: "card", amount: 300 }] };
    expect(cardholderVerifies(forged, keys.publicKeyObject)).toBe(false);
  });

  it("ignores a signature header when the merchantId has no registered key, and seals none", async () => {
    await registerSigningKey(f.deps, merchant, { merchantId: "m-1", publicKey: keys.publicKey });
    const b = body({ merchantId: "m-unsigned" });
    const receipt = await prepareReceipt(f.deps, merchant, message(b));
    await applyMerchantSignature(f.deps, message(b), receipt, signBody(b, keys.privateKey));
    expect(sealedPlaintextOf(receipt)).not.toHaveProperty("merchantSignature");
    expect(sealedPlaintextOf(receipt)).not.toHaveProperty("merchantKeyId");
    const record = await encryptReceipt(f.deps, merchant, message(b), "garbage");
    expect(record.merchantId).toBe("m-unsigned");
  });
});
