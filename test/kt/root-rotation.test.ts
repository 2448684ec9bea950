import { describe, expect, it } from "vitest";
import { base64 } from "../../src/kt/bytes.js";
import type { DirectorySnapshot } from "../../src/kt/directory.js";
import { canonicalJson, type Json } from "../../src/kt/json.js";
import { nodeEngine } from "../../src/kt/node-engine.js";
import type { RootSightings } from "../../src/kt/root-delay.js";
import { formatTime, parseTime } from "../../src/kt/statements.js";
import { type VerifyLookupInput, verifyLookup } from "../../src/kt/verify.js";
import type { KtBinding } from "../../src/kt/wire.js";
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
 * The root delay after an issuer's own rotation: a new root introduced by a `receipts.v1/signing-key`
 * statement (role root) that the previous root signed counts at once for a verifier that already
 * counts the previous root. A root without that statement (a first root, a recovery root the
 * operator confirmed), or with one that does not prove it, waits the delay.
 */

const HASHED_PAN = "a".repeat(64);
const BIN = { digits: "41111111", kind: "bin" as const };
const DELAY = 72 * 3600;
const enc = (s: string) => new TextEncoder().encode(s);

function rotationStatement(of: Issuer, changes: Record<string, Json> = {}): string {
  return canonicalJson({
    v: 1,
    type: "receipts.v1/signing-key",
    issuer: "bank-a",
    signingKeyId: of.signingKeyId,
    algorithm: "Ed25519",
    spki: base64(of.spki),
    role: "root",
    version: 7,
    issuedAt: formatTime(NOW - 3_600_000),
    ...changes,
  });
}

function signed(statement: string, by: Issuer, signingKeyId = by.signingKeyId): KtBinding {
  return { statement: base64(enc(statement)), signature: base64(by.sign(enc(statement))), signingKeyId };
}

/**
 * A snapshot of bank-a with its current root and an older root `old`: by default retired by this
 * root's rotation (listed revoked from the same snapshot as the new root is listed current); with
 * `retired` "earlier", revoked in an earlier snapshot, as a root that revoked itself before its
 * recovery root was confirmed.
 */
function setting(
  oldStatus: "revoked" | "current" = "revoked",
  retired: "with-rotation" | "earlier" = "with-rotation",
) {
  const world = new World();
  const old = makeIssuer("bank-a");
  const root = makeIssuer("bank-a");
  const key = makeUserKey();
  const parsed = JSON.parse(snapshotOf([{ issuer: root, bins: ["411111"] }])) as DirectorySnapshot;
  const entry = parsed.issuers[0] as DirectorySnapshot["issuers"][0];
  const rootFrom = (entry.signingKeys[0] as DirectorySnapshot["issuers"][0]["signingKeys"][0]).effectiveFrom;
  entry.signingKeys.push({
    signingKeyId: old.signingKeyId,
    algorithm: "Ed25519",
    spki: base64(old.spki),
    role: "root",
    status: oldStatus,
    effectiveFrom:
      retired === "with-rotation" ? rootFrom : formatTime((parseTime(rootFrom) as number) - 1000),
  });
  const snapshot = canonicalJson(parsed as unknown as Json);
  const answer = answerFor(world, {
    statement: bindingOf(root, key, HASHED_PAN),
    signer: root,
    key,
    snapshot,
  });
  const witnessedAt = Math.floor((NOW - 60_000) / 1000);
  const input: VerifyLookupInput = {
    answer,
    card: { cardRef: { hashedPan: HASHED_PAN }, bin: BIN },
    sealTo: { keyId: key.keyId, algorithm: "HPKE-P256-SHA256-A256GCM", spki: key.spki },
    directoryJson: snapshot,
    now: NOW,
  };
  return { world, old, root, input, witnessedAt, policy: world.policy({ rootDelaySeconds: DELAY }) };
}

/** A verifier's memory: `seen` maps root ids to the witnessed time it first saw them. */
function memory(seen: Record<string, number>): { sightings: RootSightings; seen: Map<string, number> } {
  const map = new Map(Object.entries(seen).map(([id, at]) => [`bank-a ${id}`, at]));
  return {
    seen: map,
    sightings: (issuer, id, witnessedAt) => {
      const key = `${issuer} ${id}`;
      if (!map.has(key)) map.set(key, witnessedAt);
      return map.get(key) as number;
    },
  };
}

type S = ReturnType<typeof setting>;
const check = (s: S, rotation: KtBinding | undefined, sightings?: RootSightings) => {
  const v = verifyLookup(s.policy, {
    ...s.input,
    answer: { ...s.input.answer, ...(rotation === undefined ? {} : { rootRotation: rotation }) },
    ...(sightings === undefined ? {} : { rootSightings: sightings }),
  });
  return v.ok ? "accepted" : v.check;
};

describe("the root delay after an issuer's rotation", () => {
  it("counts at once a root its counted predecessor introduced, and remembers the new root", () => {
    const s = setting();
    const m = memory({ [s.old.signingKeyId]: s.witnessedAt - DELAY });
    expect(check(s, signed(rotationStatement(s.root), s.old), m.sightings)).toBe("accepted");
    expect(m.seen.get(`bank-a ${s.root.signingKeyId}`)).toBe(s.witnessedAt);
    // The same with Node's engine as the policy's verifier would pass it.
    const v = verifyLookup(
      s.policy,
      {
        ...s.input,
        answer: { ...s.input.answer, rootRotation: signed(rotationStatement(s.root), s.old) },
        rootSightings: m.sightings,
      },
      { engine: nodeEngine },
    );
    expect(v.ok).toBe(true);
  });

  it("keeps the delay for a root without a rotation (a first or recovery root)", () => {
    const s = setting();
    const m = memory({ [s.old.signingKeyId]: s.witnessedAt - DELAY });
    expect(check(s, undefined, m.sightings)).toBe("root");
  });

  it("keeps the delay when the predecessor does not count yet for this verifier, or was never seen", () => {
    const s = setting();
    const rotation = signed(rotationStatement(s.root), s.old);
    expect(check(s, rotation, memory({ [s.old.signingKeyId]: s.witnessedAt - DELAY + 1 }).sightings)).toBe(
      "root",
    );
    expect(check(s, rotation, memory({}).sightings)).toBe("root");
    expect(check(s, rotation)).toBe("root");
  });

  it("keeps the delay for a rotation the operator made up: signed by another key, or by the new root", () => {
    const s = setting();
    const m = () => memory({ [s.old.signingKeyId]: s.witnessedAt - DELAY }).sightings;
    const operator = makeIssuer("bank-a");
    const statement = rotationStatement(s.root);
    expect(check(s, signed(statement, operator, s.old.signingKeyId), m())).toBe("root");
    expect(check(s, signed(statement, s.root), m())).toBe("root");
    expect(check(s, signed(statement, s.root, s.old.signingKeyId), m())).toBe("root");
    // Bytes that are not base64, a signature that is not 64 bytes, a statement that does not parse.
    const good = signed(statement, s.old);
    expect(check(s, { ...good, statement: "%%" }, m())).toBe("root");
    expect(check(s, { ...good, signature: base64(new Uint8Array(63)) }, m())).toBe("root");
    expect(check(s, signed(`${statement} `, s.old), m())).toBe("root");
  });

  it("keeps the delay for a signed statement that is not this root's introduction", () => {
    const s = setting();
    const m = () => memory({ [s.old.signingKeyId]: s.witnessedAt - DELAY }).sightings;
    const other = makeIssuer("bank-a");
    for (const changes of [
      { role: "signer" },
      { issuer: "bank-b" },
      { signingKeyId: other.signingKeyId },
      { spki: base64(other.spki) },
      { algorithm: "ECDSA-P256-SHA256" },
    ] as Record<string, Json>[]) {
      expect(check(s, signed(rotationStatement(s.root, changes), s.old), m()), JSON.stringify(changes)).toBe(
        "root",
      );
    }
    const revocation = canonicalJson({
      v: 1,
      type: "receipts.v1/signing-key-revocation",
      issuer: "bank-a",
      signingKeyId: s.root.signingKeyId,
      version: 7,
      revokedAt: formatTime(NOW - 3_600_000),
    });
    expect(check(s, signed(revocation, s.old), m())).toBe("root");
  });

  it("keeps the delay for a successor vouched for by a root that revoked itself (listed revoked before it)", () => {
    // The thief of a root the bank revoked signs a rotation for the recovery root the operator
    // confirmed: the old root was listed revoked a snapshot (here one second) before the new one was
    // listed current, which a rotation never shows.
    const s = setting("revoked", "earlier");
    const m = memory({ [s.old.signingKeyId]: s.witnessedAt - DELAY });
    expect(check(s, signed(rotationStatement(s.root), s.old), m.sightings)).toBe("root");
    // The same statement with the old root retired by the rotation itself counts at once.
    const r = setting();
    const n = memory({ [r.old.signingKeyId]: r.witnessedAt - DELAY });
    expect(check(r, signed(rotationStatement(r.root), r.old), n.sightings)).toBe("accepted");
  });

  it("keeps the delay when the signer is not a retired root of the issuer in the snapshot", () => {
    const listedCurrent = setting("current");
    const m = memory({ [listedCurrent.old.signingKeyId]: listedCurrent.witnessedAt - DELAY });
    expect(
      check(listedCurrent, signed(rotationStatement(listedCurrent.root), listedCurrent.old), m.sightings),
    ).toBe("root");
    const s = setting();
    const stranger = makeIssuer("bank-a");
    const n = memory({ [stranger.signingKeyId]: s.witnessedAt - DELAY });
    expect(check(s, signed(rotationStatement(s.root), stranger), n.sightings)).toBe("root");
  });
});
