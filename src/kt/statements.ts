import { KEY_ALGORITHMS } from "../crypto/suites.js";
import { fromBase64Strict, fromBase64urlStrict, fromUtf8, utf8 } from "./bytes.js";
import { type Checked, canonicalJson, type Json, type JsonObject, parseCanonicalObject } from "./json.js";

/**
 * Signed statements (docs/key-transparency.md): canonical JSON with exactly the members of their `type`.
 * docs/key-transparency.md lists every type's members; this file is the one place that checks them.
 *
 * Card statements (signed by a current signing key of `issuer`): `receipts.v1/key-binding` (the
 * members docs/key-transparency.md lists), `receipts.v1/key-revocation`. Issuer statement:
 * `receipts.v1/escrow-key`. Tenant statements (signed by the tenant's root): `receipts.v1/signing-key`,
 * `receipts.v1/signing-key-revocation`, `receipts.v1/require-bindings`, `receipts.v1/bin-claim`,
 * `receipts.v1/bin-release`, `receipts.v1/plaintext-intake`. The directory snapshot
 * (`receipts.v1/directory`) is in `directory.ts`: the log writes it, nobody signs it.
 */

/** Default and bound of `notAfter - notBefore` of a binding or escrow key (KT_MAX_BINDING_DAYS). */
export const DEFAULT_MAX_BINDING_DAYS = 35;

/** A member's rule: undefined when the value is good, else what it must be. */
export type Rule = (value: Json) => string | undefined;

const TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})Z$/;

/** Milliseconds since the epoch of a `YYYY-MM-DDTHH:MM:SSZ` time, or undefined if it is not one. */
export function parseTime(text: string): number | undefined {
  const m = TIME.exec(text);
  if (m === null) return undefined;
  const ms = Date.parse(text);
  if (Number.isNaN(ms) || new Date(ms).toISOString() !== `${text.slice(0, 19)}.000Z`) return undefined;
  return ms;
}

/** The `YYYY-MM-DDTHH:MM:SSZ` form of a time (milliseconds dropped). */
export function formatTime(ms: number): string {
  return `${new Date(ms).toISOString().slice(0, 19)}Z`;
}

const pattern =
  (re: RegExp, what: string): Rule =>
  (v) =>
    typeof v === "string" && re.test(v) ? undefined : `must be ${what}`;
const oneOf =
  (...values: Json[]): Rule =>
  (v) =>
    values.includes(v) ? undefined : `must be one of ${values.map((x) => JSON.stringify(x)).join(", ")}`;
const orNull =
  (rule: Rule): Rule =>
  (v) =>
    v === null ? undefined : rule(v);

/** Tenant ids, as the service writes them (1-128 of letters, digits, `.`, `_`, `:`, `-`). */
export const TENANT: Rule = pattern(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/, "a tenant id");
export const HASHED_PAN: Rule = pattern(/^[0-9a-f]{64}$/, "64 lower-case hexadecimal characters");
export const PAR: Rule = pattern(/^[0-9A-Z]{29}$/, "a PAR (29 upper-case letters and digits)");
export const CARD_REF: Rule = (v) =>
  HASHED_PAN(v) === undefined || PAR(v) === undefined ? undefined : "must be a hashed PAN or a PAR";
export const BIN: Rule = pattern(/^(\d{6}|\d{8})$/, "6 or 8 digits");
export const USER_KEY_ID: Rule = pattern(
  /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
  "a lower-case UUID",
);
export const ESCROW_KEY_ID: Rule = pattern(/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/, "a key id");
export const SIGNING_KEY_ID: Rule = pattern(/^sk_[0-9a-f]{32}$/, "a signingKeyId (sk_ and 32 hex digits)");
/** A key suite of the registry (src/crypto/suites.ts). */
export const KEY_ALGORITHM: Rule = oneOf(...KEY_ALGORITHMS);
export const SIGNING_ALGORITHM: Rule = oneOf("Ed25519", "ECDSA-P256-SHA256");
export const SHA256_B64URL: Rule = (v) =>
  typeof v === "string" && fromBase64urlStrict(v, 32) !== undefined
    ? undefined
    : "must be unpadded base64url of 32 bytes";
export const SPKI_B64: Rule = (v) =>
  typeof v === "string" && v.length <= 200 && fromBase64Strict(v) !== undefined
    ? undefined
    : "must be base64 DER";
export const TIME_RULE: Rule = (v) =>
  typeof v === "string" && parseTime(v) !== undefined ? undefined : "must be a time YYYY-MM-DDTHH:MM:SSZ";
export const VERSION: Rule = (v) =>
  typeof v === "number" && Number.isSafeInteger(v) && v >= 1 ? undefined : "must be an integer of at least 1";
export const INDEX: Rule = (v) =>
  typeof v === "number" && Number.isSafeInteger(v) && v >= 0 ? undefined : "must be a non-negative integer";
export const BOOLEAN: Rule = (v) => (typeof v === "boolean" ? undefined : "must be true or false");

/** The statement types, each with its exact members and their rules (`v` and `type` included). */
export const STATEMENT_TYPES = {
  "receipts.v1/key-binding": {
    issuer: TENANT,
    cardRef: CARD_REF,
    bin: BIN,
    keyId: USER_KEY_ID,
    algorithm: KEY_ALGORITHM,
    spkiSha256: SHA256_B64URL,
    version: VERSION,
    supersedes: orNull(USER_KEY_ID),
    notBefore: TIME_RULE,
    notAfter: TIME_RULE,
  },
  "receipts.v1/key-revocation": {
    issuer: TENANT,
    cardRef: CARD_REF,
    bin: BIN,
    keyId: USER_KEY_ID,
    version: VERSION,
    reason: oneOf("lost", "rotated", "erased"),
    revokedAt: TIME_RULE,
  },
  "receipts.v1/escrow-key": {
    issuer: TENANT,
    keyId: ESCROW_KEY_ID,
    algorithm: KEY_ALGORITHM,
    spkiSha256: SHA256_B64URL,
    version: VERSION,
    supersedes: orNull(ESCROW_KEY_ID),
    notBefore: TIME_RULE,
    notAfter: TIME_RULE,
  },
  "receipts.v1/signing-key": {
    issuer: TENANT,
    signingKeyId: SIGNING_KEY_ID,
    algorithm: SIGNING_ALGORITHM,
    spki: SPKI_B64,
    role: oneOf("root", "signer"),
    version: VERSION,
    issuedAt: TIME_RULE,
  },
  "receipts.v1/signing-key-revocation": {
    issuer: TENANT,
    signingKeyId: SIGNING_KEY_ID,
    version: VERSION,
    revokedAt: TIME_RULE,
  },
  "receipts.v1/require-bindings": {
    issuer: TENANT,
    requireBindings: BOOLEAN,
    version: VERSION,
    issuedAt: TIME_RULE,
  },
  "receipts.v1/bin-claim": {
    issuer: TENANT,
    prefix: BIN,
    kind: oneOf("bin", "token-bin"),
    version: VERSION,
    issuedAt: TIME_RULE,
  },
  "receipts.v1/bin-release": {
    issuer: TENANT,
    prefix: BIN,
    kind: oneOf("bin", "token-bin"),
    to: orNull(TENANT),
    version: VERSION,
    issuedAt: TIME_RULE,
  },
  "receipts.v1/plaintext-intake": {
    issuer: TENANT,
    plaintextIntake: oneOf("refuse", "accept"),
    version: VERSION,
    issuedAt: TIME_RULE,
  },
} as const satisfies Record<string, Record<string, Rule>>;

export type StatementType = keyof typeof STATEMENT_TYPES;

/** Tenant statements: valid only when signed by the tenant's root. */
export const TENANT_STATEMENT_TYPES: readonly StatementType[] = [
  "receipts.v1/signing-key",
  "receipts.v1/signing-key-revocation",
  "receipts.v1/require-bindings",
  "receipts.v1/bin-claim",
  "receipts.v1/bin-release",
  "receipts.v1/plaintext-intake",
];

interface Common {
  v: 1;
  issuer: string;
  version: number;
}
export interface KeyBinding extends Common {
  type: "receipts.v1/key-binding";
  cardRef: string;
  bin: string;
  keyId: string;
  algorithm: string;
  spkiSha256: string;
  supersedes: string | null;
  notBefore: string;
  notAfter: string;
}
export interface KeyRevocation extends Common {
  type: "receipts.v1/key-revocation";
  cardRef: string;
  bin: string;
  keyId: string;
  reason: "lost" | "rotated" | "erased";
  revokedAt: string;
}
export interface EscrowKeyStatement extends Common {
  type: "receipts.v1/escrow-key";
  keyId: string;
  algorithm: string;
  spkiSha256: string;
  supersedes: string | null;
  notBefore: string;
  notAfter: string;
}
/** A tenant statement (its members beyond the common ones vary by type; see STATEMENT_TYPES). */
export interface TenantStatement extends Common {
  type: Exclude<
    StatementType,
    "receipts.v1/key-binding" | "receipts.v1/key-revocation" | "receipts.v1/escrow-key"
  >;
  [member: string]: Json;
}
export type Statement = KeyBinding | KeyRevocation | EscrowKeyStatement | TenantStatement;
/** Statements about one card. */
export type CardStatement = KeyBinding | KeyRevocation;

/** Checks an object against its type's exact member set; the reason names the first bad member. */
export function checkMembers(
  object: JsonObject,
  rules: Record<string, Rule>,
  where = "",
): string | undefined {
  for (const name of Object.keys(object))
    if (!Object.hasOwn(rules, name)) return `${where}has an unknown member "${name}"`;
  for (const [name, rule] of Object.entries(rules)) {
    const value = object[name];
    if (value === undefined) return `${where}lacks the member "${name}"`;
    const problem = rule(value);
    if (problem !== undefined) return `${where}${name} ${problem}`;
  }
  return undefined;
}

/** Options of statement checks. */
export interface StatementOptions {
  /** KT_MAX_BINDING_DAYS: the longest validity window of a binding or escrow key (default 35). */
  maxBindingDays?: number;
}

/**
 * Parses statement bytes: UTF-8, canonical JSON, `v` 1, a known `type`, exactly its members, each
 * by its rule, and for bindings and escrow keys a window `notBefore < notAfter` of at most
 * `maxBindingDays`. The reason of a refusal says which rule failed.
 */
export function parseStatement(
  bytes: Uint8Array | string,
  options: StatementOptions = {},
): Checked<Statement> {
  const text = typeof bytes === "string" ? bytes : fromUtf8(bytes);
  if (text === undefined) return { ok: false, reason: "statement is not UTF-8" };
  const parsed = parseCanonicalObject(text);
  if (!parsed.ok) return { ok: false, reason: `statement ${parsed.reason}` };
  const object = parsed.value;
  if (object.v !== 1) return { ok: false, reason: "statement v must be 1" };
  const type = object.type;
  if (typeof type !== "string" || !Object.hasOwn(STATEMENT_TYPES, type)) {
    return { ok: false, reason: "statement type is not one this version knows" };
  }
  const rules = { v: oneOf(1), type: oneOf(type), ...STATEMENT_TYPES[type as StatementType] };
  const problem = checkMembers(object, rules, "statement ");
  if (problem !== undefined) return { ok: false, reason: problem };
  if (type === "receipts.v1/key-binding" || type === "receipts.v1/escrow-key") {
    const windowProblem = checkWindow(object, options.maxBindingDays ?? DEFAULT_MAX_BINDING_DAYS);
    if (windowProblem !== undefined) return { ok: false, reason: windowProblem };
    if (object.supersedes === object.keyId) return { ok: false, reason: "statement supersedes its own key" };
  }
  return { ok: true, value: object as unknown as Statement };
}

function checkWindow(object: JsonObject, maxDays: number): string | undefined {
  const from = parseTime(object.notBefore as string) as number;
  const to = parseTime(object.notAfter as string) as number;
  if (to <= from) return "statement notAfter must be after notBefore";
  if (to - from > maxDays * 86_400_000) return `statement validity exceeds ${maxDays} days`;
  return undefined;
}

/** Whether a binding's (or escrow key's) validity window holds at `now` (ms): notBefore <= now < notAfter. */
export function isCurrent(statement: { notBefore: string; notAfter: string }, now: number): boolean {
  const from = parseTime(statement.notBefore);
  const to = parseTime(statement.notAfter);
  return from !== undefined && to !== undefined && from <= now && now < to;
}

/** The canonical bytes of a statement object (what an issuer signs). */
export function statementBytes(statement: Statement): Uint8Array {
  return utf8(canonicalJson(statement as unknown as Json));
}

/**
 * The statement as the service stores it: its canonical JSON without `cardRef` (docs/key-transparency.md:
 * the card reference is never stored in the clear). {@link withCardRef} rebuilds the exact bytes.
 */
export function withoutCardRef(statement: Uint8Array | string): string {
  const parsed = parseCanonicalObject(
    typeof statement === "string" ? statement : (fromUtf8(statement) ?? ""),
  );
  if (!parsed.ok) throw new TypeError(`statement ${parsed.reason}`);
  const { cardRef: _cardRef, ...rest } = parsed.value;
  return canonicalJson(rest);
}

/**
 * The exact statement bytes from a stored statement (without `cardRef`) and the caller's card
 * reference: canonical JSON has one form, so adding the member back gives the signed bytes, which
 * the verifier then checks against the signature like any other.
 */
export function withCardRef(stored: string, cardRef: string): Uint8Array {
  const parsed = parseCanonicalObject(stored);
  if (!parsed.ok) throw new TypeError(`stored statement ${parsed.reason}`);
  if ("cardRef" in parsed.value) throw new TypeError("stored statement already has a cardRef");
  return utf8(canonicalJson({ ...parsed.value, cardRef }));
}
