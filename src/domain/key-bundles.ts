import { createPublicKey } from "node:crypto";
import type { KeyBundle } from "../../gen/receipts/v1/receipt_pb.js";
import { AUTH_TAG_BYTES, IV_BYTES } from "../crypto/envelope.js";
import type { Violations } from "../errors.js";
import type { KeyAlgorithm, StoredKeyBundle } from "../store/types.js";
import { KEY_ALGORITHMS } from "./onboarding.js";
import type { SealingKey } from "./routing.js";

/**
 * Checks on key bundles and sealed parts made outside the service (merchant-side sealing, issuer-side
 * escrow release, sections 16-17). The service cannot open them, so it checks everything it can: the
 * bundle names the right key and suite, and every part has the size its algorithm gives it.
 */

/** The uncompressed P-256 point HPKE's DHKEM(P-256) encapsulates to: 0x04, X, Y. */
export const HPKE_ENCAPSULATED_KEY_BYTES = 65;

/** The HPKE ciphertext of a 32-byte AES key under AES-256-GCM: the key and a 16-byte tag. */
export const HPKE_WRAPPED_KEY_BYTES = 48;

/** The largest ciphertext accepted from a merchant: a receipt's JSON fits far below it. */
export const MAX_SEALED_CIPHERTEXT_BYTES = 1_048_576;

/** Whether `value` names a key suite. */
export function isKeyAlgorithm(value: string): value is KeyAlgorithm {
  return (KEY_ALGORITHMS as readonly string[]).includes(value);
}

/** The size of an RSA key's wrapped AES key: its modulus, in bytes. */
function rsaWrappedKeyBytes(spki: string): number {
  const details = createPublicKey({ key: Buffer.from(spki, "base64"), format: "der", type: "spki" })
    .asymmetricKeyDetails;
  return Math.ceil((details?.modulusLength ?? 0) / 8);
}

/**
 * Checks a key bundle made outside the service against the key it must be wrapped to, adding
 * violations under `field` (e.g. `keyBundle`). The key id itself is the caller's to compare (a stale
 * one is a `conflict`, not a validation error). Returns the bundle as stored when it is valid.
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
  const before = v.list.length;
  if (bundle.algorithm !== key.algorithm) {
    v.add(`${field}.algorithm`, `must be ${key.algorithm}, the suite of key ${key.keyId}`);
    return undefined;
  }
  const wrapped = bundle.encryptedAesKey.length;
  if (key.algorithm === "RSA-OAEP-256") {
    const size = rsaWrappedKeyBytes(key.spki);
    if (wrapped !== size) v.add(`${field}.encryptedAesKey`, `must be ${size} bytes for this RSA key`);
    if (bundle.encapsulatedKey.length > 0) v.add(`${field}.encapsulatedKey`, "is only for HPKE keys");
  } else {
    if (wrapped !== HPKE_WRAPPED_KEY_BYTES) {
      v.add(`${field}.encryptedAesKey`, `must be ${HPKE_WRAPPED_KEY_BYTES} bytes for an HPKE key`);
    }
    const enc = bundle.encapsulatedKey;
    if (enc.length !== HPKE_ENCAPSULATED_KEY_BYTES || enc[0] !== 0x04) {
      v.add(
        `${field}.encapsulatedKey`,
        `must be the ${HPKE_ENCAPSULATED_KEY_BYTES}-byte uncompressed P-256 point of HPKE`,
      );
    }
  }
  if (v.list.length > before) return undefined;
  const stored: StoredKeyBundle = {
    keyId: key.keyId,
    algorithm: key.algorithm,
    encryptedAesKey: Buffer.from(bundle.encryptedAesKey).toString("base64"),
  };
  if (key.algorithm !== "RSA-OAEP-256") {
    stored.encapsulatedKey = Buffer.from(bundle.encapsulatedKey).toString("base64");
  }
  return stored;
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
