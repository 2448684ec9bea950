import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { status as GrpcStatus, Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BadRequestSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { createReceiptsClient, openListing, ReceiptsApiError } from "../../src/client/index.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { get, hashPan, post, startService, type TestService } from "../support/harness.js";

/**
 * The receipt fields over every surface: a sale over REST, its refund over gRPC and a
 * void over Connect (the client library), each opened on the device with every field as sent; and
 * bad input refused on each surface with every offending field named and nothing stored.
 */

const PAN = "4000056655665556";
const ARN = "74001236123000000001236";
const DATE = "2026-01-01T09:30:00Z";

/** A REST body of a sale with every card-transaction field. */
function sale(suffix: string): Record<string, unknown> {
  return {
    receiptId: `cf-sale-${suffix}`,
    merchantId: "m-cards",
    merchantName: "Corner Coffee",
    transactionId: `cf-t-${suffix}`,
    transactionDate: DATE,
    currency: "EUR",
    recipientHashedPan: hashPan(PAN),
    receiptType: "sale",
    authorizationCode: "A1B2C3",
    retrievalReferenceNumber: "600112345678",
    acquirerReferenceNumber: ARN,
    terminalId: "TID00042",
    merchantCategoryCode: "5814",
    cardAcceptorName: "CORNER COFFEE DUBLIN",
    subtotal: 1000,
    taxAmount: 230,
    tipAmount: 150,
    totalAmount: 1380,
    tenders: [
      { method: "gift_card", amount: 380 },
      { method: "card", cardBrand: "visa", cardLast4: "5556", amount: 1000 },
    ],
    taxBreakdown: [{ rate: 0.23, taxableAmount: 1000, taxAmount: 230 }],
    items: [{ lineItemId: "1", name: "Brunch", quantity: 1, unitPrice: 1000, totalPrice: 1000 }],
  };
}

function keyed(key: string): Metadata {
  const md = new Metadata();
  md.set("x-api-key", key);
  return md;
}

describe("card-transaction receipt fields over REST, gRPC and Connect", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it("seals them on every surface, and the device opens them as sent", async () => {
    const keys = await post(svc, "/api/v1/onboarding/generate-keys", svc.issuerKey, {
      algorithm: "HPKE-P256-SHA256-A256GCM",
    });
    const { keyId, publicKey, privateKey } = keys.body.data as {
      keyId: string;
      publicKey: string;
      privateKey: string;
    };
    const reg = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      hashedPan: hashPan(PAN),
      publicKey,
      keyId,
    });
    const userId = (reg.body.data as { userId: string }).userId;

    const body = sale("1");
    const rest = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body);
    expect(rest.status).toBe(200);

    const client = grpcClient(ReceiptsService, svc.port);
    try {
      const refund = await grpcUnary(
        client,
        "encryptReceipt",
        {
          receipt: {
            receiptId: "cf-refund-1",
            merchantId: "m-cards",
            merchantName: "Corner Coffee",
            transactionId: "cf-t-refund-1",
            transactionDate: { seconds: BigInt(Date.parse(DATE) / 1000 + 3600), nanos: 0 },
            currency: "EUR",
            recipientHashedPan: hashPan(PAN),
            receiptType: "refund",
            originalReceiptId: "cf-sale-1",
            totalAmount: 500n,
            tenders: [{ method: "card", cardLast4: "5556", amount: 500n }],
            mockItems: false,
          },
        },
        keyed(svc.merchantKey),
      );
      expect(refund.error).toBeUndefined();
    } finally {
      client.close();
    }

    const merchant = createReceiptsClient({ baseUrl: svc.baseUrl, apiKey: svc.merchantKey });
    await merchant.encryptReceipt({
      receiptId: "cf-void-1",
      merchantId: "m-cards",
      merchantName: "Corner Coffee",
      transactionId: "cf-t-void-1",
      transactionDate: { seconds: BigInt(Date.parse(DATE) / 1000 + 7200), nanos: 0 },
      currency: "EUR",
      recipientHashedPan: hashPan(PAN),
      receiptType: "void",
      originalReceiptId: "cf-sale-1",
      authorizationCode: "Z9Y8X7",
      mockItems: false,
    });

    const listing = await get(svc, `/api/v1/receipts/${userId}`, svc.issuerKey);
    const opened = await openListing((listing.body.data as { receipts: never[] }).receipts, {
      [keyId]: privateKey,
    });
    const byId = new Map(opened.map((o) => [o.ok ? o.receipt.receiptId : "", o.ok ? o.receipt : undefined]));
    const { recipientHashedPan: _card, ...sealedSale } = body;
    expect(byId.get("cf-sale-1")).toMatchObject({ ...sealedSale, version: "1.0" });
    expect(byId.get("cf-refund-1")).toMatchObject({
      receiptType: "refund",
      originalReceiptId: "cf-sale-1",
      tenders: [{ method: "card", cardLast4: "5556", amount: 500 }],
    });
    expect(byId.get("cf-void-1")).toMatchObject({
      receiptType: "void",
      originalReceiptId: "cf-sale-1",
      authorizationCode: "Z9Y8X7",
    });
  });

  it("refuses bad input over REST naming every field, and stores nothing", async () => {
    const bad = {
      ...sale("2"),
      receiptType: "refund",
      tenders: [{ method: "card", amount: 100 }],
      acquirerReferenceNumber: `${ARN.slice(0, 22)}7`,
      merchantCategoryCode: "58140",
      authorizationCode: "A1B2C",
    };
    const res = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, bad);
    expect(res.status).toBe(400);
    expect(res.body.error?.code).toBe("invalid_request");
    const details = res.body.error?.details ?? "";
    for (const field of [
      "originalReceiptId",
      "tenders",
      "acquirerReferenceNumber",
      "merchantCategoryCode",
      "authorizationCode",
    ]) {
      expect(details, field).toContain(`${field}: `);
    }
    expect(await svc.store.receipts.findByMerchantReceipt("m-cards", "cf-sale-2")).toBeUndefined();

    const missing = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, {
      ...sale("3"),
      receiptType: "refund",
      originalReceiptId: "no-such-sale",
      amount: 1380,
    });
    expect(missing.status).toBe(400);
    expect(missing.body.error?.details).toContain(
      "originalReceiptId: must name a receipt of this merchantId",
    );
    expect(await svc.store.payments.findByTransaction("m-cards", "cf-t-3")).toBeUndefined();
    expect(await svc.store.receipts.findByMerchantReceipt("m-cards", "cf-sale-3")).toBeUndefined();
  });

  it("refuses bad input over gRPC and Connect with the fields in BadRequest, and stores nothing", async () => {
    const client = grpcClient(ReceiptsService, svc.port);
    try {
      const refused = await grpcUnary(
        client,
        "encryptReceipt",
        {
          receipt: {
            receiptId: "cf-grpc-bad",
            merchantId: "m-cards",
            merchantName: "Corner Coffee",
            transactionId: "cf-t-grpc-bad",
            transactionDate: { seconds: BigInt(Date.parse(DATE) / 1000), nanos: 0 },
            currency: "EUR",
            recipientHashedPan: hashPan(PAN),
            receiptType: "void",
            totalAmount: 100n,
            tenders: [{ method: "card", amount: 99n }],
          },
        },
        keyed(svc.merchantKey),
      );
      expect(refused.error?.code).toBe(GrpcStatus.INVALID_ARGUMENT);
      const raw = refused.error?.metadata.get("grpc-status-details-bin")[0] as Buffer;
      const details = fromBinary(StatusSchema, raw).details;
      const badRequest = details.map((any) => anyUnpack(any, BadRequestSchema)).find((d) => d !== undefined);
      expect(badRequest?.fieldViolations.map((v) => v.field).sort()).toEqual([
        "originalReceiptId",
        "tenders",
      ]);
    } finally {
      client.close();
    }
    const merchant = createReceiptsClient({ baseUrl: svc.baseUrl, apiKey: svc.merchantKey });
    const err = await merchant
      .encryptReceipt({
        receiptId: "cf-connect-bad",
        merchantId: "m-cards",
        merchantName: "Corner Coffee",
        transactionId: "cf-t-connect-bad",
        transactionDate: { seconds: BigInt(Date.parse(DATE) / 1000), nanos: 0 },
        currency: "EUR",
        recipientHashedPan: hashPan(PAN),
        originalReceiptId: "cf-sale-1",
        retrievalReferenceNumber: "12345678901",
      })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ReceiptsApiError);
    expect((err as ReceiptsApiError).violations.map((v) => v.field).sort()).toEqual([
      "originalReceiptId",
      "retrievalReferenceNumber",
    ]);
    for (const id of ["cf-grpc-bad", "cf-connect-bad"]) {
      expect(await svc.store.receipts.findByMerchantReceipt("m-cards", id)).toBeUndefined();
    }
  });
});
