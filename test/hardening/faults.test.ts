import { type Client, status } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { FakeClock } from "../../src/clock.js";
import { hashToken } from "../../src/domain/grants.js";
import { IDEMPOTENCY_LEASE_MS } from "../../src/domain/idempotency.js";
import { get, hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";
import { storeDouble } from "./store-double.js";
import { type Cardholder, grantFor, grpcTyped, onboard, rawGrpcClient, send } from "./support.js";

/** The store time limit of these tests: a stalled call must turn into a 503 this fast. */
const STORE_TIMEOUT_MS = 300;
const MERCHANT_TENANT = "merchant-1";

describe("store faults: 503 with nothing half-written, and recovery when the store returns", () => {
  const clock = new FakeClock("2026-03-01T12:00:00Z");
  const double = storeDouble();
  let svc: TestService;
  let grpc: Client;
  let holder: Cardholder;

  beforeAll(async () => {
    svc = await startService({
      clock,
      store: double.store,
      // The event worker and the key log's sequencer off: their own background store calls would
      // interleave with a request's, which these tests fail one by one in order.
      env: { STORE_TIMEOUT_MS: String(STORE_TIMEOUT_MS), EVENTS_WORKER: "off", KT_SEQUENCER: "off" },
    });
    grpc = rawGrpcClient(svc.port);
    holder = await onboard(svc, "4111111111111111");
  });
  afterAll(async () => {
    double.heal();
    grpc.close();
    await svc.close();
  });

  /** Payments and receipts stored for a transaction: a payment never exists without its receipt. */
  async function stored(transactionId: string) {
    const receipts = await svc.store.receipts.findByTransaction(MERCHANT_TENANT, transactionId);
    const payments = await Promise.all(receipts.map((r) => svc.store.payments.findById(r.paymentId ?? "")));
    expect(payments.every((p) => p !== undefined && p.transactionId === transactionId)).toBe(true);
    return receipts.length;
  }

  /** A create-payment body for a card; every call makes a new receipt and transaction. */
  /**
   * A payment of a merchantId of its own: each create is that merchantId's first use, so every create
   * makes the same store calls (the first use claims the merchantId; later ones only read its owner).
   */
  function paymentBody(hashedPan: string): Record<string, unknown> {
    const merchantId = `m-fault-${crypto.randomUUID().slice(0, 8)}`;
    return { ...receiptBody({ recipientHashedPan: hashedPan, merchantId }), amount: 950 };
  }

  function create(body: Record<string, unknown>, idempotencyKey: string) {
    return post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, body, {
      "idempotency-key": idempotencyKey,
    });
  }

  /** The store calls a successful create makes, in order. */
  async function callsOfACreate(hashedPan: string): Promise<string[]> {
    const from = double.calls.length;
    const ok = await create(paymentBody(hashedPan), `probe-${hashedPan}`);
    expect(ok.status).toBe(200);
    return double.calls.slice(from).map((c) => c.method);
  }

  for (const [card, pan] of [
    ["a registered card", "4111111111111111"],
    ["an unregistered card (escrow)", "4000000000000044"],
  ] as const) {
    it(`fails each store call of a payment for ${card}: 503 and nothing stored, or 200 and all stored`, async () => {
      const calls = await callsOfACreate(hashPan(pan));
      const commit = calls.indexOf("payments.createWithReceipt");
      expect(commit).toBeGreaterThan(0);
      expect(calls.length).toBeGreaterThan(commit + 1);
      for (const [position, method] of calls.entries()) {
        const body = paymentBody(hashPan(pan));
        const key = `fail-${position}-${pan}`;
        const earlier = calls.slice(0, position).filter((m) => m === method).length;
        double.inject(method, "fail", 1, earlier);
        const first = await create(body, key);
        double.heal();
        const label = `call ${position} (${method}) failed: ${JSON.stringify(first.body.error ?? {})}`;
        if (first.status === 503) {
          expect(first.body.error?.code, label).toBe("service_unavailable");
          expect(await stored(body.transactionId as string), label).toBe(0);
          const retry = await create(body, key);
          expect(retry.status, `retry after ${label}`).toBe(200);
        } else {
          // Only what follows the atomic write may fail without failing the call: it already happened.
          expect(first.status, label).toBe(200);
          expect(position, label).toBeGreaterThan(commit);
        }
        expect(await stored(body.transactionId as string), label).toBe(1);
      }
    });
  }

  it("answers 503 within the store time limit when a store call stalls, and the late write stays whole", async () => {
    const body = paymentBody(holder.hashedPan);
    double.inject("payments.createWithReceipt", "stall");
    const started = performance.now();
    const first = await create(body, "stall-1");
    expect(first.status).toBe(503);
    expect(first.body.error?.code).toBe("service_unavailable");
    expect(performance.now() - started).toBeLessThan(STORE_TIMEOUT_MS + 1_500);
    expect(await stored(body.transactionId as string)).toBe(0);

    double.release();
    await new Promise((resolve) => setTimeout(resolve, 50));
    // The write that was cut off lands whole, and a retry never makes a second payment.
    expect(await stored(body.transactionId as string)).toBe(1);
    const retry = await create(body, "stall-1");
    expect([200, 409]).toContain(retry.status);
    expect(await stored(body.transactionId as string)).toBe(1);
  });

  it("answers UNAVAILABLE over gRPC and 503 over REST for a stalled read, and recovers", async () => {
    double.inject("users.findById", "stall", 2);
    const request = { userId: holder.userId, pageSize: 5 };
    const viaGrpc = await grpcTyped(grpc, ReceiptsService.method.listReceipts, request, {
      "x-api-key": svc.issuerKey,
    });
    expect(viaGrpc.code).toBe(status.UNAVAILABLE);
    const viaRest = await get(svc, `/api/v1/receipts/${holder.userId}`, svc.issuerKey);
    expect(viaRest.status).toBe(503);
    double.heal();
    expect((await get(svc, `/api/v1/receipts/${holder.userId}`, svc.issuerKey)).status).toBe(200);
  });

  it("reports not ready while the store fails or stalls, and ready again once it answers", async () => {
    double.inject("ping", "fail");
    expect((await send(svc, "GET", "/readyz")).status).toBe(503);
    double.inject("ping", "stall");
    const started = performance.now();
    expect((await send(svc, "GET", "/readyz")).status).toBe(503);
    expect(performance.now() - started).toBeLessThan(STORE_TIMEOUT_MS + 1_500);
    double.heal();
    expect((await send(svc, "GET", "/readyz")).status).toBe(200);
  });

  it("lets a retry take over an Idempotency-Key left in progress by a call that died, once its lease runs out", async () => {
    const body = paymentBody(holder.hashedPan);
    // The first call's write hangs and its key cannot be released: what a crashed process leaves behind.
    double.inject("payments.createWithReceipt", "stall");
    double.inject("idempotency.abandon", "fail");
    expect((await create(body, "orphaned-key")).status).toBe(503);

    clock.advance(IDEMPOTENCY_LEASE_MS);
    const retry = await create(body, "orphaned-key");
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(await stored(body.transactionId as string)).toBe(1);
    const replay = await create(body, "orphaned-key");
    expect(replay.body.data.paymentId).toBe(retry.body.data.paymentId);

    double.heal();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await stored(body.transactionId as string)).toBe(1);
  });

  it("refuses an expired grant although the store has not deleted it yet", async () => {
    const receipt = receiptBody({ recipientHashedPan: holder.hashedPan });
    expect((await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, receipt)).status).toBe(200);
    const tokenId = await grantFor(svc, holder);
    const decrypt = () =>
      post(svc, "/api/v1/receipts/decrypt", svc.issuerKey, {
        receiptId: receipt.receiptId,
        tokenId,
        privateKey: holder.privateKey,
      });
    clock.advance(179_000);
    expect((await decrypt()).status).toBe(200);
    clock.advance(1_000);
    const expired = await decrypt();
    expect(expired.status).toBe(403);
    expect(expired.body.error?.message).toMatch(/expired/);
    expect(await svc.store.grants.findByHash(hashToken(tokenId))).toBeDefined();
  });
});
