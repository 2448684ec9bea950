import { invalidRequest } from "../errors.js";

/**
 * The key suites. Every user key, key bundle and generated pair names its suite as
 * `algorithm`; the receipt's own AES-256-GCM layer is the same for both, so re-wrapping a receipt's
 * AES key moves it between suites without touching the ciphertext.
 *
 * - `RSA-OAEP-256`: RSA (2048..8192 bits, e = 65537), RSA-OAEP with SHA-256 for the hash and MGF1.
 * - `HPKE-P256-SHA256-A256GCM`: EC P-256, HPKE (RFC 9180) base mode with DHKEM(P-256, HKDF-SHA256),
 *   HKDF-SHA256 and AES-256-GCM; `info` = {@link HPKE_INFO}, `aad` = the receipt's AAD.
 */
export type KeyAlgorithm = "RSA-OAEP-256" | "HPKE-P256-SHA256-A256GCM";

/** The RSA suite, the seed's only one and the default wherever a suite is optional. */
export const RSA_OAEP_256 = "RSA-OAEP-256" satisfies KeyAlgorithm;

/** The P-256 suite: a key a phone's secure hardware can generate and never export. */
export const HPKE_P256 = "HPKE-P256-SHA256-A256GCM" satisfies KeyAlgorithm;

/** Every suite, default first. */
export const KEY_ALGORITHMS: readonly KeyAlgorithm[] = [RSA_OAEP_256, HPKE_P256];

/** Whether `value` names a suite (exact spelling, as the API carries it). */
export function isKeyAlgorithm(value: unknown): value is KeyAlgorithm {
  return value === RSA_OAEP_256 || value === HPKE_P256;
}

/** HPKE `info` of the key wrap: the UTF-8 bytes of `receipts.v1 key wrap`. */
export const HPKE_INFO_TEXT = "receipts.v1 key wrap";

/** RFC 9180 identifiers of the HPKE suite: KEM DHKEM(P-256, HKDF-SHA256), KDF HKDF-SHA256, AEAD AES-256-GCM. */
export const HPKE_IDS = { kem: 0x0010, kdf: 0x0001, aead: 0x0002 } as const;

/** Length of the HPKE encapsulated key (`enc`): an uncompressed P-256 point, 0x04 || X || Y. */
export const HPKE_ENC_BYTES = 65;

/** Length of the HPKE ciphertext of a 32-byte AES key: the key plus the 16-byte AES-GCM tag. */
export const HPKE_WRAPPED_KEY_BYTES = 48;

/** The parts of a key bundle whose sizes depend on the suite, as raw bytes or base64 text. */
export interface WrappedKeyParts {
  encryptedAesKey: Uint8Array | string;
  encapsulatedKey?: Uint8Array | string | undefined;
}

/**
 * The expected size of each wrapped-key part for a key of `algorithm`. `rsaModulusBytes` is the
 * recipient's RSA modulus size in bytes (256 for RSA-2048): an RSA-OAEP ciphertext is exactly that long.
 */
export function wrappedKeySizes(
  algorithm: KeyAlgorithm,
  rsaModulusBytes?: number,
): { encryptedAesKey: number; encapsulatedKey: number | undefined } {
  if (algorithm === HPKE_P256) {
    return { encryptedAesKey: HPKE_WRAPPED_KEY_BYTES, encapsulatedKey: HPKE_ENC_BYTES };
  }
  if (rsaModulusBytes === undefined || !Number.isInteger(rsaModulusBytes) || rsaModulusBytes <= 0) {
    throw new RangeError("the RSA modulus size is needed to size an RSA-OAEP wrapped key");
  }
  return { encryptedAesKey: rsaModulusBytes, encapsulatedKey: undefined };
}

/**
 * Checks a caller-supplied key bundle (merchant-side sealing, issuer-side escrow release) against the
 * key it names: strict base64 and the sizes of the suite. RSA: `encryptedAesKey` is exactly the
 * modulus size and there is no `encapsulatedKey`; HPKE: `encapsulatedKey` is 65 bytes starting 0x04
 * (uncompressed point) and `encryptedAesKey` 48 bytes. Throws `invalid_request` naming every offending
 * field under `fieldPrefix` (e.g. `keyBundle.encapsulatedKey: must be 65 bytes`); values are never quoted.
 * Returns the decoded bytes.
 *
 * @param rsaModulusBytes the RSA key's modulus size in bytes; ignored for HPKE.
 */
export function checkWrappedKey(
  algorithm: KeyAlgorithm,
  rsaModulusBytes: number | undefined,
  parts: WrappedKeyParts,
  fieldPrefix = "keyBundle",
): { encryptedAesKey: Uint8Array; encapsulatedKey?: Uint8Array } {
  const sizes = wrappedKeySizes(algorithm, rsaModulusBytes);
  const violations: { field: string; description: string }[] = [];
  const field = (name: string) => (fieldPrefix === "" ? name : `${fieldPrefix}.${name}`);
  const read = (name: string, value: Uint8Array | string | undefined, size: number) => {
    const bytes = typeof value === "string" ? strictBase64(value) : value;
    if (bytes === undefined) {
      violations.push({
        field: field(name),
        description: typeof value === "string" ? "must be base64" : "is required",
      });
      return undefined;
    }
    if (bytes.length !== size) {
      violations.push({ field: field(name), description: `must be ${size} bytes` });
      return undefined;
    }
    return bytes;
  };
  const encryptedAesKey = read("encryptedAesKey", parts.encryptedAesKey, sizes.encryptedAesKey);
  let encapsulatedKey: Uint8Array | undefined;
  const givenEnc = parts.encapsulatedKey !== undefined && parts.encapsulatedKey.length > 0;
  if (sizes.encapsulatedKey === undefined) {
    if (givenEnc) {
      violations.push({ field: field("encapsulatedKey"), description: `must be absent for ${algorithm}` });
    }
  } else {
    encapsulatedKey = read(
      "encapsulatedKey",
      givenEnc ? parts.encapsulatedKey : undefined,
      sizes.encapsulatedKey,
    );
    if (encapsulatedKey !== undefined && encapsulatedKey[0] !== 0x04) {
      violations.push({
        field: field("encapsulatedKey"),
        description: "must be an uncompressed P-256 point",
      });
    }
  }
  if (violations.length > 0) throw invalidRequest(violations);
  return {
    encryptedAesKey: encryptedAesKey as Uint8Array,
    ...(encapsulatedKey === undefined ? {} : { encapsulatedKey }),
  };
}

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** Canonical padded base64, or undefined: `Buffer.from` alone silently skips bad characters. */
function strictBase64(text: string): Uint8Array | undefined {
  if (text.length === 0 || !BASE64.test(text)) return undefined;
  return Buffer.from(text, "base64");
}
