import { status as GrpcStatus, Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { OnboardingService } from "../../gen/receipts/v1/onboarding_pb.js";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { hashPan, startService, type TestService } from "../support/harness.js";

function keyed(key: string, extra: Record<string, string> = {}): Metadata {
  const md = new Metadata();
  md.set("x-api-key", key);
  for (const [k, v] of Object.entries(extra)) md.set(k, v);
  return md;
}

describe("the five-step flow over gRPC (grpc-js)", () => {
  let svc: TestService;
  beforeAll(async () => {
    // Step 1 as in production: the service finds the primes on its key-generation workers.
    svc = await startService({ realRsaKeyGeneration: true });
  });
  afterAll(async () => {
    await svc.close();
  });

  it("runs every step with a real gRPC client and decrypts the receipt", async () => {
    const onboarding = grpcClient(OnboardingService, svc.port);
    const keys = grpcClient(KeysService, svc.port);
    const payments = grpcClient(PaymentsService, svc.port);
    const receipts = grpcClient(ReceiptsService, svc.port);
    try {
      // biome-ignore lint/suspicious/noExplicitAny: responses are protobuf-es messages read field by field
      type Any = any;
      const gen = await grpcUnary<Any>(onboarding, "generateKeys", {}, keyed(svc.issuerKey));
      expect(gen.error).toBeUndefined();
      expect(gen.header.get("x-ratelimit-limit")).toEqual(["60"]);
      const { keyId, publicKey, privateKey } = gen.response;

      const hashedPan = hashPan("6011000990139424");
      const reg = await grpcUnary<Any>(
        onboarding,
        "register",
        { hashedPan, publicKey, keyId },
        keyed(svc.issuerKey),
      );
      expect(reg.response.status).toBe("active");
      const userId: string = reg.response.userId;

      const receipt = {
        receiptId: "grpc-r-1",
        merchantId: "merchant-001",
        merchantName: "Gate 7 Kiosk",
        transactionId: "grpc-t-1",
        transactionDate: { seconds: BigInt(Date.parse("2026-01-01T08:00:00Z") / 1000), nanos: 0 },
        currency: "usd",
        recipientHashedPan: hashedPan,
        amount: 1234n,
        items: [{ lineItemId: "1", name: "Water", quantity: 1n, unitPrice: 1234n, totalPrice: 1234n }],
      };
      const pay = await grpcUnary<Any>(
        payments,
        "createPayment",
        { gateway: "gateway_a", receipt },
        keyed(svc.merchantKey, { "idempotency-key": "grpc-pay-1" }),
      );
      expect(pay.error).toBeUndefined();
      expect(pay.response.amount).toBe(1234n);
      expect(pay.response.serviceMetadata).toMatchObject({ keyId, isEscrowed: false, currency: "USD" });
      const replay = await grpcUnary<Any>(
        payments,
        "createPayment",
        { gateway: "gateway_a", receipt },
        keyed(svc.merchantKey, { "idempotency-key": "grpc-pay-1" }),
      );
      expect(replay.response.paymentId).toBe(pay.response.paymentId);
      expect(replay.response.clientSecret).toBe(pay.response.clientSecret);

      const grant = await grpcUnary<Any>(keys, "grantAccess", { userId, keyId }, keyed(svc.issuerKey));
      const tokenId: string = grant.response.tokenId;
      expect(tokenId).toMatch(/^tok_/);

      const dec = await grpcUnary<Any>(
        payments,
        "decryptPayment",
        { paymentId: pay.response.paymentId, tokenId, privateKey },
        keyed(svc.issuerKey),
      );
      expect(dec.error).toBeUndefined();
      expect(dec.response.receipt).toMatchObject({
        receiptId: "grpc-r-1",
        merchantName: "Gate 7 Kiosk",
        currency: "USD",
        amount: 1234n,
        keyId,
      });
      expect(dec.response.receipt.items[0]).toMatchObject({ name: "Water", totalPrice: 1234n });

      const list = await grpcUnary<Any>(receipts, "listReceipts", { userId }, keyed(svc.issuerKey));
      expect(list.response.receipts).toHaveLength(1);
      expect(list.response.receipts[0].keyBundle.algorithm).toBe("RSA-OAEP-256");
    } finally {
      for (const c of [onboarding, keys, payments, receipts]) c.close();
    }
  });

  it("returns gRPC statuses with the service's error code for domain errors", async () => {
    const keys = grpcClient(KeysService, svc.port);
    try {
      const missing = await grpcUnary(
        keys,
        "grantAccess",
        { userId: "usr_nope", keyId: "k" },
        keyed(svc.issuerKey),
      );
      expect(missing.error?.code).toBe(GrpcStatus.NOT_FOUND);
      const wrongRole = await grpcUnary(
        keys,
        "grantAccess",
        { userId: "u", keyId: "k" },
        keyed(svc.merchantKey),
      );
      expect(wrongRole.error?.code).toBe(GrpcStatus.PERMISSION_DENIED);
      const noKey = await grpcUnary(keys, "grantAccess", { userId: "u", keyId: "k" }, new Metadata());
      expect(noKey.error?.code).toBe(GrpcStatus.UNAUTHENTICATED);
      expect(noKey.error?.metadata.get("x-ratelimit-limit")).toEqual(["60"]);
      expect(noKey.error?.metadata.get("x-request-id")[0]).toBeTruthy();
    } finally {
      keys.close();
    }
  });
});
