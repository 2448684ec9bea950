import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  type ChargeInput,
  gatewayIdempotencyKey,
  oncePerIdempotencyKey,
  type PaymentGateway,
} from "../../src/domain/gateways/gateway.js";
import { createSandboxGatewayA } from "../../src/domain/gateways/sandbox-a.js";
import { createPayment } from "../../src/domain/payments.js";
import { refundPayment } from "../../src/domain/refunds.js";
import {
  type DomainFixture,
  domainFixture,
  principal,
  receiptMessage,
  rejection,
} from "../support/domain.js";

/**
 * The caller's Idempotency-Key reaches the gateway: a payment whose first attempt was charged but
 * not stored (the store failed after the charge) is retried with the same key, reaches the gateway
 * again, and the gateway, which honours keys as real ones do, answers with the first charge instead
 * of charging the card a second time. The key sent is scoped to the caller and to the operation.
 */

const merchant = principal("merchant", "shop-1");
const otherShop = principal("merchant", "shop-2");
const CALLER = { requestId: "r", sourceIp: "" };
const PAN = "4000000000000077";

/** gateway_a whose charges are recorded: a real gateway's behaviour, one charge per key. */
function recordingGateway(): { gateway: PaymentGateway; charged: ChargeInput[] } {
  const charged: ChargeInput[] = [];
  const sandbox = createSandboxGatewayA();
  const gateway: PaymentGateway = {
    ...sandbox,
    charge: oncePerIdempotencyKey(async (input) => {
      charged.push(input);
      return { status: "succeeded", orderId: `ord_${charged.length}` };
    }),
  };
  return { gateway, charged };
}

function receipt(transactionId = "txn-1", merchantId = "m-1") {
  return receiptMessage(PAN, {
    amount: 1000n,
    transactionId,
    merchantId,
    receiptId: `rcpt-${transactionId}`,
  });
}

describe("the gateway's idempotency key", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    await f.close();
  });

  it("keeps a retried payment, charged the first time but not stored, from being charged twice", async () => {
    const { gateway, charged } = recordingGateway();
    f.deps.gateways = [gateway];
    const input = { gateway: "gateway_a", receipt: receipt(), idempotencyKey: "order-1" };
    vi.spyOn(f.store.payments, "createWithReceipt").mockRejectedValueOnce(new Error("store unavailable"));

    await expect(createPayment(f.deps, merchant, input, CALLER)).rejects.toThrow("store unavailable");
    const retried = await createPayment(f.deps, merchant, input, CALLER);

    expect(charged).toHaveLength(1);
    expect(retried.payment.orderId).toBe("ord_1");
    expect(charged[0]?.idempotencyKey).toMatch(/^[0-9a-f]{40}$/);
  });

  it("charges a retry without a key again (what the key prevents)", async () => {
    const { gateway, charged } = recordingGateway();
    f.deps.gateways = [gateway];
    const input = { gateway: "gateway_a", receipt: receipt() };
    vi.spyOn(f.store.payments, "createWithReceipt").mockRejectedValueOnce(new Error("store unavailable"));

    await expect(createPayment(f.deps, merchant, input, CALLER)).rejects.toThrow("store unavailable");
    await createPayment(f.deps, merchant, input, CALLER);

    expect(charged).toHaveLength(2);
    expect(charged.map((c) => c.idempotencyKey)).toEqual([undefined, undefined]);
  });

  it("never lets two callers' same key, or a charge and a refund, meet at the gateway", async () => {
    const { gateway, charged } = recordingGateway();
    const refunds: (string | undefined)[] = [];
    f.deps.gateways = [
      {
        ...gateway,
        refund: async (input) => {
          refunds.push(input.idempotencyKey);
          return { gatewayRefundId: "re_1" };
        },
      },
    ];
    const first = await createPayment(
      f.deps,
      merchant,
      { gateway: "gateway_a", receipt: receipt("txn-1"), idempotencyKey: "k" },
      CALLER,
    );
    await createPayment(
      f.deps,
      otherShop,
      { gateway: "gateway_a", receipt: receipt("txn-2", "m-2"), idempotencyKey: "k" },
      CALLER,
    );
    await refundPayment(
      f.deps,
      merchant,
      {
        paymentId: first.payment.paymentId,
        receipt: receiptMessage(PAN, {
          receiptId: "rcpt-refund",
          transactionId: "txn-refund",
          receiptType: "refund",
          originalReceiptId: first.receipt.receiptId,
          amount: 100n,
          mockItems: false,
        }),
        idempotencyKey: "k",
      },
      CALLER,
    );

    expect(charged).toHaveLength(2);
    const keys = [...charged.map((c) => c.idempotencyKey), ...refunds];
    expect(new Set(keys).size).toBe(3);
    expect(keys).toEqual([
      gatewayIdempotencyKey("charge", merchant.id, "k"),
      gatewayIdempotencyKey("charge", otherShop.id, "k"),
      gatewayIdempotencyKey("refund", merchant.id, "k"),
    ]);
  });
});

describe("a sandbox gateway", () => {
  it("charges once per key, and refuses the key with another amount", async () => {
    const sandbox = createSandboxGatewayA();
    const charge = { paymentId: "pay_1", amount: 500, currency: "EUR", idempotencyKey: "g-1" };
    const first = await sandbox.charge(charge);
    expect(await sandbox.charge({ ...charge, paymentId: "pay_2" })).toEqual(first);
    expect((await sandbox.charge({ ...charge, idempotencyKey: "g-2" })).orderId).not.toBe(first.orderId);
    const err = await rejection(sandbox.charge({ ...charge, amount: 600 }));
    expect(err.code).toBe("invalid_request");
    expect((await sandbox.charge({ paymentId: "pay_3", amount: 500, currency: "EUR" })).orderId).not.toBe(
      first.orderId,
    );
  });
});
