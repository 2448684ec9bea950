import { fromUtf8 } from "./bytes.js";
import { type Checked, type Json, parseCanonicalObject } from "./json.js";
import {
  BIN,
  BOOLEAN,
  checkMembers,
  ESCROW_KEY_ID,
  INDEX,
  KEY_ALGORITHM,
  parseTime,
  type Rule,
  SHA256_B64URL,
  SIGNING_ALGORITHM,
  SIGNING_KEY_ID,
  SPKI_B64,
  TENANT,
  TIME_RULE,
} from "./statements.js";

/**
 * The directory snapshot (`receipts.v1/directory`, docs/key-transparency.md): the whole directory, appended
 * by the log on every change and at least every 24 h, valid until `notAfter` (at most 48 h after
 * `issuedAt`). Verifiers use only a snapshot proven under the checkpoint and not expired, and take
 * from it which issuer owns a BIN, which signing keys are current, and which escrow keys are current.
 */

/** The longest a snapshot may claim to be valid. */
export const MAX_SNAPSHOT_HOURS = 48;

/** The most signing keys (revoked ones included) a snapshot lists for one issuer. */
export const MAX_SIGNING_KEYS = 64;

export interface SigningKeyEntry {
  signingKeyId: string;
  algorithm: "Ed25519" | "ECDSA-P256-SHA256";
  /** Base64 SPKI DER. */
  spki: string;
  role: "root" | "signer";
  status: "pending" | "current" | "revoked";
  /** When it counts (a root: KT_ROOT_DELAY after the first checkpoint that showed it). */
  effectiveFrom: string;
}
export interface PrefixEntry {
  prefix: string;
  kind: "bin" | "token-bin";
  effectiveFrom: string;
  /** When it stops counting (a BIN moving away), or null. */
  effectiveUntil: string | null;
}
export interface EscrowKeyRef {
  keyId: string;
  algorithm: string;
  spkiSha256: string;
}
export interface IssuerEntry {
  issuer: string;
  /** Version of the tenant's last root-signed statement (0: none). */
  version: number;
  requireBindings: boolean;
  plaintextIntake: "accept" | "refuse";
  signingKeys: SigningKeyEntry[];
  prefixes: PrefixEntry[];
  escrowKey: EscrowKeyRef | null;
}
export interface DirectorySnapshot {
  v: 1;
  type: "receipts.v1/directory";
  issuedAt: string;
  notAfter: string;
  /** Leaf index of the previous snapshot, or null for the first. */
  previous: number | null;
  issuers: IssuerEntry[];
  serviceEscrowKey: EscrowKeyRef | null;
}

const oneOf =
  (...values: Json[]): Rule =>
  (v) =>
    values.includes(v) ? undefined : `must be one of ${values.map((x) => JSON.stringify(x)).join(", ")}`;
const nullOr =
  (rule: Rule): Rule =>
  (v) =>
    v === null ? undefined : rule(v);
const object =
  (rules: Record<string, Rule>): Rule =>
  (v) =>
    v === null || typeof v !== "object" || Array.isArray(v) ? "must be an object" : checkMembers(v, rules);
const list =
  (rule: Rule, max: number): Rule =>
  (v) => {
    if (!Array.isArray(v) || v.length > max) return `must be a list of at most ${max}`;
    for (const [i, item] of v.entries()) {
      const problem = rule(item);
      if (problem !== undefined) return `[${i}] ${problem}`;
    }
    return undefined;
  };

const ESCROW_REF = object({ keyId: ESCROW_KEY_ID, algorithm: KEY_ALGORITHM, spkiSha256: SHA256_B64URL });
const SIGNING_KEY_ENTRY = object({
  signingKeyId: SIGNING_KEY_ID,
  algorithm: SIGNING_ALGORITHM,
  spki: SPKI_B64,
  role: oneOf("root", "signer"),
  status: oneOf("pending", "current", "revoked"),
  effectiveFrom: TIME_RULE,
});
const PREFIX_ENTRY = object({
  prefix: BIN,
  kind: oneOf("bin", "token-bin"),
  effectiveFrom: TIME_RULE,
  effectiveUntil: nullOr(TIME_RULE),
});
const ISSUER_ENTRY = object({
  issuer: TENANT,
  version: INDEX,
  requireBindings: BOOLEAN,
  plaintextIntake: oneOf("accept", "refuse"),
  signingKeys: list(SIGNING_KEY_ENTRY, MAX_SIGNING_KEYS),
  prefixes: list(PREFIX_ENTRY, 100_000),
  escrowKey: nullOr(ESCROW_REF),
});
const SNAPSHOT_RULES: Record<string, Rule> = {
  v: oneOf(1),
  type: oneOf("receipts.v1/directory"),
  issuedAt: TIME_RULE,
  notAfter: TIME_RULE,
  previous: nullOr(INDEX),
  issuers: list(ISSUER_ENTRY, 1_000_000),
  serviceEscrowKey: nullOr(ESCROW_REF),
};

/**
 * Parses a snapshot's JSON: canonical, exactly the members above at every depth, a window of at most
 * 48 h, each issuer once, and no two owners of one prefix (of one kind) at any time.
 */
export function parseDirectory(json: Uint8Array | string): Checked<DirectorySnapshot> {
  const text = typeof json === "string" ? json : fromUtf8(json);
  if (text === undefined) return { ok: false, reason: "snapshot is not UTF-8" };
  const parsed = parseCanonicalObject(text);
  if (!parsed.ok) return { ok: false, reason: `snapshot ${parsed.reason}` };
  const problem = checkMembers(parsed.value, SNAPSHOT_RULES, "snapshot ");
  if (problem !== undefined) return { ok: false, reason: problem };
  const snapshot = parsed.value as unknown as DirectorySnapshot;
  const from = parseTime(snapshot.issuedAt) as number;
  const to = parseTime(snapshot.notAfter) as number;
  if (to <= from || to - from > MAX_SNAPSHOT_HOURS * 3_600_000) {
    return { ok: false, reason: `snapshot validity must be within ${MAX_SNAPSHOT_HOURS} h` };
  }
  const conflict = ownershipConflict(snapshot);
  if (conflict !== undefined) return { ok: false, reason: conflict };
  return { ok: true, value: snapshot };
}

function ownershipConflict(snapshot: DirectorySnapshot): string | undefined {
  const issuers = new Set<string>();
  const spans = new Map<string, Array<[number, number]>>();
  for (const entry of snapshot.issuers) {
    if (issuers.has(entry.issuer)) return `snapshot lists issuer ${entry.issuer} twice`;
    issuers.add(entry.issuer);
    for (const p of entry.prefixes) {
      const span: [number, number] = [
        parseTime(p.effectiveFrom) as number,
        p.effectiveUntil === null ? Number.POSITIVE_INFINITY : (parseTime(p.effectiveUntil) as number),
      ];
      const key = `${p.kind}:${p.prefix}`;
      const known = spans.get(key) ?? [];
      if (known.some(([a, b]) => span[0] < b && a < span[1]))
        return `snapshot gives prefix ${p.prefix} two owners at once`;
      spans.set(key, [...known, span]);
    }
  }
  return undefined;
}

/** Whether a snapshot may be used at `now`: issued (with a minute of clock skew) and not expired. */
export function snapshotIsCurrent(snapshot: DirectorySnapshot, now: number): boolean {
  return (
    (parseTime(snapshot.issuedAt) as number) <= now + 60_000 && now < (parseTime(snapshot.notAfter) as number)
  );
}

/**
 * The issuer owning the longest prefix of a card's own BIN at `now` (`kind` "bin" for a card number's
 * first digits, "token-bin" for a wallet token's first 8), or why there is none: nobody owns it, or a
 * 6-digit BIN would match a longer prefix (send 8 digits).
 */
export function ownerOfBin(
  snapshot: DirectorySnapshot,
  cardBin: string,
  kind: "bin" | "token-bin",
  now: number,
): Checked<IssuerEntry> {
  if (BIN(cardBin) !== undefined) return { ok: false, reason: "the card's BIN must be 6 or 8 digits" };
  let best: { issuer: IssuerEntry; length: number } | undefined;
  for (const issuer of snapshot.issuers) {
    for (const p of issuer.prefixes) {
      if (p.kind !== kind || !inEffect(p, now)) continue;
      if (p.prefix.length > cardBin.length && p.prefix.startsWith(cardBin)) {
        return {
          ok: false,
          reason: "a 6-digit BIN covers an 8-digit prefix: the card's 8 digits are needed",
        };
      }
      if (cardBin.startsWith(p.prefix) && (best === undefined || p.prefix.length > best.length)) {
        best = { issuer, length: p.prefix.length };
      }
    }
  }
  return best === undefined
    ? { ok: false, reason: "no issuer owns the card's BIN" }
    : { ok: true, value: best.issuer };
}

function inEffect(p: PrefixEntry, now: number): boolean {
  const from = parseTime(p.effectiveFrom) as number;
  return from <= now && (p.effectiveUntil === null || now < (parseTime(p.effectiveUntil) as number));
}

/** The issuer's signing key with this id if it is current at `now` (status current, in effect). */
export function currentSigningKey(
  issuer: IssuerEntry,
  signingKeyId: string,
  now: number,
): SigningKeyEntry | undefined {
  return issuer.signingKeys.find(
    (k) =>
      k.signingKeyId === signingKeyId &&
      k.status === "current" &&
      (parseTime(k.effectiveFrom) as number) <= now,
  );
}

/** The issuer's entry by tenant id. */
export function issuerEntry(snapshot: DirectorySnapshot, issuer: string): IssuerEntry | undefined {
  return snapshot.issuers.find((entry) => entry.issuer === issuer);
}
