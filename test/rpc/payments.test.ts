import { Code, ConnectError } from "@connectrpc/connect";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import {
  type ChargeInput,
  gatewayIdempotencyKey,
  oncePerIdempotencyKey,
  type PaymentGateway,
} from "../../src/domain/gateways/gateway.js";
import { createSandboxGatewayA } from "../../src/domain/gateways/sandbox-a.js";
import { receiptMessage } from "../support/domain.js";
import { type RpcFixture, rpcFixture } from "./support.js";

/**
 * PaymentsService and ReceiptsService in memory, through the service's own interceptor chain: the
 * Idempotency-Key header reaches the gateway scoped to the caller, a retry is answered without a
 * second charge, and the chain refuses a missing key and the wrong role before any service code runs.
 */

const PAN = "4000000000000077";

/** gateway_a with its charges recorded, one per idempotency key as a real gateway charges. */
function recordingGateway(): { gateway: PaymentGateway; charged: ChargeInput[] } {
  const charged: ChargeInput[] = [];
  const gateway: PaymentGateway = {
    ...createSandboxGatewayA(),
    charge: oncePerIdempotencyKey(async (input) => {
      charged.push(input);
      return { status: "succeeded", orderId: `ord_${charged.length}` };
    }),
  };
  return { gateway, charged };
}

let rpc: RpcFixture;
let charged: ChargeInput[];
beforeEach(async () => {
  const recording = recordingGateway();
  charged = recording.charged;
  rpc = await rpcFixture({ gateways: [recording.gateway] });
});
afterEach(async () => {
  await rpc.close();
});

/** The error code a call rejects with. */
async function codeOf(call: Promise<unknown>): Promise<Code | undefined> {
  try {
    await call;
  } catch (err) {
    return ConnectError.from(err).code;
  }
  return undefined;
}

describe("PaymentsService, in memory", () => {
  it("passes the Idempotency-Key to the gateway, scoped to the caller, and answers a retry without a second charge", async () => {
    const merchant = await rpc.apiKey("merchant", "shop-1");
    const payments = rpc.client(PaymentsService, merchant.key);
    const request = { gateway: "gateway_a", receipt: receiptMessage(PAN, { amount: 1200n }) };
    const headers = { "idempotency-key": "order-77" };

    const first = await payments.createPayment(request, { headers });
    let replayed: string | null = null;
    const retry = await payments.createPayment(request, {
      headers,
      onHeader: (h) => {
        replayed = h.get("idempotent-replayed");
      },
    });

    expect(retry.paymentId).toBe(first.paymentId);
    expect(replayed).toBe("true");
    expect(charged).toHaveLength(1);
    expect(charged[0]?.idempotencyKey).toBe(gatewayIdempotencyKey("charge", merchant.id, "order-77"));
    expect(first.orderId).toBe("ord_1");
  });

  it("refuses a call without an API key, and an issuer's key, before any charge", async () => {
    const issuer = await rpc.apiKey("issuer", "bank-1");
    const request = { gateway: "gateway_a", receipt: receiptMessage(PAN, { amount: 500n }) };

    expect(await codeOf(rpc.client(PaymentsService).createPayment(request))).toBe(Code.Unauthenticated);
    expect(await codeOf(rpc.client(PaymentsService, issuer.key).createPayment(request))).toBe(
      Code.PermissionDenied,
    );
    expect(charged).toHaveLength(0);
  });
});

describe("ReceiptsService, in memory", () => {
  it("encrypts a receipt, then finds it by its transaction, for its merchant only", async () => {
    const merchant = await rpc.apiKey("merchant", "shop-1");
    const other = await rpc.apiKey("merchant", "shop-2");
    const receipt = receiptMessage(PAN, { merchantId: "m-rpc", transactionId: "t-rpc" });

    const sealed = await rpc.client(ReceiptsService, merchant.key).encryptReceipt({ receipt });
    const found = await rpc
      .client(ReceiptsService, merchant.key)
      .getTransactionReceipt({ merchantId: "m-rpc", transactionId: "t-rpc" });

    expect(found.receipt?.receiptId).toBe(receipt.receiptId);
    expect(sealed.receipt?.receiptId).toBe(receipt.receiptId);
    expect(
      await codeOf(
        rpc
          .client(ReceiptsService, other.key)
          .getTransactionReceipt({ merchantId: "m-rpc", transactionId: "t-rpc" }),
      ),
    ).not.toBeUndefined();
  });
});
