import { randomBytes, randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FakeClock } from "../../src/clock.js";
import { panHashOf } from "../../src/domain/pan.js";
import { fixtureRsaKeyPair } from "../support/fixture-keys.js";
import { get, hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";

/**
 * Planting escrow (issue 31, item 10): whoever knows a card's hashed PAN can escrow receipts for it,
 * and the card's registration then has every one of them to release. A merchant tenant may escrow at
 * most ESCROW_INTAKE_LIMIT receipts per card per window, and a registration releases one bounded page
 * itself (ESCROW_RELEASE_PER_CALL), the rest in the background; a planted receipt that does not open
 * is held once and never looked at again.
 */

const INTAKE = 4;
const PER_CALL = 3;

describe("escrow intake and release are bounded", { timeout: 120_000 }, () => {
  const clock = new FakeClock("2026-03-01T12:00:00Z");
  let svc: TestService;
  let otherShop: string;

  beforeAll(async () => {
    svc = await startService({
      clock,
      env: { ESCROW_INTAKE_LIMIT: String(INTAKE), ESCROW_RELEASE_PER_CALL: String(PER_CALL) },
    });
    otherShop = await svc.newKey({ role: "merchant", tier: "standard", tenantId: "merchant-2" });
  });
  afterAll(() => svc.close());

  const encrypt = (key: string, card: string, merchantId = "merchant-001") =>
    post(svc, "/api/v1/receipts/encrypt", key, receiptBody({ recipientHashedPan: card, merchantId }));

  /** A receipt planted by a merchant around random bytes, claiming the escrow key's binding. */
  async function plantGarbage(card: string) {
    const look = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, { recipientHashedPan: card });
    return post(svc, "/api/v1/receipts/sealed", svc.merchantKey, {
      recipientHashedPan: card,
      version: "1.0",
      receiptId: `planted-${randomUUID().slice(0, 8)}`,
      merchantId: "merchant-001",
      transactionId: `pt-${randomUUID().slice(0, 8)}`,
      keyBundle: {
        keyId: look.body.data.keyId,
        algorithm: "RSA-OAEP-256",
        encryptedAesKey: randomBytes(256).toString("base64"),
        aadBound: true,
      },
      ciphertext: randomBytes(100).toString("base64"),
      iv: randomBytes(12).toString("base64"),
      authTag: randomBytes(16).toString("base64"),
    });
  }

  it("refuses a merchant tenant's escrow for one card past the limit, until the window ends", async () => {
    const card = hashPan("4000000000009001");
    for (let i = 0; i < INTAKE - 1; i++) expect((await encrypt(svc.merchantKey, card)).status).toBe(200);
    expect((await plantGarbage(card)).status).toBe(200);
    const over = await encrypt(svc.merchantKey, card);
    expect(over.status).toBe(429);
    expect(over.body.error?.code).toBe("rate_limit_exceeded");
    expect(Number(over.headers.get("retry-after"))).toBeGreaterThan(0);
    // Merchant-sealed and payments count against the same bound.
    expect((await plantGarbage(card)).status).toBe(429);
    const pay = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, {
      ...receiptBody({ recipientHashedPan: card }),
      amount: 950,
    });
    expect(pay.status).toBe(429);
    // Another merchant tenant, and another card, have bounds of their own.
    expect((await encrypt(otherShop, card, "shop-2-store")).status).toBe(200);
    expect((await encrypt(svc.merchantKey, hashPan("4000000000009002"))).status).toBe(200);
    // A registered card is not escrow: no bound.
    const holder = await fixtureRsaKeyPair();
    const reg = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      hashedPan: card,
      publicKey: holder.publicKey,
      keyId: randomUUID(),
    });
    expect(reg.status).toBe(200);
    for (let i = 0; i < INTAKE + 1; i++) expect((await encrypt(svc.merchantKey, card)).status).toBe(200);
    // The window ends: escrow for a fresh card is admitted again.
    const fresh = hashPan("4000000000009003");
    for (let i = 0; i < INTAKE; i++) expect((await encrypt(svc.merchantKey, fresh)).status).toBe(200);
    expect((await encrypt(svc.merchantKey, fresh)).status).toBe(429);
    clock.advance(3_600_000);
    expect((await encrypt(svc.merchantKey, fresh)).status).toBe(200);
  });

  it("releases one page within the registration, the rest after it, and looks at a planted receipt once", async () => {
    const card = hashPan("4000000000009100");
    // Planted first, so that the oldest-first release meets it first; then 7 real receipts from
    // two merchant tenants (each within its bound).
    expect((await plantGarbage(card)).status).toBe(200);
    clock.advance(1_000);
    const sent: string[] = [];
    for (const [key, merchantId, n] of [
      [svc.merchantKey, "merchant-001", 3],
      [otherShop, "shop-2-store", 4],
    ] as const) {
      for (let i = 0; i < n; i++) {
        const body = receiptBody({ recipientHashedPan: card, merchantId });
        expect((await post(svc, "/api/v1/receipts/encrypt", key, body)).status).toBe(200);
        sent.push(body.receiptId as string);
      }
    }
    const holder = await fixtureRsaKeyPair();
    const register = () =>
      post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
        hashedPan: card,
        publicKey: holder.publicKey,
        keyId: holderKeyId,
      });
    const holderKeyId = randomUUID();
    const reg = await register();
    expect(reg.body.data).toMatchObject({
      releasedReceipts: PER_CALL - 1,
      heldReceipts: 1,
      releasePending: true,
    });
    await svc.app.domain.background.idle();
    const listing = await get(svc, `/api/v1/receipts/${reg.body.data.userId}?pageSize=50`, svc.issuerKey);
    expect(listing.body.data.receipts.map((r: { receiptId: string }) => r.receiptId).sort()).toEqual(
      sent.sort(),
    );
    // The planted receipt stays escrowed (until its retention ends), marked, and is not looked at again.
    const escrowed = await svc.store.receipts.findEscrowed(
      {
        panHash: panHashOf(svc.config.hashedPanPepper, card),
        ownerTenantId: "issuer-1",
        includeUnowned: true,
      },
      clock.now(),
      10,
    );
    expect(escrowed.receipts.map((r) => r.escrowHeld)).toEqual([true]);
    const again = await register();
    expect(again.body.data).toMatchObject({ releasedReceipts: 0, heldReceipts: 0, releasePending: false });
  });
});
