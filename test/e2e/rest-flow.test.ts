import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { get, hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";

describe("the five-step flow over REST", () => {
  let svc: TestService;
  beforeAll(async () => {
    // Step 1 as in production: the service finds the primes on its key-generation workers.
    svc = await startService({ realRsaKeyGeneration: true });
  });
  afterAll(async () => {
    await svc.close();
  });

  it("generates keys, registers, pays, grants and decrypts exactly what the merchant sent", async () => {
    // 1. generate-keys
    const keys = await post(svc, "/api/v1/onboarding/generate-keys", svc.issuerKey, {});
    expect(keys.status).toBe(200);
    expect(keys.body.success).toBe(true);
    const { keyId, publicKey, privateKey, algorithm } = keys.body.data;
    expect(algorithm).toBe("RSA-OAEP-256");
    expect(keyId).toMatch(/^[0-9a-f-]{36}$/);

    // 2. register
    const hashedPan = hashPan("5555555555554444");
    const reg = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      hashedPan,
      publicKey,
      keyId,
    });
    expect(reg.status).toBe(200);
    expect(reg.body.data).toMatchObject({ keyId, status: "active", releasedReceipts: 0 });
    const userId: string = reg.body.data.userId;
    expect(userId).toMatch(/^usr_/);

    // 3. create payment
    const body = receiptBody({ recipientHashedPan: hashedPan.toUpperCase(), amount: 950 });
    const pay = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, body);
    expect(pay.status).toBe(200);
    const payment = pay.body.data;
    expect(payment.paymentId).toMatch(/^pay_/);
    expect(payment.clientSecret).toMatch(new RegExp(`^${payment.paymentId}_secret_`));
    expect(payment.amount).toBe(950);
    expect(payment.serviceMetadata).toMatchObject({
      receiptId: body.receiptId,
      transactionId: body.transactionId,
      keyId,
      isEscrowed: false,
      gateway: "gateway_a",
      amount: 950,
      currency: "EUR",
    });

    // 4. grant
    const grant = await post(svc, "/api/v1/keys/grant-access", svc.issuerKey, { userId, keyId });
    expect(grant.status).toBe(200);
    expect(grant.body.data).toMatchObject({ userId, keyId, purpose: "decrypt", sourceIp: "127.0.0.1" });
    const ttl = Date.parse(grant.body.data.expiresAt) - Date.parse(grant.body.data.grantedAt);
    expect(ttl).toBe(180_000);

    // 5. decrypt
    const dec = await post(svc, "/api/v1/payments/decrypt", svc.issuerKey, {
      paymentId: payment.paymentId,
      tokenId: grant.body.data.tokenId,
      privateKey,
    });
    expect(dec.status).toBe(200);
    const receipt = dec.body.data;
    expect(receipt).toMatchObject({
      receiptId: body.receiptId,
      merchantId: "merchant-001",
      merchantName: "Corner Coffee",
      transactionId: body.transactionId,
      transactionDate: "2026-01-01T09:30:00Z",
      currency: "EUR",
      totalAmount: 950,
      amount: 950,
      keyId,
      items: (body.items as object[]).map((item) => ({ ...item, taxes: [] })),
    });
    expect(receipt.recipientHashedPan).toBeUndefined();
    expect(Date.parse(receipt.decryptedAt)).not.toBeNaN();
  });

  it("escrows a receipt for an unregistered card and releases it on registration", async () => {
    const hashedPan = hashPan("4000056655665556");
    const body = receiptBody({ recipientHashedPan: hashedPan });
    const enc = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body);
    expect(enc.status).toBe(200);
    expect(enc.body.data.isEscrowed).toBe(true);
    expect(enc.body.data.escrowKeyId).toMatch(/^esc_/);
    expect(Date.parse(enc.body.data.expiresAt) - Date.parse(enc.body.data.createdAt)).toBe(30 * 86_400_000);

    const keys = (await post(svc, "/api/v1/onboarding/generate-keys", svc.issuerKey, {})).body.data;
    const reg = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      hashedPan,
      publicKey: keys.publicKey,
      keyId: keys.keyId,
    });
    expect(reg.body.data.releasedReceipts).toBe(1);
    const userId = reg.body.data.userId;

    const list = await get(svc, `/api/v1/receipts/${userId}`, svc.issuerKey);
    expect(list.status).toBe(200);
    const [listed] = list.body.data.receipts;
    expect(listed.isEscrowed).toBe(false);
    expect(listed.keyId).toBe(keys.keyId);
    expect(listed.ciphertext).toBe(enc.body.data.ciphertext);

    const grant = (await post(svc, "/api/v1/keys/grant-access", svc.issuerKey, { userId, keyId: keys.keyId }))
      .body.data;
    const dec = await post(svc, "/api/v1/receipts/decrypt", svc.issuerKey, {
      receiptId: body.receiptId,
      accessTokenId: grant.tokenId,
      privateKey: keys.privateKey,
    });
    expect(dec.status).toBe(200);
    expect(dec.body.data.merchantName).toBe("Corner Coffee");
    // proto3 JSON renders an empty list as []: the items come back with `taxes: []`.
    expect(dec.body.data.items).toEqual((body.items as object[]).map((item) => ({ ...item, taxes: [] })));
  });
});
