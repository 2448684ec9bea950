import { verify } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import {
  createReceiptsClient,
  generateSigningKey,
  openReceipt,
  type ReceiptInput,
  ReceiptsApiError,
  signableReceipt,
  signReceipt,
} from "../../src/client/index.js";
import { createReceiptsClient as createInNode } from "../../src/client/node.js";
import { receiptJsonOf, signingTextOf } from "../../src/receipt-fields.js";
import { hashPan, startService, type TestService } from "../support/harness.js";
import { rejectionOf } from "./support.js";

/**
 * The merchant's signing key in the client library: made with WebCrypto, registered with the
 * service, and used by the creates, which sign exactly what the service checks.
 */

function receipt(suffix: string, card: string): ReceiptInput {
  return {
    receiptId: `sig-r-${suffix}`,
    merchantId: "signing-shop",
    merchantName: "Signing Shop",
    transactionId: `sig-t-${suffix}`,
    transactionDate: { seconds: BigInt(Math.floor(Date.now() / 1000) - 30), nanos: 0 },
    currency: "eur",
    recipientHashedPan: card,
    items: [{ lineItemId: "1", name: "Tea", quantity: 1n, unitPrice: 300n, totalPrice: 300n }],
  };
}

describe("signing receipts with the client", () => {
  it("signs the receipt's REST JSON form, which Node's Ed25519 verifies against the public key", async () => {
    const key = await generateSigningKey();
    const spki = Buffer.from(key.publicKey, "base64");
    expect(spki.length).toBe(44);
    const body = signableReceipt(receipt("1", hashPan("4000000000000501")));
    expect(body).toMatchObject({ version: "1.0", currency: "EUR" });
    const signature = Buffer.from(await signReceipt(body, key.privateKey), "base64");
    const text = Buffer.from(signingTextOf(receiptJsonOf(create(ReceiptSchema, body)) as never));
    const publicKey = { key: spki, format: "der", type: "spki" } as const;
    expect(verify(null, text, publicKey, signature)).toBe(true);
    expect(verify(null, Buffer.from(`${text} `), publicKey, signature)).toBe(false);
    // Not extractable unless asked: the private key cannot leave the WebCrypto key object.
    await expect(globalThis.crypto.subtle.exportKey("pkcs8", key.privateKey as never)).rejects.toThrow();
  });

  describe("against a running service", () => {
    let svc: TestService;
    beforeAll(async () => {
      svc = await startService();
    });
    afterAll(() => svc?.close());

    it("registers a signing key; then creates with a signer succeed, over fetch and gRPC, and without fail", async () => {
      const merchant = createReceiptsClient({ baseUrl: svc.baseUrl, apiKey: svc.merchantKey });
      const overGrpc = createInNode({ baseUrl: svc.baseUrl, apiKey: svc.merchantKey, transport: "grpc" });
      const issuer = createReceiptsClient({ baseUrl: svc.baseUrl, apiKey: svc.issuerKey });
      const device = await issuer.generateKeys({ algorithm: "HPKE-P256-SHA256-A256GCM" });
      const card = hashPan("4000000000000502");
      await issuer.register({ hashedPan: card, publicKey: device.publicKey, keyId: device.keyId });

      const key = await generateSigningKey();
      const registered = await merchant.registerSigningKey({
        merchantId: "signing-shop",
        publicKey: key.publicKey,
      });
      expect(registered).toMatchObject({ merchantId: "signing-shop", algorithm: "Ed25519" });
      expect(registered.merchantKeyId).toMatch(/^mk_/);
      const signer = { merchantKeyId: registered.merchantKeyId, privateKey: key.privateKey };

      const sealed = await merchant.encryptReceipt(receipt("2", card), { signer });
      const paid = await overGrpc.createPayment(
        "gateway_a",
        { ...receipt("3", card), amount: 300n },
        { signer },
      );
      expect(paid.paymentId).toMatch(/^pay_/);
      // A refund's receipt is the merchant's too: signed like the creates, refused unsigned.
      const refund = (suffix: string): ReceiptInput => ({
        receiptId: `sig-r-${suffix}`,
        merchantId: "signing-shop",
        merchantName: "Signing Shop",
        transactionId: `sig-t-${suffix}`,
        transactionDate: { seconds: BigInt(Math.floor(Date.now() / 1000) - 30), nanos: 0 },
        currency: "eur",
        recipientHashedPan: card,
        receiptType: "refund",
        originalReceiptId: "sig-r-3",
        amount: 100n,
        items: [{ lineItemId: "1", name: "Tea", quantity: 1n, unitPrice: 100n, totalPrice: 100n }],
      });
      const refunded = await merchant.refundPayment(paid.paymentId, refund("5"), { signer });
      expect(refunded.payment?.refundedAmount).toBe(100n);
      expect(await rejectionOf(merchant.refundPayment(paid.paymentId, refund("6")))).toMatchObject({
        code: "invalid_signature",
      });

      const unsigned = await rejectionOf(merchant.encryptReceipt(receipt("4", card)));
      expect(unsigned).toBeInstanceOf(ReceiptsApiError);
      expect(unsigned).toMatchObject({
        code: "invalid_signature",
        docUrl: `${svc.baseUrl}/docs/errors#invalid_signature`,
      });

      // The signature is sealed inside: the device finds it after opening.
      const opened = await openReceipt(sealed, device.privateKey);
      expect(opened).toMatchObject({ receiptId: "sig-r-2", currency: "EUR", version: "1.0" });
      expect({ ...opened }).toMatchObject({ merchantKeyId: registered.merchantKeyId });
    });
  });
});
