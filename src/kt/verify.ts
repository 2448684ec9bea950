/* Over 400 lines on purpose: the merchant's whole verification of an answer, check after check in the
 * order docs/key-transparency.md lists them, so that a reviewer reads every refusal in one place; the
 * pieces with a life of their own (policy, directory, statements, root delay, Merkle proofs) are their
 * own modules already. */
import { base64url, fromBase64Strict, toHex } from "./bytes.js";
import {
  currentSigningKey,
  type DirectorySnapshot,
  type IssuerEntry,
  ownerOfBin,
  parseDirectory,
  snapshotIsCurrent,
} from "./directory.js";
import { defaultSha256, type Sha256 } from "./hash.js";
import { directoryLeaf, OPENING_BYTES, statementLeaf } from "./leaves.js";
import { leafHash, verifyInclusion } from "./merkle.js";
import {
  checkCheckpointSignatures,
  checkFreshness,
  type ParsedPolicy,
  type SignedCheckpoint,
  type TrustedCheckpoint,
} from "./policy.js";
import { DEFAULT_ROOT_DELAY_SECONDS, type RootSightings, rootDelayProblem } from "./root-delay.js";
import { nobleEngine, parseSigningKey, type SignatureEngine, verifySignature } from "./signatures.js";
import { isCurrent, parseStatement, parseTime, type Statement } from "./statements.js";
import type { KtBinding, KtLookupAnswer, KtProof } from "./wire.js";

/**
 * The merchant's check of a lookup answer before it seals (docs/key-transparency.md, "The merchant's
 * verification"), as one pure function: given the answer, what the merchant itself knows (the card reference
 * it looked up, the card's own BIN, the key it is about to seal to), the trust policy and the time, it says
 * yes or why not. Nothing the service says about itself is taken on trust: the leaf is rebuilt, the
 * snapshot is proven under the witnessed checkpoint, the BIN owner comes from the snapshot and the
 * card's own digits, never from the statement.
 */

/** Which check failed. */
export type KtCheck =
  | "checkpoint"
  | "directory"
  | "statement"
  | "card"
  | "key"
  | "issuer"
  | "signature"
  | "window"
  | "inclusion"
  | "escrow"
  | "root";

export type KtVerdict =
  | {
      ok: true;
      issuer: string | null;
      version: number | null;
      /** The card binding's `notBefore`; null for an escrow key. */
      notBefore: string | null;
      treeSize: number;
      witnessedAt: number;
    }
  | { ok: false; check: KtCheck; reason: string };

/** The card as the merchant knows it. */
export interface KnownCard {
  /** The card reference looked up: a hashed PAN (64 lower-case hex) or a PAR. */
  cardRef: { hashedPan: string } | { par: string };
  /** The card's own BIN: the PAN's first 6 or 8 digits (kind "bin"), or a wallet token's first 8 ("token-bin"). */
  bin?: { digits: string; kind: "bin" | "token-bin" } | undefined;
}

/** What the merchant is about to seal to. */
export interface SealTarget {
  keyId: string;
  algorithm: string;
  /** SPKI DER of the key. */
  spki: Uint8Array;
}

export interface VerifyLookupInput {
  answer: KtLookupAnswer;
  card: KnownCard;
  sealTo: SealTarget;
  /** The snapshot's JSON, fetched by `answer.directory.sha256` (and cached: it never changes). */
  directoryJson: string;
  /** Milliseconds since the epoch. */
  now: number;
  /** The verifier's memory of when it first saw each root (`root-delay.ts`); without it, only now. */
  rootSightings?: RootSightings;
}

export interface VerifyDeps {
  engine?: SignatureEngine;
  sha256?: Sha256;
  /** Checkpoints and snapshots already checked (a merchant seals many receipts under one checkpoint). */
  cache?: VerifierCache;
}

/**
 * What a verifier may remember between answers: checkpoints whose signatures verified (keyed by the
 * policy and the exact note text; the clock's rules are applied again on every answer) and snapshots
 * that parsed (keyed by their exact JSON). Only successes are kept, a bounded number of each.
 */
export class VerifierCache {
  private readonly checkpoints = new WeakMap<ParsedPolicy, Map<string, SignedCheckpoint>>();
  private readonly snapshots = new Map<string, DirectorySnapshot>();

  constructor(private readonly limit = 16) {}

  checkpoint(
    policy: ParsedPolicy,
    note: string,
    engine: SignatureEngine,
  ): ReturnType<typeof checkCheckpointSignatures> {
    const known = this.checkpoints.get(policy) ?? new Map<string, SignedCheckpoint>();
    this.checkpoints.set(policy, known);
    const hit = known.get(note);
    if (hit !== undefined) return { ok: true, value: hit };
    const checked = checkCheckpointSignatures(policy, note, engine);
    if (checked.ok) remember(known, note, checked.value, this.limit);
    return checked;
  }

  snapshot(json: string): ReturnType<typeof parseDirectory> {
    const hit = this.snapshots.get(json);
    if (hit !== undefined) return { ok: true, value: hit };
    const parsed = parseDirectory(json);
    if (parsed.ok) remember(this.snapshots, json, parsed.value, this.limit);
    return parsed;
  }
}

function remember<T>(map: Map<string, T>, key: string, value: T, limit: number): void {
  if (map.size >= limit) map.delete(map.keys().next().value as string);
  map.set(key, value);
}

/** The engines a check runs with. */
type Engines = { engine: SignatureEngine; sha256: Sha256 };

const no = (check: KtCheck, reason: string): KtVerdict => ({ ok: false, check, reason });

/** Verifies a lookup answer; see the module comment. */
export function verifyLookup(
  policy: ParsedPolicy,
  input: VerifyLookupInput,
  deps: VerifyDeps = {},
): KtVerdict {
  const engine = deps.engine ?? nobleEngine;
  const sha256 = deps.sha256 ?? defaultSha256;
  const { answer } = input;
  const note = answer.proof?.checkpoint ?? answer.checkpoint;
  if (note === undefined) return no("checkpoint", "the answer carries no checkpoint");
  const signatures =
    deps.cache?.checkpoint(policy, note, engine) ?? checkCheckpointSignatures(policy, note, engine);
  if (!signatures.ok) return no("checkpoint", signatures.reason);
  const trusted = checkFreshness(policy, signatures.value, Math.floor(input.now / 1000));
  if (!trusted.ok) return no("checkpoint", trusted.reason);
  return verifyUnderCheckpoint(policy, trusted.value, input, { ...deps, engine, sha256 });
}

/**
 * Everything {@link verifyLookup} checks once the answer's checkpoint is trusted: the snapshot proven
 * under it, the key, and the signed statement (or the escrow rules). The service's own check before it
 * seals (server-side sealing, for tenants with `requireBindings`) calls it with its latest checkpoint,
 * whose log signature it checked itself; a merchant calls {@link verifyLookup}, which also wants the
 * witnesses.
 */
export function verifyUnderCheckpoint(
  policy: ParsedPolicy,
  checkpoint: TrustedCheckpoint,
  input: VerifyLookupInput,
  deps: VerifyDeps = {},
): KtVerdict {
  const engine = deps.engine ?? nobleEngine;
  const sha256 = deps.sha256 ?? defaultSha256;
  const { answer, sealTo } = input;
  const snapshot = provenSnapshot(checkpoint, input, sha256, deps.cache);
  if (!snapshot.ok) return snapshot;
  const spkiSha256 = base64url(sha256(sealTo.spki));
  const publicKey = fromBase64Strict(answer.publicKey);
  if (
    publicKey === undefined ||
    toHex(publicKey) !== toHex(sealTo.spki) ||
    answer.keyId !== sealTo.keyId ||
    answer.algorithm !== sealTo.algorithm
  ) {
    return no("key", "the key to seal to is not the key the answer names");
  }
  const done = {
    ok: true as const,
    treeSize: checkpoint.checkpoint.size,
    witnessedAt: checkpoint.witnessedAt,
  };
  if (answer.isEscrowed) {
    const escrow = checkEscrow(policy, input, snapshot.value, spkiSha256, checkpoint, { engine, sha256 });
    return escrow.ok ? { ...done, issuer: escrow.issuer, version: escrow.version, notBefore: null } : escrow;
  }
  const card = input.card.bin;
  if (card === undefined) return no("issuer", "the card's own BIN is needed to check who owns it");
  const owner = ownerOfBin(snapshot.value, card.digits, card.kind, input.now);
  if (!owner.ok) return no("issuer", owner.reason);
  const signed = checkSigned(
    policy,
    input,
    owner.value,
    checkpoint,
    { engine, sha256 },
    "receipts.v1/key-binding",
  );
  if (!signed.ok) return signed;
  const s = signed.statement;
  if (s.type !== "receipts.v1/key-binding") return no("statement", "the statement is not a key binding");
  const looked = "hashedPan" in input.card.cardRef ? input.card.cardRef.hashedPan : input.card.cardRef.par;
  if (s.cardRef !== looked) return no("card", "the binding is about another card");
  if (s.keyId !== sealTo.keyId || s.algorithm !== sealTo.algorithm || s.spkiSha256 !== spkiSha256) {
    return no("key", "the binding does not describe the key to seal to");
  }
  return { ...done, issuer: s.issuer, version: s.version, notBefore: s.notBefore };
}

/** The snapshot of the answer, proven under the checkpoint and current. */
function provenSnapshot(
  trusted: TrustedCheckpoint,
  input: VerifyLookupInput,
  sha256: Sha256,
  cache: VerifierCache | undefined,
): { ok: true; value: DirectorySnapshot } | { ok: false; check: KtCheck; reason: string } {
  const proof = input.answer.directory;
  const parsed = cache?.snapshot(input.directoryJson) ?? parseDirectory(input.directoryJson);
  if (!parsed.ok) return { ok: false, check: "directory", reason: parsed.reason };
  const inclusion = decodeHashes(proof.inclusion);
  const leaf = leafHash(directoryLeaf(input.directoryJson), sha256);
  const { size, root } = trusted.checkpoint;
  if (inclusion === undefined || !verifyInclusion(proof.index, size, leaf, inclusion, root, sha256)) {
    return { ok: false, check: "directory", reason: "the snapshot is not proven under the checkpoint" };
  }
  if (!snapshotIsCurrent(parsed.value, input.now))
    return { ok: false, check: "directory", reason: "the snapshot has expired" };
  return parsed;
}

function decodeHashes(hashes: string[]): Uint8Array[] | undefined {
  if (!Array.isArray(hashes)) return undefined;
  const out = hashes.map((h) => (typeof h === "string" ? fromBase64Strict(h, 32) : undefined));
  return out.some((h) => h === undefined) ? undefined : (out as Uint8Array[]);
}

type Signed = { ok: true; statement: Statement } | { ok: false; check: KtCheck; reason: string };

/**
 * The statement of the answer, checked: canonical with its type's members, `type` as expected, signed
 * by a key the snapshot lists as current for the BIN owner (and, if pinned, under the pinned root),
 * valid now, and its rebuilt leaf included under the checkpoint.
 */
function checkSigned(
  policy: ParsedPolicy,
  input: VerifyLookupInput,
  owner: IssuerEntry,
  trusted: TrustedCheckpoint,
  deps: Engines,
  type: Statement["type"],
): Signed {
  const { binding, opening, proof } = input.answer;
  if (binding === undefined || opening === undefined || proof === undefined) {
    return { ok: false, check: "statement", reason: "the answer carries no signed statement" };
  }
  const bytes = fromBase64Strict(binding.statement);
  if (bytes === undefined) return { ok: false, check: "statement", reason: "statement is not base64" };
  const parsed = parseStatement(
    bytes,
    policy.policy.maxBindingDays === undefined ? {} : { maxBindingDays: policy.policy.maxBindingDays },
  );
  if (!parsed.ok) return { ok: false, check: "statement", reason: parsed.reason };
  const statement = parsed.value;
  if (statement.type !== type)
    return { ok: false, check: "statement", reason: `the statement is not a ${type}` };
  if (statement.issuer !== owner.issuer)
    return { ok: false, check: "issuer", reason: "the statement's issuer does not own the card's BIN" };
  const key = signerOf(policy, owner, binding, input.now, deps.sha256);
  if (!key.ok) return key;
  const delayed = rootDelayProblem(owner, {
    now: input.now,
    witnessedAt: trusted.witnessedAt,
    delaySeconds: policy.policy.rootDelaySeconds ?? DEFAULT_ROOT_DELAY_SECONDS,
    pinned: pinOf(policy, owner.issuer) !== undefined,
    ...(input.rootSightings === undefined ? {} : { sightings: input.rootSightings }),
    rotation: input.answer.rootRotation,
    engine: deps.engine,
  });
  if (delayed !== undefined) return { ok: false, check: "root", reason: delayed };
  const signature = fromBase64Strict(binding.signature, 64);
  if (signature === undefined || !verifySignature(key.key, bytes, signature, deps.engine)) {
    return {
      ok: false,
      check: "signature",
      reason: "the signature does not verify under the issuer's signing key",
    };
  }
  if (!isCurrent(statement as { notBefore: string; notAfter: string }, input.now)) {
    return { ok: false, check: "window", reason: "the statement is not valid now" };
  }
  const cardRef = input.card.cardRef;
  const par = statement.type === "receipts.v1/key-binding" && "par" in cardRef ? cardRef.par : undefined;
  const included = leafIncluded(
    proof,
    trusted,
    { signerSpki: key.key.spki, opening, statement: bytes, par },
    deps.sha256,
  );
  return included
    ? { ok: true, statement }
    : { ok: false, check: "inclusion", reason: "the statement's leaf is not under the checkpoint" };
}

/** The root the policy pins for `issuer`: its own member only (an issuer may be named "constructor"). */
function pinOf(policy: ParsedPolicy, issuer: string): string | undefined {
  const pins = policy.policy.pinnedRoots;
  return pins !== undefined && Object.hasOwn(pins, issuer) ? pins[issuer] : undefined;
}

function signerOf(policy: ParsedPolicy, owner: IssuerEntry, binding: KtBinding, now: number, sha256: Sha256) {
  const entry = currentSigningKey(owner, binding.signingKeyId, now);
  if (entry === undefined)
    return {
      ok: false as const,
      check: "signature" as const,
      reason: "the signing key is not current for the issuer",
    };
  const pin = pinOf(policy, owner.issuer);
  if (pin !== undefined) {
    const root = owner.signingKeys.find(
      (k) => k.role === "root" && k.status === "current" && (parseTime(k.effectiveFrom) as number) <= now,
    );
    const rootSpki = root === undefined ? undefined : fromBase64Strict(root.spki);
    if (rootSpki === undefined || base64url(sha256(rootSpki)) !== pin) {
      return {
        ok: false as const,
        check: "signature" as const,
        reason: "the issuer's root is not the pinned one",
      };
    }
  }
  const spki = fromBase64Strict(entry.spki);
  const parsed = spki === undefined ? undefined : parseSigningKey(spki);
  if (parsed === undefined || !parsed.ok || parsed.key.algorithm !== entry.algorithm) {
    return {
      ok: false as const,
      check: "signature" as const,
      reason: "the snapshot's signing key does not parse",
    };
  }
  return { ok: true as const, key: parsed.key };
}

function leafIncluded(
  proof: KtProof,
  trusted: TrustedCheckpoint,
  leaf: { signerSpki: Uint8Array; opening: string; statement: Uint8Array; par: string | undefined },
  sha256: Sha256,
): boolean {
  const opening = fromBase64Strict(leaf.opening, OPENING_BYTES);
  const inclusion = decodeHashes(proof.inclusion);
  if (opening === undefined || inclusion === undefined || proof.treeSize !== trusted.checkpoint.size)
    return false;
  const bytes = statementLeaf(
    { signerSpki: leaf.signerSpki, opening, statement: leaf.statement, par: leaf.par },
    sha256,
  );
  return verifyInclusion(
    proof.leafIndex,
    proof.treeSize,
    leafHash(bytes, sha256),
    inclusion,
    trusted.checkpoint.root,
    sha256,
  );
}

/**
 * Escrow answers: never with no BIN known; the service's escrow key only when the policy allows it
 * and the BIN's owner (if any) has no escrow key of its own; an issuer escrow key only when it is the
 * current one (per the snapshot) of the issuer owning the card's BIN, with its signed, logged statement.
 */
function checkEscrow(
  policy: ParsedPolicy,
  input: VerifyLookupInput,
  snapshot: DirectorySnapshot,
  spkiSha256: string,
  trusted: TrustedCheckpoint,
  deps: Engines,
):
  | { ok: true; issuer: string | null; version: number | null }
  | { ok: false; check: KtCheck; reason: string } {
  const card = input.card.bin;
  if (card === undefined)
    return { ok: false, check: "escrow", reason: "an escrow answer for a card whose BIN is unknown" };
  const owner = ownerOfBin(snapshot, card.digits, card.kind, input.now);
  const { sealTo } = input;
  const same = (ref: { keyId: string; algorithm: string; spkiSha256: string } | null) =>
    ref !== null &&
    ref.keyId === sealTo.keyId &&
    ref.algorithm === sealTo.algorithm &&
    ref.spkiSha256 === spkiSha256;
  if (same(snapshot.serviceEscrowKey)) {
    if (policy.policy.allowServiceEscrow !== true)
      return { ok: false, check: "escrow", reason: "the service escrow key is not allowed" };
    if (owner.ok && owner.value.escrowKey !== null) {
      return {
        ok: false,
        check: "escrow",
        reason: "the service escrow key for a card whose issuer has its own",
      };
    }
    return { ok: true, issuer: null, version: null };
  }
  if (!owner.ok) return { ok: false, check: "escrow", reason: owner.reason };
  if (!same(owner.value.escrowKey))
    return { ok: false, check: "escrow", reason: "not the current escrow key of the BIN's owner" };
  const signed = checkSigned(policy, input, owner.value, trusted, deps, "receipts.v1/escrow-key");
  if (!signed.ok) return signed;
  const s = signed.statement;
  if (
    s.type !== "receipts.v1/escrow-key" ||
    s.keyId !== sealTo.keyId ||
    s.spkiSha256 !== spkiSha256 ||
    s.algorithm !== sealTo.algorithm
  ) {
    return {
      ok: false,
      check: "key",
      reason: "the escrow-key statement does not describe the key to seal to",
    };
  }
  return { ok: true, issuer: s.issuer, version: s.version };
}
