import { toHex } from "./bytes.js";
import {
  type Checkpoint,
  checkNoteSignature,
  type NoteKey,
  parseCheckpoint,
  parseNote,
  parseVkey,
} from "./note.js";
import { nobleEngine, type SignatureEngine } from "./signatures.js";

/**
 * The merchant's trust policy (docs/key-transparency.md, "The merchant's verification"): shipped with the
 * client library or configured by the merchant, never fetched from the service. A checkpoint is trusted when
 * the log's key signed it and a quorum of the policy's witnesses cosigned it recently enough.
 */

/** The default `maxCheckpointAge`: one hour. */
export const DEFAULT_MAX_CHECKPOINT_AGE_SECONDS = 3600;

/** How far in the future a cosignature time may be and still count (clock skew), in seconds. */
export const MAX_CLOCK_SKEW_SECONDS = 60;

/** A witness the policy trusts. */
export interface PolicyWitness {
  /** The witness's vkey (cosignature type 0x04). */
  vkey: string;
  /** Who runs it; witnesses of the operator's organisation do not count. */
  organisation: string;
}

/** The trust policy, as JSON. */
export interface TrustPolicy {
  /** The log's checkpoint origin, `<host>/receipts/kt/v1`. */
  origin: string;
  /** The log's vkey (Ed25519 note signature, type 0x01). */
  logKey: string;
  /** The operator's organisation (its witnesses never count). */
  operator: string;
  witnesses: PolicyWitness[];
  /** Cosignatures needed (at least 2), from at least 2 organisations. */
  quorum: number;
  /** Oldest acceptable checkpoint, from the quorum's cosignature times (default 3600). */
  maxCheckpointAgeSeconds?: number;
  /** Accept the service's own escrow key (default false). */
  allowServiceEscrow?: boolean;
  /** Per issuer, the spkiSha256 of the root the merchant pinned. */
  pinnedRoots?: Record<string, string>;
  /** KT_MAX_BINDING_DAYS (default 35). */
  maxBindingDays?: number;
  /**
   * KT_ROOT_DELAY: seconds after the first witnessed checkpoint that contained it before an issuer's
   * root counts (default 72 h; 0 for a development service). A pinned root counts at once.
   */
  rootDelaySeconds?: number;
}

/** A policy whose keys parsed. */
export interface ParsedPolicy {
  policy: TrustPolicy;
  logKey: NoteKey;
  witnesses: Array<{ key: NoteKey; organisation: string }>;
}

/**
 * Checks a policy's own rules: a log key (0x01), at least 3 witnesses (0x04) from at least 2
 * organisations other than the operator, none of the operator's, no witness twice, and a quorum of
 * at least 2 that the witnesses can reach and that is more than half of them. Throws with the
 * reason: a bad policy is a configuration error, found before any lookup.
 */
export function parsePolicy(policy: TrustPolicy): ParsedPolicy {
  const logKey = parseVkey(policy.logKey);
  if (logKey === undefined || logKey.type !== 0x01)
    throw new TypeError("trust policy: logKey must be an Ed25519 note vkey");
  const witnesses = policy.witnesses.map((w) => {
    const key = parseVkey(w.vkey);
    if (key === undefined || key.type !== 0x04)
      throw new TypeError(`trust policy: ${w.vkey} is not a cosignature vkey`);
    if (w.organisation === policy.operator)
      throw new TypeError("trust policy: the operator's witnesses do not count");
    return { key, organisation: w.organisation };
  });
  // By name and by key: a cosignature does not sign the witness's name, so one key listed under
  // two names would have its line copied under the other and count twice.
  const names = new Set(witnesses.map((w) => `${w.key.name}+${w.key.keyId}`));
  const keys = new Set(witnesses.map((w) => toHex(w.key.publicKey)));
  if (names.size !== witnesses.length || keys.size !== witnesses.length) {
    throw new TypeError("trust policy: a witness is listed twice");
  }
  if (witnesses.length < 3) throw new TypeError("trust policy: at least 3 witnesses are needed");
  if (new Set(witnesses.map((w) => w.organisation)).size < 2) {
    throw new TypeError("trust policy: witnesses from at least 2 organisations are needed");
  }
  const delay = policy.rootDelaySeconds;
  if (delay !== undefined && (!Number.isSafeInteger(delay) || delay < 0)) {
    throw new TypeError("trust policy: rootDelaySeconds must be a whole number of seconds, 0 or more");
  }
  if (!Number.isInteger(policy.quorum) || policy.quorum < 2 || policy.quorum > witnesses.length) {
    throw new TypeError("trust policy: quorum must be at least 2 and at most the number of witnesses");
  }
  // Witnesses do not talk to each other, so two disjoint quorums could each cosign their own fork.
  if (2 * policy.quorum <= witnesses.length) {
    throw new TypeError(
      "trust policy: quorum must be more than half of the witnesses, so that any two quorums share one",
    );
  }
  return { policy, logKey, witnesses };
}

/** A checkpoint the policy trusts, with the time its quorum vouches for. */
export interface TrustedCheckpoint {
  checkpoint: Checkpoint;
  /** The note text that was signed. */
  text: string;
  /** The quorum's freshness: when the freshest quorum of two organisations had all cosigned (seconds). */
  witnessedAt: number;
}

/** What a checkpoint's signatures say, before the clock is read: pure, so it may be cached by note text. */
export interface SignedCheckpoint {
  checkpoint: Checkpoint;
  text: string;
  /** The policy's witnesses whose cosignatures verified, with their times (seconds). */
  cosigned: Array<{ time: number; organisation: string }>;
}

/**
 * Checks a checkpoint note's signatures against the policy: a checkpoint of the policy's origin,
 * signed by the log's key, every present signature of a known key verifying; and collects the
 * witnesses' cosignature times.
 */
export function checkCheckpointSignatures(
  parsed: ParsedPolicy,
  checkpointNote: string,
  engine: SignatureEngine = nobleEngine,
): { ok: true; value: SignedCheckpoint } | { ok: false; reason: string } {
  const note = parseNote(checkpointNote);
  const checkpoint = note === undefined ? undefined : parseCheckpoint(note.text);
  if (note === undefined || checkpoint === undefined)
    return { ok: false, reason: "checkpoint is not a signed checkpoint note" };
  if (checkpoint.origin !== parsed.policy.origin)
    return { ok: false, reason: "checkpoint is of another log (origin)" };
  const log = checkNoteSignature(note, parsed.logKey, engine);
  if (log.status !== "good")
    return { ok: false, reason: `checkpoint log signature is ${log.status === "bad" ? "bad" : "missing"}` };
  const cosigned: SignedCheckpoint["cosigned"] = [];
  for (const witness of parsed.witnesses) {
    const check = checkNoteSignature(note, witness.key, engine);
    if (check.status === "bad")
      return { ok: false, reason: `checkpoint has a bad cosignature of ${witness.key.name}` };
    if (check.status === "good" && check.timestamp !== undefined) {
      cosigned.push({ time: check.timestamp, organisation: witness.organisation });
    }
  }
  return { ok: true, value: { checkpoint, text: note.text, cosigned } };
}

/**
 * The clock's part at `now` (seconds): cosignatures more than a minute in the future do not count; a
 * quorum of distinct witnesses from at least 2 organisations is needed; and the freshest such quorum
 * ({@link freshestQuorumTime}) is at most `maxCheckpointAgeSeconds` old.
 */
export function checkFreshness(
  parsed: ParsedPolicy,
  signed: SignedCheckpoint,
  now: number,
): { ok: true; value: TrustedCheckpoint } | { ok: false; reason: string } {
  const counted = signed.cosigned.filter((c) => c.time <= now + MAX_CLOCK_SKEW_SECONDS);
  const quorum = parsed.policy.quorum;
  if (counted.length < quorum || new Set(counted.map((c) => c.organisation)).size < 2) {
    return { ok: false, reason: `checkpoint lacks a witness quorum (${counted.length} of ${quorum})` };
  }
  const witnessedAt = freshestQuorumTime(counted, quorum);
  const maxAge = parsed.policy.maxCheckpointAgeSeconds ?? DEFAULT_MAX_CHECKPOINT_AGE_SECONDS;
  if (now - witnessedAt > maxAge) return { ok: false, reason: "checkpoint is older than maxCheckpointAge" };
  return { ok: true, value: { checkpoint: signed.checkpoint, text: signed.text, witnessedAt } };
}

/**
 * The latest time by which a quorum of cosignatures from at least two organisations had all been
 * made: the newest `k >= quorum` cosignatures that span two organisations, dated by the oldest of
 * them. (The quorum-th newest alone would let one organisation's witnesses make a checkpoint fresh
 * that the others cosigned long ago.) `counted` holds a quorum from two organisations.
 */
function freshestQuorumTime(counted: Array<{ time: number; organisation: string }>, quorum: number): number {
  const newest = [...counted].sort((a, b) => b.time - a.time);
  const organisations = new Set<string>();
  for (const [i, c] of newest.entries()) {
    organisations.add(c.organisation);
    if (i + 1 >= quorum && organisations.size >= 2) return c.time;
  }
  throw new Error("unreachable: counted holds a quorum from two organisations");
}

/** Verifies a checkpoint note at `now` (seconds): {@link checkCheckpointSignatures}, then {@link checkFreshness}. */
export function verifyCheckpoint(
  parsed: ParsedPolicy,
  checkpointNote: string,
  now: number,
  engine: SignatureEngine = nobleEngine,
): { ok: true; value: TrustedCheckpoint } | { ok: false; reason: string } {
  const signed = checkCheckpointSignatures(parsed, checkpointNote, engine);
  return signed.ok ? checkFreshness(parsed, signed.value, now) : signed;
}
