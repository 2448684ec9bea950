import { fromBase64 } from "../kt/base64.js";
import { type Json, signingTextOf } from "../receipt-fields.js";

/**
 * The cardholder's side of merchant signatures (README, "Merchant signatures"): the service cannot check a
 * signature sealed inside a receipt it cannot open, so the device does, after opening it, against the
 * merchant's public signing keys (`GET /api/v1/merchants/{merchantId}/signing-keys`). WebCrypto only, like
 * the rest of the library that runs on the device.
 */

/** How a receipt's merchant signature checked out. */
export type SignatureStatus = "valid" | "invalid" | "absent";

/** One signing key of a merchantId as the listing gives it (JSON: times as RFC 3339 strings). */
export interface SigningKeyInfo {
  merchantKeyId: string;
  /** Base64 DER SubjectPublicKeyInfo of the Ed25519 key. */
  publicKey: string;
  /** When it became the merchantId's current key. */
  registeredAt: string | Date;
  /** When a newer key replaced it; absent for the current key. */
  replacedAt?: string | Date | undefined;
  /** When the merchant revoked it. */
  revokedAt?: string | Date | undefined;
  /** The merchant declared that every receipt is signed while this key is current. */
  allReceiptsSigned?: boolean | undefined;
}

/** The outcome of {@link checkReceiptSignature}: the status, why, and the key it names. */
export interface SignatureCheck {
  status: SignatureStatus;
  /** Why, in words (for a log or a support screen). */
  reason: string;
  /** The `merchantKeyId` the receipt names, when it names one. */
  merchantKeyId?: string;
}

/** Length of an Ed25519 signature, in bytes. */
const SIGNATURE_BYTES = 64;

/**
 * Checks the merchant signature sealed in an opened receipt against the merchantId's signing keys.
 * `storedAt` is when the service stored the receipt (the envelope's `createdAt`); without it the
 * check is the strictest one (a revoked key is never good, and the current key's declaration counts).
 *
 * - **valid**: the receipt names a listed key, the key was not revoked before the receipt was stored,
 *   and the Ed25519 signature over the receipt's signed form (RFC 8785 canonical JSON, the library's
 *   `signingTextOf`) verifies.
 * - **invalid**: a signature that does not verify, is malformed, names no listed key (or none), or was
 *   made with a key revoked before the receipt was stored; or no signature although the key current
 *   when the receipt was stored declared that every receipt is signed.
 * - **absent**: no signature, and no declaration says there must be one.
 */
export async function checkReceiptSignature(
  receipt: object,
  keys: readonly SigningKeyInfo[],
  storedAt?: string | Date,
): Promise<SignatureCheck> {
  const fields = receipt as Record<string, unknown>;
  const signature = typeof fields.merchantSignature === "string" ? fields.merchantSignature : "";
  const keyId = typeof fields.merchantKeyId === "string" ? fields.merchantKeyId : "";
  const stored = storedAt === undefined ? Number.NaN : timeOf(storedAt);
  const at = Number.isNaN(stored) ? undefined : stored;
  if (signature === "" && keyId === "") {
    const current = currentAt(keys, at);
    return current?.allReceiptsSigned === true
      ? { status: "invalid", reason: "unsigned, but the merchant declared every receipt of that time signed" }
      : { status: "absent", reason: "the merchant did not sign this receipt" };
  }
  const named = { merchantKeyId: keyId };
  const key = keys.find((k) => k.merchantKeyId === keyId);
  if (key === undefined)
    return { status: "invalid", reason: "signed with a key the merchant does not list", ...named };
  const revokedAt = key.revokedAt === undefined ? undefined : timeOf(key.revokedAt);
  // A revocation time that does not parse counts from the beginning.
  if (revokedAt !== undefined && (at === undefined || Number.isNaN(revokedAt) || at >= revokedAt)) {
    return { status: "invalid", reason: "signed with a key revoked before the receipt was stored", ...named };
  }
  const bytes = fromBase64(signature);
  if (bytes === undefined || bytes.length !== SIGNATURE_BYTES) {
    return { status: "invalid", reason: "the signature is not 64 bytes of base64", ...named };
  }
  const verified = await verifies(key.publicKey, bytes, signingTextOf(fields as { [name: string]: Json }));
  return verified
    ? { status: "valid", reason: "the merchant's signature verifies", ...named }
    : { status: "invalid", reason: "the signature does not verify over this receipt", ...named };
}

/** The key current at `at` (registered at or before it, not replaced by then); the current one without a time. */
function currentAt(keys: readonly SigningKeyInfo[], at: number | undefined): SigningKeyInfo | undefined {
  if (at === undefined) return keys.find((k) => k.replacedAt === undefined);
  return keys.find(
    (k) => timeOf(k.registeredAt) <= at && (k.replacedAt === undefined || at < timeOf(k.replacedAt)),
  );
}

/** Ed25519 verification with WebCrypto; a key that does not import verifies nothing. */
async function verifies(spki: string, signature: Uint8Array<ArrayBuffer>, text: string): Promise<boolean> {
  const der = fromBase64(spki);
  if (der === undefined) return false;
  const subtle = globalThis.crypto.subtle;
  try {
    const key = await subtle.importKey("spki", der, { name: "Ed25519" }, false, ["verify"]);
    return await subtle.verify({ name: "Ed25519" }, key, signature, new TextEncoder().encode(text));
  } catch {
    return false;
  }
}

/** Milliseconds of an RFC 3339 string or a Date; NaN (which compares false) for anything else. */
function timeOf(value: string | Date): number {
  return value instanceof Date ? value.getTime() : Date.parse(value);
}

/** Where `openListing` gets a merchantId's signing keys: the service's listing, or the app's cache. */
export type SigningKeySource = (
  merchantId: string,
) => readonly SigningKeyInfo[] | Promise<readonly SigningKeyInfo[]>;

/**
 * A memo of `source` per merchantId for one listing: each merchantId's keys are read once. A source
 * that fails gives every receipt of that merchantId the status `invalid` (a signature that cannot be
 * checked is not a valid one), with the failure as the reason.
 */
export function signingKeysOnce(
  source: SigningKeySource,
): (merchantId: string) => Promise<readonly SigningKeyInfo[] | Error> {
  const read = new Map<string, Promise<readonly SigningKeyInfo[] | Error>>();
  return (merchantId) => {
    let keys = read.get(merchantId);
    if (keys === undefined) {
      keys = Promise.resolve()
        .then(() => source(merchantId))
        .catch((err: unknown) => (err instanceof Error ? err : new Error(String(err))));
      read.set(merchantId, keys);
    }
    return keys;
  };
}

/** The time a listed envelope was stored: its `createdAt` (RFC 3339 text, a Date, or a protobuf Timestamp). */
export function storedAtOf(envelope: object): Date | undefined {
  const createdAt = (envelope as { createdAt?: unknown }).createdAt;
  if (typeof createdAt === "string" || createdAt instanceof Date) {
    const time = timeOf(createdAt);
    return Number.isNaN(time) ? undefined : new Date(time);
  }
  if (typeof createdAt === "object" && createdAt !== null && "seconds" in createdAt) {
    const { seconds, nanos } = createdAt as { seconds: bigint | number | string; nanos?: number };
    return new Date(Number(seconds) * 1000 + Math.floor((nanos ?? 0) / 1_000_000));
  }
  return undefined;
}
