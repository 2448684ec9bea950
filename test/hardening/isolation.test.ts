import { randomBytes, randomUUID } from "node:crypto";
import { type Client, status } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { get, post, receiptBody, startService, type TestService } from "../support/harness.js";
import { type Cardholder, grantFor, grpcTyped, onboard, rawGrpcClient } from "./support.js";

/** What a caller learns from an error: everything but the request id and the time. */
function visible(answer: {
  status: number;
  body: { error?: { code: string; message: string; details: string } };
}) {
  const { code, message, details } = answer.body.error ?? { code: "none", message: "", details: "" };
  return { status: answer.status, code, message, details };
}

const random = (prefix: string) => `${prefix}_${randomBytes(12).toString("base64url")}`;

describe("tenant isolation: another tenant's ids answer exactly like ids that do not exist", () => {
  let svc: TestService;
  let grpc: Client;
  /** Tenant A (the harness's issuer and merchant) and what it owns. */
  let a: { holder: Cardholder; token: string; paymentId: string; receiptId: string; transactionId: string };
  /** Tenant B: another issuer with a cardholder of its own, and another merchant. */
  let b: { issuer: string; merchant: string; holder: Cardholder; token: string };

  beforeAll(async () => {
    svc = await startService();
    grpc = rawGrpcClient(svc.port);
    const holder = await onboard(svc, "4111111111111111");
    const payment = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, {
      ...receiptBody({ recipientHashedPan: holder.hashedPan }),
      amount: 950,
    });
    const receipt = receiptBody({ recipientHashedPan: holder.hashedPan });
    expect((await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, receipt)).status).toBe(200);
    a = {
      holder,
      token: await grantFor(svc, holder),
      paymentId: payment.body.data.paymentId,
      receiptId: receipt.receiptId as string,
      transactionId: receipt.transactionId as string,
    };
    const issuer = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "issuer-2" });
    const merchant = await svc.newKey({ role: "merchant", tier: "standard", tenantId: "merchant-2" });
    const bHolder = await onboard(svc, "5555555555554444", issuer);
    b = { issuer, merchant, holder: bHolder, token: await grantFor(svc, bHolder, issuer) };
  });
  afterAll(async () => {
    grpc.close();
    await svc.close();
  });

  /** POSTs both bodies as tenant B and expects the same visible answer, a 4xx. */
  async function samePost(path: string, key: string, theirs: unknown, nobodys: unknown) {
    const [x, y] = [await post(svc, path, key, theirs), await post(svc, path, key, nobodys)];
    expect(x.status).toBeGreaterThanOrEqual(400);
    expect(visible(x), `${path} ${JSON.stringify(theirs)}`).toEqual(visible(y));
  }

  it("grant-access: another tenant's user, or its key on one's own user", async () => {
    await samePost(
      "/api/v1/keys/grant-access",
      b.issuer,
      { userId: a.holder.userId, keyId: a.holder.keyId },
      { userId: random("usr"), keyId: randomUUID() },
    );
    await samePost(
      "/api/v1/keys/grant-access",
      b.issuer,
      { userId: b.holder.userId, keyId: a.holder.keyId },
      { userId: b.holder.userId, keyId: randomUUID() },
    );
  });

  it("receipts listing: another tenant's user, over REST and gRPC", async () => {
    const [x, y] = [
      await get(svc, `/api/v1/receipts/${a.holder.userId}`, b.issuer),
      await get(svc, `/api/v1/receipts/${random("usr")}`, b.issuer),
    ];
    expect(x.status).toBe(404);
    expect(visible(x)).toEqual(visible(y));
    const list = (userId: string) =>
      grpcTyped(grpc, ReceiptsService.method.listReceipts, { userId }, { "x-api-key": b.issuer });
    const [gx, gy] = [await list(a.holder.userId), await list(random("usr"))];
    expect(gx.code).toBe(status.NOT_FOUND);
    expect({ code: gx.code, details: gx.details }).toEqual({ code: gy.code, details: gy.details });
  });

  it("decrypt payment: another tenant's payment with one's own grant, or its grant with its payment", async () => {
    const mine = { tokenId: b.token, privateKey: b.holder.privateKey };
    await samePost(
      "/api/v1/payments/decrypt",
      b.issuer,
      { paymentId: a.paymentId, ...mine },
      {
        paymentId: random("pay"),
        ...mine,
      },
    );
    const theirs = { paymentId: a.paymentId, privateKey: a.holder.privateKey };
    await samePost(
      "/api/v1/payments/decrypt",
      b.issuer,
      { ...theirs, tokenId: a.token },
      {
        ...theirs,
        tokenId: random("tok"),
      },
    );
  });

  it("decrypt receipt: another tenant's receipt with one's own grant, or its grant with its receipt", async () => {
    const mine = { tokenId: b.token, privateKey: b.holder.privateKey };
    await samePost(
      "/api/v1/receipts/decrypt",
      b.issuer,
      { receiptId: a.receiptId, ...mine },
      {
        receiptId: random("rcpt"),
        ...mine,
      },
    );
    const theirs = { receiptId: a.receiptId, privateKey: a.holder.privateKey };
    await samePost(
      "/api/v1/receipts/decrypt",
      b.issuer,
      { ...theirs, tokenId: a.token },
      {
        ...theirs,
        tokenId: random("tok"),
      },
    );
  });

  it("transaction receipt: another merchant tenant's transaction", async () => {
    const [x, y] = [
      await get(svc, `/api/v1/transactions/${a.transactionId}/receipt`, b.merchant),
      await get(svc, `/api/v1/transactions/${random("txn")}/receipt`, b.merchant),
    ];
    expect(x.status).toBe(404);
    expect(visible(x)).toEqual(visible(y));
  });

  it("payments: another merchant tenant's payment, read or refunded, and none of it listed", async () => {
    const [x, y] = [
      await get(svc, `/api/v1/payments/${a.paymentId}`, b.merchant),
      await get(svc, `/api/v1/payments/${random("pay")}`, b.merchant),
    ];
    expect(x.status).toBe(404);
    expect(visible(x)).toEqual(visible(y));
    const refund = {
      ...receiptBody({ merchantId: "merchant-001", receiptType: "refund", originalReceiptId: "whatever" }),
      amount: 1,
    };
    const [rx, ry] = [
      await post(svc, `/api/v1/payments/${a.paymentId}/refund`, b.merchant, refund),
      await post(svc, `/api/v1/payments/${random("pay")}/refund`, b.merchant, refund),
    ];
    expect(rx.status).toBe(404);
    expect(visible(rx)).toEqual(visible(ry));
    expect((await get(svc, "/api/v1/payments", b.merchant)).body.data.payments).toEqual([]);
    // Tenant A's payment is untouched.
    expect((await get(svc, `/api/v1/payments/${a.paymentId}`, svc.merchantKey)).body.data.refunds).toEqual(
      [],
    );
  });

  it("refund receipts: another merchant tenant's receipt as the original answers like a random id", async () => {
    const naming = (originalReceiptId: string) =>
      receiptBody({ merchantId: "merchant-001", receiptType: "refund", originalReceiptId });
    await samePost("/api/v1/receipts/encrypt", b.merchant, naming(a.receiptId), naming(random("rcpt")));
  });

  it("encrypt and create: another merchant tenant's receipt and transaction ids are free to use", async () => {
    const reuse = receiptBody({
      receiptId: a.receiptId,
      transactionId: a.transactionId,
      merchantId: "merchant-002",
    });
    expect((await post(svc, "/api/v1/receipts/encrypt", b.merchant, reuse)).status).toBe(200);
    const pay = { ...receiptBody({ transactionId: a.transactionId, merchantId: "merchant-002" }), amount: 5 };
    expect((await post(svc, "/api/v1/payments/gateway_a/create", b.merchant, pay)).status).toBe(200);
    // And tenant A's own view of its transaction is untouched.
    const own = await get(svc, `/api/v1/transactions/${a.transactionId}/receipt`, svc.merchantKey);
    expect(own.body.data.merchantId).toBe("merchant-001");
  });
});
