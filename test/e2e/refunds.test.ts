import { Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { createReceiptsClient, ReceiptsApiError } from "../../src/client/index.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { get, hashPan, post, startService, type TestService } from "../support/harness.js";

/**
 * Payments a merchant reads and refunds over REST, gRPC and Connect: partial refunds
 * with an Idempotency-Key (a retry refunds nothing twice), paged listing, tenants kept apart, and bad
 * refunds refused naming every field with nothing written.
 */

const PAN = "4000000000000093";
let counter = 0;

/** A sale body of 1000 for gateway_a. */
function saleBody(): Record<string, unknown> {
  counter += 1;
  return {
    receiptId: `rf-sale-${counter}`,
    merchantId: "m-refunds",
    merchantName: "Corner Coffee",
    transactionId: `rf-t-${counter}`,
    transactionDate: "2026-01-01T09:30:00Z",
    currency: "EUR",
    recipientHashedPan: hashPan(PAN),
    amount: 1000,
    items: [{ lineItemId: "1", name: "Dinner", quantity: 1, unitPrice: 1000, totalPrice: 1000 }],
  };
}

/** A refund body: the refund receipt of `original`, refunding `amount`. */
function refundBody(original: string, amount: number, extra: Record<string, unknown> = {}) {
  counter += 1;
  return {
    receiptId: `rf-refund-${counter}`,
    merchantId: "m-refunds",
    merchantName: "Corner Coffee",
    transactionId: `rf-rt-${counter}`,
    transactionDate: "2026-01-02T10:00:00Z",
    currency: "EUR",
    recipientHashedPan: hashPan(PAN),
    receiptType: "refund",
    originalReceiptId: original,
    amount,
    ...extra,
  };
}

describe("payments a merchant reads and refunds, over every surface", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(async () => {
    await svc.close();
  });

  async function sale(): Promise<{ paymentId: string; receiptId: string }> {
    const body = saleBody();
    const res = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, body);
    expect(res.status).toBe(200);
    return { paymentId: res.body.data.paymentId, receiptId: body.receiptId as string };
  }

  it("refunds over REST with an Idempotency-Key: a retry replays, another body is conflict", async () => {
    const pay = await sale();
    const body = refundBody(pay.receiptId, 400);
    const path = `/api/v1/payments/${pay.paymentId}/refund`;
    const first = await post(svc, path, svc.merchantKey, body, { "idempotency-key": "rf-key-1" });
    expect(first.status).toBe(200);
    expect(first.body.data).toMatchObject({
      refund: { amount: 400, status: "succeeded", receiptId: body.receiptId },
      payment: { paymentId: pay.paymentId, refundedAmount: 400, status: "succeeded" },
      serviceMetadata: { receiptId: body.receiptId, amount: 400, currency: "EUR" },
    });
    const again = await post(svc, path, svc.merchantKey, body, { "idempotency-key": "rf-key-1" });
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body.data.refund.refundId).toBe(first.body.data.refund.refundId);
    const other = await post(
      svc,
      path,
      svc.merchantKey,
      { ...body, amount: 401 },
      { "idempotency-key": "rf-key-1" },
    );
    expect(other.status).toBe(409);
    // Without a key, the same refund receipt cannot be stored twice: nothing is refunded again.
    const unkeyed = await post(svc, path, svc.merchantKey, body);
    expect(unkeyed.status).toBe(409);

    const read = await get(svc, `/api/v1/payments/${pay.paymentId}`, svc.merchantKey);
    expect(read.status).toBe(200);
    expect(read.body.data).toMatchObject({ paymentId: pay.paymentId, amount: 1000, refundedAmount: 400 });
    expect(read.body.data.refunds).toHaveLength(1);
    expect(JSON.stringify(read.body.data)).not.toContain("Dinner");
  });

  it("refuses a bad refund over REST naming every field, and writes nothing", async () => {
    const pay = await sale();
    const path = `/api/v1/payments/${pay.paymentId}/refund`;
    const bad = refundBody("not-the-sale", 1001, { receiptType: undefined, currency: "USD" });
    const res = await post(svc, path, svc.merchantKey, bad);
    expect(res.status).toBe(400);
    expect(res.body.error?.code).toBe("invalid_request");
    for (const field of ["receiptType", "originalReceiptId", "currency", "amount"]) {
      expect(res.body.error?.details, field).toContain(`${field}: `);
    }
    expect(await svc.store.receipts.findByMerchantReceipt("m-refunds", bad.receiptId)).toBeUndefined();
    expect((await svc.store.payments.findById(pay.paymentId))?.refunds).toBeUndefined();
    const missing = await post(svc, "/api/v1/payments/pay_nope/refund", svc.merchantKey, refundBody("x", 1));
    expect(missing.status).toBe(404);
  });

  it("refunds over gRPC and Connect, and lists the tenant's payments page by page", async () => {
    const pay = await sale();
    const client = grpcClient(PaymentsService, svc.port);
    try {
      const md = new Metadata();
      md.set("x-api-key", svc.merchantKey);
      md.set("idempotency-key", "rf-grpc-1");
      const body = refundBody(pay.receiptId, 300);
      const refunded = await grpcUnary<{ refund: { amount: bigint }; payment: { refundedAmount: bigint } }>(
        client,
        "refundPayment",
        {
          paymentId: pay.paymentId,
          receipt: {
            ...body,
            amount: 300n,
            transactionDate: { seconds: BigInt(Date.parse("2026-01-02T10:00:00Z") / 1000), nanos: 0 },
          },
        },
        md,
      );
      expect(refunded.error).toBeUndefined();
      expect(refunded.response?.payment.refundedAmount).toBe(300n);
    } finally {
      client.close();
    }
    const merchant = createReceiptsClient({ baseUrl: svc.baseUrl, apiKey: svc.merchantKey });
    const receipt = refundBody(pay.receiptId, 700);
    const rest = await merchant.refundPayment(pay.paymentId, {
      ...receipt,
      amount: 700n,
      transactionDate: { seconds: BigInt(Date.parse("2026-01-02T10:00:00Z") / 1000), nanos: 0 },
    } as never);
    expect(rest.payment?.refundedAmount).toBe(1000n);
    const more = await merchant
      .refundPayment(pay.paymentId, {
        ...refundBody(pay.receiptId, 1),
        amount: 1n,
        transactionDate: { seconds: BigInt(Date.parse("2026-01-02T10:00:00Z") / 1000), nanos: 0 },
      } as never)
      .catch((e: unknown) => e);
    expect(more).toBeInstanceOf(ReceiptsApiError);
    expect((more as ReceiptsApiError).violations[0]).toMatchObject({ field: "amount" });
    expect((await merchant.getPayment(pay.paymentId)).refunds.map((r) => r.amount)).toEqual([300n, 700n]);

    const seen: string[] = [];
    let pageToken = "";
    do {
      const page = await get(svc, `/api/v1/payments?pageSize=2&pageToken=${pageToken}`, svc.merchantKey);
      expect(page.status).toBe(200);
      expect(page.body.data.payments.length).toBeLessThanOrEqual(2);
      seen.push(...page.body.data.payments.map((p: { paymentId: string }) => p.paymentId));
      pageToken = page.body.data.nextPageToken;
    } while (pageToken !== "");
    expect(new Set(seen).size).toBe(seen.length);
    expect(seen).toContain(pay.paymentId);
    const viaClient = await merchant.listPayments({ pageSize: 200 });
    expect(viaClient.payments.map((p) => p.paymentId)).toEqual(seen);
  });

  it("shows a merchant none of another tenant's payments, and keeps issuers out", async () => {
    const pay = await sale();
    const stranger = await svc.newKey({ role: "merchant", tier: "standard", tenantId: "merchant-2" });
    const read = await get(svc, `/api/v1/payments/${pay.paymentId}`, stranger);
    expect(read.status).toBe(404);
    const refund = await post(
      svc,
      `/api/v1/payments/${pay.paymentId}/refund`,
      stranger,
      refundBody(pay.receiptId, 1),
    );
    expect(refund.status).toBe(404);
    const listed = await get(svc, "/api/v1/payments", stranger);
    expect(listed.body.data.payments).toEqual([]);
    expect((await get(svc, "/api/v1/payments", svc.issuerKey)).status).toBe(403);
  });
});
