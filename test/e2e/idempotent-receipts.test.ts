import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sealReceipt } from "../../src/client/webcrypto.js";
import { hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";

/**
 * `Idempotency-Key` on encrypt and on merchant-sealed receipts (the rule, which the client
 * library applies to every create): a retry with the same key and body gets the first answer and
 * stores nothing twice; the same key with another body is `conflict`; without a key a second store of
 * the same receipt is `conflict`, as before.
 */
describe("Idempotency-Key on receipts without a payment", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it("replays encrypt for a retry with the same key and body, and refuses another body", async () => {
    const body = receiptBody({ recipientHashedPan: hashPan("4000000000000123") });
    const key = { "idempotency-key": crypto.randomUUID() };
    const first = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body, key);
    const retry = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body, key);
    expect(first.status).toBe(200);
    expect(retry.status).toBe(200);
    expect(retry.body.data).toEqual(first.body.data);
    const other = await post(
      svc,
      "/api/v1/receipts/encrypt",
      svc.merchantKey,
      { ...body, merchantName: "Else" },
      key,
    );
    expect(other.status).toBe(409);
    expect(other.body.error?.message).toContain("Idempotency-Key");
    // Without the header the same receipt is a duplicate, as ever.
    const again = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body);
    expect(again.status).toBe(409);
    expect(again.body.error?.message).toContain("receiptId already exists");
  });

  it("replays a merchant-sealed receipt for a retry with the same key", async () => {
    const card = hashPan("4000000000000124");
    const looked = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, { recipientHashedPan: card });
    const { keyId, publicKey, aadBound } = looked.body.data as {
      keyId: string;
      publicKey: string;
      aadBound: boolean;
    };
    const plain = receiptBody({ receiptId: `idem-${crypto.randomUUID().slice(0, 8)}` });
    const { keyId: _top, ...envelope } = await sealReceipt(plain as never, publicKey, { keyId, aadBound });
    const body = { recipientHashedPan: card, ...envelope };
    const key = { "idempotency-key": crypto.randomUUID() };
    const first = await post(svc, "/api/v1/receipts/sealed", svc.merchantKey, body, key);
    const retry = await post(svc, "/api/v1/receipts/sealed", svc.merchantKey, body, key);
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(retry.status, JSON.stringify(retry.body)).toBe(200);
    expect(retry.body.data).toEqual(first.body.data);
  });
});
