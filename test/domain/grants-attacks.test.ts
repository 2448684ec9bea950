import { generateKeyPairSync } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { grantAccess, hashToken, MAX_ACTIVE_GRANTS, validGrant } from "../../src/domain/grants.js";
import { registerEscrowKey } from "../../src/domain/issuer-escrow.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { type DomainFixture, domainFixture, principal, rejection } from "../support/domain.js";
import { hashPan } from "../support/harness.js";

const bankA = principal("issuer", "bank-a");
const CALLER = { requestId: "req-g", sourceIp: "198.51.100.23" };

/**
 * Issue 38: decrypt grants from the side of whoever holds a token too long, asks for one too many, or
 * reads the store: the token's lifetime ends exactly at `expiresAt`, a sixth grant is refused with
 * when to retry, and neither the store nor the audit log holds the token itself.
 */
describe("decrypt grants", () => {
  let f: DomainFixture;
  let user: { userId: string; keyId: string };
  beforeEach(async () => {
    f = await domainFixture();
    const keys = await generateKeys(f.deps, bankA);
    const registered = await register(f.deps, bankA, { hashedPan: hashPan("4000000000000223"), ...keys });
    user = { userId: registered.userId, keyId: keys.keyId };
  });
  afterEach(async () => {
    await f.close();
  });

  const grant = () => grantAccess(f.deps, bankA, user, CALLER);

  it("refuses blank fields by name, and grants nothing", async () => {
    const err = await rejection(grantAccess(f.deps, bankA, { userId: "", keyId: "" }, CALLER));
    expect(err.code).toBe("invalid_request");
    expect(err.violations).toEqual([
      { field: "userId", description: "is required" },
      { field: "keyId", description: "is required" },
    ]);
    expect((await f.store.audit.list(100)).filter((e) => e.action === "grant.created")).toEqual([]);
  });

  it("shows the token once and stores only its hash; the grant ends exactly at its expiry", async () => {
    const g = await grant();
    expect(g.tokenId).toMatch(/^tok_[A-Za-z0-9_-]{32}$/);
    expect(g).toEqual({
      tokenId: g.tokenId,
      userId: user.userId,
      keyId: user.keyId,
      purpose: "decrypt",
      grantedAt: new Date("2026-03-01T12:00:00Z"),
      expiresAt: new Date("2026-03-01T12:03:00Z"),
      sourceIp: "198.51.100.23",
    });
    const stored = await f.store.grants.findByHash(hashToken(g.tokenId));
    expect(stored).toMatchObject({ tenantId: "bank-a", userId: user.userId, keyId: user.keyId });
    expect(JSON.stringify(stored)).not.toContain(g.tokenId);
    const [event] = (await f.store.audit.list(100)).filter((e) => e.action === "grant.created");
    expect(event).toMatchObject({
      tenantId: "bank-a",
      requestId: "req-g",
      sourceIp: "198.51.100.23",
      userId: user.userId,
      keyId: user.keyId,
      subject: hashToken(g.tokenId).slice(0, 8),
    });
    expect(JSON.stringify(event)).not.toContain(g.tokenId);

    f.clock.advance(180_000 - 1);
    expect(await validGrant(f.deps, bankA, g.tokenId)).toMatchObject({ userId: user.userId });
    f.clock.advance(1);
    const expired = await rejection(validGrant(f.deps, bankA, g.tokenId));
    expect([expired.code, expired.message]).toEqual([
      "forbidden",
      "The access token has expired; ask for a new grant.",
    ]);
  });

  it("refuses a sixth active grant with the seconds until the oldest expires, and writes none", async () => {
    for (let i = 0; i < MAX_ACTIVE_GRANTS; i++) {
      await grant();
      f.clock.advance(10_000);
    }
    // The oldest was granted 50 s ago, 10.5 s more: it expires in 119.5 s, so retry after 120.
    f.clock.advance(10_500);
    const refused = await rejection(grant());
    expect(refused.code).toBe("rate_limit_exceeded");
    expect(refused.retryAfterSeconds).toBe(120);
    expect(refused.message).toBe(
      `This user already has ${MAX_ACTIVE_GRANTS} active access tokens; try again when one expires.`,
    );
    expect((await f.store.audit.list(100)).filter((e) => e.action === "grant.created")).toHaveLength(
      MAX_ACTIVE_GRANTS,
    );
    // Once the oldest expired, one more is granted.
    f.clock.advance(119_500);
    expect((await grant()).userId).toBe(user.userId);
  });

  it("audits a call made from inside the service (the command line) as internal, with no source address", async () => {
    const publicKey = generateKeyPairSync("ec", { namedCurve: "P-256" })
      .publicKey.export({ type: "spki", format: "der" })
      .toString("base64");
    await registerEscrowKey(f.deps, bankA, { publicKey });
    const [event] = (await f.store.audit.list(100)).filter((e) => e.action === "escrow_key.registered");
    expect(event).toMatchObject({ requestId: "internal", sourceIp: "" });
  });
});
