import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  checkRegistration,
  checkSelf,
  DeviceCheckError,
  type HeldBinding,
} from "../../src/client/device-checks.js";
import {
  escrowKeyStatement,
  generateIssuerSigner,
  type IssuerSigner,
  issuerSigningKeyOf,
  keyBindingStatement,
  signStatement,
  statementOf,
} from "../../src/client/key-binding.js";
import { createKeyTrust, type KeyTrust, KeyVerificationError } from "../../src/client/key-trust.js";
import { base64, fromBase64Strict, fromUtf8 } from "../../src/kt/bytes.js";
import { parseSigningKey, verifySignature } from "../../src/kt/signatures.js";
import { parseStatement } from "../../src/kt/statements.js";
import { bindingOf, type Issuer, NOW } from "../kt/world.js";
import { CARD_BIN, Directory, FixtureServer, HASHED_PAN, makeDeviceKey } from "./kt-fixture.js";

/**
 * The issuer's statements made with WebCrypto (both signing algorithms), in the canonical form every
 * verifier checks; and the device's checks of its own registration and of a self-check, against the
 * fixture's log.
 */

const CARD = { hashedPan: HASHED_PAN, bin: CARD_BIN };
const DAY = 86_400_000;

/** The fixture's issuer for a WebCrypto signer: the snapshot lists its key; it signs through the test. */
function issuerOf(signer: IssuerSigner): Issuer {
  const spki = fromBase64Strict(signer.spki) as Uint8Array;
  return {
    tenant: "bank-a",
    spki,
    signingKeyId: signer.signingKeyId,
    sign: () => {
      throw new Error("signs with WebCrypto");
    },
  };
}

describe("issuer statements", () => {
  for (const algorithm of ["Ed25519", "ECDSA-P256-SHA256"] as const) {
    it(`builds a canonical key binding and signs it with an ${algorithm} WebCrypto key, by the one rule`, async () => {
      const signer = await generateIssuerSigner(algorithm);
      expect(signer.signingKeyId).toMatch(/^sk_[0-9a-f]{32}$/);
      expect(await issuerSigningKeyOf(signer.spki)).toEqual({
        algorithm,
        spki: signer.spki,
        signingKeyId: signer.signingKeyId,
      });
      const device = makeDeviceKey();
      const statement = keyBindingStatement({
        issuer: "bank-a",
        card: { hashedPan: HASHED_PAN.toUpperCase() },
        bin: CARD_BIN,
        keyId: device.keyId,
        publicKey: base64(device.spki),
        version: 1,
        notBefore: NOW - DAY,
      });
      // The same bytes the fixture's reference issuer writes for the same facts.
      const reference = bindingOf(issuerOf(signer), device, HASHED_PAN, {
        notAfter: new Date(NOW + 29 * DAY).toISOString().replace(".000Z", "Z"),
      });
      expect(fromUtf8(statement)).toBe(reference);
      const binding = await signStatement(statement, signer);
      expect(binding.signingKeyId).toBe(signer.signingKeyId);
      const key = parseSigningKey(fromBase64Strict(signer.spki) as Uint8Array);
      if (!key.ok) throw new Error(key.reason);
      const signature = fromBase64Strict(binding.signature, 64) as Uint8Array;
      expect(verifySignature(key.key, statement, signature)).toBe(true);
      expect(verifySignature(key.key, statement.slice(0, -1), signature)).toBe(false);
    });
  }

  it("refuses to build a statement that breaks a rule, and to sign with a key that is not the signer's", async () => {
    const device = makeDeviceKey();
    const input = {
      issuer: "bank-a",
      card: { hashedPan: HASHED_PAN },
      bin: CARD_BIN,
      keyId: device.keyId,
      publicKey: base64(device.spki),
      version: 1,
    };
    expect(() => keyBindingStatement({ ...input, validDays: 36 })).toThrow(/exceeds 35 days/);
    expect(() => keyBindingStatement({ ...input, bin: "4111" })).toThrow(/bin/);
    expect(() => keyBindingStatement({ ...input, version: 0 })).toThrow(/version/);
    expect(() => keyBindingStatement({ ...input, publicKey: "bm90IGEga2V5" })).toThrow(/SPKI/);
    const escrow = escrowKeyStatement({
      issuer: "bank-a",
      keyId: "iek_1",
      publicKey: base64(device.spki),
      version: 1,
    });
    expect(parseStatement(escrow)).toMatchObject({ ok: true, value: { type: "receipts.v1/escrow-key" } });
    const signer = await generateIssuerSigner("Ed25519");
    const stranger = await generateIssuerSigner("Ed25519");
    await expect(signStatement(escrow, { ...signer, privateKey: stranger.privateKey })).rejects.toThrow(
      /not that key's/,
    );
    await expect(signStatement(escrow, { ...signer, signingKeyId: stranger.signingKeyId })).rejects.toThrow(
      /not the id/,
    );
    const revocation = statementOf({
      v: 1,
      type: "receipts.v1/key-revocation",
      issuer: "bank-a",
      cardRef: HASHED_PAN,
      bin: CARD_BIN,
      keyId: device.keyId,
      version: 2,
      reason: "lost",
      revokedAt: "2026-11-25T10:00:00Z",
    });
    expect((await signStatement(revocation, signer)).statement).toBe(base64(revocation));
    expect(() => statementOf({ v: 1, type: "receipts.v1/key-revocation" } as never)).toThrow(/lacks/);
  });
});

describe("the device's checks", () => {
  const server = new FixtureServer();
  let signer: IssuerSigner;
  let directory: Directory;
  let trust: KeyTrust;
  beforeAll(async () => {
    await server.start();
    signer = await generateIssuerSigner("ECDSA-P256-SHA256");
  });
  afterAll(() => server.close());

  /** A registration as the issuer makes it for a device key, and the service's (honest) answer. */
  async function register(version = 1, key = makeDeviceKey(), notBefore = NOW - DAY) {
    directory ??= new Directory(issuerOf(signer));
    trust = createKeyTrust({ policy: directory.world.policyJson, baseUrl: server.url, now: () => NOW });
    const statement = keyBindingStatement({
      issuer: "bank-a",
      card: { hashedPan: HASHED_PAN },
      bin: CARD_BIN,
      keyId: key.keyId,
      publicKey: base64(key.spki),
      version,
      notBefore,
    });
    const binding = await signStatement(statement, signer);
    const answer = directory.signed(
      key,
      fromUtf8(statement) as string,
      fromBase64Strict(binding.signature) as Uint8Array,
    );
    server.use({ answer, snapshot: directory.snapshot, key });
    const held: HeldBinding = { binding, keyId: key.keyId, publicKey: base64(key.spki) };
    return { answer, held, key };
  }

  it("accepts its own binding, logged under a witnessed checkpoint, as the card's first", async () => {
    const { answer, held } = await register();
    const verified = await checkRegistration(answer, held, { trust, card: CARD, firstRegistration: true });
    expect(verified).toMatchObject({ version: 1, issuer: "bank-a", keyId: held.keyId });
  });

  it("refuses to go on silently when its first registration is answered with version 3", async () => {
    const { answer, held } = await register(3);
    const refused = await checkRegistration(answer, held, {
      trust,
      card: CARD,
      firstRegistration: true,
    }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(DeviceCheckError);
    expect((refused as DeviceCheckError).code).toBe("not_first_binding");
    // A rotation on a device that registered before is version 3 by right.
    expect(
      (await checkRegistration(answer, held, { trust, card: CARD, firstRegistration: false })).version,
    ).toBe(3);
  });

  it("refuses a register answer with another statement, another key, or no valid proof", async () => {
    const { answer, held } = await register();
    const other = await register();
    // The service logged another statement for this key (a longer window, say) than the one signed.
    const again = await register(1, other.key, NOW - 2 * DAY);
    const swapped = { ...again.answer, binding: other.answer.binding };
    await expect(
      checkRegistration(swapped, again.held, { trust, card: CARD, firstRegistration: true }),
    ).rejects.toMatchObject({ code: "statement_mismatch" });
    const attacker = makeDeviceKey();
    const substituted = { ...answer, keyId: attacker.keyId, publicKey: base64(attacker.spki) };
    await expect(
      checkRegistration(substituted, held, { trust, card: CARD, firstRegistration: true }),
    ).rejects.toMatchObject({ code: "key_mismatch" });
    const proof = answer.proof as NonNullable<typeof answer.proof>;
    const unproven = { ...answer, proof: { ...proof, leafIndex: proof.leafIndex - 1 } };
    await expect(
      checkRegistration(unproven, held, { trust, card: CARD, firstRegistration: true }),
    ).rejects.toBeInstanceOf(KeyVerificationError);
  });

  it("self-check: accepts its key under a refresh, refuses another key and an older statement", async () => {
    const key = makeDeviceKey();
    const first = await register(1, key);
    const refresh = await register(2, key);
    expect((await checkSelf(refresh.answer, first.held, { trust, card: CARD })).version).toBe(2);
    await expect(checkSelf(first.answer, refresh.held, { trust, card: CARD })).rejects.toMatchObject({
      code: "rolled_back",
    });
    const substituted = await register(3);
    await expect(checkSelf(substituted.answer, refresh.held, { trust, card: CARD })).rejects.toMatchObject({
      code: "key_mismatch",
    });
    const escrowed = { ...refresh.answer, isEscrowed: true };
    await expect(checkSelf(escrowed, refresh.held, { trust, card: CARD })).rejects.toMatchObject({
      code: "key_mismatch",
    });
  });
});
