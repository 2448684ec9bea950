import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { KeyBundleSchema, ReceiptSchema, SealedReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { sealReceipt } from "../../src/client/webcrypto.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { createPayment } from "../../src/domain/payments.js";
import { storeSealedReceipt } from "../../src/domain/receipts.js";
import { lookupKey } from "../../src/domain/routing.js";
import type { SealedInput } from "../../src/domain/sealed.js";
import { type DomainFixture, domainFixture, principal, rejection } from "../support/domain.js";
import { hashPan } from "../support/harness.js";

const bankA = principal("issuer", "bank-a");
const shop1 = principal("merchant", "shop-1");
const shop2 = principal("merchant", "shop-2");
const CALLER = { requestId: "req-s", sourceIp: "" };
const PAN = "4000000000000298";

/**
 * Issue 38: a receipt the merchant sealed on its side, from the side of a merchant that sends a
 * bundle the service cannot vouch for (no key, another key than the card routes to, a suite it does
 * not know, wrong sizes), plants escrow in bulk, or uses another tenant's merchantId. Each is refused
 * with the field or code that says why, and nothing is stored.
 */
describe("merchant-sealed receipts", () => {
  let f: DomainFixture;
  let n = 0;
  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    await f.close();
  });

  async function sealed(merchantId = "m-1", pan = PAN): Promise<SealedInput> {
    n += 1;
    const key = await lookupKey(f.deps, shop1, { recipientHashedPan: hashPan(pan) }, CALLER);
    const envelope = await sealReceipt(
      {
        version: "1.0",
        receiptId: `sealed-r-${n}`,
        merchantId,
        merchantName: "Sealed Cafe",
        transactionId: `sealed-t-${n}`,
        transactionDate: "2026-03-01T11:00:00Z",
        currency: "EUR",
        items: [{ lineItemId: "1", name: "Tea", quantity: 1, unitPrice: 300, totalPrice: 300, taxes: [] }],
      },
      key.publicKey,
      { keyId: key.keyId, aadBound: key.aadBound },
    );
    const b = (text: string) => Buffer.from(text, "base64");
    return {
      recipientHashedPan: hashPan(pan),
      version: envelope.version,
      receiptId: envelope.receiptId,
      merchantId,
      transactionId: envelope.transactionId,
      keyBundle: create(KeyBundleSchema, {
        keyId: envelope.keyBundle.keyId,
        algorithm: envelope.keyBundle.algorithm,
        encryptedAesKey: b(envelope.keyBundle.encryptedAesKey),
        encapsulatedKey: b(envelope.keyBundle.encapsulatedKey ?? ""),
        aadBound: envelope.keyBundle.aadBound === true,
      }),
      ciphertext: b(envelope.ciphertext),
      iv: b(envelope.iv),
      authTag: b(envelope.authTag),
    };
  }
  const stored = (s: SealedInput) => f.store.receipts.findByMerchantReceipt(s.merchantId, s.receiptId);

  it("stores the sealed parts as sent, for the card's user, without seeing the content", async () => {
    const keys = await generateKeys(f.deps, bankA);
    const user = await register(f.deps, bankA, { hashedPan: hashPan(PAN), ...keys });
    const input = await sealed();
    const record = await storeSealedReceipt(f.deps, shop1, input, CALLER);
    expect(record).toMatchObject({ userId: user.userId, isEscrowed: false, merchantTenantId: "shop-1" });
    const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");
    expect(await stored(input)).toMatchObject({
      ciphertext: b64(input.ciphertext),
      iv: b64(input.iv),
      authTag: b64(input.authTag),
      keyBundle: {
        keyId: keys.keyId,
        encryptedAesKey: b64(input.keyBundle?.encryptedAesKey ?? new Uint8Array()),
      },
    });
  });

  it("refuses a missing bundle, a blank keyId and an unknown suite, naming each field; stores nothing", async () => {
    const input = await sealed();
    const missing = await rejection(
      storeSealedReceipt(f.deps, shop1, { ...input, keyBundle: undefined }, CALLER),
    );
    expect(missing.violations).toEqual([{ field: "keyBundle", description: "is required" }]);
    const bundle = input.keyBundle ?? create(KeyBundleSchema);
    const blank = await rejection(
      storeSealedReceipt(
        f.deps,
        shop1,
        { ...input, keyBundle: create(KeyBundleSchema, { ...bundle, keyId: "", algorithm: "AES" }) },
        CALLER,
      ),
    );
    expect(blank.violations).toEqual([
      { field: "keyBundle.keyId", description: "is required: the keyId that look-up gave" },
      { field: "keyBundle.algorithm", description: "must be RSA-OAEP-256 or HPKE-P256-SHA256-A256GCM" },
    ]);
    // Field problems come before the merchantId: nothing is claimed by a refused call.
    expect(await f.store.merchants.find("m-1")).toBeUndefined();
    expect(await stored(input)).toBeUndefined();
  });

  it("refuses a malformed card reference and malformed sealed parts, naming each field; stores nothing", async () => {
    const input = await sealed();
    const err = await rejection(
      storeSealedReceipt(
        f.deps,
        shop1,
        { ...input, recipientHashedPan: "not-a-hash", iv: new Uint8Array(5), authTag: new Uint8Array(3) },
        CALLER,
      ),
    );
    expect(err.code).toBe("invalid_request");
    expect(err.violations.map((v) => v.field)).toEqual(["recipientHashedPan", "iv", "authTag"]);
    expect(await stored(input)).toBeUndefined();
    expect(await f.store.merchants.find("m-1")).toBeUndefined();
  });

  it("answers conflict for a bundle naming another key than the card routes to now", async () => {
    const input = await sealed();
    // The card registers after the merchant looked up the (escrow) key: it routes to the user now.
    const keys = await generateKeys(f.deps, bankA);
    await register(f.deps, bankA, { hashedPan: hashPan(PAN), ...keys });
    const err = await rejection(storeSealedReceipt(f.deps, shop1, input, CALLER));
    expect([err.code, err.message]).toEqual([
      "conflict",
      "The recipient's key changed: look it up again and seal to the key it gives.",
    ]);
    expect(await stored(input)).toBeUndefined();
  });

  it("refuses a bundle of the right key with the wrong sizes, naming the field", async () => {
    const input = await sealed();
    const bundle = input.keyBundle ?? create(KeyBundleSchema);
    const err = await rejection(
      storeSealedReceipt(
        f.deps,
        shop1,
        { ...input, keyBundle: create(KeyBundleSchema, { ...bundle, encryptedAesKey: new Uint8Array(5) }) },
        CALLER,
      ),
    );
    expect(err.code).toBe("invalid_request");
    expect(err.violations.map((v) => v.field)).toEqual(["keyBundle.encryptedAesKey"]);
    expect(await stored(input)).toBeUndefined();
  });

  it("counts escrowed sealed receipts against the intake limit of the merchant and card", async () => {
    f.deps.escrow = { ...f.deps.escrow, intakeLimit: 2 };
    await storeSealedReceipt(f.deps, shop1, await sealed(), CALLER);
    await storeSealedReceipt(f.deps, shop1, await sealed(), CALLER);
    const third = await sealed();
    const err = await rejection(storeSealedReceipt(f.deps, shop1, third, CALLER));
    expect(err.code).toBe("rate_limit_exceeded");
    expect(await stored(third)).toBeUndefined();
  });

  it("refuses another tenant's merchantId as forbidden, before the key check", async () => {
    await storeSealedReceipt(f.deps, shop1, await sealed("m-owned"), CALLER);
    const input = await sealed("m-owned");
    const bundle = input.keyBundle ?? create(KeyBundleSchema);
    const stale = { ...input, keyBundle: create(KeyBundleSchema, { ...bundle, keyId: "stale-key" }) };
    const err = await rejection(storeSealedReceipt(f.deps, shop2, stale, CALLER));
    expect([err.code, err.message]).toEqual(["forbidden", "This merchantId belongs to another tenant."]);
  });

  it("names the fields of a payment's sealed receipt under sealedReceipt.", async () => {
    const input = await sealed();
    const sealedReceipt = create(SealedReceiptSchema, {
      version: input.version,
      receiptId: input.receiptId,
      ciphertext: input.ciphertext,
      iv: input.iv,
      authTag: input.authTag,
    });
    const receipt = create(ReceiptSchema, {
      merchantId: "m-1",
      transactionId: input.transactionId,
      recipientHashedPan: hashPan(PAN),
      currency: "EUR",
      amount: 300n,
      sealedReceipt,
    });
    const err = await rejection(createPayment(f.deps, shop1, { gateway: "gateway_a", receipt }, CALLER));
    expect(err.violations).toEqual([{ field: "sealedReceipt.keyBundle", description: "is required" }]);
  });
});
