import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { KeyBundleSchema, type Receipt, ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { openReceipt, type SealedEnvelope, sealReceipt } from "../../src/client/index.js";
import { gatewayByName } from "../../src/domain/gateways/index.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { createPayment } from "../../src/domain/payments.js";
import { getPayment, listPayments, refundPayment } from "../../src/domain/refunds.js";
import { lookupKey } from "../../src/domain/routing.js";
import { invalidRequest } from "../../src/errors.js";
import { encryptedReceiptOf } from "../../src/rpc/convert.js";
import { createMongoStore } from "../../src/store/mongo/index.js";
import type { Store } from "../../src/store/types.js";
import { FakeMongo } from "../store/fake-mongo/index.js";
import {
  type DomainFixture,
  domainFixture,
  principal,
  receiptMessage,
  rejection,
} from "../support/domain.js";
import { hashPan } from "../support/harness.js";

/**
 * Payments a merchant reads and refunds, at the domain level: partial refunds up to the
 * amount charged, a refund receipt in the clear or sealed by the merchant, refusals that write
 * nothing, declined payments, tenants kept apart, and refund totals that hold under concurrent
 * refunds on both stores.
 */

const merchant = principal("merchant", "shop-1");
const otherShop = principal("merchant", "shop-2");
const issuer = principal("issuer", "bank-a");
const CALLER = { requestId: "r", sourceIp: "" };
const PAN = "4000000000000077";

/** A sale of 1000 through `gateway`, as the merchant creates it. */
async function sale(f: DomainFixture, gateway = "gateway_a", extra: Partial<Receipt> = {}) {
  const receipt = receiptMessage(PAN, {
    amount: 1000n,
    items: [
      {
        $typeName: "receipts.v1.LineItem",
        lineItemId: "1",
        name: "Dinner",
        quantity: 1n,
        unitPrice: 1000n,
        totalPrice: 1000n,
        taxes: [],
      },
    ],
    ...extra,
  });
  return (await createPayment(f.deps, merchant, { gateway, receipt }, CALLER)).payment;
}

/** A refund receipt in the clear for `paymentReceiptId`, refunding `amount`. */
function refundReceipt(paymentReceiptId: string, amount: bigint, extra: Partial<Receipt> = {}): Receipt {
  return receiptMessage(PAN, {
    receiptType: "refund",
    originalReceiptId: paymentReceiptId,
    amount,
    items: [],
    mockItems: false,
    ...extra,
  });
}

/** A refund of `amount` whose receipt the merchant sealed on its side (`envelope`), for the card `hashedPan`. */
function sealedRefund(envelope: SealedEnvelope, hashedPan: string, amount: bigint): Receipt {
  const bytes = (text: string) => Buffer.from(text, "base64");
  // Only the payment's fields stand beside a sealed receipt.
  return create(ReceiptSchema, {
    merchantId: "m-1",
    transactionId: envelope.transactionId,
    currency: "EUR",
    recipientHashedPan: hashedPan,
    amount,
    sealedReceipt: {
      version: envelope.version,
      receiptId: envelope.receiptId,
      keyBundle: create(KeyBundleSchema, {
        keyId: envelope.keyBundle.keyId,
        algorithm: envelope.keyBundle.algorithm,
        encryptedAesKey: bytes(envelope.keyBundle.encryptedAesKey),
        encapsulatedKey: bytes(envelope.keyBundle.encapsulatedKey ?? ""),
        aadBound: envelope.keyBundle.aadBound ?? false,
      }),
      ciphertext: bytes(envelope.ciphertext),
      iv: bytes(envelope.iv),
      authTag: bytes(envelope.authTag),
    },
  });
}

describe("payments a merchant reads and refunds", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    await f.close();
  });

  it("refunds part of a payment, then the rest, each with its refund receipt, and refuses more", async () => {
    const pay = await sale(f);
    const first = await refundPayment(
      f.deps,
      merchant,
      { paymentId: pay.paymentId, receipt: refundReceipt(pay.receiptId, 300n) },
      CALLER,
    );
    expect(first.refund).toMatchObject({
      amount: 300,
      status: "succeeded",
      gatewayRefundId: expect.stringMatching(/^re_/),
    });
    expect(first.payment.refundedAmount).toBe(300);
    expect(await f.store.receipts.findByMerchantReceipt("m-1", first.refund.receiptId)).toBeDefined();

    const over = refundReceipt(pay.receiptId, 701n);
    const err = await rejection(
      refundPayment(f.deps, merchant, { paymentId: pay.paymentId, receipt: over }, CALLER),
    );
    expect(err.violations).toEqual([
      {
        field: "amount",
        description: "must be at most 700, what is left to refund of the payment's 1000 (300 refunded)",
      },
    ]);
    expect(await f.store.receipts.findByMerchantReceipt("m-1", over.receiptId)).toBeUndefined();

    const rest = await refundPayment(
      f.deps,
      merchant,
      { paymentId: pay.paymentId, receipt: refundReceipt(pay.receiptId, 700n) },
      CALLER,
    );
    const stored = await getPayment(f.deps, merchant, pay.paymentId);
    expect(stored.refundedAmount).toBe(1000);
    expect(stored.refunds?.map((r) => [r.amount, r.status])).toEqual([
      [300, "succeeded"],
      [700, "succeeded"],
    ]);
    expect(rest.refund.refundId).not.toBe(first.refund.refundId);
    const audited = await f.store.audit.list(10, { tenantId: "shop-1" });
    expect(audited.filter((e) => e.action === "payment.refunded").map((e) => e.subject)).toEqual([
      pay.paymentId,
      pay.paymentId,
    ]);
  });

  it("names every problem of a refund receipt at once, and writes nothing", async () => {
    const pay = await sale(f);
    const bad = refundReceipt("another-receipt", 0n, {
      receiptType: "sale",
      merchantId: "m-2",
      currency: "USD",
      cardNonce: "cnon:card-nonce-ok",
    });
    const err = await rejection(
      refundPayment(f.deps, merchant, { paymentId: pay.paymentId, receipt: bad }, CALLER),
    );
    expect(err.code).toBe("invalid_request");
    expect(err.violations.map((v) => v.field).sort()).toEqual([
      "amount",
      "cardNonce",
      "currency",
      "merchantId",
      "originalReceiptId",
      "receiptType",
    ]);
    const missing = refundReceipt(pay.receiptId, 100n, { originalReceiptId: undefined, totalAmount: 99n });
    const err2 = await rejection(
      refundPayment(f.deps, merchant, { paymentId: pay.paymentId, receipt: missing }, CALLER),
    );
    expect(err2.violations).toEqual([
      {
        field: "originalReceiptId",
        description: `must be ${pay.receiptId}, the receiptId of the payment's receipt`,
      },
      { field: "totalAmount", description: "must be the amount refunded" },
    ]);
    expect((await getPayment(f.deps, merchant, pay.paymentId)).refunds).toBeUndefined();
    for (const r of [bad, missing]) {
      expect(await f.store.receipts.findByMerchantReceipt(r.merchantId, r.receiptId)).toBeUndefined();
    }
  });

  it("refuses a refund receipt for another card than the payment's, and takes the card's other reference", async () => {
    const pay = await sale(f);
    const OTHER = "4000000000000085";
    const PAR = "5001A1B2C3D4E5F6G7H8J9K0L1M2N";
    // In the clear, by another hashed PAN or a PAR of another card: a refund of another card's payment
    // (and, for an issuer refusing plaintext receipts, the payment's receipt taken in the clear past it).
    for (const card of [
      { recipientHashedPan: hashPan(OTHER) },
      { recipientHashedPan: "", recipientPar: PAR },
    ]) {
      const other = refundReceipt(pay.receiptId, 100n, card);
      const err = await rejection(
        refundPayment(f.deps, merchant, { paymentId: pay.paymentId, receipt: other }, CALLER),
      );
      expect(err.code).toBe("invalid_request");
      expect(err.violations).toEqual([
        {
          field: card.recipientHashedPan === "" ? "recipientPar" : "recipientHashedPan",
          description: "must name the card the payment was made with",
        },
      ]);
      expect(JSON.stringify(err)).not.toContain(hashPan(OTHER));
      expect(await f.store.receipts.findByMerchantReceipt("m-1", other.receiptId)).toBeUndefined();
    }
    // Sealed by the merchant to the other card's key: refused the same way.
    const key = await lookupKey(f.deps, merchant, { recipientHashedPan: hashPan(OTHER) }, CALLER);
    const envelope = await sealReceipt(
      {
        receiptId: "sealed-refund-other",
        merchantId: "m-1",
        merchantName: "Corner Coffee",
        transactionId: "t-sealed-refund-other",
        transactionDate: "2026-03-01T11:30:00Z",
        currency: "EUR",
        receiptType: "refund",
        originalReceiptId: pay.receiptId,
        totalAmount: 100,
      },
      key,
      { trust: "unverified" },
    );
    const sealed = sealedRefund(envelope, hashPan(OTHER), 100n);
    const err = await rejection(
      refundPayment(f.deps, merchant, { paymentId: pay.paymentId, receipt: sealed }, CALLER),
    );
    expect(err.violations).toEqual([
      { field: "recipientHashedPan", description: "must name the card the payment was made with" },
    ]);
    expect((await getPayment(f.deps, merchant, pay.paymentId)).refunds).toBeUndefined();
    // The card registered by both references: its PAR names the payment's card too.
    const keys = await generateKeys(f.deps, issuer, { algorithm: "HPKE-P256-SHA256-A256GCM" });
    await register(f.deps, issuer, {
      hashedPan: hashPan(PAN),
      par: PAR,
      publicKey: keys.publicKey,
      keyId: keys.keyId,
    });
    const byPar = refundReceipt(pay.receiptId, 100n, { recipientHashedPan: "", recipientPar: PAR });
    const refunded = await refundPayment(
      f.deps,
      merchant,
      { paymentId: pay.paymentId, receipt: byPar },
      CALLER,
    );
    expect(refunded.payment.refundedAmount).toBe(100);
  });

  it("keeps a declined payment, refuses to refund it, and lets the next card take its paymentId", async () => {
    const receipt = receiptMessage(PAN, { cardNonce: "cnon:card-nonce-insufficient-funds" });
    const declined = await rejection(
      createPayment(f.deps, merchant, { gateway: "gateway_b", receipt }, CALLER),
    );
    expect(declined.code).toBe("payment_declined");
    const paymentId = declined.metadata.payment_id as string;
    expect(paymentId).toMatch(/^pay_/);
    expect(await getPayment(f.deps, merchant, paymentId)).toMatchObject({
      status: "declined",
      declineCode: "insufficient_funds",
      amount: 300,
    });
    expect(
      await f.store.receipts.findByMerchantReceipt(receipt.merchantId, receipt.receiptId),
    ).toBeUndefined();
    const err = await rejection(
      refundPayment(f.deps, merchant, { paymentId, receipt: refundReceipt(receipt.receiptId, 100n) }, CALLER),
    );
    expect(err.violations).toEqual([
      { field: "paymentId", description: "was declined: a declined payment has nothing to refund" },
    ]);

    const retry = Object.assign(receiptMessage(PAN, { cardNonce: "cnon:card-nonce-ok" }), {
      transactionId: receipt.transactionId,
    });
    const paid = await createPayment(f.deps, merchant, { gateway: "gateway_b", receipt: retry }, CALLER);
    expect(paid.payment).toMatchObject({ paymentId, status: "succeeded" });
    expect((await getPayment(f.deps, merchant, paymentId)).declineCode).toBeUndefined();
    const refunded = await refundPayment(
      f.deps,
      merchant,
      { paymentId, receipt: refundReceipt(retry.receiptId, 100n) },
      CALLER,
    );
    expect(refunded.refund.gatewayRefundId).toMatch(/^rfd_/);
  });

  it("frees the amount and deletes the receipt when the gateway refuses, and holds it when the gateway fails", async () => {
    const pay = await sale(f);
    const gateway = gatewayByName("gateway_a");
    const refused = refundReceipt(pay.receiptId, 400n);
    vi.spyOn(gateway, "refund").mockRejectedValueOnce(
      invalidRequest([{ field: "amount", description: "refused by the gateway" }]),
    );
    await rejection(refundPayment(f.deps, merchant, { paymentId: pay.paymentId, receipt: refused }, CALLER));
    // As before the refund: nothing refunded, no refunds.
    const freed = await getPayment(f.deps, merchant, pay.paymentId);
    expect([freed.refundedAmount ?? 0, freed.refunds ?? []]).toEqual([0, []]);
    expect(await f.store.receipts.findByMerchantReceipt("m-1", refused.receiptId)).toBeUndefined();

    const lost = refundReceipt(pay.receiptId, 400n);
    vi.spyOn(gateway, "refund").mockRejectedValueOnce(new Error("the gateway did not answer"));
    await expect(
      refundPayment(f.deps, merchant, { paymentId: pay.paymentId, receipt: lost }, CALLER),
    ).rejects.toThrow("did not answer");
    // It may have refunded: the amount stays held, the refund pending, for an operator to settle.
    const after = await getPayment(f.deps, merchant, pay.paymentId);
    expect(after.refundedAmount).toBe(400);
    expect(after.refunds?.map((r) => r.status)).toEqual(["pending"]);
  });

  it("takes a refund receipt the merchant sealed, which the device opens as a refund of the sale", async () => {
    const keys = await generateKeys(f.deps, issuer, { algorithm: "HPKE-P256-SHA256-A256GCM" });
    await register(f.deps, issuer, { hashedPan: hashPan(PAN), publicKey: keys.publicKey, keyId: keys.keyId });
    const pay = await sale(f);
    const key = await lookupKey(f.deps, merchant, { recipientHashedPan: hashPan(PAN) }, CALLER);
    const envelope = await sealReceipt(
      {
        receiptId: "sealed-refund-1",
        merchantId: "m-1",
        merchantName: "Corner Coffee",
        transactionId: "t-sealed-refund-1",
        transactionDate: "2026-03-01T11:30:00Z",
        currency: "EUR",
        receiptType: "refund",
        originalReceiptId: pay.receiptId,
        totalAmount: 250,
      },
      key.publicKey,
      { keyId: key.keyId },
    );
    const receipt = sealedRefund(envelope, hashPan(PAN), 250n);
    const refunded = await refundPayment(f.deps, merchant, { paymentId: pay.paymentId, receipt }, CALLER);
    expect(refunded.payment.refundedAmount).toBe(250);
    const stored = await f.store.receipts.findByMerchantReceipt("m-1", "sealed-refund-1");
    const opened = await openReceipt(encryptedReceiptOf(stored as never), keys.privateKey);
    expect(opened).toMatchObject({
      receiptType: "refund",
      originalReceiptId: pay.receiptId,
      totalAmount: 250,
    });
  });

  it("shows a merchant only its own tenant's payments, and a limited key only its merchantIds'", async () => {
    const mine = await sale(f);
    const theirs = (
      await createPayment(
        f.deps,
        otherShop,
        { gateway: "gateway_a", receipt: receiptMessage(PAN, { merchantId: "m-9", amount: 500n }) },
        CALLER,
      )
    ).payment;
    for (const attempt of [
      getPayment(f.deps, merchant, theirs.paymentId),
      refundPayment(
        f.deps,
        merchant,
        { paymentId: theirs.paymentId, receipt: refundReceipt(theirs.receiptId, 1n) },
        CALLER,
      ),
    ]) {
      expect((await rejection(attempt)).code).toBe("not_found");
    }
    expect(
      (await listPayments(f.deps, merchant, { pageSize: 0, pageToken: "" })).payments.map((p) => p.paymentId),
    ).toEqual([mine.paymentId]);
    const limited = principal("merchant", "shop-1", ["m-other"]);
    expect((await rejection(getPayment(f.deps, limited, mine.paymentId))).code).toBe("not_found");
    expect((await listPayments(f.deps, limited, { pageSize: 10, pageToken: "" })).payments).toEqual([]);
    expect(
      (await rejection(listPayments(f.deps, merchant, { pageSize: 201, pageToken: "" }))).violations[0]
        ?.field,
    ).toBe("pageSize");
    expect(
      (await rejection(listPayments(f.deps, merchant, { pageSize: 1, pageToken: "garbage" }))).violations[0]
        ?.field,
    ).toBe("pageToken");
  });
});

describe.each([
  ["memory", async (): Promise<Store | undefined> => undefined],
  [
    "mongodb (fake driver)",
    async (): Promise<Store | undefined> => {
      const store = await createMongoStore({
        uri: "mongodb://fake.invalid/",
        dbName: "refunds",
        createClient: new FakeMongo({ seed: 7 }).createClient,
      });
      await store.init();
      return store;
    },
  ],
] as const)("concurrent refunds on the %s store", (_name, makeStore) => {
  it("refund no more than the payment charged, and keep exactly the refunds' receipts", async () => {
    const store = await makeStore();
    const f = await domainFixture(store === undefined ? {} : { store });
    try {
      const pay = await sale(f);
      const receipts = Array.from({ length: 8 }, () => refundReceipt(pay.receiptId, 300n));
      const settled = await Promise.allSettled(
        receipts.map((receipt) =>
          refundPayment(f.deps, merchant, { paymentId: pay.paymentId, receipt }, CALLER),
        ),
      );
      const done = settled.filter((s) => s.status === "fulfilled");
      expect(done).toHaveLength(3);
      for (const s of settled) {
        if (s.status === "rejected") expect((s.reason as { code?: string }).code).toBe("invalid_request");
      }
      const stored = await getPayment(f.deps, merchant, pay.paymentId);
      expect(stored.refundedAmount).toBe(900);
      expect(stored.refunds?.every((r) => r.status === "succeeded")).toBe(true);
      const kept = await Promise.all(
        receipts.map((r) => f.store.receipts.findByMerchantReceipt("m-1", r.receiptId)),
      );
      expect(kept.filter((r) => r !== undefined)).toHaveLength(3);
    } finally {
      await f.close();
      await store?.close();
    }
  });
});
