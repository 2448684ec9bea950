import { RSA_SUITE, suiteOfKeyType } from "../crypto/suites.js";
import { base64, base64url, fromBase64Strict } from "../kt/bytes.js";
import { defaultSha256 } from "../kt/hash.js";
import { parseSigningKey, type SigningAlgorithm, signingKeyIdOf, verifySignature } from "../kt/signatures.js";
import { formatTime, parseStatement, type Statement, statementBytes } from "../kt/statements.js";
import type { KtBinding } from "../kt/wire.js";
import { derKindOf, subtleCrypto, type WebCryptoKey } from "./client-keys.js";

/**
 * The issuer's side of the key directory (docs/key-transparency.md): its signing key (Ed25519 or ECDSA P-256,
 * with WebCrypto, so it may live in a browser, an app or behind a non-extractable key), the signed
 * statements it hands to `register` and `POST /issuers/escrow-keys` (`binding`), in the one canonical
 * form (RFC 8785) every verifier re-serialises and compares byte for byte. Each statement is checked
 * by the same rules the service and the merchant apply before it is signed, and each signature is
 * verified by the one signature rule after it is made, so a wrong key or a malformed statement fails
 * here rather than at the service.
 */

/** An issuer signing key as the service and the directory name it. */
export interface IssuerSigningKey {
  algorithm: SigningAlgorithm;
  /** Base64 SubjectPublicKeyInfo DER: `publicKey` of `POST /api/v1/issuers/signing-keys`. */
  spki: string;
  /** `sk_` and 32 hex digits, derived from the key (the service gives the same id). */
  signingKeyId: string;
}

/** A signing key whose private half signs: the private key (it may be non-extractable) and its public facts. */
export interface IssuerSigner extends IssuerSigningKey {
  privateKey: WebCryptoKey;
}

const WEBCRYPTO_PARAMS = {
  Ed25519: { generate: { name: "Ed25519" }, sign: { name: "Ed25519" } },
  "ECDSA-P256-SHA256": {
    generate: { name: "ECDSA", namedCurve: "P-256" },
    sign: { name: "ECDSA", hash: "SHA-256" },
  },
} as const;

/**
 * Makes a signing key with WebCrypto. The private key is not extractable unless asked: an issuer
 * that keeps its root in an HSM signs there instead, with {@link issuerSigningKeyOf} for the public facts.
 */
export async function generateIssuerSigner(
  algorithm: SigningAlgorithm = "Ed25519",
  options: { extractable?: boolean } = {},
): Promise<IssuerSigner & { publicKey: WebCryptoKey }> {
  const params = WEBCRYPTO_PARAMS[algorithm];
  if (params === undefined) throw new TypeError(`algorithm must be Ed25519 or ECDSA-P256-SHA256`);
  const pair = (await subtleCrypto().generateKey(params.generate, options.extractable === true, [
    "sign",
    "verify",
  ])) as { publicKey: WebCryptoKey; privateKey: WebCryptoKey };
  const facts = await issuerSigningKeyOf(pair.publicKey);
  return { ...facts, privateKey: pair.privateKey, publicKey: pair.publicKey };
}

/**
 * The public facts of a signing key (a WebCrypto public key, or base64 SPKI DER), checked by the
 * service's own key rules (canonical Ed25519, a P-256 point on the curve, uncompressed).
 */
export async function issuerSigningKeyOf(publicKey: WebCryptoKey | string): Promise<IssuerSigningKey> {
  const spki =
    typeof publicKey === "string"
      ? fromBase64Strict(publicKey)
      : new Uint8Array(await subtleCrypto().exportKey("spki", publicKey));
  if (spki === undefined) throw new TypeError("the signing key is not base64 SPKI DER");
  const parsed = parseSigningKey(spki);
  if (!parsed.ok) throw new TypeError(`the signing key is refused: ${parsed.reason}`);
  return { algorithm: parsed.key.algorithm, spki: base64(spki), signingKeyId: signingKeyIdOf(spki) };
}

/** What a key binding says; the key's `algorithm` and `spkiSha256` are read from `publicKey`. */
export interface KeyBindingInput {
  /** The issuer's tenant id. */
  issuer: string;
  /** The card: its hashed PAN (64 hex digits, written lower-case) or its PAR. */
  card: { hashedPan: string } | { par: string };
  /** The card's BIN (6 or 8 digits) as the issuer knows it. */
  bin: string;
  /** The device key's id (a lower-case UUID) and its public key (base64 SPKI DER, either suite). */
  keyId: string;
  publicKey: string;
  /** The card's next statement version: 1 for its first binding, then last + 1 (refreshes and rotations too). */
  version: number;
  /** The key this one replaces (a rotation), or null. */
  supersedes?: string | null;
  /** Start of validity (default five minutes ago, for clocks running behind), in milliseconds or a Date. */
  notBefore?: number | Date;
  /** Days of validity (default 30; at most KT_MAX_BINDING_DAYS, 35 by default). */
  validDays?: number;
}

/** Default validity of a binding or escrow-key statement, in days: inside the 35-day maximum, refreshed before it ends. */
export const DEFAULT_VALID_DAYS = 30;

/** The canonical bytes of a `receipts.v1/key-binding` statement; throws `TypeError` if a rule is broken. */
export function keyBindingStatement(input: KeyBindingInput): Uint8Array {
  const key = keyFacts(input.publicKey);
  const cardRef = "hashedPan" in input.card ? input.card.hashedPan.toLowerCase() : input.card.par;
  return checked({
    v: 1,
    type: "receipts.v1/key-binding",
    issuer: input.issuer,
    cardRef,
    bin: input.bin,
    keyId: input.keyId,
    algorithm: key.algorithm,
    spkiSha256: key.spkiSha256,
    version: input.version,
    supersedes: input.supersedes ?? null,
    ...window(input.notBefore, input.validDays),
  });
}

/** A card registered by both its hashed PAN and its PAR: one binding per reference, each with its own versions. */
export interface CardBindingsInput extends Omit<KeyBindingInput, "card" | "version" | "supersedes"> {
  card: { hashedPan: string; par: string };
  /** Each reference's next statement version (its statements are counted apart). */
  versions: { hashedPan: number; par: number };
  /** The key each reference's binding replaces (a rotation), or null. */
  supersedes?: { hashedPan?: string | null; par?: string | null };
  /** The BIN the PAR's binding names, when not `bin` (a wallet token's first 8 digits). */
  parBin?: string;
}

/**
 * Signs the two bindings of a card registered by both references, for the same key: `binding` (the
 * hashed PAN's) and `parBinding` (the PAR's), as `register` takes them.
 */
export async function signCardBindings(
  input: CardBindingsInput,
  signer: IssuerSigner,
): Promise<{ binding: KtBinding; parBinding: KtBinding }> {
  const { card, versions, supersedes, parBin, ...rest } = input;
  const hashed = keyBindingStatement({
    ...rest,
    card: { hashedPan: card.hashedPan },
    version: versions.hashedPan,
    supersedes: supersedes?.hashedPan ?? null,
  });
  const par = keyBindingStatement({
    ...rest,
    card: { par: card.par },
    bin: parBin ?? rest.bin,
    version: versions.par,
    supersedes: supersedes?.par ?? null,
  });
  return { binding: await signStatement(hashed, signer), parBinding: await signStatement(par, signer) };
}

/** What an issuer escrow-key statement says; the key's facts are read from `publicKey`. */
export interface EscrowKeyInput {
  issuer: string;
  /** The escrowKeyId the statement names. */
  keyId: string;
  publicKey: string;
  /** The issuer's next escrow-key version (1, then last + 1). */
  version: number;
  supersedes?: string | null;
  notBefore?: number | Date;
  validDays?: number;
}

/** The canonical bytes of a `receipts.v1/escrow-key` statement; throws `TypeError` if a rule is broken. */
export function escrowKeyStatement(input: EscrowKeyInput): Uint8Array {
  const key = keyFacts(input.publicKey);
  return checked({
    v: 1,
    type: "receipts.v1/escrow-key",
    issuer: input.issuer,
    keyId: input.keyId,
    algorithm: key.algorithm,
    spkiSha256: key.spkiSha256,
    version: input.version,
    supersedes: input.supersedes ?? null,
    ...window(input.notBefore, input.validDays),
  });
}

/** What an issuer's revocation of a card's key says (`receipts.v1/key-revocation`). */
export interface KeyRevocationInput {
  issuer: string;
  /** The card reference its binding names: the hashed PAN (any case; written lower case) or the PAR. */
  card: { hashedPan: string } | { par: string };
  /** The card's BIN, as its binding says. */
  bin: string;
  /** The card's active key (the last binding's keyId). */
  keyId: string;
  /** The card's next statement version: the last + 1. */
  version: number;
  /** Why: "erased" for an erasure (`deleteUser` takes it), "lost" for a lost device, "rotated". */
  reason: "lost" | "rotated" | "erased";
  /** When (default now), in milliseconds or a Date. */
  revokedAt?: number | Date;
}

/**
 * The canonical bytes of a `receipts.v1/key-revocation` statement; throws `TypeError` if a rule is
 * broken. Signed with {@link signStatement}, an erasure's revocation goes in `deleteUser`'s
 * `revocations`, one per card reference of the user whose card has a binding in the key log.
 */
export function keyRevocationStatement(input: KeyRevocationInput): Uint8Array {
  const cardRef = "hashedPan" in input.card ? input.card.hashedPan.toLowerCase() : input.card.par;
  const at = input.revokedAt === undefined ? Date.now() : Number(input.revokedAt);
  if (!Number.isFinite(at)) throw new TypeError("revokedAt must be a time");
  return checked({
    v: 1,
    type: "receipts.v1/key-revocation",
    issuer: input.issuer,
    cardRef,
    bin: input.bin,
    keyId: input.keyId,
    version: input.version,
    reason: input.reason,
    revokedAt: formatTime(at),
  });
}

/** A root rotation: the tenant's current root introduces its successor. */
export interface RootRotationInput {
  issuer: string;
  /** The new root's public facts ({@link issuerSigningKeyOf} or {@link generateIssuerSigner}). */
  newRoot: IssuerSigningKey;
  /** The tenant's next statement version: the last root-signed statement's + 1. */
  version: number;
  /** When (default now), in milliseconds or a Date. */
  issuedAt?: number | Date;
}

/** A root's revocation of itself (when it is compromised), or of a signer. */
export interface SigningKeyRevocationInput {
  issuer: string;
  /** The key revoked: the root itself, or a signer. */
  signingKeyId: string;
  /** The tenant's next statement version. */
  version: number;
  /** When (default now), in milliseconds or a Date. */
  revokedAt?: number | Date;
}

function timeOf(at: number | Date | undefined, name: string): string {
  const ms = at === undefined ? Date.now() : Number(at);
  if (!Number.isFinite(ms)) throw new TypeError(`${name} must be a time`);
  return formatTime(ms);
}

/**
 * Signs a root rotation with the current root (docs/key-transparency.md, "Root rotation"): the body
 * of `POST /api/v1/issuers/signing-keys` (`publicKey` the new root's SPKI, `statement` and `signature`
 * the current root's `receipts.v1/signing-key` statement of role `root`). The new root is current at
 * the service at once and the old one signs nothing more; merchants honour the new root
 * KT_ROOT_DELAY after the first checkpoint that shows it (or at once once they pin it).
 */
export async function signRootRotation(
  input: RootRotationInput,
  currentRoot: IssuerSigner,
): Promise<{ publicKey: string; statement: string; signature: string }> {
  const bytes = checked({
    v: 1,
    type: "receipts.v1/signing-key",
    issuer: input.issuer,
    signingKeyId: input.newRoot.signingKeyId,
    algorithm: input.newRoot.algorithm,
    spki: input.newRoot.spki,
    role: "root",
    version: input.version,
    issuedAt: timeOf(input.issuedAt, "issuedAt"),
  });
  if (input.newRoot.signingKeyId === currentRoot.signingKeyId)
    throw new TypeError("the new root must be another key than the current one");
  const signed = await signStatement(bytes, currentRoot);
  return { publicKey: input.newRoot.spki, statement: signed.statement, signature: signed.signature };
}

/**
 * Signs a `receipts.v1/signing-key-revocation` with the tenant's root: the body of
 * `POST /api/v1/issuers/signing-keys/{signingKeyId}/revoke`. Revoking the root itself (when it is
 * lost to someone else) revokes every signer with it; the tenant then registers a recovery root and
 * the operator confirms it after an out-of-band check, as for its first root.
 */
export async function signSigningKeyRevocation(
  input: SigningKeyRevocationInput,
  root: IssuerSigner,
): Promise<{ statement: string; signature: string }> {
  const bytes = checked({
    v: 1,
    type: "receipts.v1/signing-key-revocation",
    issuer: input.issuer,
    signingKeyId: input.signingKeyId,
    version: input.version,
    revokedAt: timeOf(input.revokedAt, "revokedAt"),
  });
  const signed = await signStatement(bytes, root);
  return { statement: signed.statement, signature: signed.signature };
}

/**
 * The canonical bytes of any statement type (revocations, and the tenant statements the root signs:
 * signing keys, `requireBindings`, BIN claims and releases, `plaintextIntake`), checked against its
 * type's exact members; docs/key-transparency.md lists them.
 */
export function statementOf(statement: Statement): Uint8Array {
  return checked(statement);
}

/**
 * Signs statement bytes with the signer's private key (WebCrypto: Ed25519, or ECDSA P-256 with
 * SHA-256, whose raw r || s is the wire form) and gives the `binding` object `register` and
 * `POST /issuers/escrow-keys` take. The signature is verified by the one rule before it is returned.
 */
export async function signStatement(statement: Uint8Array, signer: IssuerSigner): Promise<KtBinding> {
  const parsed = parseStatement(statement);
  if (!parsed.ok) throw new TypeError(`the statement is refused: ${parsed.reason}`);
  const params = WEBCRYPTO_PARAMS[signer.algorithm];
  if (params === undefined) throw new TypeError("signer.algorithm must be Ed25519 or ECDSA-P256-SHA256");
  const bytes = new Uint8Array(statement);
  const signature = new Uint8Array(await subtleCrypto().sign(params.sign, signer.privateKey, bytes));
  const spki = fromBase64Strict(signer.spki);
  const key = spki === undefined ? undefined : parseSigningKey(spki);
  if (key === undefined || !key.ok || !verifySignature(key.key, bytes, signature)) {
    throw new TypeError("the signature does not verify under signer.spki: the private key is not that key's");
  }
  if (signingKeyIdOf(key.key.spki) !== signer.signingKeyId)
    throw new TypeError("signer.signingKeyId is not the id of signer.spki");
  return { statement: base64(bytes), signature: base64(signature), signingKeyId: signer.signingKeyId };
}

function checked(statement: Record<string, unknown> | Statement): Uint8Array {
  const bytes = statementBytes(statement as Statement);
  const parsed = parseStatement(bytes);
  if (!parsed.ok) throw new TypeError(`the statement is refused: ${parsed.reason}`);
  return bytes;
}

/** The suite and `spkiSha256` of a receipt key (base64 SPKI DER). */
function keyFacts(publicKey: string): { algorithm: string; spkiSha256: string } {
  const spki = fromBase64Strict(publicKey);
  const kind = derKindOf(publicKey);
  if (spki === undefined || kind === "unknown")
    throw new TypeError("publicKey must be base64 SPKI DER of an RSA or P-256 key");
  return {
    algorithm: (suiteOfKeyType(kind) ?? RSA_SUITE).algorithm,
    spkiSha256: base64url(defaultSha256(spki)),
  };
}

/** How far before now a default `notBefore` is set, so a verifier whose clock runs behind accepts it. */
const CLOCK_SLACK_MS = 5 * 60_000;

function window(notBefore: number | Date | undefined, validDays = DEFAULT_VALID_DAYS) {
  const from = notBefore === undefined ? Date.now() - CLOCK_SLACK_MS : Number(notBefore);
  if (!Number.isFinite(from)) throw new TypeError("notBefore must be a time");
  return { notBefore: formatTime(from), notAfter: formatTime(from + validDays * 86_400_000) };
}
