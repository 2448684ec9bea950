import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { grantAccess, validGrant } from "../../src/domain/grants.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { encryptReceipt } from "../../src/domain/receipts.js";
import { recipientOf } from "../../src/domain/routing.js";
import {
  type DomainFixture,
  domainFixture,
  principal,
  receiptMessage,
  rejection,
} from "../support/domain.js";
import { hashPan } from "../support/harness.js";

const bankA = principal("issuer", "bank-a");
const bankB = principal("issuer", "bank-b");
const CALLER = { requestId: "r", sourceIp: "" };

/**
 * Attacks on the security core that survived mutation testing (issue 38; scripts/mutation.mjs, then
 * one group for all of src/domain; now the groups grants and routing run it) with no fast test to stop
 * them: each test fails on the mutant named in it.
 */
describe("attacks the domain tests did not try", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    await f.close();
  });

  async function cardholder(issuer: typeof bankA, pan: string) {
    const keys = await generateKeys(f.deps, issuer);
    const user = await register(f.deps, issuer, { hashedPan: hashPan(pan), ...keys });
    return { userId: user.userId, keyId: keys.keyId };
  }

  it("refuses a grant for one user with another user's key, of the same issuer or another (grants.ts)", async () => {
    const alice = await cardholder(bankA, "4000000000000066");
    const bob = await cardholder(bankA, "4000000000000074");
    const carol = await cardholder(bankB, "4000000000000082");
    for (const keyId of [bob.keyId, carol.keyId, bob.keyId.toUpperCase()]) {
      const refused = await rejection(grantAccess(f.deps, bankA, { userId: alice.userId, keyId }, CALLER));
      expect([refused.code, refused.message]).toEqual(["not_found", "Key not found for this user."]);
    }
    const other = await rejection(
      grantAccess(f.deps, bankA, { userId: carol.userId, keyId: carol.keyId }, CALLER),
    );
    expect([other.code, other.message]).toEqual(["not_found", "User not found."]);
    // The user's own key, in any case, is granted: the refusals were the key's owner.
    const own = await grantAccess(
      f.deps,
      bankA,
      { userId: alice.userId, keyId: alice.keyId.toUpperCase() },
      CALLER,
    );
    expect(own).toMatchObject({ keyId: alice.keyId });
  });

  it("answers not_found to another tenant's token and an unknown one, and audits a grant without its hash (grants.ts)", async () => {
    const alice = await cardholder(bankA, "4000000000000157");
    const grant = await grantAccess(f.deps, bankA, { userId: alice.userId, keyId: alice.keyId }, CALLER);
    expect(await validGrant(f.deps, bankA, grant.tokenId)).toMatchObject({ userId: alice.userId });
    for (const [caller, token] of [
      [bankB, grant.tokenId],
      [bankA, `${grant.tokenId}x`],
      [bankA, "tok_unknown"],
    ] as const) {
      const refused = await rejection(validGrant(f.deps, caller, token));
      expect([refused.code, refused.message]).toEqual(["not_found", "Access token not found."]);
    }
    const [event] = (await f.store.audit.list(10)).filter((e) => e.action === "grant.created");
    expect(event?.subject).toMatch(/^[0-9a-f]{8}$/);
  });

  it("gives a merchantId to one tenant when two use it first at the same time (merchants.ts)", async () => {
    const shops = Array.from({ length: 6 }, (_, i) => principal("merchant", `shop-${i % 2}`));
    const results = await Promise.allSettled(
      shops.map((shop) =>
        encryptReceipt(
          f.deps,
          shop,
          receiptMessage("4000000000000090", { merchantId: "m-race" }),
          null,
          CALLER,
        ),
      ),
    );
    const owner = (await f.store.merchants.find("m-race"))?.tenantId;
    expect(owner === "shop-0" || owner === "shop-1").toBe(true);
    results.forEach((result, i) => {
      const tenant = shops[i]?.tenantId;
      if (tenant === owner) expect(result.status, `${tenant} owns m-race`).toBe("fulfilled");
      else {
        expect(result.status).toBe("rejected");
        expect((result as PromiseRejectedResult).reason).toMatchObject({ code: "forbidden" });
      }
    });
  });

  it("routes a card whose BIN another issuer owns to that issuer's escrow, with the conflict (routing.ts)", async () => {
    await f.store.bins.set("bank-a", ["41111111"], f.clock.now());
    const pan = "4111111100000010";
    const user = await cardholder(bankB, pan);
    const card = { recipientHashedPan: hashPan(pan), cardBin: "41111111" };
    const routed = await recipientOf(f.deps, card);
    expect(routed).toMatchObject({
      kind: "escrow",
      ownerTenantId: "bank-a",
      conflict: { binOwner: "bank-a", registeredBy: "bank-b" },
    });
    expect(routed.key.keyId).not.toBe(user.keyId);
    // Without the BIN, or with a BIN nobody owns, the card's user.
    for (const other of [{ recipientHashedPan: hashPan(pan) }, { ...card, cardBin: "52000000" }]) {
      expect(await recipientOf(f.deps, other)).toMatchObject({ kind: "user", key: { keyId: user.keyId } });
    }
    // The BIN's own issuer registering the card gets it.
    const own = await cardholder(bankA, "4111111100000028");
    expect(
      await recipientOf(f.deps, { recipientHashedPan: hashPan("4111111100000028"), cardBin: "41111111" }),
    ).toMatchObject({
      kind: "user",
      key: { keyId: own.keyId },
    });
  });
});
