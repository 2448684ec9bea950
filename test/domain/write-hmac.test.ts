import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { cardKeyOf } from "../../src/domain/pan.js";
import { createPayment } from "../../src/domain/payments.js";
import { encryptReceipt } from "../../src/domain/receipts.js";
import { refundPayment } from "../../src/domain/refunds.js";
import type { ReceiptRecord } from "../../src/store/types.js";
import { type DomainFixture, domainFixture, principal, receiptMessage } from "../support/domain.js";
import { hashPan } from "../support/harness.js";
import { hmacs } from "../support/hmac-count.js";

// Every HMAC the domain takes, counted (and computed by node:crypto as before).
vi.mock("node:crypto", async (original) =>
  (await import("../support/hmac-count.js")).cryptoCountingHmacs(original),
);

const bank = principal("issuer", "bank-a");
const shop = principal("merchant", "shop-1");
const CALLER = { requestId: "req-w", sourceIp: "203.0.113.9" };
const REGISTERED = "4000000000000173";
const UNREGISTERED = "4000000000000181";
const PAR = "V0010013018209856843587239384";

/**
 * A write in the clear (encrypt, create payment, refund) keys its card once: the HMAC under the pepper
 * that the plaintext-intake check finds the card's user by is the one routing takes (it was two HMACs
 * per call; one costs about 4 us of the main thread). The receipt still goes where that key says: to the
 * registered card's user, or to escrow under the card's key.
 */
describe("a write in the clear takes its card's HMAC once", () => {
  let f: DomainFixture;
  let userId: string;
  beforeEach(async () => {
    f = await domainFixture();
    const keys = await generateKeys(f.deps, bank, { algorithm: "" });
    userId = (await register(f.deps, bank, { hashedPan: hashPan(REGISTERED), ...keys })).userId;
  });
  afterEach(async () => {
    await f.close();
  });

  const cards: [string, (r: Receipt) => Receipt, string, boolean][] = [
    ["a registered card", (r) => r, hashPan(REGISTERED), false],
    [
      "an unregistered card",
      (r) => ({ ...r, recipientHashedPan: hashPan(UNREGISTERED) }),
      hashPan(UNREGISTERED),
      true,
    ],
    ["a card named by its PAR", (r) => ({ ...r, recipientHashedPan: "", recipientPar: PAR }), "", true],
  ];
  const expectRouted = (record: ReceiptRecord, hashedPan: string, escrowed: boolean) => {
    const par = hashedPan === "" ? PAR : undefined;
    expect(record.panHash).toBe(cardKeyOf(f.deps.pepper, { hashedPan, par }));
    expect(record.isEscrowed).toBe(escrowed);
    expect(record.userId).toBe(escrowed ? undefined : userId);
  };

  it.each(cards)("encrypt, for %s", async (_name, card, hashedPan, escrowed) => {
    const input = card(receiptMessage(REGISTERED));
    hmacs.count = 0;
    const record = await encryptReceipt(f.deps, shop, input, null, CALLER);
    expect(hmacs.count).toBe(1);
    expectRouted(record, hashedPan, escrowed);
  });

  it.each(cards)("create payment and its refund, for %s", async (_name, card, hashedPan, escrowed) => {
    const receipt = card(receiptMessage(REGISTERED, { amount: 300n }));
    hmacs.count = 0;
    const paid = await createPayment(f.deps, shop, { gateway: "gateway_a", receipt }, CALLER);
    expect(hmacs.count).toBe(1);
    expectRouted(paid.receipt, hashedPan, escrowed);

    const refund = card(
      receiptMessage(REGISTERED, {
        receiptType: "refund",
        originalReceiptId: receipt.receiptId,
        transactionId: receipt.transactionId,
        amount: 100n,
        items: [],
        mockItems: false,
      }),
    );
    hmacs.count = 0;
    const refunded = await refundPayment(
      f.deps,
      shop,
      { paymentId: paid.payment.paymentId, receipt: refund },
      CALLER,
    );
    expect(hmacs.count).toBe(1);
    expect(refunded.receipt.receiptId).toBe(refund.receiptId);
    expectRouted(refunded.receipt, hashedPan, escrowed);
  });
});
