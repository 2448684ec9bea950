import type { KeyBundle } from "../../gen/receipts/v1/receipt_pb.js";
import { base64OfBytes } from "../base64-text.js";
import { AUTH_TAG_BYTES, IV_BYTES } from "../crypto/envelope.js";
import { PublicKeyCache } from "../crypto/keys.js";
import { storedAadBound, suiteOf } from "../crypto/suites.js";
import { checkWrappedKey } from "../crypto/wrapped-key.js";
import { AppError, type Violations } from "../errors.js";
import type { StoredKeyBundle } from "../store/types.js";
import type { SealingKey } from "./routing.js";

/**
 * Checks on key bundles and sealed parts made outside the service (merchant-side sealing, issuer-side
 * escrow release). The service cannot open them, so it checks everything it can: the
 * bundle names the key's suite, and every part has the size the suite gives it.
 */

/**
 * The recipients' keys, each parsed once for its modulus size (by key id and SPKI, so a key whose
 * material changed is parsed afresh): parsing a stored key on every sealed receipt, to learn the size
 * its wrapped AES key must have, was about 6% of the call's CPU time.
 */
const sealingKeys = new PublicKeyCache(4_096);

/** The largest ciphertext accepted from a merchant: a receipt's JSON fits far below it. */
export const MAX_SEALED_CIPHERTEXT_BYTES = 1_048_576;

/**
 * Checks a key bundle made outside the service against the key it must be wrapped to, adding
 * violations under `field` (e.g. `keyBundle`). The key id is the caller's to compare (a stale one is
 * a `conflict`, not a validation error). An RSA bundle for a key whose wraps must be bound (an escrow
 * key) must say `aadBound`: the service cannot check the label, but an unbound wrap to an escrow key
 * is refused here, and a bound one that lies fails to unwrap at release. Returns the bundle as stored
 * (`aadBound` kept for RSA only: HPKE is always bound), or undefined when it is invalid.
 */
export function checkKeyBundle(
  v: Violations,
  field: string,
  bundle: KeyBundle | undefined,
  key: SealingKey,
): StoredKeyBundle | undefined {
  if (bundle === undefined) {
    v.add(field, "is required");
    return undefined;
  }
  if (bundle.algorithm !== key.algorithm) {
    v.add(`${field}.algorithm`, `must be ${key.algorithm}, the suite of key ${key.keyId}`);
    return undefined;
  }
  const suite = suiteOf(key.algorithm);
  if (key.aadBound && !suite.alwaysAadBound && !bundle.aadBound) {
    v.add(
      `${field}.aadBound`,
      `must be true for escrow key ${key.keyId}: wrap the AES key with the receipt's AAD as the OAEP label`,
    );
    return undefined;
  }
  const modulusBits = suite.sizedByKey ? sealingKeys.modulusBits(key.keyId, key.spki) : undefined;
  try {
    const parts = checkWrappedKey(
      key.algorithm,
      modulusBits === undefined ? undefined : Math.ceil(modulusBits / 8),
      bundle,
      field,
    );
    const stored: StoredKeyBundle = {
      keyId: key.keyId,
      algorithm: key.algorithm,
      encryptedAesKey: base64OfBytes(parts.encryptedAesKey),
      ...storedAadBound(key.algorithm, bundle.aadBound),
    };
    if (parts.encapsulatedKey !== undefined) {
      stored.encapsulatedKey = base64OfBytes(parts.encapsulatedKey);
    }
    return stored;
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    for (const violation of err.violations) v.add(violation.field, violation.description);
    return undefined;
  }
}

/** The AES-GCM parts of a receipt sealed outside the service. */
export interface SealedBytes {
  ciphertext: Uint8Array;
  iv: Uint8Array;
  authTag: Uint8Array;
}

/** Checks the sizes of AES-GCM parts made outside the service, adding violations under `prefix` + name. */
export function checkSealedBytes(v: Violations, parts: SealedBytes, prefix = ""): void {
  if (parts.iv.length !== IV_BYTES) v.add(`${prefix}iv`, `must be ${IV_BYTES} bytes`);
  if (parts.authTag.length !== AUTH_TAG_BYTES) v.add(`${prefix}authTag`, `must be ${AUTH_TAG_BYTES} bytes`);
  if (parts.ciphertext.length === 0) v.add(`${prefix}ciphertext`, "is required");
  else if (parts.ciphertext.length > MAX_SEALED_CIPHERTEXT_BYTES) {
    v.add(`${prefix}ciphertext`, `must be at most ${MAX_SEALED_CIPHERTEXT_BYTES} bytes`);
  }
}
