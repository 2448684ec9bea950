import { describe, expect, it } from "vitest";
import { DECLINE_CODES } from "../../src/domain/gateways/declines.js";
import { GATEWAY_NAMES, type PaymentGateway } from "../../src/domain/gateways/gateway.js";
import { createSandboxGateways, gatewayByName } from "../../src/domain/gateways/index.js";
import { createSandboxGatewayA } from "../../src/domain/gateways/sandbox-a.js";
import {
  createSandboxGatewayB,
  NONCE_DECLINED,
  NONCE_OK,
  SANDBOX_NONCES,
} from "../../src/domain/gateways/sandbox-b.js";
import { MAX_MONEY } from "../../src/domain/limits.js";
import { mockItems, withMockItems } from "../../src/domain/mock-items.js";
import type { ReceiptLineItem, ValidReceipt } from "../../src/domain/receipt-rules.js";
import { AppError } from "../../src/errors.js";

const base: ValidReceipt = {
  version: "1.0",
  receiptId: "rcpt-0001",
  merchantId: "m-1",
  merchantName: "Shop",
  transactionId: "t-1",
  transactionDate: "2025-06-01T00:00:00Z",
  currency: "EUR",
  recipientHashedPan: "0".repeat(64),
  items: [],
  mockItems: true,
};

const coffee: ReceiptLineItem = {
  lineItemId: "li-1",
  name: "Coffee",
  quantity: 2,
  unitPrice: 350,
  totalPrice: 700,
  taxes: [{ name: "VAT", rate: 0.19, amount: 133 }],
};
const cake: ReceiptLineItem = {
  lineItemId: "li-2",
  name: "Cake",
  quantity: 1,
  unitPrice: 400,
  totalPrice: 400,
  taxes: [],
};

/** The `details` of the invalid_request `fn` throws; fails the test when it does not throw one. */
function detailsOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe("invalid_request");
    return (err as AppError).details;
  }
  throw new Error("expected invalid_request");
}

/** A random source that counts up, so generated ids are predictable. */
function countingRandom(): (size: number) => Uint8Array {
  let next = 0;
  return (size) => Uint8Array.from({ length: size }, () => next++ % 256);
}

describe("gatewayByName", () => {
  it("finds every built-in gateway", () => {
    for (const name of GATEWAY_NAMES) expect(gatewayByName(name).name).toBe(name);
  });

  it.each(["gateway_c", "GATEWAY_A", "", "stripe"])("rejects %j on the gateway field", (name) => {
    expect(detailsOf(() => gatewayByName(name))).toBe("gateway: must be one of gateway_a, gateway_b");
  });

  it("looks names up in the list it is given, so real clients can replace the sandboxes", () => {
    const [a] = createSandboxGateways();
    const only = [a as PaymentGateway];
    expect(gatewayByName("gateway_a", only)).toBe(a);
    expect(detailsOf(() => gatewayByName("gateway_b", only))).toBe("gateway: must be one of gateway_a");
  });
});

describe("gateway_a (payment intents)", () => {
  const gateway = createSandboxGatewayA({ random: countingRandom() });

  it("charges the stated amount", () => {
    expect(gateway.resolveAmount({ ...base, amount: 1_234 })).toBe(1_234);
  });

  it("requires an amount greater than 0 and no card nonce", () => {
    expect(detailsOf(() => gateway.resolveAmount(base))).toBe("amount: is required by gateway_a");
    expect(detailsOf(() => gateway.resolveAmount({ ...base, amount: 0 }))).toBe(
      "amount: must be greater than 0",
    );
    expect(detailsOf(() => gateway.resolveAmount({ ...base, amount: 5, cardNonce: NONCE_OK }))).toBe(
      "cardNonce: only accepted by gateway_b",
    );
  });

  it("returns succeeded, an order id and a client secret of the payment with 128 random bits", async () => {
    const result = await gateway.charge({ paymentId: "pay_abc", amount: 500, currency: "EUR" });
    expect(result.status).toBe("succeeded");
    expect(result.orderId).toBe("ord_000102030405060708090a0b0c0d0e0f");
    expect(result.clientSecret).toBe("pay_abc_secret_101112131415161718191a1b1c1d1e1f");
  });

  it("uses fresh randomness by default", async () => {
    const real = gatewayByName("gateway_a");
    const [one, two] = await Promise.all([
      real.charge({ paymentId: "pay_1", amount: 1, currency: "EUR" }),
      real.charge({ paymentId: "pay_1", amount: 1, currency: "EUR" }),
    ]);
    expect(one.clientSecret).toMatch(/^pay_1_secret_[0-9a-f]{32}$/);
    expect(one.orderId).toMatch(/^ord_[0-9a-f]{32}$/);
    expect(one.clientSecret).not.toBe(two.clientSecret);
    expect(one.orderId).not.toBe(two.orderId);
  });

  it("refuses to charge a non-positive amount", async () => {
    await expect(gateway.charge({ paymentId: "pay_1", amount: 0, currency: "EUR" })).rejects.toMatchObject({
      code: "invalid_request",
    });
  });
});

describe("gateway_b (orders with card nonces)", () => {
  const gateway = createSandboxGatewayB({ random: countingRandom() });

  it("derives the amount from totalPrice plus item taxes", () => {
    expect(gateway.resolveAmount({ ...base, items: [coffee, cake] })).toBe(700 + 133 + 400);
  });

  it("accepts a stated amount that agrees and rejects one that does not, saying what it should be", () => {
    expect(gateway.resolveAmount({ ...base, items: [coffee, cake], amount: 1_233 })).toBe(1_233);
    expect(detailsOf(() => gateway.resolveAmount({ ...base, items: [coffee, cake], amount: 1_100 }))).toBe(
      "amount: must be 1233, the sum of the items' totalPrice and tax amounts",
    );
  });

  it("derives the amount from the mock items, the same before and after they are generated", () => {
    const unknown = gateway.resolveAmount(base);
    expect(unknown).toBe(mockItems("rcpt-0001").reduce((s, i) => s + i.totalPrice, 0));
    expect(gateway.resolveAmount(withMockItems(base))).toBe(unknown);
    expect(gateway.resolveAmount({ ...base, amount: 777 })).toBe(777);
    expect(gateway.resolveAmount(withMockItems({ ...base, amount: 777 }))).toBe(777);
    expect(gateway.resolveAmount({ ...base, totalAmount: 888 })).toBe(888);
  });

  it("needs items to derive from", () => {
    expect(detailsOf(() => gateway.resolveAmount({ ...base, mockItems: false, amount: 5 }))).toBe(
      "items: must not be empty when mockItems is false: gateway_b derives the amount from them",
    );
  });

  it("rejects a derived amount of 0", () => {
    const free = { ...cake, unitPrice: 0, totalPrice: 0 };
    expect(detailsOf(() => gateway.resolveAmount({ ...base, items: [free] }))).toBe(
      "items: must add up to an amount greater than 0",
    );
    expect(detailsOf(() => gateway.resolveAmount({ ...base, amount: 0 }))).toBe(
      "amount: must be greater than 0",
    );
  });

  it("rejects items that add up beyond the safe range", () => {
    const huge = { ...cake, unitPrice: MAX_MONEY, totalPrice: MAX_MONEY };
    expect(
      detailsOf(() => gateway.resolveAmount({ ...base, items: [huge, { ...huge, lineItemId: "x" }] })),
    ).toBe(`items: must add up to at most ${MAX_MONEY} (totalPrice plus tax amounts)`);
  });

  it("accepts only the sandbox nonces", () => {
    expect(gateway.resolveAmount({ ...base, items: [cake], cardNonce: NONCE_OK })).toBe(400);
    expect(gateway.resolveAmount({ ...base, items: [cake], cardNonce: NONCE_DECLINED })).toBe(400);
    expect(detailsOf(() => gateway.resolveAmount({ ...base, items: [cake], cardNonce: "cnon:other" }))).toBe(
      `cardNonce: must be a sandbox card nonce: ${Object.keys(SANDBOX_NONCES).join(", ")}`,
    );
  });

  it("succeeds with the ok nonce or none, without a client secret", async () => {
    for (const cardNonce of [NONCE_OK, undefined]) {
      const result = await gateway.charge({
        paymentId: "pay_1",
        amount: 400,
        currency: "EUR",
        ...(cardNonce === undefined ? {} : { cardNonce }),
      });
      expect(result.status).toBe("succeeded");
      expect(result.orderId).toMatch(/^ord_[0-9a-f]{32}$/);
      expect(result.clientSecret).toBeUndefined();
    }
  });

  it("declines the declined nonce with payment_declined and a decline code", async () => {
    const charge = gateway.charge({
      paymentId: "pay_1",
      amount: 400,
      currency: "EUR",
      cardNonce: NONCE_DECLINED,
    });
    await expect(charge).rejects.toBeInstanceOf(AppError);
    await expect(charge).rejects.toMatchObject({
      code: "payment_declined",
      message: "The card was declined: the card's issuer declined the charge without giving a reason.",
      metadata: { decline_code: "generic_decline" },
    });
  });

  it("gives every sandbox nonce its outcome, each decline code at least once", async () => {
    const seen = new Set<string>();
    for (const [cardNonce, outcome] of Object.entries(SANDBOX_NONCES)) {
      expect(gateway.resolveAmount({ ...base, items: [cake], cardNonce })).toBe(400);
      const charge = gateway.charge({ paymentId: "pay_1", amount: 400, currency: "EUR", cardNonce });
      if (outcome === "approved") {
        await expect(charge).resolves.toMatchObject({ status: "succeeded" });
        continue;
      }
      seen.add(outcome);
      await expect(charge).rejects.toMatchObject({
        code: "payment_declined",
        message: `The card was declined: ${DECLINE_CODES[outcome].reason}.`,
        metadata: { decline_code: outcome },
      });
    }
    expect([...seen].sort()).toEqual(Object.keys(DECLINE_CODES).sort());
  });

  it("refuses any other nonce on the cardNonce field", async () => {
    const charge = gateway.charge({
      paymentId: "pay_1",
      amount: 400,
      currency: "EUR",
      cardNonce: "cnon:bogus",
    });
    await expect(charge).rejects.toMatchObject({
      code: "invalid_request",
      violations: [{ field: "cardNonce", description: expect.stringContaining("sandbox card nonce") }],
    });
  });
});

describe.each([
  ["gateway_a", /^re_[0-9a-f]{32}$/],
  ["gateway_b", /^rfd_[0-9a-f]{32}$/],
] as const)("%s refunds in its sandbox", (name, idPattern) => {
  const gateway = gatewayByName(name);
  const refund = (amount: number, payment: { status: string; amount: number; refunded: number }) =>
    gateway.refund({
      paymentId: "pay_1",
      orderId: "ord_1",
      refundId: "ref_1",
      amount,
      currency: "EUR",
      payment,
    });
  const refusal = async (promise: Promise<unknown>) => {
    const err = await promise.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(AppError);
    return (err as AppError).violations;
  };

  it("refunds part of a charge, then the rest, with an id of its own for each", async () => {
    const first = await refund(300, { status: "succeeded", amount: 1000, refunded: 0 });
    const rest = await refund(700, { status: "succeeded", amount: 1000, refunded: 300 });
    expect(first.gatewayRefundId).toMatch(idPattern);
    expect(rest.gatewayRefundId).toMatch(idPattern);
    expect(rest.gatewayRefundId).not.toBe(first.gatewayRefundId);
  });

  it("refuses refunds adding up to more than the charge, saying what is left", async () => {
    expect(await refusal(refund(701, { status: "succeeded", amount: 1000, refunded: 300 }))).toEqual([
      {
        field: "amount",
        description: "must be at most 700, what is left to refund of the payment's 1000 (300 refunded)",
      },
    ]);
    expect(await refusal(refund(1, { status: "succeeded", amount: 1000, refunded: 1000 }))).toHaveLength(1);
  });

  it("refuses a refund of a declined payment, and an amount that is not positive", async () => {
    expect(await refusal(refund(100, { status: "declined", amount: 1000, refunded: 0 }))).toEqual([
      { field: "paymentId", description: "was declined: a declined payment has nothing to refund" },
    ]);
    for (const amount of [0, -5, 1.5]) {
      expect(await refusal(refund(amount, { status: "succeeded", amount: 1000, refunded: 0 }))).toEqual([
        { field: "amount", description: "must be greater than 0" },
      ]);
    }
  });
});
