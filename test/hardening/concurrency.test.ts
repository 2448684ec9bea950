import { fromBinary } from "@bufbuild/protobuf";
import { type Client, status } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { OnboardingService, RegisterResponseSchema } from "../../gen/receipts/v1/onboarding_pb.js";
import { CreatePaymentResponseSchema, PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { FakeClock } from "../../src/clock.js";
import { panHashOf } from "../../src/domain/pan.js";
import { get, hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";
import { connectRaw, grantFor, grpcTyped, onboard, rawGrpcClient } from "./support.js";

/** The merchant tenant of the harness's merchant key. */
const MERCHANT_TENANT = "merchant-1";

/** The REST receipt body and the same request as a gRPC message, so both hash to one request. */
function paymentRequest(overrides: Record<string, unknown> = {}) {
  const rest: Record<string, unknown> = {
    ...receiptBody({ transactionDate: "2026-02-01T10:00:00Z", ...overrides }),
    amount: 950,
  };
  const items = (rest.items as Array<Record<string, unknown>>).map((item) => ({
    ...item,
    quantity: BigInt(item.quantity as number),
    unitPrice: BigInt(item.unitPrice as number),
    totalPrice: BigInt(item.totalPrice as number),
  }));
  const grpc = {
    ...rest,
    items,
    totalAmount: 950n,
    amount: 950n,
    transactionDate: { seconds: BigInt(Date.parse("2026-02-01T10:00:00Z") / 1000), nanos: 0 },
  };
  return { rest, grpc };
}

describe("concurrency: racing callers never break an invariant", () => {
  const clock = new FakeClock("2026-03-01T12:00:00Z");
  let svc: TestService;
  let grpc: Client;

  beforeAll(async () => {
    svc = await startService({ clock });
    grpc = rawGrpcClient(svc.port);
  });
  afterAll(async () => {
    grpc.close();
    await svc.close();
  });

  /** How many payments (each stored with its receipt) exist for a transaction of the merchant. */
  async function paymentsFor(transactionId: string) {
    const receipts = await svc.store.receipts.findByTransaction(MERCHANT_TENANT, transactionId);
    const payments = await Promise.all(receipts.map((r) => svc.store.payments.findById(r.paymentId ?? "")));
    return { receipts, payments: payments.filter((p) => p !== undefined) };
  }

  it("makes exactly one payment for 20 concurrent REST creates with one Idempotency-Key", async () => {
    const { rest } = paymentRequest();
    const headers = { "idempotency-key": "idem-rest-20" };
    const answers = await Promise.all(
      Array.from({ length: 20 }, () =>
        post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, rest, headers),
      ),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    const ids = new Set(answers.map((a) => a.body.data.paymentId));
    expect(ids.size).toBe(1);
    expect(new Set(answers.map((a) => a.body.data.clientSecret)).size).toBe(1);
    const { receipts, payments } = await paymentsFor(rest.transactionId as string);
    expect(payments.map((p) => p?.paymentId)).toEqual([...ids]);
    expect(receipts).toHaveLength(1);
  });

  it("makes exactly one payment for creates racing over REST and gRPC with one Idempotency-Key", async () => {
    const { rest, grpc: message } = paymentRequest();
    const key = "idem-mixed-16";
    const viaRest = Array.from({ length: 8 }, () =>
      post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, rest, { "idempotency-key": key }).then(
        (a) => (a.status === 200 ? (a.body.data.paymentId as string) : `HTTP ${a.status}`),
      ),
    );
    const viaGrpc = Array.from({ length: 8 }, () =>
      grpcTyped(
        grpc,
        PaymentsService.method.createPayment,
        { gateway: "gateway_a", receipt: message },
        { "x-api-key": svc.merchantKey, "idempotency-key": key },
      ).then((o) =>
        o.code === status.OK && o.response
          ? fromBinary(CreatePaymentResponseSchema, o.response).paymentId
          : `gRPC ${status[o.code]} ${o.details}`,
      ),
    );
    const ids = await Promise.all([...viaRest, ...viaGrpc]);
    expect(new Set(ids).size, ids.join(", ")).toBe(1);
    expect(ids[0]).toMatch(/^pay_/);
    const { payments } = await paymentsFor(rest.transactionId as string);
    expect(payments).toHaveLength(1);
  });

  it("answers conflict to every racer that reuses the key with another body, and pays once", async () => {
    const key = "idem-different-bodies";
    const bodies = Array.from(
      { length: 6 },
      (_, i) => paymentRequest({ transactionId: `txn-race-${i}` }).rest,
    );
    const answers = await Promise.all(
      bodies.map((b) =>
        post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, b, { "idempotency-key": key }),
      ),
    );
    expect(answers.filter((a) => a.status === 200)).toHaveLength(1);
    expect(answers.filter((a) => a.status === 409).map((a) => a.body.error?.code)).toEqual(
      Array(5).fill("conflict"),
    );
    const made = await Promise.all(bodies.map((b) => paymentsFor(b.transactionId as string)));
    expect(made.reduce((n, m) => n + m.payments.length, 0)).toBe(1);
  });

  it("never issues more than 5 live grants to one user, whatever the race across REST and gRPC", async () => {
    const holder = await onboard(svc, "4000000000000010");
    const request = { userId: holder.userId, keyId: holder.keyId };
    const outcomes = await Promise.all([
      ...Array.from({ length: 10 }, () =>
        post(svc, "/api/v1/keys/grant-access", svc.issuerKey, request).then((a) => ({
          ok: a.status === 200,
          limited: a.status === 429 && Number(a.headers.get("retry-after")) > 0,
        })),
      ),
      ...Array.from({ length: 10 }, () =>
        grpcTyped(grpc, KeysService.method.grantAccess, request, { "x-api-key": svc.issuerKey }).then(
          (o) => ({
            ok: o.code === status.OK,
            limited: o.code === status.RESOURCE_EXHAUSTED && Number(o.metadata?.get("retry-after")[0]) > 0,
          }),
        ),
      ),
    ]);
    expect(outcomes.filter((o) => o.ok)).toHaveLength(5);
    expect(outcomes.filter((o) => o.limited)).toHaveLength(15);
    clock.advance(181_000);
    expect((await post(svc, "/api/v1/keys/grant-access", svc.issuerKey, request)).status).toBe(200);
  });

  it("makes one user for concurrent registrations of one card, with exactly one active key", async () => {
    const hashedPan = hashPan("4000000000000028");
    const keys = await Promise.all(
      Array.from(
        { length: 8 },
        async () => (await post(svc, "/api/v1/onboarding/generate-keys", svc.issuerKey, {})).body.data,
      ),
    );
    const userIds = await Promise.all(
      keys.map(async ({ keyId, publicKey }, i) => {
        const body = { hashedPan, publicKey, keyId };
        if (i % 2 === 0)
          return (await post(svc, "/api/v1/onboarding/register", svc.issuerKey, body)).body.data?.userId;
        const o = await grpcTyped(grpc, OnboardingService.method.register, body, {
          "x-api-key": svc.issuerKey,
        });
        return o.response ? fromBinary(RegisterResponseSchema, o.response).userId : `gRPC ${status[o.code]}`;
      }),
    );
    expect(new Set(userIds).size, userIds.join(", ")).toBe(1);
    const user = await svc.store.users.findByPanHash(panHashOf(svc.config.hashedPanPepper, hashedPan));
    expect(user?.userId).toBe(userIds[0]);
    const stored = await Promise.all(keys.map((k) => svc.store.users.findKey(k.keyId)));
    expect(stored.filter((k) => k?.status === "active").map((k) => k?.keyId)).toEqual([user?.activeKeyId]);
    expect(stored.filter((k) => k?.status === "rotated")).toHaveLength(7);
  });

  it("loses no receipt when escrow release races new receipts for the card, and decrypts them all", async () => {
    const hashedPan = hashPan("4000000000000036");
    const keys = (await post(svc, "/api/v1/onboarding/generate-keys", svc.issuerKey, {})).body.data;
    const receipts = Array.from({ length: 16 }, (_, i) =>
      receiptBody({ recipientHashedPan: hashedPan, merchantName: `Race Shop ${i}` }),
    );
    const encrypt = (r: Record<string, unknown>) => post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, r);
    const first = await encrypt(receipts[0] as Record<string, unknown>);
    expect(first.body.data.isEscrowed).toBe(true);
    const [early, registration, late] = await Promise.all([
      Promise.all(receipts.slice(1, 8).map(encrypt)),
      post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
        hashedPan,
        publicKey: keys.publicKey,
        keyId: keys.keyId,
      }),
      Promise.all(receipts.slice(8).map(encrypt)),
    ]);
    expect([first, ...early, ...late].map((a) => a.status)).toEqual(Array(16).fill(200));
    expect(registration.status).toBe(200);
    const holder = { ...keys, hashedPan, userId: registration.body.data.userId };

    const listed = await get(svc, `/api/v1/receipts/${holder.userId}?pageSize=200`, svc.issuerKey);
    const sealed = listed.body.data.receipts as Array<{
      receiptId: string;
      isEscrowed: boolean;
      keyId: string;
    }>;
    expect(sealed.map((r) => r.receiptId).sort()).toEqual(receipts.map((r) => r.receiptId as string).sort());
    expect(sealed.every((r) => !r.isEscrowed && r.keyId === keys.keyId)).toBe(true);

    const tokenId = await grantFor(svc, holder);
    const opened = await Promise.all(
      receipts.map((r) =>
        post(svc, "/api/v1/receipts/decrypt", svc.issuerKey, {
          receiptId: r.receiptId,
          tokenId,
          privateKey: keys.privateKey,
        }),
      ),
    );
    expect(opened.map((a) => a.body.data?.merchantName)).toEqual(receipts.map((r) => r.merchantName));
  });
});

describe("concurrency: one rate limit per key across REST, gRPC and Connect under parallel load", () => {
  const clock = new FakeClock("2026-03-01T12:00:10Z");
  let svc: TestService;
  let grpc: Client;

  beforeAll(async () => {
    svc = await startService({ clock, env: { RATE_LIMIT_TIERS: '{"standard":{"requestsPerMinute":40}}' } });
    grpc = rawGrpcClient(svc.port);
  });
  afterAll(async () => {
    grpc.close();
    await svc.close();
  });

  it("lets exactly the limit through and answers the rest 429 / RESOURCE_EXHAUSTED with Retry-After", async () => {
    const key = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "t-burst" });
    const request = { userId: "usr_nobody", pageSize: 1 };
    const calls = [
      ...Array.from({ length: 20 }, () =>
        get(svc, `/api/v1/receipts/${request.userId}`, key).then((a) =>
          a.status === 429 ? Number(a.headers.get("retry-after")) : 0,
        ),
      ),
      ...Array.from({ length: 20 }, () =>
        grpcTyped(grpc, ReceiptsService.method.listReceipts, request, { "x-api-key": key }).then((o) =>
          o.code === status.RESOURCE_EXHAUSTED ? Number(o.metadata?.get("retry-after")[0]) : 0,
        ),
      ),
      ...Array.from({ length: 20 }, () =>
        connectRaw(svc, ReceiptsService.method.listReceipts, JSON.stringify(request), {
          "x-api-key": key,
        }).then((a) => (a.status === 429 ? Number(a.headers.get("retry-after")) : 0)),
      ),
    ];
    const retryAfter = await Promise.all(calls);
    expect(retryAfter.filter((s) => s === 0)).toHaveLength(40);
    // The window started at 12:00:00 and the clock says 12:00:10: 50 seconds until it resets.
    expect(retryAfter.filter((s) => s > 0)).toEqual(Array(20).fill(50));
    clock.advance(60_000);
    expect((await get(svc, `/api/v1/receipts/${request.userId}`, key)).status).toBe(404);
  });
});
