import { describe, expect, it } from "vitest";
import { base64, base64url } from "../../src/kt/bytes.js";
import { canonicalJson, type Json } from "../../src/kt/json.js";
import { nodeEngine } from "../../src/kt/node-engine.js";
import type { SignatureEngine } from "../../src/kt/signatures.js";
import { formatTime } from "../../src/kt/statements.js";
import { VerifierCache, type VerifyLookupInput, verifyLookup } from "../../src/kt/verify.js";
import type { KtLookupAnswer } from "../../src/kt/wire.js";
import { nodeSha256 } from "./support.js";
import {
  answerFor,
  bindingOf,
  type Issuer,
  makeIssuer,
  makeUserKey,
  NOW,
  snapshotOf,
  World,
} from "./world.js";

/**
 * The merchant's verification against the answers a lying or careless service could send next, one
 * lie each: missing parts, a key named three different ways, a statement about another key, a
 * signing key the snapshot does not make current, a root that is not the pinned one, escrow keys
 * that are not the ones the snapshot names. Each must be refused by the check meant to catch it;
 * the honest variants beside them must pass.
 */

const HASHED_PAN = "c".repeat(64);
const BIN = { digits: "41111111", kind: "bin" as const };
const HPKE = "HPKE-P256-SHA256-A256GCM";
type Binding = NonNullable<KtLookupAnswer["binding"]>;
type Proof = NonNullable<KtLookupAnswer["proof"]>;

function setting() {
  const world = new World();
  const bank = makeIssuer("bank-a");
  const key = makeUserKey();
  const snapshot = snapshotOf([{ issuer: bank, bins: ["411111"] }]);
  const answer = answerFor(world, {
    statement: bindingOf(bank, key, HASHED_PAN),
    signer: bank,
    key,
    snapshot,
  });
  const input: VerifyLookupInput = {
    answer,
    card: { cardRef: { hashedPan: HASHED_PAN }, bin: BIN },
    sealTo: { keyId: key.keyId, algorithm: HPKE, spki: key.spki },
    directoryJson: snapshot,
    now: NOW,
  };
  return { world, bank, key, snapshot, input };
}

type Setting = ReturnType<typeof setting>;

/** Node's native engine and hash (signatures.test.ts proves it answers as the pure one does). */
const native = { engine: nodeEngine, sha256: nodeSha256 };

const check = (s: Setting, input: Partial<VerifyLookupInput> = {}, policy = s.world.policy()) =>
  verifyLookup(policy, { ...s.input, ...input }, native);

/** The verdict of `s`'s answer with its statement replaced by `statement` (same key, snapshot, card). */
function withStatement(s: Setting, statement: string, options: { isEscrowed?: boolean; par?: string } = {}) {
  const answer = answerFor(s.world, {
    statement,
    signer: s.bank,
    key: s.key,
    snapshot: s.snapshot,
    ...options,
  });
  return check(s, { answer });
}

/** A snapshot of one issuer whose signing keys are `keys` (each as the snapshot lists it). */
function snapshotWithKeys(tenant: Issuer, keys: Array<Record<string, Json>>): string {
  const parsed = JSON.parse(snapshotOf([{ issuer: tenant, bins: ["411111"] }])) as {
    issuers: Array<{ signingKeys: Json }>;
  };
  (parsed.issuers[0] as { signingKeys: Json }).signingKeys = keys;
  return canonicalJson(parsed as unknown as Json);
}

const keyEntry = (issuer: Issuer, changes: Record<string, Json> = {}): Record<string, Json> => ({
  signingKeyId: issuer.signingKeyId,
  algorithm: "Ed25519",
  spki: base64(issuer.spki),
  role: "root",
  status: "current",
  effectiveFrom: formatTime(NOW - 10 * 86_400_000),
  ...changes,
});

describe("verifyLookup against a service that leaves parts out", () => {
  it("refuses an answer with no checkpoint, no binding, no opening or no proof", () => {
    const s = setting();
    const { proof, binding, opening, ...bare } = s.input.answer;
    expect(check(s, { answer: bare })).toEqual({
      ok: false,
      check: "checkpoint",
      reason: "the answer carries no checkpoint",
    });
    const note = (proof as Proof).checkpoint;
    const [b, o, p] = [binding as Binding, opening as string, proof as Proof];
    const missing: KtLookupAnswer[] = [
      { ...bare, checkpoint: note, binding: b, opening: o },
      { ...bare, proof: p, opening: o },
      { ...bare, proof: p, binding: b },
    ];
    for (const answer of missing) {
      expect(check(s, { answer })).toEqual({
        ok: false,
        check: "statement",
        reason: "the answer carries no signed statement",
      });
    }
  });

  it("refuses a statement or signature that is not strict base64 of the right length", () => {
    const s = setting();
    const binding = s.input.answer.binding as Binding;
    const bent = (changes: Partial<Binding>) =>
      check(s, { answer: { ...s.input.answer, binding: { ...binding, ...changes } } });
    expect(bent({ statement: "not base64!" })).toEqual({
      ok: false,
      check: "statement",
      reason: "statement is not base64",
    });
    expect(bent({ signature: base64(new Uint8Array(63)) })).toMatchObject({ check: "signature" });
    expect(bent({ signature: `${binding.signature}AAAA` })).toMatchObject({ check: "signature" });
  });

  it("refuses an opening of the wrong length, and proof hashes that are not a list of 32-byte hashes", () => {
    const s = setting();
    const answer = s.input.answer;
    const proof = answer.proof as Proof;
    expect(check(s, { answer: { ...answer, opening: base64(new Uint8Array(15)) } })).toMatchObject({
      check: "inclusion",
    });
    for (const inclusion of [
      [...proof.inclusion.slice(1), 7],
      "AAAA",
      [base64(new Uint8Array(31)), ...proof.inclusion.slice(1)],
    ]) {
      const bent = { ...answer, proof: { ...proof, inclusion: inclusion as string[] } };
      expect(check(s, { answer: bent }), JSON.stringify(inclusion)).toMatchObject({ check: "inclusion" });
      const bentDirectory = {
        ...answer,
        directory: { ...answer.directory, inclusion: inclusion as string[] },
      };
      expect(check(s, { answer: bentDirectory }), JSON.stringify(inclusion)).toMatchObject({
        check: "directory",
        reason: "the snapshot is not proven under the checkpoint",
      });
    }
  });

  it("asks for the card's own BIN before trusting any issuer", () => {
    const s = setting();
    expect(check(s, { card: { cardRef: s.input.card.cardRef } })).toEqual({
      ok: false,
      check: "issuer",
      reason: "the card's own BIN is needed to check who owns it",
    });
  });
});

describe("verifyLookup against a key named three ways", () => {
  it("reports the tree size and the witnessed time of an accepted answer", () => {
    const s = setting();
    expect(check(s)).toEqual({
      ok: true,
      issuer: "bank-a",
      version: 1,
      // The binding's own, as bindingOf dates it: what KeyTrust orders a card's bindings by.
      notBefore: formatTime(NOW - 86_400_000),
      treeSize: (s.input.answer.proof as Proof).treeSize,
      witnessedAt: Math.floor((NOW - 60_000) / 1000),
    });
  });

  it("refuses an answer whose key, key id or algorithm is not the one the merchant seals to", () => {
    const s = setting();
    const answer = s.input.answer;
    const lies: KtLookupAnswer[] = [
      { ...answer, publicKey: "%%%" },
      { ...answer, keyId: makeUserKey().keyId },
      { ...answer, algorithm: "RSA-OAEP-256" },
    ];
    for (const lie of lies) {
      expect(check(s, { answer: lie })).toEqual({
        ok: false,
        check: "key",
        reason: "the key to seal to is not the key the answer names",
      });
    }
  });

  it("refuses a signed binding that describes another key id, algorithm or key hash", () => {
    const s = setting();
    const other = makeUserKey();
    const lies = [
      bindingOf(s.bank, { keyId: other.keyId, spkiSha256: s.key.spkiSha256 }, HASHED_PAN),
      bindingOf(s.bank, { keyId: s.key.keyId, spkiSha256: other.spkiSha256 }, HASHED_PAN),
      bindingOf(s.bank, s.key, HASHED_PAN, { algorithm: "RSA-OAEP-256" }),
    ];
    for (const statement of lies) {
      expect(withStatement(s, statement)).toEqual({
        ok: false,
        check: "key",
        reason: "the binding does not describe the key to seal to",
      });
    }
  });

  it("refuses an escrow-key statement sent as a key binding, a statement not yet valid, and one longer than the policy allows", () => {
    const s = setting();
    const escrowStatement = canonicalJson({
      v: 1,
      type: "receipts.v1/escrow-key",
      issuer: "bank-a",
      keyId: s.key.keyId,
      algorithm: HPKE,
      spkiSha256: s.key.spkiSha256,
      version: 1,
      supersedes: null,
      notBefore: formatTime(NOW - 1000_000),
      notAfter: formatTime(NOW + 1000_000),
    });
    expect(withStatement(s, escrowStatement)).toEqual({
      ok: false,
      check: "statement",
      reason: "the statement is not a receipts.v1/key-binding",
    });
    const early = bindingOf(s.bank, s.key, HASHED_PAN, {
      notBefore: formatTime(NOW + 3_600_000),
      notAfter: formatTime(NOW + 20 * 86_400_000),
    });
    expect(withStatement(s, early)).toMatchObject({ check: "window" });
    const twentyDays = bindingOf(s.bank, s.key, HASHED_PAN, { notAfter: formatTime(NOW + 19 * 86_400_000) });
    const answer = answerFor(s.world, {
      statement: twentyDays,
      signer: s.bank,
      key: s.key,
      snapshot: s.snapshot,
    });
    expect(check(s, { answer }).ok).toBe(true);
    expect(check(s, { answer }, s.world.policy({ maxBindingDays: 10 }))).toMatchObject({
      check: "statement",
    });
  });

  it("refuses a binding of another PAR logged under the card's PAR", () => {
    const s = setting();
    const par = "B".repeat(29);
    const card = { cardRef: { par }, bin: BIN };
    const answerOf = (about: string) =>
      answerFor(s.world, {
        statement: bindingOf(s.bank, s.key, about),
        signer: s.bank,
        key: s.key,
        snapshot: s.snapshot,
        par,
      });
    expect(check(s, { answer: answerOf(par), card }).ok).toBe(true);
    expect(check(s, { answer: answerOf("C".repeat(29)), card })).toEqual({
      ok: false,
      check: "card",
      reason: "the binding is about another card",
    });
  });
});

describe("verifyLookup against signing keys the snapshot does not vouch for", () => {
  /** `s` with the snapshot listing `keys` for bank-a and the binding signed by `signer`. */
  function signedUnder(s: Setting, signer: Issuer, keys: Array<Record<string, Json>>) {
    const snapshot = snapshotWithKeys(s.bank, keys);
    const answer = answerFor(s.world, {
      statement: bindingOf(s.bank, s.key, HASHED_PAN),
      signer,
      key: s.key,
      snapshot,
    });
    return { answer, directoryJson: snapshot };
  }

  it("refuses a signing key that is pending, revoked or not yet in effect", () => {
    const s = setting();
    for (const changes of [
      { status: "pending" },
      { status: "revoked" },
      { effectiveFrom: formatTime(NOW + 3_600_000) },
    ]) {
      expect(check(s, signedUnder(s, s.bank, [keyEntry(s.bank, changes)])), JSON.stringify(changes)).toEqual({
        ok: false,
        check: "signature",
        reason: "the signing key is not current for the issuer",
      });
    }
    expect(check(s, signedUnder(s, s.bank, [keyEntry(s.bank)])).ok).toBe(true);
  });

  it("refuses a signing key the snapshot lists under another algorithm, or whose key does not parse", () => {
    const s = setting();
    for (const changes of [{ algorithm: "ECDSA-P256-SHA256" }, { spki: base64(new Uint8Array(44)) }]) {
      expect(check(s, signedUnder(s, s.bank, [keyEntry(s.bank, changes)])), JSON.stringify(changes)).toEqual({
        ok: false,
        check: "signature",
        reason: "the snapshot's signing key does not parse",
      });
    }
  });

  it("accepts a signer under the pinned root, and refuses when the current root is not the pinned one", () => {
    const s = setting();
    const root = makeIssuer("bank-a");
    const pin = base64url(nodeSha256(root.spki));
    const pinned = s.world.policy({ pinnedRoots: { "bank-a": pin } });
    const signer = keyEntry(s.bank, { role: "signer" });
    const rootEntry = (changes: Record<string, Json> = {}) => keyEntry(root, changes);
    expect(check(s, signedUnder(s, s.bank, [rootEntry(), signer]), pinned)).toMatchObject({ ok: true });
    // Another issuer's pin does not apply to bank-a.
    const elsewhere = s.world.policy({ pinnedRoots: { "bank-b": base64url(nodeSha256(s.bank.spki)) } });
    expect(check(s, signedUnder(s, s.bank, [rootEntry(), signer]), elsewhere)).toMatchObject({ ok: true });
    const refusals = [
      // The pinned key listed, but not as the root, not current, or not yet in effect.
      [rootEntry({ role: "signer" }), signer],
      [rootEntry({ status: "revoked" }), signer],
      [rootEntry({ status: "pending" }), signer],
      [rootEntry({ effectiveFrom: formatTime(NOW + 3_600_000) }), signer],
      // A current root, but not the pinned one.
      [keyEntry(s.bank)],
    ];
    for (const keys of refusals) {
      expect(check(s, signedUnder(s, s.bank, keys), pinned), JSON.stringify(keys[0])).toEqual({
        ok: false,
        check: "signature",
        reason: "the issuer's root is not the pinned one",
      });
    }
  });
});

describe("verifyLookup against escrow keys the snapshot does not name", () => {
  function escrowSetting() {
    const s = setting();
    const escrow = makeUserKey();
    const service = makeUserKey();
    const ref = (k: { keyId: string; spkiSha256: string }) => ({
      keyId: k.keyId,
      algorithm: HPKE,
      spkiSha256: k.spkiSha256,
    });
    const snapshot = snapshotOf([{ issuer: s.bank, bins: ["411111"], escrowKey: ref(escrow) }], {
      serviceEscrowKey: ref(service),
    });
    const statementOf = (changes: Record<string, Json> = {}) =>
      canonicalJson({
        v: 1,
        type: "receipts.v1/escrow-key",
        issuer: "bank-a",
        keyId: escrow.keyId,
        algorithm: HPKE,
        spkiSha256: escrow.spkiSha256,
        version: 2,
        supersedes: null,
        notBefore: formatTime(NOW - 1000_000),
        notAfter: formatTime(NOW + 1000_000),
        ...changes,
      });
    const sealTo = { keyId: escrow.keyId, algorithm: HPKE, spki: escrow.spki };
    const answerOf = (statement: string, par?: string) =>
      answerFor(s.world, {
        statement,
        signer: s.bank,
        key: escrow,
        snapshot,
        isEscrowed: true,
        ...(par === undefined ? {} : { par }),
      });
    return { s, escrow, service, snapshot, statementOf, sealTo, answerOf };
  }

  it("accepts the BIN owner's escrow key with its statement, for a hashed PAN and for a PAR card", () => {
    const e = escrowSetting();
    const input = { answer: e.answerOf(e.statementOf()), sealTo: e.sealTo, directoryJson: e.snapshot };
    expect(check(e.s, input)).toMatchObject({ ok: true, issuer: "bank-a", version: 2 });
    // An escrow-key statement is logged without the card's PAR: a PAR card does not change its leaf.
    const parCard = { cardRef: { par: "D".repeat(29) }, bin: BIN };
    expect(check(e.s, { ...input, card: parCard })).toMatchObject({ ok: true, issuer: "bank-a" });
  });

  it("refuses an escrow statement that describes another key id, algorithm or key hash", () => {
    const e = escrowSetting();
    const other = makeUserKey();
    for (const changes of [
      { keyId: other.keyId },
      { algorithm: "RSA-OAEP-256" },
      { spkiSha256: other.spkiSha256 },
    ]) {
      const input = {
        answer: e.answerOf(e.statementOf(changes)),
        sealTo: e.sealTo,
        directoryJson: e.snapshot,
      };
      expect(check(e.s, input), JSON.stringify(changes)).toEqual({
        ok: false,
        check: "key",
        reason: "the escrow-key statement does not describe the key to seal to",
      });
    }
  });

  it("refuses a key that is neither the owner's escrow key nor the service's, whatever matches", () => {
    const e = escrowSetting();
    const stranger = makeUserKey();
    const answer = e.answerOf(e.statementOf());
    const tries = [
      // A stranger's key presented as escrow.
      { keyId: stranger.keyId, algorithm: HPKE, spki: stranger.spki },
      // The owner's escrow key id and key, under another algorithm.
      { ...e.sealTo, algorithm: "RSA-OAEP-256" },
      // The owner's escrow key id with another key.
      { ...e.sealTo, spki: stranger.spki },
      // Another key id for the owner's key.
      { ...e.sealTo, keyId: stranger.keyId },
    ];
    for (const sealTo of tries) {
      const lie = {
        ...answer,
        keyId: sealTo.keyId,
        algorithm: sealTo.algorithm,
        publicKey: base64(sealTo.spki),
      };
      expect(
        check(e.s, { answer: lie, sealTo, directoryJson: e.snapshot }),
        JSON.stringify(sealTo.keyId),
      ).toEqual({
        ok: false,
        check: "escrow",
        reason: "not the current escrow key of the BIN's owner",
      });
    }
    // The service's escrow key for a card nobody owns, when the policy allows it: no issuer, no version.
    const serviceSeal = { keyId: e.service.keyId, algorithm: HPKE, spki: e.service.spki };
    const serviceAnswer = { ...answer, keyId: e.service.keyId, publicKey: base64(e.service.spki) };
    const unowned = { cardRef: e.s.input.card.cardRef, bin: { digits: "99999999", kind: "bin" as const } };
    const allowed = e.s.world.policy({ allowServiceEscrow: true });
    expect(
      check(
        e.s,
        { answer: serviceAnswer, sealTo: serviceSeal, directoryJson: e.snapshot, card: unowned },
        allowed,
      ),
    ).toEqual({
      ok: true,
      issuer: null,
      version: null,
      notBefore: null,
      treeSize: (answer.proof as Proof).treeSize,
      witnessedAt: Math.floor((NOW - 60_000) / 1000),
    });
    // The owner's escrow key for a card nobody owns: refused with the reason the BIN has no owner.
    expect(check(e.s, { answer, sealTo: e.sealTo, directoryJson: e.snapshot, card: unowned })).toEqual({
      ok: false,
      check: "escrow",
      reason: "no issuer owns the card's BIN",
    });
  });
});

describe("VerifierCache", () => {
  /** Node's engine, counting the signatures it checks. */
  function counting(): SignatureEngine & { calls: number } {
    const engine = {
      calls: 0,
      ed25519: (...args: Parameters<SignatureEngine["ed25519"]>) => {
        engine.calls += 1;
        return nodeEngine.ed25519(...args);
      },
      p256: (...args: Parameters<SignatureEngine["p256"]>) => {
        engine.calls += 1;
        return nodeEngine.p256(...args);
      },
    };
    return engine;
  }

  it("checks a checkpoint's signatures once per policy, and again once it is forgotten", () => {
    const s = setting();
    const policy = s.world.policy();
    const engine = counting();
    const cache = new VerifierCache(1);
    expect(verifyLookup(policy, s.input, { cache, engine, sha256: nodeSha256 }).ok).toBe(true);
    const first = engine.calls;
    // The log's signature and two cosignatures, then the statement's.
    expect(first).toBe(4);
    expect(verifyLookup(policy, s.input, { cache, engine, sha256: nodeSha256 }).ok).toBe(true);
    expect(engine.calls - first).toBe(1);
    // Another policy object: its own checks.
    engine.calls = 0;
    expect(verifyLookup(s.world.policy(), s.input, { cache, engine, sha256: nodeSha256 }).ok).toBe(true);
    expect(engine.calls).toBe(4);
    // A second checkpoint pushes the first out of a cache of one.
    const later = answerFor(s.world, {
      statement: bindingOf(s.bank, s.key, HASHED_PAN),
      signer: s.bank,
      key: s.key,
      snapshot: s.snapshot,
    });
    expect(
      verifyLookup(policy, { ...s.input, answer: later }, { cache, engine, sha256: nodeSha256 }).ok,
    ).toBe(true);
    engine.calls = 0;
    expect(verifyLookup(policy, s.input, { cache, engine, sha256: nodeSha256 }).ok).toBe(true);
    expect(engine.calls).toBe(4);
    // A checkpoint whose signatures failed is not remembered as checked.
    const stranger = new World();
    const forged = {
      ...s.input.answer,
      proof: { ...(s.input.answer.proof as Proof), checkpoint: stranger.checkpoint() },
    };
    engine.calls = 0;
    expect(
      verifyLookup(policy, { ...s.input, answer: forged }, { cache, engine, sha256: nodeSha256 }),
    ).toMatchObject({
      check: "checkpoint",
    });
    expect(
      verifyLookup(policy, { ...s.input, answer: forged }, { cache, engine, sha256: nodeSha256 }),
    ).toMatchObject({
      check: "checkpoint",
    });
  });

  it("keeps sixteen checkpoints by default", () => {
    const s = setting();
    const policy = s.world.policy();
    const engine = counting();
    const cache = new VerifierCache();
    const answers = Array.from({ length: 16 }, () =>
      answerFor(s.world, {
        statement: bindingOf(s.bank, s.key, HASHED_PAN),
        signer: s.bank,
        key: s.key,
        snapshot: s.snapshot,
      }),
    );
    for (const answer of answers)
      expect(verifyLookup(policy, { ...s.input, answer }, { cache, engine, sha256: nodeSha256 }).ok).toBe(
        true,
      );
    engine.calls = 0;
    for (const answer of answers)
      expect(verifyLookup(policy, { ...s.input, answer }, { cache, engine, sha256: nodeSha256 }).ok).toBe(
        true,
      );
    expect(engine.calls).toBe(16);
    const one = answerFor(s.world, {
      statement: bindingOf(s.bank, s.key, HASHED_PAN),
      signer: s.bank,
      key: s.key,
      snapshot: s.snapshot,
    });
    expect(verifyLookup(policy, { ...s.input, answer: one }, { cache, engine, sha256: nodeSha256 }).ok).toBe(
      true,
    );
    engine.calls = 0;
    expect(
      verifyLookup(
        policy,
        { ...s.input, answer: answers[0] as KtLookupAnswer },
        { cache, engine, sha256: nodeSha256 },
      ).ok,
    ).toBe(true);
    expect(engine.calls).toBe(4);
  });

  it("answers a snapshot that does not parse the same from the cache", () => {
    const s = setting();
    const cache = new VerifierCache();
    const broken = `${s.snapshot} `;
    const first = verifyLookup(s.world.policy(), { ...s.input, directoryJson: broken }, { ...native, cache });
    expect(first).toMatchObject({ ok: false, check: "directory" });
    expect(
      verifyLookup(s.world.policy(), { ...s.input, directoryJson: broken }, { ...native, cache }),
    ).toEqual(first);
    expect(verifyLookup(s.world.policy(), s.input, { ...native, cache }).ok).toBe(true);
    expect(verifyLookup(s.world.policy(), s.input, { ...native, cache }).ok).toBe(true);
  });
});

describe("verifyLookup: what each refusal tells the merchant", () => {
  it("refuses a public key that is not the one sealed to, even with the right id and algorithm", () => {
    const s = setting();
    const answer = { ...s.input.answer, publicKey: base64(makeUserKey().spki) };
    expect(check(s, { answer })).toEqual({
      ok: false,
      check: "key",
      reason: "the key to seal to is not the key the answer names",
    });
  });

  it("refuses a card whose BIN nobody owns, and a snapshot the log holds but that does not parse", () => {
    const s = setting();
    expect(check(s, { card: { ...s.input.card, bin: { digits: "99999999", kind: "bin" } } })).toEqual({
      ok: false,
      check: "issuer",
      reason: "no issuer owns the card's BIN",
    });
    const broken = `${s.snapshot} `;
    const answer = answerFor(s.world, {
      statement: bindingOf(s.bank, s.key, HASHED_PAN),
      signer: s.bank,
      key: s.key,
      snapshot: broken,
    });
    expect(check(s, { answer, directoryJson: broken })).toMatchObject({
      ok: false,
      check: "directory",
      reason: expect.stringMatching(/^snapshot /),
    });
  });

  it("names the check and the reason of each refused statement", () => {
    const s = setting();
    const other = makeIssuer("bank-b");
    const snapshot = snapshotOf([
      { issuer: s.bank, bins: ["411111"] },
      { issuer: other, bins: ["522222"] },
    ]);
    const byOther = answerFor(s.world, {
      statement: bindingOf(other, s.key, HASHED_PAN),
      signer: other,
      key: s.key,
      snapshot,
    });
    expect(check(s, { answer: byOther, directoryJson: snapshot })).toEqual({
      ok: false,
      check: "issuer",
      reason: "the statement's issuer does not own the card's BIN",
    });
    const binding = s.input.answer.binding as Binding;
    const badSignature = {
      ...s.input.answer,
      binding: { ...binding, signature: base64(new Uint8Array(64)) },
    };
    expect(check(s, { answer: badSignature })).toEqual({
      ok: false,
      check: "signature",
      reason: "the signature does not verify under the issuer's signing key",
    });
    const early = bindingOf(s.bank, s.key, HASHED_PAN, {
      notBefore: formatTime(NOW + 3_600_000),
      notAfter: formatTime(NOW + 20 * 86_400_000),
    });
    expect(withStatement(s, early)).toEqual({
      ok: false,
      check: "window",
      reason: "the statement is not valid now",
    });
    const proof = s.input.answer.proof as Proof;
    const moved = { ...s.input.answer, proof: { ...proof, leafIndex: proof.leafIndex - 1 } };
    expect(check(s, { answer: moved })).toEqual({
      ok: false,
      check: "inclusion",
      reason: "the statement's leaf is not under the checkpoint",
    });
  });

  it("accepts a root pinned from the very millisecond it takes effect", () => {
    const s = setting();
    const root = makeIssuer("bank-a");
    const pinned = s.world.policy({ pinnedRoots: { "bank-a": base64url(nodeSha256(root.spki)) } });
    const snapshot = snapshotWithKeys(s.bank, [
      keyEntry(root, { effectiveFrom: formatTime(NOW) }),
      keyEntry(s.bank, { role: "signer" }),
    ]);
    const answer = answerFor(s.world, {
      statement: bindingOf(s.bank, s.key, HASHED_PAN),
      signer: s.bank,
      key: s.key,
      snapshot,
    });
    expect(check(s, { answer, directoryJson: snapshot }, pinned)).toMatchObject({ ok: true });
  });
});

describe("verifyLookup: escrow refusals", () => {
  it("refuses an escrow answer without the card's BIN, or with a statement whose signature fails", () => {
    const s = setting();
    const escrow = makeUserKey();
    const ref = { keyId: escrow.keyId, algorithm: HPKE, spkiSha256: escrow.spkiSha256 };
    const snapshot = snapshotOf([{ issuer: s.bank, bins: ["411111"], escrowKey: ref }]);
    const statement = canonicalJson({
      v: 1,
      type: "receipts.v1/escrow-key",
      issuer: "bank-a",
      keyId: escrow.keyId,
      algorithm: HPKE,
      spkiSha256: escrow.spkiSha256,
      version: 1,
      supersedes: null,
      notBefore: formatTime(NOW - 1000_000),
      notAfter: formatTime(NOW + 1000_000),
    });
    const answer = answerFor(s.world, { statement, signer: s.bank, key: escrow, snapshot, isEscrowed: true });
    const sealTo = { keyId: escrow.keyId, algorithm: HPKE, spki: escrow.spki };
    expect(
      check(s, { answer, sealTo, directoryJson: snapshot, card: { cardRef: s.input.card.cardRef } }),
    ).toEqual({
      ok: false,
      check: "escrow",
      reason: "an escrow answer for a card whose BIN is unknown",
    });
    const binding = answer.binding as Binding;
    const forged = { ...answer, binding: { ...binding, signature: base64(new Uint8Array(64)) } };
    expect(check(s, { answer: forged, sealTo, directoryJson: snapshot })).toMatchObject({
      ok: false,
      check: "signature",
    });
  });

  it("takes the service escrow key for an owned card whose issuer has no escrow key, and never over the issuer's own", () => {
    const s = setting();
    const service = makeUserKey();
    const issuerEscrow = makeUserKey();
    const ref = (k: { keyId: string; spkiSha256: string }) => ({
      keyId: k.keyId,
      algorithm: HPKE,
      spkiSha256: k.spkiSha256,
    });
    const allowed = s.world.policy({ allowServiceEscrow: true });
    const sealTo = { keyId: service.keyId, algorithm: HPKE, spki: service.spki };
    const serviceAnswer = (snapshot: string) => {
      const base = answerFor(s.world, {
        statement: bindingOf(s.bank, s.key, HASHED_PAN),
        signer: s.bank,
        key: s.key,
        snapshot,
      });
      const { binding: _b, opening: _o, proof, ...rest } = base;
      return {
        ...rest,
        keyId: service.keyId,
        publicKey: base64(service.spki),
        isEscrowed: true,
        checkpoint: (proof as Proof).checkpoint,
      };
    };
    const without = snapshotOf([{ issuer: s.bank, bins: ["411111"] }], { serviceEscrowKey: ref(service) });
    expect(
      check(s, { answer: serviceAnswer(without), sealTo, directoryJson: without }, allowed),
    ).toMatchObject({
      ok: true,
      issuer: null,
      version: null,
    });
    const withOwn = snapshotOf([{ issuer: s.bank, bins: ["411111"], escrowKey: ref(issuerEscrow) }], {
      serviceEscrowKey: ref(service),
    });
    expect(check(s, { answer: serviceAnswer(withOwn), sealTo, directoryJson: withOwn }, allowed)).toEqual({
      ok: false,
      check: "escrow",
      reason: "the service escrow key for a card whose issuer has its own",
    });
  });
});
