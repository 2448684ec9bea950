import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Metadata, type ServiceError } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { type CreatePaymentResponse, PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { DECLINE_CODES } from "../../src/domain/gateways/declines.js";
import { SANDBOX_NONCES } from "../../src/domain/gateways/sandbox-b.js";
import { ERRORS } from "../../src/errors.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { get, post, receiptBody, startService, type TestService } from "../support/harness.js";

/**
 * Errors and retries as a payments developer meets them: every error links to its
 * documentation, a replayed idempotent answer says so on every protocol, a payment sent again without
 * an Idempotency-Key names the payment that stands (the caller's own only), and a decline says why.
 */

/** The `google.rpc.ErrorInfo` of a grpc-js failure. */
function errorInfoOf(error: ServiceError | undefined) {
  const raw = error?.metadata.get("grpc-status-details-bin")[0];
  if (!(raw instanceof Buffer)) return undefined;
  for (const detail of fromBinary(StatusSchema, raw).details) {
    const info = anyUnpack(detail, ErrorInfoSchema);
    if (info !== undefined) return info;
  }
  return undefined;
}

function metadataOf(apiKey: string, extra: Record<string, string> = {}): Metadata {
  const md = new Metadata();
  md.set("x-api-key", apiKey);
  for (const [name, value] of Object.entries(extra)) md.set(name, value);
  return md;
}

/** A create-payment request as the RPC protocols take it (gateway_b derives the amount from the items). */
function grpcPayment(nonce?: string) {
  const run = crypto.randomUUID().slice(0, 8);
  return {
    gateway: "gateway_b",
    receipt: {
      receiptId: `r-${run}`,
      merchantId: "merchant-001",
      merchantName: "Corner Coffee",
      transactionId: `t-${run}`,
      transactionDate: { seconds: 1_767_259_800n },
      currency: "EUR",
      recipientHashedPan: "a".repeat(64),
      items: [{ lineItemId: "1", name: "Tea", quantity: 1n, unitPrice: 300n, totalPrice: 300n }],
      ...(nonce === undefined ? {} : { cardNonce: nonce }),
    },
  };
}

describe("errors and retries", () => {
  let svc: TestService;
  let grpcPayments: ReturnType<typeof grpcClient>;
  beforeAll(async () => {
    svc = await startService();
    grpcPayments = grpcClient(PaymentsService, svc.port);
  });
  afterAll(async () => {
    grpcPayments.close();
    await svc.close();
  });

  it("links every REST error to its section of the error page, which the service serves", async () => {
    const answers = [
      await fetch(`${svc.baseUrl}/api/v1/no-such-path`),
      await fetch(`${svc.baseUrl}/api/v1/keys/grant-access`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: "{}",
      }),
      await fetch(`${svc.baseUrl}/api/v1/keys/grant-access`, {
        method: "POST",
        headers: { "x-api-key": svc.issuerKey, "content-type": "text/plain" },
        body: "{}",
      }),
      await fetch(`${svc.baseUrl}/api/v1/keys/grant-access`, {
        method: "POST",
        headers: { "x-api-key": svc.issuerKey, "content-type": "application/json" },
        body: '{"userId": 5}',
      }),
    ];
    const codes: string[] = [];
    for (const res of answers) {
      const { error } = (await res.json()) as { error: { code: string; doc_url: string } };
      expect(error.doc_url).toBe(`/docs/errors#${error.code}`);
      codes.push(error.code);
      // The reference resolves against the address that answered; the page has the anchor.
      const page = await fetch(new URL(error.doc_url, svc.baseUrl));
      expect(page.status).toBe(200);
      expect(page.headers.get("content-type")).toMatch(/^text\/html/);
      expect(await page.text()).toContain(`<section id="${error.code}">`);
    }
    expect(codes).toEqual(["not_found", "unauthorized", "unsupported_media_type", "invalid_request"]);
  });

  it("serves one section per registered code, with the decline codes and the sandbox cards", async () => {
    const page = await (await fetch(`${svc.baseUrl}/docs/errors`)).text();
    for (const code of Object.keys(ERRORS)) expect(page).toContain(`<section id="${code}">`);
    for (const code of Object.keys(DECLINE_CODES)) expect(page).toContain(`<code>${code}</code>`);
    for (const nonce of Object.keys(SANDBOX_NONCES)) expect(page).toContain(`<code>${nonce}</code>`);
  });

  it("puts doc_url in the ErrorInfo metadata of gRPC errors", async () => {
    const { error } = await grpcUnary(grpcPayments, "createPayment", {}, metadataOf("rk_dev_nobody"));
    const info = errorInfoOf(error);
    expect(info?.reason).toBe("unauthorized");
    expect(info?.metadata.doc_url).toBe("/docs/errors#unauthorized");
  });

  it("marks a replayed REST payment with Idempotent-Replayed: true, and only the replay", async () => {
    const body = receiptBody({ amount: 950 });
    const key = { "idempotency-key": crypto.randomUUID() };
    const first = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, body, key);
    const retry = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, body, key);
    expect(first.status).toBe(200);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    expect(retry.status).toBe(200);
    expect(retry.headers.get("idempotent-replayed")).toBe("true");
    expect(retry.body.data).toEqual(first.body.data);
    // A new key is a new call, not a replay (and a second payment of the transaction).
    const other = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, body, {
      "idempotency-key": crypto.randomUUID(),
    });
    expect(other.status).toBe(409);
    expect(other.headers.get("idempotent-replayed")).toBeNull();
  });

  it("marks a replay in gRPC response metadata", async () => {
    const request = grpcPayment();
    const md = () => metadataOf(svc.merchantKey, { "idempotency-key": crypto.randomUUID() });
    const key = md();
    const first = await grpcUnary<CreatePaymentResponse>(grpcPayments, "createPayment", request, key);
    const retry = await grpcUnary<CreatePaymentResponse>(grpcPayments, "createPayment", request, key);
    expect(first.error).toBeUndefined();
    expect(first.header.get("idempotent-replayed")).toEqual([]);
    expect(retry.error).toBeUndefined();
    expect(retry.header.get("idempotent-replayed")).toEqual(["true"]);
    expect(retry.response?.paymentId).toBe(first.response?.paymentId);
  });

  it("marks a replay in Connect response headers", async () => {
    const client = createClient(
      PaymentsService,
      createConnectTransport({ baseUrl: svc.baseUrl, httpVersion: "1.1" }),
    );
    const request = grpcPayment();
    const headers = { "x-api-key": svc.merchantKey, "idempotency-key": crypto.randomUUID() };
    const seen: (string | null)[] = [];
    for (let i = 0; i < 2; i++) {
      await client.createPayment(request, {
        headers,
        onHeader: (h) => {
          seen.push(h.get("idempotent-replayed"));
        },
      });
    }
    expect(seen).toEqual([null, "true"]);
  });

  it("answers a payment sent again without an Idempotency-Key with 409 naming the payment", async () => {
    const body = receiptBody({ amount: 950 });
    const first = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, body);
    expect(first.status).toBe(200);
    const paymentId = first.body.data.paymentId as string;
    const again = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, body);
    expect(again.status).toBe(409);
    expect(again.body.error).toMatchObject({
      code: "conflict",
      payment_id: paymentId,
      details: `payment_id: ${paymentId}`,
      doc_url: "/docs/errors#conflict",
    });
    expect(again.body.error?.message).toContain(paymentId);
    // gRPC: the same payment in the ErrorInfo metadata.
    const request = grpcPayment();
    const md = () => metadataOf(svc.merchantKey);
    const grpcFirst = await grpcUnary<CreatePaymentResponse>(grpcPayments, "createPayment", request, md());
    const grpcAgain = await grpcUnary(grpcPayments, "createPayment", request, md());
    expect(errorInfoOf(grpcAgain.error)?.metadata).toEqual({
      payment_id: grpcFirst.response?.paymentId,
      doc_url: "/docs/errors#conflict",
    });
  });

  it("never names another tenant's payment", async () => {
    const merchantId = `m-${crypto.randomUUID().slice(0, 8)}`;
    const body = receiptBody({ amount: 950, merchantId });
    const first = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, body);
    expect(first.status).toBe(200);
    // The operator hands the merchantId to another tenant, which then sends the same transaction: the
    // new owner may use every transactionId of its merchantId (issue 31), so the previous owner's
    // payment gives way, and its id appears nowhere in the answer.
    const otherKey = await svc.newKey({ role: "merchant", tier: "standard", tenantId: "merchant-other" });
    await svc.store.merchants.assign(merchantId, "merchant-other", new Date());
    const other = await post(svc, "/api/v1/payments/gateway_a/create", otherKey, body);
    expect(other.status, JSON.stringify(other.body)).toBe(200);
    expect(JSON.stringify(other.body)).not.toContain(first.body.data.paymentId);
    // Sent again, it is the new owner's own duplicate, named with its own payment only.
    const again = await post(svc, "/api/v1/payments/gateway_a/create", otherKey, body);
    expect(again.status).toBe(409);
    expect(JSON.stringify(again.body)).not.toContain(first.body.data.paymentId);
    expect(again.body.error?.message).toContain(other.body.data.paymentId);
  });

  it("says why a payment was declined, for every sandbox card that declines", async () => {
    const declining = Object.entries(SANDBOX_NONCES).filter(([, outcome]) => outcome !== "approved");
    expect(declining.length).toBeGreaterThanOrEqual(5);
    for (const [cardNonce, declineCode] of declining) {
      const res = await post(
        svc,
        "/api/v1/payments/gateway_b/create",
        svc.merchantKey,
        receiptBody({ cardNonce }),
      );
      expect(res.status, cardNonce).toBe(402);
      // The declined payment is kept: the error names it, and the merchant can read it.
      const paymentId = (res.body.error as Record<string, string> | undefined)?.payment_id ?? "";
      expect(res.body.error).toMatchObject({
        code: "payment_declined",
        decline_code: declineCode,
        details: `decline_code: ${declineCode}; payment_id: ${paymentId}`,
        doc_url: "/docs/errors#payment_declined",
      });
      const declined = await get(svc, `/api/v1/payments/${paymentId}`, svc.merchantKey);
      expect(declined.body.data).toMatchObject({ paymentId, status: "declined", declineCode });
      expect(res.body.error?.message).toBe(
        `The card was declined: ${DECLINE_CODES[declineCode as keyof typeof DECLINE_CODES].reason}.`,
      );
    }
    const approved = await post(
      svc,
      "/api/v1/payments/gateway_b/create",
      svc.merchantKey,
      receiptBody({ cardNonce: "cnon:card-nonce-ok" }),
    );
    expect(approved.status).toBe(200);
  });

  it("carries the decline code in ErrorInfo metadata for gRPC and Connect", async () => {
    const md = metadataOf(svc.merchantKey);
    const { error } = await grpcUnary(
      grpcPayments,
      "createPayment",
      grpcPayment("cnon:card-nonce-insufficient-funds"),
      md,
    );
    expect(errorInfoOf(error)?.metadata.decline_code).toBe("insufficient_funds");
    const client = createClient(
      PaymentsService,
      createConnectTransport({ baseUrl: svc.baseUrl, httpVersion: "1.1" }),
    );
    const failure = await client
      .createPayment(grpcPayment("cnon:card-nonce-rejected-cvv"), {
        headers: { "x-api-key": svc.merchantKey },
      })
      .then(
        () => undefined,
        (err: unknown) => ConnectError.from(err),
      );
    const info = failure?.findDetails(ErrorInfoSchema)[0];
    expect(info?.reason).toBe("payment_declined");
    expect(info?.metadata).toEqual({
      decline_code: "incorrect_cvc",
      doc_url: "/docs/errors#payment_declined",
      payment_id: expect.stringMatching(/^pay_/),
    });
  });
});
