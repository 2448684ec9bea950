import { generateKeyPairSync } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeyTrust, createReceiptsClient, KeyVerificationError } from "../../src/client/index.js";
import { escrowKeyStatement, signStatement } from "../../src/client/key-binding.js";
import type { TrustPolicy } from "../../src/kt/policy.js";
import { hashPan, post, type TestService } from "../support/harness.js";
import { startWitnessedService, type WitnessedService } from "../support/kt-witnessed.js";

/**
 * Escrow answers under the merchant's trust policy, against a running service whose issuers sign
 * their escrow keys (`POST /issuers/escrow-keys` with `binding`): the signed, logged escrow key of
 * the issuer owning the card's own BIN verifies; the same answer for a card whose own BIN another
 * issuer owns, the service's escrow key without `allowServiceEscrow`, and an issuer escrow key
 * registered without a statement are each refused, before anything is sealed.
 */

const TOKEN = "kt-escrow-trust-test-admin-token-01234";

describe("escrow answers under the merchant's trust policy", { timeout: 120_000 }, () => {
  let kt: WitnessedService;
  let svc: TestService;
  let policy: TrustPolicy;
  const signed = { tenant: "escrow-signed-bank", bin: "52000022", key: "" };
  const unsigned = { tenant: "escrow-unsigned-bank", bin: "52000033", key: "" };
  const unowned = "52000044";

  function escrowPublicKey(): string {
    return generateKeyPairSync("ec", { namedCurve: "P-256" })
      .publicKey.export({ type: "spki", format: "der" })
      .toString("base64");
  }

  async function lookup(bin: string) {
    const res = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
      recipientHashedPan: hashPan(`${bin}00000001`),
      cardBin: bin,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.data.isEscrowed).toBe(true);
    return res.body.data as Record<string, unknown>;
  }

  beforeAll(async () => {
    kt = await startWitnessedService({ token: TOKEN, name: "kt-escrow-trust", answerCosignatures: 3 });
    ({ svc, policy } = kt);
    for (const bank of [signed, unsigned]) {
      bank.key = await svc.newKey({ role: "issuer", tier: "standard", tenantId: bank.tenant });
      await kt.ownBins(bank.tenant, [bank.bin]);
    }
    const root = await kt.confirmedRoot(signed.tenant, signed.key);
    const publicKey = escrowPublicKey();
    const binding = await signStatement(
      escrowKeyStatement({ issuer: signed.tenant, keyId: "iek_signed-escrow-1", publicKey, version: 1 }),
      root,
    );
    // Through the client library, as an issuer would.
    const client = createReceiptsClient({ baseUrl: svc.baseUrl, apiKey: signed.key });
    const registered = await client.registerEscrowKey(publicKey, { binding });
    expect(registered.escrowKeyId).toBe("iek_signed-escrow-1");
    await kt.confirmedRoot(unsigned.tenant, unsigned.key);
    const plain = await post(svc, "/api/v1/issuers/escrow-keys", unsigned.key, {
      publicKey: escrowPublicKey(),
    });
    expect(plain.status, JSON.stringify(plain.body)).toBe(200);
    await kt.witnessed();
  });
  afterAll(async () => {
    await kt?.close();
  });

  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      () => {
        throw new Error("the answer verified");
      },
      (err: unknown) => {
        expect(err).toBeInstanceOf(KeyVerificationError);
        return err as KeyVerificationError;
      },
    );

  it("verifies the signed, logged escrow key of the issuer owning the card's own BIN", async () => {
    const trust = createKeyTrust({ policy, baseUrl: svc.baseUrl });
    const answer = await lookup(signed.bin);
    expect(answer.keyId).toBe("iek_signed-escrow-1");
    const verified = await trust.verify(answer, {
      hashedPan: hashPan(`${signed.bin}00000001`),
      bin: signed.bin,
    });
    expect(verified).toMatchObject({
      keyId: "iek_signed-escrow-1",
      isEscrowed: true,
      issuer: signed.tenant,
      version: 1,
    });
  });

  it("refuses that answer for a card whose own BIN another issuer owns", async () => {
    const trust = createKeyTrust({ policy, baseUrl: svc.baseUrl });
    const answer = await lookup(signed.bin);
    const err = await refusal(
      trust.verify(answer, { hashedPan: hashPan(`${signed.bin}00000001`), bin: unsigned.bin }),
    );
    expect(err.check).toBe("escrow");
    const nobody = await refusal(
      trust.verify(answer, { hashedPan: hashPan(`${signed.bin}00000001`), bin: unowned }),
    );
    expect(nobody.check).toBe("escrow");
  });

  it("refuses the service's escrow key unless the policy allows it", async () => {
    const answer = await lookup(unowned);
    const card = { hashedPan: hashPan(`${unowned}00000001`), bin: unowned };
    const err = await refusal(createKeyTrust({ policy, baseUrl: svc.baseUrl }).verify(answer, card));
    expect(err.check).toBe("escrow");
    expect(err.reason).toContain("service escrow key");
    const allowed = createKeyTrust({ policy: { ...policy, allowServiceEscrow: true }, baseUrl: svc.baseUrl });
    expect(await allowed.verify(answer, card)).toMatchObject({ isEscrowed: true, issuer: null });
    // Not for a card of an issuer that has an escrow key of its own.
    const own = await refusal(allowed.verify(answer, { ...card, bin: signed.bin }));
    expect(own.check).toBe("escrow");
  });

  it("refuses an issuer escrow key registered without a signed statement", async () => {
    const trust = createKeyTrust({ policy, baseUrl: svc.baseUrl });
    const answer = await lookup(unsigned.bin);
    expect(answer.binding).toBeUndefined();
    const err = await refusal(
      trust.verify(answer, { hashedPan: hashPan(`${unsigned.bin}00000001`), bin: unsigned.bin }),
    );
    expect(err.check).toBe("statement");
  });
});
