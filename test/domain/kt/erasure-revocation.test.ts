import { generateKeyPairSync, randomUUID } from "node:crypto";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { OnboardingService } from "../../../gen/receipts/v1/onboarding_pb.js";
import {
  type IssuerSigner,
  keyBindingStatement,
  keyRevocationStatement,
  signCardBindings,
  signStatement,
} from "../../../src/client/key-binding.js";
import { panHashOf } from "../../../src/domain/pan.js";
import { fromBase64Strict } from "../../../src/kt/bytes.js";
import { leafHash, verifyInclusion } from "../../../src/kt/merkle.js";
import type { KtBinding } from "../../../src/kt/wire.js";
import type { KtLeafRecord } from "../../../src/store/kt-types.js";
import { storeDouble } from "../../hardening/store-double.js";
import { hashPan, post, startService, type TestService } from "../../support/harness.js";
import { operatorSteps, ownBins, registeredRoot, untilSequenced } from "../../support/kt-issuers.js";

/**
 * An erasure writes a revocation (issue 32): DeleteUser takes the issuer's signed
 * `receipts.v1/key-revocation` (reason "erased") of each bound card reference, checks it as register
 * checks a binding, queues it in the erasure's own store step, and once its leaf is appended deletes
 * the card's statements and openings, the revocation's included; the leaves stay and every proof
 * still verifies. A requireBindings tenant's erasure of a bound card without one is `forbidden`, any
 * bad revocation is refused in the envelope, and in every refusal nothing is erased. A tenant without
 * requireBindings erases unrevoked, as before. A retry after a failure at any step finishes, and the
 * revocation is logged once.
 */

const TOKEN = "kt-erasure-revocation-admin-token-012345";
const PEPPER = "kt-erasure-revocation-pepper-0123456789abcdef";
const double = storeDouble();
let svc: TestService;

const admin = (method: string, path: string, body?: unknown) =>
  operatorSteps(svc.baseUrl, TOKEN)(method, path, body);

interface Bank {
  id: string;
  key: string;
  bin: string;
  root: IssuerSigner;
}

async function bank(id: string, bin: string, strict: boolean): Promise<Bank> {
  const key = await svc.newKey({ role: "issuer", tier: "standard", tenantId: id });
  await ownBins(svc, id, [bin]);
  if (strict) await admin("PUT", `/admin/v1/issuers/${id}/require-bindings`, { requireBindings: true });
  const root = await registeredRoot(svc, admin, { id, key });
  return { id, key, bin, root };
}

let cards = 0;
interface Card {
  hashedPan: string;
  keyId: string;
  userId: string;
  cardKey: string;
  /** The register request that bound it (its signed binding included). */
  request: { hashedPan: string; publicKey: string; keyId: string; binding: KtBinding };
}

/** A card of the bank's BIN registered with its signed binding (version 1), its leaf logged. */
async function boundCard(b: Bank): Promise<Card> {
  const hashedPan = hashPan(`${b.bin}${String(++cards).padStart(8, "0")}`);
  const keyId = randomUUID();
  const { publicKey: k } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const publicKey = k.export({ type: "spki", format: "der" }).toString("base64");
  const statement = keyBindingStatement({
    issuer: b.id,
    card: { hashedPan },
    bin: b.bin,
    keyId,
    publicKey,
    version: 1,
  });
  const binding = await signStatement(statement, b.root);
  const request = { hashedPan, publicKey, keyId, binding };
  const res = await post(svc, "/api/v1/onboarding/register", b.key, request);
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return { hashedPan, keyId, userId: res.body.data.userId, cardKey: panHashOf(PEPPER, hashedPan), request };
}

/** The card's revocation for an erasure, signed by `signer` (the bank's root unless said otherwise). */
async function revocation(
  b: Bank,
  card: Card,
  change: Partial<{
    version: number;
    keyId: string;
    issuer: string;
    reason: "lost" | "erased";
    hashedPan: string;
  }> = {},
  signer: IssuerSigner = b.root,
): Promise<KtBinding> {
  const statement = keyRevocationStatement({
    issuer: change.issuer ?? b.id,
    card: { hashedPan: change.hashedPan ?? card.hashedPan },
    bin: b.bin,
    keyId: change.keyId ?? card.keyId,
    version: change.version ?? 2,
    reason: change.reason ?? "erased",
  });
  return signStatement(statement, signer);
}

async function erase(b: Bank, userId: string, revocations?: KtBinding[]) {
  const res = await fetch(`${svc.baseUrl}/api/v1/users/${userId}`, {
    method: "DELETE",
    headers: {
      "x-api-key": b.key,
      ...(revocations === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(revocations === undefined ? {} : { body: JSON.stringify({ revocations }) }),
  });
  return {
    status: res.status,
    body: (await res.json()) as { data?: Record<string, number>; error?: Record<string, unknown> },
  };
}

/** The card's leaf records (statements of its sequence), as stored. */
async function leavesOf(card: Card): Promise<KtLeafRecord[]> {
  const head = await svc.store.ktLog.head();
  return (await svc.store.ktLog.leaves(0, head.size)).filter((l) => l.cardKey === card.cardKey);
}

/** Nothing of the erasure happened: the user, its key and the card's logged statements are all there. */
async function untouched(card: Card): Promise<void> {
  expect(await svc.store.users.findById(card.userId)).toBeDefined();
  expect(await svc.store.users.findKey(card.keyId)).toBeDefined();
  expect(await svc.store.erasures.find(card.userId)).toBeUndefined();
  const last = await svc.store.ktLog.lastOfSequence(`card:${card.cardKey}`);
  expect(last).toMatchObject({ version: 1, type: "receipts.v1/key-binding" });
  expect(last?.opening).toBeDefined();
}

/** The revocation is logged (one leaf), and nothing left in the log's records names the card or the user. */
async function revokedAndErased(card: Card): Promise<KtLeafRecord> {
  const id = `ktp_erasure_0_${card.userId}`;
  const leaf = await svc.store.ktLog.leafByPending(id);
  expect(leaf).toMatchObject({ type: "receipts.v1/key-revocation", tenantId: expect.any(String) });
  expect(leaf?.erasedAt).toBeInstanceOf(Date);
  for (const member of ["statement", "signature", "opening", "cardKey", "sequence", "userId"] as const) {
    expect(leaf?.[member], member).toBeUndefined();
  }
  expect(await leavesOf(card)).toEqual([]);
  const head = await svc.store.ktLog.head();
  const all = await svc.store.ktLog.leaves(0, head.size);
  expect(all.filter((l) => l.pendingId === id)).toHaveLength(1);
  expect(all.filter((l) => l.userId === card.userId)).toEqual([]);
  expect(await svc.store.ktLog.sequenceState(`card:${card.cardKey}`)).toBeUndefined();
  expect(await svc.store.ktLog.findPending(id)).toBeUndefined();
  return leaf as KtLeafRecord;
}

const sequenced = () => untilSequenced(svc);

let strict: Bank;
let lax: Bank;
let other: Bank;

beforeAll(async () => {
  svc = await startService({
    store: double.store,
    env: {
      ADMIN_TOKEN: TOKEN,
      HASHED_PAN_PEPPER: PEPPER,
      KT_SEQUENCER_POLL_MS: "20",
      KT_LOG_WAIT_MS: "3000",
    },
  });
  strict = await bank("erase-strict-bank", "53100011", true);
  lax = await bank("erase-lax-bank", "53100022", false);
  other = await bank("erase-other-bank", "53100033", true);
});
afterAll(async () => {
  double.heal();
  await svc?.close();
});

describe("an erasure revokes the card's binding", { timeout: 120_000 }, () => {
  it("refuses a requireBindings tenant's erasure of a bound card without a revocation: forbidden, nothing erased", async () => {
    const card = await boundCard(strict);
    const res = await erase(strict, card.userId);
    expect(res.status, JSON.stringify(res.body)).toBe(403);
    expect(res.body.error?.code).toBe("forbidden");
    expect(res.body.error?.details).toContain("revocations: is required");
    await untouched(card);
  });

  it("refuses each bad revocation in the envelope, erasing nothing", async () => {
    const card = await boundCard(strict);
    const another = await boundCard(strict);
    const good = await revocation(strict, card);
    const flipped = Buffer.from(good.signature, "base64");
    flipped[5] = (flipped[5] as number) ^ 1;
    const cases: Array<[string, KtBinding[], number, string, string]> = [
      [
        "a wrong version",
        [await revocation(strict, card, { version: 3 })],
        400,
        "invalid_request",
        "revocations[0].statement.version",
      ],
      [
        "a replayed first version",
        [await revocation(strict, card, { version: 1 })],
        400,
        "invalid_request",
        "revocations[0].statement.version",
      ],
      [
        "another key",
        [await revocation(strict, card, { keyId: randomUUID() })],
        400,
        "invalid_request",
        "revocations[0].statement.keyId",
      ],
      [
        "another card",
        [await revocation(strict, another)],
        400,
        "invalid_request",
        "revocations[0].statement.cardRef",
      ],
      [
        "the reason lost",
        [await revocation(strict, card, { reason: "lost" })],
        400,
        "invalid_request",
        "revocations[0].statement.reason",
      ],
      [
        "a bad signature",
        [{ ...good, signature: flipped.toString("base64") }],
        400,
        "invalid_signature",
        "revocations[0].signature",
      ],
      [
        "another tenant's signer",
        [await revocation(strict, card, {}, other.root)],
        400,
        "invalid_signature",
        "revocations[0].signingKeyId",
      ],
      [
        "another tenant's statement",
        [await revocation(other, card, { issuer: other.id }, other.root)],
        400,
        "invalid_request",
        "revocations[0].statement",
      ],
      ["the same revocation twice", [good, good], 400, "invalid_request", "revocations[1].statement.cardRef"],
      [
        "a binding instead",
        [
          await signStatement(
            keyBindingStatement({
              issuer: strict.id,
              card: { hashedPan: card.hashedPan },
              bin: strict.bin,
              keyId: card.keyId,
              publicKey: (await svc.store.users.findKey(card.keyId))?.publicKey as string,
              version: 2,
            }),
            strict.root,
          ),
        ],
        400,
        "invalid_request",
        "revocations[0].statement.type",
      ],
    ];
    for (const [what, revocations, status, code, field] of cases) {
      const res = await erase(strict, card.userId, revocations);
      expect(res.status, `${what}: ${JSON.stringify(res.body)}`).toBe(status);
      expect(res.body.error?.code, what).toBe(code);
      expect(String(res.body.error?.details), what).toContain(`${field}: `);
      expect(JSON.stringify(res.body), what).not.toContain(card.hashedPan);
      await untouched(card);
    }
    // Another tenant cannot erase the user at all.
    expect((await erase(other, card.userId, [good])).status).toBe(404);
    await untouched(card);
  });

  it("logs the revocation, then deletes every statement and opening of the card; the leaves stay and verify", async () => {
    const card = await boundCard(strict);
    const kept = await boundCard(strict);
    const before = await leavesOf(card);
    const res = await erase(strict, card.userId, [await revocation(strict, card)]);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.data).toMatchObject({ deletedKeys: 1, receiptsLeft: 0 });
    // The audit says the key change and that it was revoked (the key ids, never the card).
    const audited = (await svc.store.audit.list(500)).filter(
      (e) => e.action === "user.erased" && e.userId === card.userId,
    );
    expect(audited.map((e) => e.subject)).toEqual(["0 receipts, 1 keys, 1 revoked"]);
    const leaf = await revokedAndErased(card);
    expect(leaf.index).toBeGreaterThan(before[0]?.index as number);
    expect((await svc.store.ktLog.leaf(before[0]?.index as number))?.leaf).toEqual(before[0]?.leaf);
    expect((await erase(strict, card.userId)).status).toBe(404);
    // The kept card's statement is intact, and every leaf is included under a new checkpoint.
    expect((await svc.store.ktLog.lastOfSequence(`card:${kept.cardKey}`))?.opening).toBeDefined();
    await boundCard(strict);
    await sequenced();
    const checkpoint = await svc.store.ktLog.latestCheckpoint();
    for (const index of [before[0]?.index as number, leaf.index]) {
      const proof = await fetch(
        `${svc.baseUrl}/kt/v1/proof/inclusion?index=${index}&size=${checkpoint?.size}`,
      );
      const inclusion = ((await proof.json()) as { data: { inclusion: string[] } }).data.inclusion.map(
        (h) => fromBase64Strict(h) as Uint8Array,
      );
      const bytes = (await svc.store.ktLog.leaf(index))?.leaf as Uint8Array;
      const root = checkpoint?.root as Uint8Array;
      expect(verifyInclusion(index, checkpoint?.size as number, leafHash(bytes), inclusion, root)).toBe(true);
    }
  });

  it("takes the revocations over Connect and gRPC too", async () => {
    const transports = [
      createConnectTransport({ baseUrl: svc.baseUrl, httpVersion: "1.1" }),
      createGrpcTransport({ baseUrl: svc.baseUrl }),
    ];
    for (const transport of transports) {
      const card = await boundCard(strict);
      const client = createClient(OnboardingService, transport);
      const headers = { "x-api-key": strict.key };
      await expect(client.deleteUser({ userId: card.userId }, { headers })).rejects.toThrow(/revocation/);
      await untouched(card);
      const answer = await client.deleteUser(
        { userId: card.userId, revocations: [await revocation(strict, card)] },
        { headers },
      );
      expect(answer.deletedKeys).toBe(1);
      await revokedAndErased(card);
    }
  });

  it("erases a bound card unrevoked for a tenant without requireBindings, and revoked when it signs", async () => {
    const unrevoked = await boundCard(lax);
    const res = await erase(lax, unrevoked.userId);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(await leavesOf(unrevoked)).toEqual([]);
    expect(await svc.store.ktLog.leafByPending(`ktp_erasure_0_${unrevoked.userId}`)).toBeUndefined();
    const revoked = await boundCard(lax);
    expect((await erase(lax, revoked.userId, [await revocation(lax, revoked)])).status).toBe(200);
    await revokedAndErased(revoked);
  });

  it("refuses the card's binding signed before the erasure, revoked or not, and takes a new one at version 1", async () => {
    // The erasure restarts the card's sequence (nothing keeps a keyed reference of an erased card), so
    // a binding the bank signed before it, still in its window, would fit as version 1 again: whoever
    // holds the bank's API key could put the erased device's key back, and merchants would seal to it.
    const unrevoked = await boundCard(lax);
    expect((await erase(lax, unrevoked.userId)).status).toBe(200);
    const revoked = await boundCard(strict);
    expect((await erase(strict, revoked.userId, [await revocation(strict, revoked)])).status).toBe(200);
    for (const [b, card] of [
      [lax, unrevoked],
      [strict, revoked],
    ] as const) {
      const replay = await post(svc, "/api/v1/onboarding/register", b.key, card.request);
      expect(replay.status, JSON.stringify(replay.body)).toBe(400);
      expect(replay.body.error?.code).toBe("invalid_request");
      expect(replay.body.error?.details).toContain(
        "binding.statement: is a statement about a card that was erased",
      );
      expect(JSON.stringify(replay.body)).not.toContain(card.hashedPan);
      expect(await svc.store.ktLog.sequenceState(`card:${card.cardKey}`)).toBeUndefined();
      expect(await svc.store.users.findByPanHash(card.cardKey)).toBeUndefined();
      // The bank's new binding of the card (a new key, version 1) registers it again.
      const keyId = randomUUID();
      const { publicKey: k } = generateKeyPairSync("ec", { namedCurve: "P-256" });
      const publicKey = k.export({ type: "spki", format: "der" }).toString("base64");
      const fresh = keyBindingStatement({
        issuer: b.id,
        card: { hashedPan: card.hashedPan },
        bin: b.bin,
        keyId,
        publicKey,
        version: 1,
      });
      const again = await post(svc, "/api/v1/onboarding/register", b.key, {
        hashedPan: card.hashedPan,
        publicKey,
        keyId,
        binding: await signStatement(fresh, b.root),
      });
      expect(again.status, JSON.stringify(again.body)).toBe(200);
      expect(JSON.parse(Buffer.from(again.body.data.binding.statement, "base64").toString()).version).toBe(1);
    }
  });

  it("refuses a PAR binding signed before the erasure of a card held by hashed PAN and PAR", async () => {
    const card = {
      hashedPan: hashPan(`${lax.bin}${String(++cards).padStart(8, "0")}`),
      par: `Q9${randomUUID().replaceAll("-", "").toUpperCase().slice(0, 27)}`,
    };
    const device = () => {
      const { publicKey: k } = generateKeyPairSync("ec", { namedCurve: "P-256" });
      return { keyId: randomUUID(), publicKey: k.export({ type: "spki", format: "der" }).toString("base64") };
    };
    const sign = (key: { keyId: string; publicKey: string }, notBefore = Date.now()) =>
      signCardBindings(
        { issuer: lax.id, card, bin: lax.bin, ...key, versions: { hashedPan: 1, par: 1 }, notBefore },
        lax.root,
      );
    const old = device();
    const before = await sign(old);
    const first = await post(svc, "/api/v1/onboarding/register", lax.key, { ...card, ...old, ...before });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect((await erase(lax, first.body.data.userId)).status).toBe(200);
    // The old PAR binding beside a new hashed-PAN binding of the old key: the PAR's is refused.
    const mixed = { ...(await sign(old, Date.now() - 60_000)), parBinding: before.parBinding };
    const replay = await post(svc, "/api/v1/onboarding/register", lax.key, { ...card, ...old, ...mixed });
    expect(replay.status, JSON.stringify(replay.body)).toBe(400);
    expect(replay.body.error?.details).toContain(
      "parBinding.statement: is a statement about a card that was erased",
    );
    expect(JSON.stringify(replay.body)).not.toContain(card.par);
    const fresh = device();
    const again = await post(svc, "/api/v1/onboarding/register", lax.key, {
      ...card,
      ...fresh,
      ...(await sign(fresh)),
    });
    expect(again.status, JSON.stringify(again.body)).toBe(200);
  });

  it("answers 503 while the revocation waits for the log, and the same request finishes it, logging it once", async () => {
    const card = await boundCard(strict);
    await svc.app.kt.sequencer.stop();
    const revocations = [await revocation(strict, card)];
    const first = await erase(strict, card.userId, revocations);
    expect(first.status, JSON.stringify(first.body)).toBe(503);
    expect(JSON.stringify(first.body)).toContain("revocation is queued");
    expect(await svc.store.users.findById(card.userId)).toBeUndefined();
    svc.app.kt.sequencer.start();
    const again = await erase(strict, card.userId, revocations);
    expect(again.status, JSON.stringify(again.body)).toBe(200);
    await revokedAndErased(card);
  });

  it("answers conflict, erasing nothing, when the card's key log moved while the erasure was checked", async () => {
    const card = await boundCard(strict);
    const revocations = [await revocation(strict, card)];
    // The erasure is held at its store step, its revocation (version 2) already checked; meanwhile
    // the bank rotates the card's key with its own version 2, so the revocation no longer follows.
    double.inject("users.erase", "stall");
    const held = double.stalled("users.erase");
    const erasing = erase(strict, card.userId, revocations);
    await held;
    const keyId = randomUUID();
    const { publicKey: k } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const publicKey = k.export({ type: "spki", format: "der" }).toString("base64");
    const rotation = await signStatement(
      keyBindingStatement({
        issuer: strict.id,
        card: { hashedPan: card.hashedPan },
        bin: strict.bin,
        keyId,
        publicKey,
        version: 2,
        supersedes: card.keyId,
      }),
      strict.root,
    );
    const rotated = await post(svc, "/api/v1/onboarding/register", strict.key, {
      hashedPan: card.hashedPan,
      publicKey,
      keyId,
      binding: rotation,
    });
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
    double.release();
    const res = await erasing;
    expect(res.status, JSON.stringify(res.body)).toBe(409);
    expect(res.body.error?.code).toBe("conflict");
    expect(res.body.error?.message).toContain("Sign the revocation again");
    expect(res.body.error?.details).toMatch(/^revocations: \S[^;]*$/);
    expect(JSON.stringify(res.body)).not.toContain(card.hashedPan);
    // Nothing was erased: the user holds the rotated key, the card's statements are all there.
    expect((await svc.store.users.findById(card.userId))?.activeKeyId).toBe(keyId);
    expect(await svc.store.users.findKey(keyId)).toBeDefined();
    expect(await svc.store.ktLog.leafByPending(`ktp_erasure_0_${card.userId}`)).toBeUndefined();
    expect(await svc.store.ktLog.findPending(`ktp_erasure_0_${card.userId}`)).toBeUndefined();
    // Signed again for the rotated key (version 3), the same erasure finishes.
    const again = await revocation(strict, card, { keyId, version: 3 });
    const done = await erase(strict, card.userId, [again]);
    expect(done.status, JSON.stringify(done.body)).toBe(200);
    expect(done.body.data).toMatchObject({ deletedKeys: 2, receiptsLeft: 0 });
    await revokedAndErased(card);
  });

  it.each([
    "users.findById",
    "erasures.begin",
    "users.erase",
    "ktLog.findPending",
    "ktLog.eraseCard",
    "grants.deleteByUser",
    "audit.append",
    "erasures.finish",
  ])("finishes when %s failed: 503, then 200 on retry, the revocation logged once", async (step) => {
    const card = await boundCard(strict);
    const revocations = [await revocation(strict, card)];
    double.inject(step, "fail");
    const failed = await erase(strict, card.userId, revocations);
    expect(failed.status, JSON.stringify(failed.body)).toBe(503);
    const retried = await erase(strict, card.userId, revocations);
    expect(retried.status, JSON.stringify(retried.body)).toBe(200);
    await revokedAndErased(card);
    expect((await erase(strict, card.userId, revocations)).status).toBe(404);
  });
});
