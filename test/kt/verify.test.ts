import { describe, expect, it } from "vitest";
import { base64, fromBase64Strict } from "../../src/kt/bytes.js";
import { canonicalJson } from "../../src/kt/json.js";
import { nodeEngine } from "../../src/kt/node-engine.js";
import { formatTime } from "../../src/kt/statements.js";
import { VerifierCache, type VerifyLookupInput, verifyLookup } from "../../src/kt/verify.js";
import type { KtLookupAnswer } from "../../src/kt/wire.js";
import { flipBit, nodeSha256 } from "./support.js";
import { answerFor, bindingOf, makeIssuer, makeUserKey, NOW, snapshotOf, World } from "./world.js";

/**
 * The merchant's verification of a lookup answer: an honest answer passes (with either engine), and
 * each lie of a malicious service (issue 32's fixture list) is refused by the check meant to catch it.
 */

const HASHED_PAN = "a".repeat(64);
const BIN = { digits: "41111111", kind: "bin" as const };

/** A log with bank-a's card (or the bank named `bankName`'s) bound under bank-a's BIN and bank-b's BIN beside it. */
function setting(bankName = "bank-a") {
  const world = new World();
  const bank = makeIssuer(bankName);
  const other = makeIssuer("bank-b");
  const key = makeUserKey();
  const snapshot = snapshotOf([
    { issuer: bank, bins: ["411111"] },
    { issuer: other, bins: ["522222"] },
  ]);
  const answer = answerFor(world, {
    statement: bindingOf(bank, key, HASHED_PAN),
    signer: bank,
    key,
    snapshot,
  });
  const input: VerifyLookupInput = {
    answer,
    card: { cardRef: { hashedPan: HASHED_PAN }, bin: BIN },
    sealTo: { keyId: key.keyId, algorithm: "HPKE-P256-SHA256-A256GCM", spki: key.spki },
    directoryJson: snapshot,
    now: NOW,
  };
  return { world, bank, other, key, snapshot, input };
}

const verdict = (
  s: ReturnType<typeof setting>,
  input: Partial<VerifyLookupInput> = {},
  policy = s.world.policy(),
) => verifyLookup(policy, { ...s.input, ...input });
const refusal = (v: ReturnType<typeof verifyLookup>) => (v.ok ? "accepted" : v.check);
/**
 * As `verdict`, with Node's native signature equations and hash: for the loops of hundreds of
 * tampered answers (signatures.test.ts proves both engines refuse every flipped bit alike).
 */
const fast = (s: ReturnType<typeof setting>, input: Partial<VerifyLookupInput>) =>
  verifyLookup(s.world.policy(), { ...s.input, ...input }, { engine: nodeEngine, sha256: nodeSha256 });

describe("verifyLookup", () => {
  it("accepts an honest answer, with the pure and the Node engine", () => {
    const s = setting();
    const v = verdict(s);
    expect(v).toMatchObject({ ok: true, issuer: "bank-a", version: 1 });
    expect(verifyLookup(s.world.policy(), s.input, { engine: nodeEngine }).ok).toBe(true);
  });

  it("refuses an unsigned attacker key (signed by a key the snapshot does not list)", () => {
    const s = setting();
    const attacker = makeIssuer("bank-a");
    const evil = makeUserKey();
    const answer = answerFor(s.world, {
      statement: bindingOf(s.bank, evil, HASHED_PAN),
      signer: attacker,
      key: evil,
      snapshot: s.snapshot,
    });
    const v = verdict(s, { answer, sealTo: { ...s.input.sealTo, keyId: evil.keyId, spki: evil.spki } });
    expect(refusal(v)).toBe("signature");
    const forged = {
      ...answer,
      binding: {
        ...(answer.binding as NonNullable<KtLookupAnswer["binding"]>),
        signingKeyId: s.bank.signingKeyId,
      },
    };
    expect(
      refusal(
        verdict(s, { answer: forged, sealTo: { ...s.input.sealTo, keyId: evil.keyId, spki: evil.spki } }),
      ),
    ).toBe("signature");
  });

  it("refuses a key signed by an issuer that does not own the card's BIN, whatever the statement's bin says", () => {
    const s = setting();
    const answer = answerFor(s.world, {
      statement: bindingOf(s.other, s.key, HASHED_PAN, { bin: "41111111" }),
      signer: s.other,
      key: s.key,
      snapshot: s.snapshot,
    });
    expect(refusal(verdict(s, { answer }))).toBe("issuer");
  });

  it("refuses a valid statement with a proof of another leaf", () => {
    const s = setting();
    const proof = s.input.answer.proof as NonNullable<KtLookupAnswer["proof"]>;
    const answer = {
      ...s.input.answer,
      proof: {
        ...proof,
        leafIndex: s.input.answer.directory.index,
        inclusion: s.input.answer.directory.inclusion,
      },
    };
    expect(refusal(verdict(s, { answer }))).toBe("inclusion");
  });

  it("refuses the service escrow key for a card whose BIN an issuer with an escrow key owns, and without allowServiceEscrow", () => {
    const s = setting();
    const service = makeUserKey();
    const issuerEscrow = makeUserKey();
    const serviceRef = {
      keyId: service.keyId,
      algorithm: "HPKE-P256-SHA256-A256GCM",
      spkiSha256: service.spkiSha256,
    };
    const escrowRef = {
      keyId: issuerEscrow.keyId,
      algorithm: "HPKE-P256-SHA256-A256GCM",
      spkiSha256: issuerEscrow.spkiSha256,
    };
    const snapshot = snapshotOf([{ issuer: s.bank, bins: ["411111"], escrowKey: escrowRef }], {
      serviceEscrowKey: serviceRef,
    });
    const base = answerFor(s.world, {
      statement: bindingOf(s.bank, s.key, HASHED_PAN),
      signer: s.bank,
      key: s.key,
      snapshot,
    });
    const { binding: _b, opening: _o, proof, ...rest } = base;
    const answer: KtLookupAnswer = {
      ...rest,
      keyId: service.keyId,
      publicKey: base64(service.spki),
      isEscrowed: true,
      checkpoint: proof?.checkpoint as string,
    };
    const sealTo = { keyId: service.keyId, algorithm: "HPKE-P256-SHA256-A256GCM", spki: service.spki };
    const input = { answer, sealTo, directoryJson: snapshot };
    expect(verdict(s, input)).toMatchObject({
      ok: false,
      check: "escrow",
      reason: "the service escrow key is not allowed",
    });
    const allowed = s.world.policy({ allowServiceEscrow: true });
    expect(verdict(s, input, allowed)).toMatchObject({
      ok: false,
      reason: "the service escrow key for a card whose issuer has its own",
    });
    const unowned = { ...s.input.card, bin: { digits: "999999", kind: "bin" as const } };
    expect(verdict(s, { ...input, card: unowned }, allowed).ok).toBe(true);
    expect(verdict(s, { ...input, card: { cardRef: s.input.card.cardRef } }, allowed)).toMatchObject({
      check: "escrow",
    });
  });

  it("accepts an issuer escrow key only as the current one of the BIN's owner, with its signed statement", () => {
    const s = setting();
    const escrow = makeUserKey();
    const ref = { keyId: escrow.keyId, algorithm: "HPKE-P256-SHA256-A256GCM", spkiSha256: escrow.spkiSha256 };
    const snapshot = snapshotOf([
      { issuer: s.bank, bins: ["411111"], escrowKey: ref },
      { issuer: s.other, bins: ["522222"] },
    ]);
    const statement = canonicalJson({
      v: 1,
      type: "receipts.v1/escrow-key",
      issuer: "bank-a",
      keyId: escrow.keyId,
      algorithm: "HPKE-P256-SHA256-A256GCM",
      spkiSha256: escrow.spkiSha256,
      version: 1,
      supersedes: null,
      notBefore: formatTime(NOW - 1000_000),
      notAfter: formatTime(NOW + 1000_000),
    });
    const answer = answerFor(s.world, { statement, signer: s.bank, key: escrow, snapshot, isEscrowed: true });
    const input = {
      answer,
      sealTo: { keyId: escrow.keyId, algorithm: "HPKE-P256-SHA256-A256GCM", spki: escrow.spki },
      directoryJson: snapshot,
    };
    expect(verdict(s, input)).toMatchObject({ ok: true, issuer: "bank-a" });
    expect(
      verdict(s, { ...input, card: { ...s.input.card, bin: { digits: "52222222", kind: "bin" } } }),
    ).toMatchObject({ check: "escrow" });
    expect(verdict(s, { ...input, card: { cardRef: s.input.card.cardRef } })).toMatchObject({
      check: "escrow",
    });
  });

  it("refuses an expired statement, and one whose window is too long", () => {
    const s = setting();
    const old = bindingOf(s.bank, s.key, HASHED_PAN, {
      notBefore: formatTime(NOW - 40 * 86_400_000),
      notAfter: formatTime(NOW - 10 * 86_400_000),
    });
    expect(
      refusal(
        verdict(s, {
          answer: answerFor(s.world, { statement: old, signer: s.bank, key: s.key, snapshot: s.snapshot }),
        }),
      ),
    ).toBe("window");
    const long = bindingOf(s.bank, s.key, HASHED_PAN, { notAfter: formatTime(NOW + 40 * 86_400_000) });
    expect(
      refusal(
        verdict(s, {
          answer: answerFor(s.world, { statement: long, signer: s.bank, key: s.key, snapshot: s.snapshot }),
        }),
      ),
    ).toBe("statement");
  });

  it("refuses a forked checkpoint, one signed by an unknown key, one lacking the quorum, and a stale one", () => {
    const s = setting();
    const proof = s.input.answer.proof as NonNullable<KtLookupAnswer["proof"]>;
    const withCheckpoint = (checkpoint: string) => ({
      answer: { ...s.input.answer, proof: { ...proof, checkpoint } },
    });
    const forkRoot = new Uint8Array(32).fill(7);
    expect(
      refusal(verdict(s, withCheckpoint(s.world.checkpoint({ size: proof.treeSize, root: forkRoot })))),
    ).toBe("directory");
    const stranger = new World();
    expect(
      verdict(s, withCheckpoint(stranger.checkpoint({ size: 0, root: stranger.tree.root(0) }))),
    ).toMatchObject({ check: "checkpoint" });
    expect(
      verdict(s, withCheckpoint(s.world.checkpoint({ size: proof.treeSize, cosigners: [0] }))),
    ).toMatchObject({ reason: expect.stringContaining("quorum") });
    expect(
      verdict(s, withCheckpoint(s.world.checkpoint({ size: proof.treeSize, cosigners: [0, 1] }))),
    ).toMatchObject({ check: "checkpoint" });
    expect(
      verdict(s, withCheckpoint(s.world.checkpoint({ size: proof.treeSize, at: NOW - 2 * 3_600_000 }))),
    ).toMatchObject({ reason: expect.stringContaining("older") });
    expect(
      verdict(s, withCheckpoint(s.world.checkpoint({ size: proof.treeSize, at: NOW + 3_600_000 }))),
    ).toMatchObject({ reason: expect.stringContaining("quorum") });
  });

  it("refuses another card, another key, a tampered statement, opening, signature, index or size", () => {
    const s = setting();
    expect(refusal(verdict(s, { card: { ...s.input.card, cardRef: { hashedPan: "b".repeat(64) } } }))).toBe(
      "card",
    );
    const otherKey = makeUserKey();
    expect(refusal(verdict(s, { sealTo: { ...s.input.sealTo, spki: otherKey.spki } }))).toBe("key");
    const answer = s.input.answer;
    const binding = answer.binding as NonNullable<KtLookupAnswer["binding"]>;
    const proof = answer.proof as NonNullable<KtLookupAnswer["proof"]>;
    const flip = (b64: string, bit: number) => base64(flipBit(fromBase64Strict(b64) as Uint8Array, bit));
    const refused: string[] = [];
    for (let bit = 0; bit < 8 * (fromBase64Strict(binding.statement) as Uint8Array).length; bit += 13) {
      if (
        fast(s, {
          answer: { ...answer, binding: { ...binding, statement: flip(binding.statement, bit) } },
        }).ok
      )
        refused.push(`statement ${bit}`);
    }
    for (let bit = 0; bit < 128; bit++) {
      if (fast(s, { answer: { ...answer, opening: flip(answer.opening as string, bit) } }).ok)
        refused.push(`opening ${bit}`);
    }
    for (let bit = 0; bit < 512; bit += 7) {
      if (
        fast(s, {
          answer: { ...answer, binding: { ...binding, signature: flip(binding.signature, bit) } },
        }).ok
      )
        refused.push(`signature ${bit}`);
    }
    for (const leafIndex of [proof.leafIndex - 1, proof.leafIndex + 1]) {
      if (fast(s, { answer: { ...answer, proof: { ...proof, leafIndex } } }).ok)
        refused.push(`index ${leafIndex}`);
    }
    for (const treeSize of [proof.treeSize - 1, proof.treeSize + 1]) {
      if (fast(s, { answer: { ...answer, proof: { ...proof, treeSize } } }).ok)
        refused.push(`size ${treeSize}`);
    }
    expect(refused).toEqual([]);
  }, 180_000); // hundreds of verifications: seconds alone, more beside a loaded suite; no time measured

  it("refuses an expired snapshot, a snapshot not under the checkpoint, and a binding of a PAR card as a hashed PAN", () => {
    const s = setting();
    const expired = snapshotOf([{ issuer: s.bank, bins: ["411111"] }], {
      issuedAt: formatTime(NOW - 47 * 3_600_000),
      notAfter: formatTime(NOW - 3_600_000),
    });
    const stale = answerFor(s.world, {
      statement: bindingOf(s.bank, s.key, HASHED_PAN),
      signer: s.bank,
      key: s.key,
      snapshot: expired,
    });
    expect(verdict(s, { answer: stale, directoryJson: expired })).toMatchObject({
      check: "directory",
      reason: "the snapshot has expired",
    });
    const other = snapshotOf([{ issuer: s.bank, bins: ["411111"] }]);
    expect(refusal(verdict(s, { directoryJson: other }))).toBe("directory");
    const par = "A".repeat(29);
    const answer = answerFor(s.world, {
      statement: bindingOf(s.bank, s.key, par),
      signer: s.bank,
      key: s.key,
      snapshot: s.snapshot,
      par,
    });
    expect(verdict(s, { answer, card: { cardRef: { par }, bin: BIN } }).ok).toBe(true);
    const asPan = answerFor(s.world, {
      statement: bindingOf(s.bank, s.key, par),
      signer: s.bank,
      key: s.key,
      snapshot: s.snapshot,
    });
    expect(refusal(verdict(s, { answer: asPan, card: { cardRef: { par }, bin: BIN } }))).toBe("inclusion");
  });

  it("refuses a binding whose issuer's root is not the pinned one", () => {
    const s = setting();
    expect(verdict(s, {}, s.world.policy({ pinnedRoots: { "bank-a": "A".repeat(43) } }))).toMatchObject({
      check: "signature",
    });
  });

  it("reads a pin only for the issuer it names: an issuer named like an Object property is not pinned", () => {
    const { world, input } = setting("constructor");
    expect(verifyLookup(world.policy(), input)).toMatchObject({ ok: true, issuer: "constructor" });
    // A pin of another issuer leaves this one unpinned: accepted as without pins, and under a root
    // delay this verifier has not waited out, refused for the delay (a pin would skip it).
    expect(verifyLookup(world.policy({ pinnedRoots: { "bank-b": "A".repeat(43) } }), input)).toMatchObject({
      ok: true,
    });
    expect(
      verifyLookup(
        world.policy({ pinnedRoots: { "bank-b": "A".repeat(43) }, rootDelaySeconds: 3600 }),
        input,
      ),
    ).toMatchObject({ ok: false, check: "root" });
  });

  it("answers the same with a cache, and still applies the clock to a cached checkpoint", () => {
    const s = setting();
    const cache = new VerifierCache(2);
    const policy = s.world.policy();
    expect(verifyLookup(policy, s.input, { cache }).ok).toBe(true);
    expect(verifyLookup(policy, s.input, { cache }).ok).toBe(true);
    expect(verifyLookup(policy, { ...s.input, now: NOW + 2 * 3_600_000 }, { cache })).toMatchObject({
      check: "checkpoint",
    });
    const other = makeUserKey();
    expect(
      verifyLookup(policy, { ...s.input, sealTo: { ...s.input.sealTo, spki: other.spki } }, { cache }).ok,
    ).toBe(false);
    const strictPolicy = s.world.policy({ quorum: 3 });
    expect(verifyLookup(strictPolicy, s.input, { cache })).toMatchObject({ check: "checkpoint" });
  });

  it("takes the tree size from the checkpoint: a proof whose shape fits another size is still refused", () => {
    // Leaf 0 of a 3-leaf tree has the proof shape of leaf 0 of 4 leaves: the RFC algorithm alone
    // would accept size 4 with the 3-leaf root. The checkpoint signs size and root together.
    const world = new World();
    const bank = makeIssuer("bank-a");
    const key = makeUserKey();
    const snapshot = snapshotOf([{ issuer: bank, bins: ["411111"] }]);
    const answer = answerFor(world, {
      statement: bindingOf(bank, key, HASHED_PAN),
      signer: bank,
      key,
      snapshot,
      statementFirst: 1,
    });
    const input: VerifyLookupInput = {
      answer,
      card: { cardRef: { hashedPan: HASHED_PAN }, bin: BIN },
      sealTo: { keyId: key.keyId, algorithm: "HPKE-P256-SHA256-A256GCM", spki: key.spki },
      directoryJson: snapshot,
      now: NOW,
    };
    const proof = answer.proof as NonNullable<KtLookupAnswer["proof"]>;
    expect([proof.leafIndex, proof.treeSize]).toEqual([0, 3]);
    expect(verifyLookup(world.policy(), input).ok).toBe(true);
    const bent = { ...answer, proof: { ...proof, treeSize: 4 } };
    expect(verifyLookup(world.policy(), { ...input, answer: bent })).toMatchObject({ check: "inclusion" });
  });
});
