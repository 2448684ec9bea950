import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { KeyBundleSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { sealReceipt } from "../../src/client/index.js";
import { createPayment } from "../../src/domain/payments.js";
import { encryptReceipt, storeSealedReceipt } from "../../src/domain/receipts.js";
import { lookupKey } from "../../src/domain/routing.js";
import {
  type DomainFixture,
  domainFixture,
  principal,
  receiptMessage,
  rejection,
} from "../support/domain.js";
import { hashPan } from "../support/harness.js";

/**
 * A refund or void must name an original receipt of the same merchant that the service stores
 * (`originals.ts` says what "exists" means). Refused requests write nothing.
 */

const merchant = principal("merchant", "shop-1");
const otherShop = principal("merchant", "shop-2");
const CALLER = { requestId: "r", sourceIp: "" };
const PAN = "4000000000000002";

describe("refund and void receipts name a stored original", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    await f.close();
  });

  it("accepts a refund of a receipt the merchant stored, and a void of it", async () => {
    const sale = await encryptReceipt(f.deps, merchant, receiptMessage(PAN));
    const refund = receiptMessage(PAN, { receiptType: "refund", originalReceiptId: sale.receiptId });
    const stored = await encryptReceipt(f.deps, merchant, refund);
    expect(await f.store.receipts.findByMerchantReceipt("m-1", stored.receiptId)).toBeDefined();
    const voided = receiptMessage(PAN, { receiptType: "void", originalReceiptId: sale.receiptId });
    await expect(encryptReceipt(f.deps, merchant, voided)).resolves.toBeDefined();
  });

  it("accepts a refund of a receipt the merchant sealed on its side, which the service cannot read", async () => {
    const key = await lookupKey(f.deps, merchant, { recipientHashedPan: hashPan(PAN) }, CALLER);
    const envelope = await sealReceipt(
      {
        receiptId: "sealed-sale",
        merchantId: "m-1",
        merchantName: "Corner Coffee",
        transactionId: "t-sealed",
        transactionDate: "2026-03-01T11:00:00Z",
        currency: "EUR",
      },
      key.publicKey,
      { keyId: key.keyId, aadBound: key.aadBound },
    );
    const bytes = (text: string) => Buffer.from(text, "base64");
    await storeSealedReceipt(
      f.deps,
      merchant,
      {
        recipientHashedPan: hashPan(PAN),
        version: envelope.version,
        receiptId: envelope.receiptId,
        merchantId: envelope.merchantId,
        transactionId: envelope.transactionId,
        keyBundle: create(KeyBundleSchema, {
          keyId: envelope.keyBundle.keyId,
          algorithm: envelope.keyBundle.algorithm,
          encryptedAesKey: bytes(envelope.keyBundle.encryptedAesKey),
          aadBound: envelope.keyBundle.aadBound === true,
        }),
        ciphertext: bytes(envelope.ciphertext),
        iv: bytes(envelope.iv),
        authTag: bytes(envelope.authTag),
      },
      CALLER,
    );
    const refund = receiptMessage(PAN, { receiptType: "refund", originalReceiptId: "sealed-sale" });
    await expect(encryptReceipt(f.deps, merchant, refund)).resolves.toBeDefined();
  });

  it("refuses an original nobody stored, naming it with every other problem, and writes nothing", async () => {
    const refund = receiptMessage(PAN, {
      receiptType: "refund",
      originalReceiptId: "never-stored",
      currency: "XXX",
    });
    const err = await rejection(encryptReceipt(f.deps, merchant, refund));
    expect(err.code).toBe("invalid_request");
    expect(err.violations.map((v) => v.field).sort()).toEqual(["currency", "originalReceiptId"]);
    expect(await f.store.receipts.findByMerchantReceipt("m-1", refund.receiptId)).toBeUndefined();
  });

  it("does not find another merchant tenant's receipt, even under the same ids", async () => {
    // A receipt of another tenant's merchantId: the ids are unique per merchantId, so a refund of m-1
    // never finds it; and a record of m-1 kept for another tenant (before merchantIds had owners)
    // does not count either.
    const theirs = await encryptReceipt(f.deps, otherShop, receiptMessage(PAN, { merchantId: "m-2" }));
    const across = receiptMessage(PAN, { receiptType: "refund", originalReceiptId: theirs.receiptId });
    expect((await rejection(encryptReceipt(f.deps, merchant, across))).violations[0]?.field).toBe(
      "originalReceiptId",
    );
    const legacy = await encryptReceipt(f.deps, merchant, receiptMessage(PAN));
    await f.store.receipts.insert({
      ...legacy,
      id: "rcp_legacy",
      receiptId: "legacy",
      merchantTenantId: "shop-0",
    });
    const ofLegacy = receiptMessage(PAN, { receiptType: "void", originalReceiptId: "legacy" });
    expect((await rejection(encryptReceipt(f.deps, merchant, ofLegacy))).violations[0]?.field).toBe(
      "originalReceiptId",
    );
  });

  it("refuses a payment whose refund receipt names a missing original, and charges nothing", async () => {
    const refund = receiptMessage(PAN, {
      receiptType: "refund",
      originalReceiptId: "never-stored",
      amount: 300n,
    });
    const err = await rejection(
      createPayment(f.deps, merchant, { gateway: "gateway_a", receipt: refund }, CALLER),
    );
    expect(err.violations).toEqual([
      {
        field: "originalReceiptId",
        description:
          "must name a receipt of this merchantId that the service stored: there is none with this receiptId",
      },
    ]);
    expect(await f.store.payments.findByTransaction("m-1", refund.transactionId)).toBeUndefined();
    expect(await f.store.receipts.findByMerchantReceipt("m-1", refund.receiptId)).toBeUndefined();
  });
});
