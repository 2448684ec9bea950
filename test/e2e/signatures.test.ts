import { fromBinary, fromJson, type JsonObject } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { status as GrpcStatus, Metadata, type ServiceError } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { type Receipt, ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { openReceipt } from "../../src/client/webcrypto.js";
import { messageToJson } from "../../src/rpc/json.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { get, hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";
import { cardholderVerifies, type MerchantKeys, merchantKeys, signBody } from "../support/signatures.js";

const SIGNING_KEYS = "/api/v1/receipts/signing-keys";
const MERCHANT_ID = "merchant-signed";

/** A receipt body in the form the service seals: upper-case currency and an explicit version. */
function signableBody(pan: string, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return receiptBody({
    version: "1.0",
    merchantId: MERCHANT_ID,
    currency: "EUR",
    recipientHashedPan: hashPan(pan),
    merchantCity: "",
    ...overrides,
  });
}

function keyed(key: string, extra: Record<string, string> = {}): Metadata {
  const md = new Metadata();
  md.set("x-api-key", key);
  for (const [k, v] of Object.entries(extra)) md.set(k, v);
  return md;
}

/** The service's error code of a gRPC failure (the `ErrorInfo` reason). */
function reasonOf(error: ServiceError | undefined): string | undefined {
  const raw = error?.metadata.get("grpc-status-details-bin")[0];
  if (!(raw instanceof Buffer)) return undefined;
  const info = fromBinary(StatusSchema, raw).details[0];
  return info && anyUnpack(info, ErrorInfoSchema)?.reason;
}

describe("merchant signatures end to end", () => {
  let svc: TestService;
  let merchant: MerchantKeys;
  let merchantKeyId: string;

  beforeAll(async () => {
    svc = await startService();
    merchant = merchantKeys();
  });
  afterAll(async () => {
    await svc.close();
  });

  /** Generates an issuer key pair and registers a card with it. */
  async function onboard(pan: string) {
    const keys = (await post(svc, "/api/v1/onboarding/generate-keys", svc.issuerKey, {})).body.data;
    const reg = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      hashedPan: hashPan(pan),
      publicKey: keys.publicKey,
      keyId: keys.keyId,
    });
    expect(reg.status).toBe(200);
    return {
      keyId: keys.keyId as string,
      privateKey: keys.privateKey as string,
      userId: reg.body.data.userId,
    };
  }

  async function grant(user: { userId: string; keyId: string }): Promise<string> {
    const res = await post(svc, "/api/v1/keys/grant-access", svc.issuerKey, {
      userId: user.userId,
      keyId: user.keyId,
    });
    return res.body.data.tokenId;
  }

  it("registers the merchant's Ed25519 key over REST", async () => {
    const res = await post(svc, SIGNING_KEYS, svc.merchantKey, {
      merchantId: MERCHANT_ID,
      publicKey: merchant.publicKey,
    });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({
      merchantKeyId: expect.stringMatching(/^mk_/),
      merchantId: MERCHANT_ID,
      algorithm: "Ed25519",
      registeredAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT[\d:.]+Z$/),
      allReceiptsSigned: false,
    });
    merchantKeyId = res.body.data.merchantKeyId;
  });

  it("over REST: refuses unsigned and mis-signed receipts, seals a signed one the cardholder can verify", async () => {
    const user = await onboard("4000056655665556");
    const body = signableBody("4000056655665556");

    const unsigned = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body);
    expect(unsigned.status).toBe(400);
    expect(unsigned.body.error?.code).toBe("invalid_signature");
    const otherBody = signBody({ ...body, totalAmount: 1 }, merchant.privateKey);
    const misSigned = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body, {
      "x-receipt-signature": otherBody,
    });
    expect(misSigned.status).toBe(400);
    expect(misSigned.body.error?.code).toBe("invalid_signature");

    const signature = signBody(body, merchant.privateKey);
    const sealed = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body, {
      "X-Receipt-Signature": signature,
    });
    expect(sealed.status).toBe(200);

    // Decrypted by the service...
    const tokenId = await grant(user);
    const opened = await post(svc, "/api/v1/receipts/decrypt", svc.issuerKey, {
      receiptId: body.receiptId,
      tokenId,
      privateKey: user.privateKey,
    });
    expect(opened.status).toBe(200);
    expect(opened.body.data).toMatchObject({ merchantSignature: signature, merchantKeyId });
    expect(cardholderVerifies(opened.body.data, merchant.publicKeyObject)).toBe(true);
    expect(cardholderVerifies({ ...opened.body.data, totalAmount: 1 }, merchant.publicKeyObject)).toBe(false);

    // ...and on the device, from the listed envelope, with WebCrypto only.
    const listed = await get(svc, `/api/v1/receipts/${user.userId}`, svc.issuerKey);
    const onDevice = await openReceipt(listed.body.data.receipts[0], user.privateKey);
    expect(onDevice).toMatchObject({ merchantSignature: signature, merchantKeyId });
    expect(cardholderVerifies({ ...onDevice }, merchant.publicKeyObject)).toBe(true);
  });

  it("over gRPC: create payment needs x-receipt-signature over the receipt's JSON form", async () => {
    const user = await onboard("5200828282828210");
    const payments = grpcClient(PaymentsService, svc.port);
    try {
      // The merchant signs the JSON form of the receipt it sends as protobuf.
      const json = signableBody("5200828282828210", { amount: 950, cardNonce: "cnon:card-nonce-ok" });
      const receipt: Receipt = fromJson(ReceiptSchema, json as JsonObject);
      const signature = signBody(json, merchant.privateKey);
      // biome-ignore lint/suspicious/noExplicitAny: responses are protobuf-es messages read field by field
      type Any = any;
      const request = { gateway: "gateway_b", receipt };

      const unsigned = await grpcUnary<Any>(payments, "createPayment", request, keyed(svc.merchantKey));
      expect(unsigned.error?.code).toBe(GrpcStatus.INVALID_ARGUMENT);
      expect(reasonOf(unsigned.error)).toBe("invalid_signature");
      const wrong = await grpcUnary<Any>(
        payments,
        "createPayment",
        request,
        keyed(svc.merchantKey, {
          "x-receipt-signature": signBody({ ...json, amount: 951 }, merchant.privateKey),
        }),
      );
      expect(reasonOf(wrong.error)).toBe("invalid_signature");

      const paid = await grpcUnary<Any>(
        payments,
        "createPayment",
        request,
        keyed(svc.merchantKey, { "x-receipt-signature": signature, "idempotency-key": "sig-pay-1" }),
      );
      expect(paid.error).toBeUndefined();
      const tokenId = await grant(user);
      const opened = await grpcUnary<Any>(
        payments,
        "decryptPayment",
        { paymentId: paid.response.paymentId, tokenId, privateKey: user.privateKey },
        keyed(svc.issuerKey),
      );
      expect(opened.error).toBeUndefined();
      expect(opened.response.receipt).toMatchObject({ merchantSignature: signature, merchantKeyId });
      const asJson = messageToJson(ReceiptSchema, opened.response.receipt) as Record<string, unknown>;
      expect(cardholderVerifies(asJson, merchant.publicKeyObject)).toBe(true);
    } finally {
      payments.close();
    }
  });

  it("refuses the merchantId to another merchant tenant with forbidden", async () => {
    const other = await svc.newKey({ role: "merchant", tier: "standard", tenantId: "merchant-2" });
    const res = await post(svc, SIGNING_KEYS, other, {
      merchantId: MERCHANT_ID,
      publicKey: merchantKeys().publicKey,
    });
    expect(res.status).toBe(403);
    expect(res.body.error?.code).toBe("forbidden");
    expect(res.body.error?.message).toContain("merchantId belongs to another tenant");
  });

  it("is forbidden for a merchant key limited to other merchantIds, and for issuers", async () => {
    const limited = await svc.newKey({
      role: "merchant",
      tier: "standard",
      tenantId: "merchant-1",
      merchantIds: ["merchant-elsewhere"],
    });
    const input = { merchantId: MERCHANT_ID, publicKey: merchantKeys().publicKey };
    const asLimited = await post(svc, SIGNING_KEYS, limited, input);
    expect(asLimited.status).toBe(403);
    expect(asLimited.body.error?.code).toBe("forbidden");
    const asIssuer = await post(svc, SIGNING_KEYS, svc.issuerKey, input);
    expect(asIssuer.status).toBe(403);
  });

  it("refuses a key that is not Ed25519 with invalid_request naming publicKey", async () => {
    const rsa = (await post(svc, "/api/v1/onboarding/generate-keys", svc.issuerKey, {})).body.data.publicKey;
    const res = await post(svc, SIGNING_KEYS, svc.merchantKey, {
      merchantId: "merchant-rsa",
      publicKey: rsa,
    });
    expect(res.status).toBe(400);
    expect(res.body.error?.code).toBe("invalid_request");
    expect(res.body.error?.details).toBe("publicKey: must be an Ed25519 key");
  });
});
