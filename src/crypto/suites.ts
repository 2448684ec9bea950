/**
 * The key suites, one registry object each ({@link KEY_SUITES}): every path that must know what a
 * suite does (sizes of a wrapped key, whether a wrap is bound to the receipt's AAD, which key type
 * belongs to it) asks the suite's object instead of comparing `algorithm`. The operations themselves
 * have one table per engine, keyed by the same names and checked complete by the compiler: Node's in
 * the crypto worker (`crypto-worker.ts`, `SUITE_CRYPTO`), WebCrypto's in the client library. This file
 * imports nothing, so the client library (on a phone) shares it.
 *
 * Every user key, key bundle and generated pair names its suite as `algorithm`; the receipt's own
 * AES-256-GCM layer is the same for both, so re-wrapping a receipt's AES key moves it between suites
 * without touching the ciphertext.
 *
 * - `RSA-OAEP-256`: RSA (2048..8192 bits, e = 65537), RSA-OAEP with SHA-256 for the hash and MGF1.
 * - `HPKE-P256-SHA256-A256GCM`: EC P-256, HPKE (RFC 9180) base mode with DHKEM(P-256, HKDF-SHA256),
 *   HKDF-SHA256 and AES-256-GCM; `info` = {@link HPKE_INFO_TEXT}, `aad` = the receipt's AAD.
 */
export type KeyAlgorithm = "RSA-OAEP-256" | "HPKE-P256-SHA256-A256GCM";

/** The RSA suite, the seed's only one and the default wherever a suite is optional. */
export const RSA_OAEP_256 = "RSA-OAEP-256" satisfies KeyAlgorithm;

/** The P-256 suite: a key a phone's secure hardware can generate and never export. */
export const HPKE_P256 = "HPKE-P256-SHA256-A256GCM" satisfies KeyAlgorithm;

/** HPKE `info` of the key wrap: the UTF-8 bytes of `receipts.v1 key wrap`. */
export const HPKE_INFO_TEXT = "receipts.v1 key wrap";

/** RFC 9180 identifiers of the HPKE suite: KEM DHKEM(P-256, HKDF-SHA256), KDF HKDF-SHA256, AEAD AES-256-GCM. */
export const HPKE_IDS = { kem: 0x0010, kdf: 0x0001, aead: 0x0002 } as const;

/** Length of the HPKE encapsulated key (`enc`): an uncompressed P-256 point, 0x04 || X || Y. */
export const HPKE_ENC_BYTES = 65;

/** Length of the HPKE ciphertext of a 32-byte AES key: the key plus the 16-byte AES-GCM tag. */
export const HPKE_WRAPPED_KEY_BYTES = 48;

/** What a key suite is: the facts every path asks of it. */
export interface KeySuite {
  /** Its name, as `algorithm` carries it on the wire and in the store. */
  readonly algorithm: KeyAlgorithm;
  /** The type of its keys, as the key parsers (`key-encoding.ts`, the client's `derKindOf`) name it. */
  readonly keyType: "rsa" | "p256";
  /** Node's `asymmetricKeyType` of its keys. */
  readonly nodeKeyType: "rsa" | "ec";
  /** Its keys in words, for messages: `an RSA key`. */
  readonly keyWords: string;
  /**
   * Whether every wrap of the suite is bound to the receipt's AAD (HPKE's `aad`). When false, a wrap is
   * bound only when its key asks for it (an escrow key: the AAD as RSA-OAEP label), and the bundle says
   * so with `aadBound`.
   */
  readonly alwaysAadBound: boolean;
  /** Whether the size of a wrapped key depends on the recipient key (an RSA modulus). */
  readonly sizedByKey: boolean;
  /**
   * The expected size of each wrapped-key part. `keyBytes` is the recipient key's size in bytes where
   * the suite is {@link sizedByKey} (256 for RSA-2048: an RSA-OAEP ciphertext is exactly that long).
   */
  wrappedKeySizes(keyBytes?: number): { encryptedAesKey: number; encapsulatedKey: number | undefined };
}

/** RSA-OAEP-256. */
export const RSA_SUITE: KeySuite = {
  algorithm: RSA_OAEP_256,
  keyType: "rsa",
  nodeKeyType: "rsa",
  keyWords: "an RSA key",
  alwaysAadBound: false,
  sizedByKey: true,
  wrappedKeySizes(keyBytes) {
    if (keyBytes === undefined || !Number.isInteger(keyBytes) || keyBytes <= 0) {
      throw new RangeError("the RSA modulus size is needed to size an RSA-OAEP wrapped key");
    }
    return { encryptedAesKey: keyBytes, encapsulatedKey: undefined };
  },
};

/** HPKE-P256-SHA256-A256GCM. */
export const HPKE_SUITE: KeySuite = {
  algorithm: HPKE_P256,
  keyType: "p256",
  nodeKeyType: "ec",
  keyWords: "an EC P-256 key",
  alwaysAadBound: true,
  sizedByKey: false,
  wrappedKeySizes: () => ({ encryptedAesKey: HPKE_WRAPPED_KEY_BYTES, encapsulatedKey: HPKE_ENC_BYTES }),
};

/** The registry: every suite by name. */
const SUITES: Readonly<Record<KeyAlgorithm, KeySuite>> = {
  [RSA_OAEP_256]: RSA_SUITE,
  [HPKE_P256]: HPKE_SUITE,
};

/** Every suite, default first. */
export const KEY_SUITES: readonly KeySuite[] = [RSA_SUITE, HPKE_SUITE];

/** Every suite's name, default first. */
export const KEY_ALGORITHMS: readonly KeyAlgorithm[] = KEY_SUITES.map((suite) => suite.algorithm);

/** Whether `value` names a suite (exact spelling, as the API carries it). */
export function isKeyAlgorithm(value: unknown): value is KeyAlgorithm {
  return typeof value === "string" && Object.hasOwn(SUITES, value);
}

/** The suite named `algorithm`. */
export function suiteOf(algorithm: KeyAlgorithm): KeySuite {
  return SUITES[algorithm];
}

/** The suite whose keys are of `keyType`, or undefined for a key type no suite takes. */
export function suiteOfKeyType(keyType: string): KeySuite | undefined {
  return KEY_SUITES.find((suite) => suite.keyType === keyType);
}

/**
 * The suite of a stored bundle. Bundles sealed before there were two suites name none: they are RSA,
 * and the HPKE ones all name theirs; a bundle with an encapsulated key and no name is HPKE.
 */
export function bundleSuite(algorithm: KeyAlgorithm | undefined, hasEncapsulatedKey: boolean): KeySuite {
  if (algorithm !== undefined) return SUITES[algorithm];
  return (
    KEY_SUITES.find(
      (suite) => (suite.wrappedKeySizes(1).encapsulatedKey !== undefined) === hasEncapsulatedKey,
    ) ?? RSA_SUITE
  );
}

/** Whether a wrap to a key of `algorithm` is bound to the receipt's AAD (see {@link KeySuite.alwaysAadBound}). */
export function isAadBound(algorithm: KeyAlgorithm, aadBound: boolean | undefined): boolean {
  return aadBound === true || SUITES[algorithm].alwaysAadBound;
}

/**
 * The `aadBound` flag of a bundle as stored: present (true) only for a bound wrap of a suite where
 * binding is optional; a suite that always binds does not repeat it.
 */
export function storedAadBound(algorithm: KeyAlgorithm, aadBound: boolean | undefined): { aadBound?: true } {
  return aadBound === true && !SUITES[algorithm].alwaysAadBound ? { aadBound: true } : {};
}

/** The expected size of each wrapped-key part for a key of `algorithm` (see {@link KeySuite.wrappedKeySizes}). */
export function wrappedKeySizes(
  algorithm: KeyAlgorithm,
  rsaModulusBytes?: number,
): { encryptedAesKey: number; encapsulatedKey: number | undefined } {
  return SUITES[algorithm].wrappedKeySizes(rsaModulusBytes);
}
