import { createHash, generateKeyPairSync, randomUUID } from "node:crypto";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { OnboardingService } from "../../gen/receipts/v1/onboarding_pb.js";
import {
  createKeyTrust,
  createReceiptsClient,
  KeyVerificationError,
  type MerchantReceipt,
  sealAndStoreReceipt,
} from "../../src/client/index.js";
import {
  generateIssuerSigner,
  type IssuerSigner,
  keyBindingStatement,
  signCardBindings,
  signRootRotation,
  signSigningKeyRevocation,
  signStatement,
  statementOf,
} from "../../src/client/key-binding.js";
import { base64url } from "../../src/kt/bytes.js";
import type { TrustPolicy } from "../../src/kt/policy.js";
import { formatTime } from "../../src/kt/statements.js";
import { hashPan, post, receiptBody } from "../support/harness.js";
import { startWitnessedService, type WitnessedService } from "../support/kt-witnessed.js";

/**
 * A merchant's verification across an issuer's root rotation and recovery, against a running service
 * and three witnesses, with the default trust policy (root delay 72 h, nothing pinned):
 * - after the bank's own rotation (the old root signs the new one's introduction), the lookup and
 *   register answers carry that statement as `rootRotation` (REST, Connect and gRPC), and a merchant
 *   that counted the old root verifies and seals at once to a binding the new root signed;
 * - a forged `rootRotation` (signed by a signer, by another issuer's root, or naming another key)
 *   does not shorten the delay;
 * - after the root revokes itself, the recovery root the operator confirms still waits the delay, also
 *   when the answer carries a rotation the thief of the revoked root (or of the root before it) signed.
 * A merchant that never counted the old root still waits the delay after a rotation, or pins.
 */

const TOKEN = "kt-root-rotation-e2e-admin-token-0123456";
const DELAY = 72 * 3600;
type Answer = Record<string, unknown>;
type Signed = { statement: string; signature: string; signingKeyId: string };

describe("a merchant's verification across a root rotation and a recovery", { timeout: 180_000 }, () => {
  let w: WitnessedService;
  /** The default trust policy: the service's log and witnesses, nothing pinned, the default delay. */
  let policy: TrustPolicy;
  const bank = { tenant: "rotating-bank", bin: "52000055", key: "" };
  const other = { tenant: "other-bank", bin: "52000066", key: "" };
  let oldRoot: IssuerSigner;
  let newRoot: IssuerSigner;
  let signer: IssuerSigner;
  let otherRoot: IssuerSigner;
  /** The bank's rotation as answers carry it (`rootRotation`), once the first test made it. */
  let rotationSigned: Signed;
  /** A merchant's memory of roots: it has counted the bank's old root (and the other bank's) for long. */
  const longKnown = () =>
    new Map([
      [`${bank.tenant} ${oldRoot.signingKeyId}`, 0],
      [`${other.tenant} ${otherRoot.signingKeyId}`, 0],
    ]);
  let cards = 0;

  const cardOf = () => {
    cards += 1;
    const hashedPan = hashPan(`${bank.bin}${String(cards).padStart(8, "0")}`);
    return { hashedPan, bin: bank.bin };
  };

  /** Registers a new card of the bank bound by `by` (its first binding); answers the register answer. */
  async function registered(card: { hashedPan: string; bin: string }, by: IssuerSigner): Promise<Answer> {
    const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const device = {
      keyId: randomUUID(),
      publicKey: publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    };
    const binding = await signStatement(
      keyBindingStatement({
        issuer: bank.tenant,
        card: { hashedPan: card.hashedPan },
        bin: bank.bin,
        keyId: device.keyId,
        publicKey: device.publicKey,
        version: 1,
      }),
      by,
    );
    const res = await post(w.svc, "/api/v1/onboarding/register", bank.key, {
      hashedPan: card.hashedPan,
      cardBin: bank.bin,
      ...device,
      binding,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.data as Answer;
  }

  async function lookup(card: { hashedPan: string; bin: string }): Promise<Answer> {
    const res = await post(w.svc, "/api/v1/keys/lookup", w.svc.merchantKey, {
      recipientHashedPan: card.hashedPan,
      cardBin: card.bin,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.data as Answer;
  }

  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      () => "verified",
      (err: unknown) => {
        expect(err).toBeInstanceOf(KeyVerificationError);
        return (err as KeyVerificationError).check;
      },
    );

  /** What a merchant with `seen` makes of `answer` for `card` (the answer copied, so a check cannot change it). */
  const verdict = (answer: Answer, card: { hashedPan: string; bin: string }, seen = longKnown()) =>
    refusal(
      createKeyTrust({ policy, baseUrl: w.svc.baseUrl, rootsSeen: seen }).verify(
        structuredClone(answer),
        card,
      ),
    );

  /** A `receipts.v1/signing-key` statement of role root for `introduced`, signed by `by` as `signingKeyId`. */
  async function forged(
    introduced: IssuerSigner,
    by: IssuerSigner,
    options: { signingKeyId?: string; issuer?: string; version?: number } = {},
  ): Promise<Signed> {
    const signed = await signRootRotation(
      { issuer: options.issuer ?? bank.tenant, newRoot: introduced, version: options.version ?? 2 },
      by,
    );
    return {
      statement: signed.statement,
      signature: signed.signature,
      signingKeyId: options.signingKeyId ?? by.signingKeyId,
    };
  }

  beforeAll(async () => {
    w = await startWitnessedService({ token: TOKEN, name: "kt-root-rotation", answerCosignatures: 3 });
    const { rootDelaySeconds: _, ...defaults } = w.policy;
    policy = defaults;
    bank.key = await w.svc.newKey({ role: "issuer", tier: "standard", tenantId: bank.tenant });
    other.key = await w.svc.newKey({ role: "issuer", tier: "standard", tenantId: other.tenant });
    await w.ownBins(bank.tenant, [bank.bin]);
    await w.ownBins(other.tenant, [other.bin]);
    oldRoot = await w.confirmedRoot(bank.tenant, bank.key);
    otherRoot = await w.confirmedRoot(other.tenant, other.key);
    signer = await generateIssuerSigner("Ed25519");
    const endorsement = await signStatement(
      statementOf({
        v: 1,
        type: "receipts.v1/signing-key",
        issuer: bank.tenant,
        signingKeyId: signer.signingKeyId,
        algorithm: signer.algorithm,
        spki: signer.spki,
        role: "signer",
        version: 1,
        issuedAt: formatTime(Date.now()),
      }),
      oldRoot,
    );
    const added = await post(w.svc, "/api/v1/issuers/signing-keys", bank.key, {
      publicKey: signer.spki,
      statement: endorsement.statement,
      signature: endorsement.signature,
    });
    expect(added.status, JSON.stringify(added.body)).toBe(200);
  });
  afterAll(async () => {
    await w?.close();
  });

  it("after the bank's rotation, counts the new root at once for a merchant that counted the old one", async () => {
    const before = cardOf();
    await registered(before, signer);
    await w.witnessed();
    expect(await verdict(await lookup(before), before)).toBe("verified");

    newRoot = await generateIssuerSigner("Ed25519");
    const rotation = await signRootRotation({ issuer: bank.tenant, newRoot, version: 2 }, oldRoot);
    const rotated = await post(w.svc, "/api/v1/issuers/signing-keys", bank.key, rotation);
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
    const expected = {
      statement: rotation.statement,
      signature: rotation.signature,
      signingKeyId: oldRoot.signingKeyId,
    };
    rotationSigned = expected;

    // A card bound by the new root: the register answer carries the rotation, and so does lookup.
    const card = cardOf();
    const answer = await registered(card, newRoot);
    expect(answer.rootRotation).toEqual(expected);
    await w.witnessed();
    const looked = await lookup(card);
    expect(looked.rootRotation).toEqual(expected);
    expect(await verdict(looked, card)).toBe("verified");
    expect(await verdict(answer, card)).toBe("verified");
    // The card bound by the signer the old root endorsed verifies at once too.
    expect(await verdict(await lookup(before), before)).toBe("verified");

    // Sealed and stored at once through the client library (Connect, binary protobuf).
    const client = createReceiptsClient({
      baseUrl: w.svc.baseUrl,
      apiKey: w.svc.merchantKey,
      retry: { maxAttempts: 1 },
    });
    const trust = createKeyTrust({ policy, baseUrl: w.svc.baseUrl, rootsSeen: longKnown() });
    const receipt = {
      ...(receiptBody({
        receiptId: "r-root-rotation-1",
        merchantName: "Rotation Cafe",
      }) as unknown as MerchantReceipt),
      recipientHashedPan: card.hashedPan,
      cardBin: card.bin,
    };
    const stored = await sealAndStoreReceipt(client, receipt, { trust });
    expect(stored.kind).toBe("receipt");
    // gRPC carries it too.
    const grpc = createClient(KeysService, createGrpcTransport({ baseUrl: w.svc.baseUrl }));
    const overGrpc = await grpc.lookupKey(
      { recipientHashedPan: card.hashedPan, cardBin: card.bin },
      { headers: { "x-api-key": w.svc.merchantKey } },
    );
    expect(overGrpc.rootRotation).toMatchObject(expected);
    await expect(
      createKeyTrust({ policy, baseUrl: w.svc.baseUrl, rootsSeen: longKnown() }).verify(overGrpc, card),
    ).resolves.toMatchObject({ issuer: bank.tenant });

    // A merchant that never counted the old root waits the delay, as for a first root, or pins.
    expect(await verdict(looked, card, new Map())).toBe("root");
    const newKey = `${bank.tenant} ${newRoot.signingKeyId}`;
    const fresh = new Map<string, number>();
    await verdict(looked, card, fresh);
    const firstSeen = fresh.get(newKey) as number;
    expect(await verdict(looked, card, new Map([[newKey, firstSeen - DELAY + 120]]))).toBe("root");
    expect(await verdict(looked, card, new Map([[newKey, firstSeen - DELAY]]))).toBe("verified");
    const pin = (s: IssuerSigner) =>
      base64url(new Uint8Array(createHash("sha256").update(Buffer.from(s.spki, "base64")).digest()));
    const pinned = (s: IssuerSigner) => ({ ...policy, pinnedRoots: { [bank.tenant]: pin(s) } });
    expect(
      await refusal(createKeyTrust({ policy: pinned(oldRoot), baseUrl: w.svc.baseUrl }).verify(looked, card)),
    ).toBe("signature");
    expect(
      await refusal(createKeyTrust({ policy: pinned(newRoot), baseUrl: w.svc.baseUrl }).verify(looked, card)),
    ).toBe("verified");
  });

  it("carries the rotation on the self-check and on a register's PAR answer, over REST and gRPC", async () => {
    expect(rotationSigned).toBeDefined();
    // The self-check answers the bank what look-up answers a merchant, the rotation included.
    const card = cardOf();
    await registered(card, newRoot);
    await w.witnessed();
    const self = await post(w.svc, "/api/v1/kt/self-check", bank.key, {
      recipientHashedPan: card.hashedPan,
      cardBin: card.bin,
    });
    expect(self.status, JSON.stringify(self.body)).toBe(200);
    expect(self.body.data.rootRotation).toEqual(rotationSigned);
    expect(await verdict(self.body.data as Answer, card)).toBe("verified");
    const keys = createClient(KeysService, createGrpcTransport({ baseUrl: w.svc.baseUrl }));
    const selfOverGrpc = await keys.ktSelfCheck(
      { recipientHashedPan: card.hashedPan, cardBin: card.bin },
      { headers: { "x-api-key": bank.key } },
    );
    expect(selfOverGrpc.rootRotation).toMatchObject(rotationSigned);

    // A card registered by hashed PAN and PAR: the PAR's answer (parAnswer) carries it as well.
    const onboarding = createClient(OnboardingService, createGrpcTransport({ baseUrl: w.svc.baseUrl }));
    for (const surface of ["REST", "gRPC"] as const) {
      const dual = { ...cardOf(), par: `Q9${randomUUID().replaceAll("-", "").toUpperCase().slice(0, 27)}` };
      const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
      const device = {
        keyId: randomUUID(),
        publicKey: publicKey.export({ type: "spki", format: "der" }).toString("base64"),
      };
      const signed = await signCardBindings(
        {
          issuer: bank.tenant,
          card: { hashedPan: dual.hashedPan, par: dual.par },
          bin: bank.bin,
          ...device,
          versions: { hashedPan: 1, par: 1 },
        },
        newRoot,
      );
      const request = { hashedPan: dual.hashedPan, par: dual.par, cardBin: bank.bin, ...device, ...signed };
      let parAnswer: { rootRotation?: unknown } | undefined;
      if (surface === "REST") {
        const res = await post(w.svc, "/api/v1/onboarding/register", bank.key, request);
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        expect(res.body.data.rootRotation, surface).toEqual(rotationSigned);
        parAnswer = res.body.data.parAnswer;
      } else {
        const res = await onboarding.register(request, { headers: { "x-api-key": bank.key } });
        expect(res.rootRotation, surface).toMatchObject(rotationSigned);
        parAnswer = res.parAnswer;
      }
      expect(parAnswer?.rootRotation, surface).toMatchObject(rotationSigned);
    }
  });

  it("does not shorten the delay for a forged rootRotation", async () => {
    const card = cardOf();
    await registered(card, newRoot);
    await w.witnessed();
    const answer = await lookup(card);
    expect(await verdict(answer, card)).toBe("verified");
    const stranger = await generateIssuerSigner("Ed25519");
    const cases: Array<[string, Signed]> = [
      // The bank's signer (current, endorsed by the old root) introducing the new root.
      ["signed by a signer", await forged(newRoot, signer)],
      [
        "a signer's signature claimed as the old root's",
        await forged(newRoot, signer, { signingKeyId: oldRoot.signingKeyId }),
      ],
      // Another bank's root (counted for long by this merchant) introducing the bank's new root.
      ["signed by another issuer's root", await forged(newRoot, otherRoot)],
      ["another issuer's rotation", await forged(newRoot, oldRoot, { issuer: other.tenant })],
      // The old root's signature on a statement naming another key.
      ["naming another key", await forged(stranger, oldRoot)],
    ];
    for (const [what, rootRotation] of cases) {
      expect(await verdict({ ...answer, rootRotation }, card), what).toBe("root");
    }
  });

  it("keeps the delay for the recovery root after a self-revocation, whatever rotation the answer carries", async () => {
    const revocation = await signSigningKeyRevocation(
      { issuer: bank.tenant, signingKeyId: newRoot.signingKeyId, version: 3 },
      newRoot,
    );
    const revoked = await post(
      w.svc,
      `/api/v1/issuers/signing-keys/${newRoot.signingKeyId}/revoke`,
      bank.key,
      revocation,
    );
    expect(revoked.status, JSON.stringify(revoked.body)).toBe(200);
    const recovery = await generateIssuerSigner("Ed25519");
    const added = await post(w.svc, "/api/v1/issuers/signing-keys", bank.key, { publicKey: recovery.spki });
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    // The operator confirms it once the log has published the revocation (a conflict before).
    const path = `/admin/v1/issuers/${bank.tenant}/signing-keys/${recovery.signingKeyId}/confirm`;
    let confirmed = await w.admin("POST", path);
    for (let i = 0; i < 100 && confirmed.status === 409; i++) {
      await w.witnessed();
      await new Promise((r) => setTimeout(r, 100));
      confirmed = await w.admin("POST", path);
    }
    expect(confirmed.status, JSON.stringify(confirmed.body)).toBe(200);
    const card = cardOf();
    const answer = await registered(card, recovery);
    expect(answer.rootRotation).toBeUndefined();
    await w.witnessed();
    const looked = await lookup(card);
    expect(looked.rootRotation).toBeUndefined();
    // A merchant that counted both earlier roots for long.
    const seen = () => new Map([...longKnown(), [`${bank.tenant} ${newRoot.signingKeyId}`, 0]]);
    expect(await verdict(looked, card, seen())).toBe("root");
    // The thief of the revoked root, or of the root before it, signs the recovery root's "rotation".
    for (const [what, rootRotation] of [
      ["by the self-revoked root", await forged(recovery, newRoot, { version: 3 })],
      ["by the root the rotation retired", await forged(recovery, oldRoot, { version: 3 })],
    ] as Array<[string, Signed]>) {
      expect(await verdict({ ...looked, rootRotation }, card, seen()), what).toBe("root");
    }
  });
});
