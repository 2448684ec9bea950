import { invalidRequest } from "../errors.js";
import { type KeyAlgorithm, suiteOf, wrappedKeySizes } from "./suites.js";

/** The parts of a key bundle whose sizes depend on the suite, as raw bytes or base64 text. */
export interface WrappedKeyParts {
  encryptedAesKey: Uint8Array | string;
  encapsulatedKey?: Uint8Array | string | undefined;
}

/**
 * Checks a caller-supplied key bundle (merchant-side sealing, issuer-side escrow release) against the
 * key it names: strict base64 and the sizes of the suite. RSA: `encryptedAesKey` is exactly the
 * modulus size and there is no `encapsulatedKey`; HPKE: `encapsulatedKey` is an uncompressed point of
 * the suite's curve (65 bytes starting 0x04 for P-256) and `encryptedAesKey` 48 bytes. Throws `invalid_request` naming every offending
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
        description: `must be an uncompressed ${suiteOf(algorithm).curve?.name ?? ""} point`,
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
