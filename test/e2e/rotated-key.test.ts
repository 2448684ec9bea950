import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashPan, post, startService, type TestService } from "../support/harness.js";

/**
 * A key the card rotated away from is never active again. A card's issuer rotates away from a lost
 * phone's key; registering that key for the card again (a stolen issuer API key, or an app that kept
 * it) must not send the card's next receipts to whoever holds the phone. Over REST, as an issuer app
 * calls it; the store contract (test/store/contract-users.ts) holds both stores to it.
 */
describe("registering a card with a key it rotated away from", { timeout: 60_000 }, () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(() => svc.close());

  const generate = async () =>
    (await post(svc, "/api/v1/onboarding/generate-keys", svc.issuerKey, {})).body.data as {
      keyId: string;
      publicKey: string;
    };
  const register = (hashedPan: string, key: { keyId: string; publicKey: string }) =>
    post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      hashedPan,
      keyId: key.keyId,
      publicKey: key.publicKey,
    });

  it("is a conflict that changes nothing: the merchant still looks up the new key", async () => {
    const hashedPan = hashPan("4000000000000301");
    const [lost, current] = [await generate(), await generate()];
    expect((await register(hashedPan, lost)).status).toBe(200);
    expect((await register(hashedPan, current)).status).toBe(200);

    const again = await register(hashedPan, lost);
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({
      success: false,
      error: { code: "conflict", message: expect.stringContaining("never active again") },
    });
    const lookup = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, { recipientHashedPan: hashedPan });
    expect(lookup.body.data).toMatchObject({ keyId: current.keyId, publicKey: current.publicKey });
    // The current key registered again is unchanged, and a new key rotates as before.
    expect((await register(hashedPan, current)).status).toBe(200);
    expect((await register(hashedPan, await generate())).status).toBe(200);
  });
});
