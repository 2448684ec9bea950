import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { lookupKey, recipientOf } from "../../src/domain/routing.js";
import { type DomainFixture, domainFixture, principal } from "../support/domain.js";
import { hashPan } from "../support/harness.js";
import { hmacs } from "../support/hmac-count.js";

// Every HMAC the domain takes, counted (and computed by node:crypto as before).
vi.mock("node:crypto", async (original) =>
  (await import("../support/hmac-count.js")).cryptoCountingHmacs(original),
);

const bank = principal("issuer", "bank-a");
const shop = principal("merchant", "shop-1");
const CALLER = { requestId: "req-h", sourceIp: "203.0.113.9" };
const PAR = "V0010013018209856843587239384";

/**
 * A look-up keys the card once: the HMAC of its hashed PAN (or PAR) under the pepper that finds its
 * user is the one its key log statement is found by, carried in the recipient rather than computed
 * again for the answer (it was two HMACs per look-up, about 2 us of a REST look-up's CPU).
 */
describe("key look-up takes the card's HMAC once", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
    const byPan = await generateKeys(f.deps, bank, { algorithm: "" });
    await register(f.deps, bank, { hashedPan: hashPan("4000000000000173"), ...byPan });
    const byPar = await generateKeys(f.deps, bank, { algorithm: "" });
    await register(f.deps, bank, { hashedPan: "", par: PAR, ...byPar });
  });
  afterEach(async () => {
    await f.close();
  });

  it("for a card named by its hashed PAN and by its PAR, and the recipient carries that key", async () => {
    for (const card of [
      { recipientHashedPan: hashPan("4000000000000173") },
      { recipientHashedPan: "", recipientPar: PAR },
    ]) {
      hmacs.count = 0;
      const answer = await lookupKey(f.deps, shop, card, CALLER);
      expect(answer.isEscrowed).toBe(false);
      expect(hmacs.count).toBe(1);
      const routed = await recipientOf(f.deps, card);
      if (routed.kind !== "user") throw new Error("not routed to the cardholder");
      const user = await f.store.users.findByPanHash(routed.panHash);
      expect(user?.userId).toBe(routed.user.userId);
    }
  });
});
