import { fromBase64Strict } from "./bytes.js";
import type { IssuerEntry, SigningKeyEntry } from "./directory.js";
import { nobleEngine, parseSigningKey, type SignatureEngine, verifySignature } from "./signatures.js";
import { parseStatement, parseTime } from "./statements.js";
import type { KtBinding } from "./wire.js";

/**
 * KT_ROOT_DELAY in the merchant's verification (docs/key-transparency.md): an issuer's root counts
 * only `rootDelaySeconds` (default 72 h; 0 for a development service) after the first checkpoint that
 * contained it, so that a root slipped in by the operator or a store writer is in the public log, for
 * the issuer's monitor to alarm on, days before any merchant seals to a key it signed.
 *
 * Which time, and why. The verifier cannot learn when the log first contained the root: the service
 * could claim any time (the snapshot's `effectiveFrom` is its word), and an answer proves only the
 * checkpoint it carries. The one time nobody at the service can move is a witness quorum's cosignature
 * time (`witnessedAt`): a checkpoint cosigned at t whose proven snapshot lists the root shows the root
 * was public at t. So the verifier remembers, per root, the earliest `witnessedAt` at which it saw the
 * root current in a proven snapshot, and the root counts once the `witnessedAt` of the answer in hand
 * is at least the delay later. Both ends are witness times, so neither the merchant's clock nor the
 * service can shorten the delay (the local clock only bounds freshness, `maxCheckpointAge`). The first
 * checkpoint this verifier saw is never earlier than the first one that existed: the delay it enforces
 * is at least KT_ROOT_DELAY, and longer for a verifier that starts late; a merchant that keeps its
 * memory across restarts (`KeyTrustOptions.rootsSeen`), or pins the root after an out-of-band check
 * (`pinnedRoots`, which counts at once), does not wait again.
 */

/** KT_ROOT_DELAY's default: 72 hours, in seconds. */
export const DEFAULT_ROOT_DELAY_SECONDS = 72 * 3600;

/**
 * The earliest witnessed time (seconds) at which the verifier saw `rootId` of `issuer` current,
 * after recording `witnessedAt` (the answer's) as a sighting.
 */
export type RootSightings = (issuer: string, rootId: string, witnessedAt: number) => number;

/** The issuer's current root at `now` (ms) as the snapshot lists it. */
export function currentRoot(issuer: IssuerEntry, now: number) {
  return issuer.signingKeys.find(
    (k) => k.role === "root" && k.status === "current" && (parseTime(k.effectiveFrom) as number) <= now,
  );
}

/**
 * Why the issuer's root does not count yet under a checkpoint witnessed at `witnessedAt`, or
 * undefined when it does. `pinned`: the merchant pinned this root (it counts at once). Without
 * `sightings` the verifier has seen the root only now.
 */
export function rootDelayProblem(
  issuer: IssuerEntry,
  input: {
    now: number;
    witnessedAt: number;
    delaySeconds: number;
    pinned: boolean;
    sightings?: RootSightings;
    /** The answer's `rootRotation`: the statement by which the previous root introduced this one. */
    rotation?: KtBinding | undefined;
    engine?: SignatureEngine;
  },
): string | undefined {
  const root = currentRoot(issuer, input.now);
  if (root === undefined) return "the issuer has no current root";
  if (input.pinned || input.delaySeconds === 0) return undefined;
  const first = input.sightings?.(issuer.issuer, root.signingKeyId, input.witnessedAt) ?? input.witnessedAt;
  if (input.witnessedAt - first >= input.delaySeconds) return undefined;
  if (input.rotation !== undefined && rotationVouches(issuer, root, input.rotation, input)) return undefined;
  return `the issuer's root is newer than the root delay (${input.delaySeconds} s) for this verifier`;
}

/**
 * Whether `rotation` proves that `root` is the successor its issuer's previous root chose: a
 * `receipts.v1/signing-key` statement of role `root` naming exactly this root (issuer, id,
 * algorithm, SPKI), signed by another root of the issuer that the snapshot still lists, retired by
 * this root's introduction (listed revoked from the same snapshot as this root is listed current), and
 * that counts for this verifier: it saw that root current at least the delay before this answer's
 * checkpoint. Such a root is the issuer's word, not the operator's, and needs no delay of its own.
 * A recovery root (confirmed by the operator after a self-revocation) or a first root has no such
 * statement, and anything short of this proof keeps the delay.
 */
export function rotationVouches(
  issuer: IssuerEntry,
  root: SigningKeyEntry,
  rotation: KtBinding,
  input: { witnessedAt: number; delaySeconds: number; sightings?: RootSightings; engine?: SignatureEngine },
): boolean {
  // A rotation retires the old root and makes the new one current in one store step, so the first
  // snapshot listing either change lists both: the same `effectiveFrom`. A root that revoked itself
  // is listed revoked in an earlier snapshot than its recovery root is listed current (the operator
  // confirms a recovery root only after that), so a self-revoked root never vouches for a successor.
  const previous = issuer.signingKeys.find(
    (k) =>
      k.signingKeyId === rotation.signingKeyId &&
      k.role === "root" &&
      k.status === "revoked" &&
      k.effectiveFrom === root.effectiveFrom,
  );
  if (previous === undefined || input.sightings === undefined) return false;
  const spki = fromBase64Strict(previous.spki);
  const key = spki === undefined ? undefined : parseSigningKey(spki);
  const bytes = fromBase64Strict(rotation.statement);
  const signature = fromBase64Strict(rotation.signature, 64);
  if (key === undefined || !key.ok || bytes === undefined || signature === undefined) return false;
  if (!verifySignature(key.key, bytes, signature, input.engine ?? nobleEngine)) return false;
  const parsed = parseStatement(bytes);
  if (!parsed.ok) return false;
  const s = parsed.value as unknown as Record<string, unknown>;
  const names =
    s.type === "receipts.v1/signing-key" &&
    s.role === "root" &&
    s.issuer === issuer.issuer &&
    s.signingKeyId === root.signingKeyId &&
    s.algorithm === root.algorithm &&
    s.spki === root.spki;
  if (!names) return false;
  const first = input.sightings(issuer.issuer, previous.signingKeyId, input.witnessedAt);
  return input.witnessedAt - first >= input.delaySeconds;
}
