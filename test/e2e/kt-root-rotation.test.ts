import { createHash } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeyTrust, KeyVerificationError } from "../../src/client/index.js";
import {
  generateIssuerSigner,
  type IssuerSigner,
  keyBindingStatement,
  signRootRotation,
  signStatement,
} from "../../src/client/key-binding.js";
import { base64url } from "../../src/kt/bytes.js";
import type { TrustPolicy } from "../../src/kt/policy.js";
import { hashPan, post, type TestService } from "../support/harness.js";
import { deviceKey, endorsedSigner } from "../support/kt-issuers.js";
import { startWitnessedService, type WitnessedService } from "../support/kt-witnessed.js";

/**
 * A merchant's verification across an issuer's root rotation, against a running service and three
 * witnesses: before the rotation the card's binding verifies; after it, the merchant's trust policy
 * refuses the issuer's statements (check `root`) until the new root has been in the witnessed log
 * for the root delay, as for a first root, or until the merchant pins the new root; then the same
 * binding (signed by a signer the old root endorsed) verifies again.
 */

const DELAY = 3600;

describe("a merchant's verification across a root rotation", { timeout: 120_000 }, () => {
  let w: WitnessedService;
  let svc: TestService;
  let policy: TrustPolicy;
  const bank = { tenant: "rotating-bank", bin: "52000055", key: "" };
  const hashedPan = hashPan(`${bank.bin}00000001`);
  const card = { hashedPan, bin: bank.bin };
  let oldRoot: IssuerSigner;
  let signer: IssuerSigner;

  async function lookup() {
    const res = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
      recipientHashedPan: hashedPan,
      cardBin: bank.bin,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.data as Record<string, unknown>;
  }

  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      () => {
        throw new Error("the answer verified");
      },
      (err: unknown) => {
        expect(err).toBeInstanceOf(KeyVerificationError);
        return (err as KeyVerificationError).check;
      },
    );

  beforeAll(async () => {
    w = await startWitnessedService({
      token: "kt-root-rotation-e2e-admin-token-0123456",
      name: "kt-root-rotation",
      answerCosignatures: 3,
    });
    svc = w.svc;
    policy = { ...w.policy, rootDelaySeconds: DELAY };
    bank.key = await svc.newKey({ role: "issuer", tier: "standard", tenantId: bank.tenant });
    await w.ownBins(bank.tenant, [bank.bin]);
    oldRoot = await w.confirmedRoot(bank.tenant, bank.key);
    signer = await endorsedSigner(svc, { id: bank.tenant, key: bank.key }, oldRoot, 1);
    const device = deviceKey();
    const binding = await signStatement(
      keyBindingStatement({
        issuer: bank.tenant,
        card: { hashedPan },
        bin: bank.bin,
        keyId: device.keyId,
        publicKey: device.publicKey,
        version: 1,
      }),
      signer,
    );
    const res = await post(svc, "/api/v1/onboarding/register", bank.key, {
      hashedPan,
      cardBin: bank.bin,
      ...device,
      binding,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await w.witnessed();
  });
  afterAll(async () => {
    await w?.close();
  });

  it("honours the new root only the root delay after the witnessed checkpoint that first showed it", async () => {
    // A merchant that has known the old root for long: the binding verifies.
    const seen = new Map([[`${bank.tenant} ${oldRoot.signingKeyId}`, 0]]);
    const trust = createKeyTrust({ policy, baseUrl: svc.baseUrl, rootsSeen: seen });
    await expect(trust.verify(await lookup(), card)).resolves.toMatchObject({
      issuer: bank.tenant,
      version: 1,
    });

    const newRoot = await generateIssuerSigner("Ed25519");
    const rotation = await signRootRotation({ issuer: bank.tenant, newRoot, version: 2 }, oldRoot);
    const rotated = await post(svc, "/api/v1/issuers/signing-keys", bank.key, rotation);
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
    await w.witnessed();

    // Just after: the new root is younger than the delay for this merchant.
    const answer = await lookup();
    expect(await refusal(trust.verify(answer, card))).toBe("root");
    const newKey = `${bank.tenant} ${newRoot.signingKeyId}`;
    const firstSeen = seen.get(newKey);
    expect(firstSeen).toBeGreaterThan(0);
    // A second short of the delay after that sighting: still refused; at the delay: it verifies.
    const short = new Map([[newKey, (firstSeen as number) - DELAY + 120]]);
    expect(
      await refusal(createKeyTrust({ policy, baseUrl: svc.baseUrl, rootsSeen: short }).verify(answer, card)),
    ).toBe("root");
    const waited = new Map([[newKey, (firstSeen as number) - DELAY]]);
    await expect(
      createKeyTrust({ policy, baseUrl: svc.baseUrl, rootsSeen: waited }).verify(answer, card),
    ).resolves.toMatchObject({ issuer: bank.tenant, version: 1 });

    // A merchant pinned to the old root refuses; pinned to the new one (after its out-of-band check), at once.
    const pin = (s: IssuerSigner) =>
      base64url(new Uint8Array(createHash("sha256").update(Buffer.from(s.spki, "base64")).digest()));
    const pinnedOld = { ...policy, pinnedRoots: { [bank.tenant]: pin(oldRoot) } };
    expect(
      await refusal(createKeyTrust({ policy: pinnedOld, baseUrl: svc.baseUrl }).verify(answer, card)),
    ).toBe("signature");
    const pinnedNew = { ...policy, pinnedRoots: { [bank.tenant]: pin(newRoot) } };
    await expect(
      createKeyTrust({ policy: pinnedNew, baseUrl: svc.baseUrl }).verify(answer, card),
    ).resolves.toMatchObject({ issuer: bank.tenant });
  });
});
