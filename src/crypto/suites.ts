/**
 * The key suites, one registry object each ({@link KEY_SUITES}): every path that must know what a
 * suite does asks the suite's object instead of comparing `algorithm`: its name, its key type, its key
 * family and curve (which the key checks read: `key-encoding.ts` and `curves.ts` for the SPKI and
 * PKCS#8 forms and the point, `keys.ts` and `key-consistency.ts` for Node's keys, the client's
 * `derKindOf` and imports), its HPKE identifiers (`hpke-suites.ts` picks @hpke/core's classes by
 * them), the sizes of a wrapped key, whether a wrap is bound to the receipt's AAD, and its words in
 * messages. The operations themselves have one table per engine, keyed by the same names and checked
 * complete by the compiler: Node's in the crypto worker (`crypto-worker.ts`, `SUITE_CRYPTO`),
 * WebCrypto's in the client library (`src/client/webcrypto.ts`, `WEB_SUITES`); an HPKE suite's entry
 * in each is one line (`hpkeCrypto(suite)`, `hpkeWeb(suite)`). A suite on a key family the code does
 * not know yet (X25519, ML-KEM) brings that family's checks and primitives too. This file imports
 * nothing, so the client library (on a phone) shares it.
 *
 * Every user key, key bundle and generated pair names its suite as `algorithm`; the receipt's own
 * AES-256-GCM layer is the same for every suite, so re-wrapping a receipt's AES key moves it between
 * suites without touching the ciphertext.
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

/**
 * An elliptic curve of a suite's keys, y^2 = x^3 - 3x + b over GF(p) with prime order n and cofactor 1
 * (the NIST curves), with p = 3 (mod 4) so that a square root is one exponentiation. Everything the key
 * checks (`key-encoding.ts`, `curves.ts`), Node (`keys.ts`, `key-consistency.ts`) and WebCrypto (the
 * client) need to know of the curve is here, so a suite on a new curve is data.
 */
export interface EcCurve {
  /** Its name as JWK `crv` and WebCrypto `namedCurve` say it, and in messages: `P-256`. */
  readonly name: string;
  /** Its OID (the named-curve parameter of an id-ecPublicKey key), DER contents in hex. */
  readonly oid: string;
  /** OpenSSL's name, as Node's `createECDH` and `asymmetricKeyDetails.namedCurve` say it. */
  readonly nodeName: string;
  /** Bytes of one coordinate or scalar. */
  readonly bytes: number;
  readonly p: bigint;
  readonly b: bigint;
  /** The order of the group: private scalars are from 1 to n - 1. */
  readonly n: bigint;
  /** The base point. */
  readonly gx: bigint;
  readonly gy: bigint;
}

/** NIST P-256 (FIPS 186-4 D.1.2.3, SEC 2 2.4.2), a.k.a. prime256v1, secp256r1. */
export const P256_CURVE: EcCurve = {
  name: "P-256",
  oid: "2a8648ce3d030107",
  nodeName: "prime256v1",
  bytes: 32,
  p: 0xffffffff00000001000000000000000000000000ffffffffffffffffffffffffn,
  b: 0x5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604bn,
  n: 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n,
  gx: 0x6b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c296n,
  gy: 0x4fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5n,
};

/** The key type names, as the key parsers (`key-encoding.ts`, the client's `derKindOf`) give them. */
export type SuiteKeyType = "rsa" | "p256";

/** What a key suite is: the facts every path asks of it. */
export interface KeySuite {
  /** Its name, as `algorithm` carries it on the wire and in the store. */
  readonly algorithm: KeyAlgorithm;
  /** The type of its keys, as the key parsers (`key-encoding.ts`, the client's `derKindOf`) name it. */
  readonly keyType: SuiteKeyType;
  /**
   * The family of its keys, which says how they are encoded and checked: `rsa` (rsaEncryption, PKCS#1
   * inside) or `ec` (id-ecPublicKey on {@link curve}, SEC 1 inside).
   */
  readonly family: "rsa" | "ec";
  /** The curve of an `ec` suite's keys. */
  readonly curve?: EcCurve;
  /** Node's `asymmetricKeyType` of its keys. */
  readonly nodeKeyType: "rsa" | "ec";
  /** Its keys in words, for messages: `an RSA key`. */
  readonly keyWords: string;
  /** What it accepts, for the messages that list every suite's keys: `EC P-256`. */
  readonly acceptedWords: string;
  /** RFC 9180 identifiers of an HPKE suite's KEM, KDF and AEAD. */
  readonly hpke?: { readonly kem: number; readonly kdf: number; readonly aead: number };
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
  family: "rsa",
  nodeKeyType: "rsa",
  keyWords: "an RSA key",
  acceptedWords: "RSA (2048 bits or more, exponent 65537)",
  alwaysAadBound: false,
  sizedByKey: true,
  wrappedKeySizes(keyBytes) {
    if (keyBytes === undefined || !Number.isInteger(keyBytes) || keyBytes <= 0) {
      throw new RangeError("the RSA modulus size is needed to size an RSA-OAEP wrapped key");
    }
    return { encryptedAesKey: keyBytes, encapsulatedKey: undefined };
  },
};

/**
 * An HPKE suite (RFC 9180 base mode, DHKEM on `curve`) wrapping the receipt's 32-byte AES key with
 * AES-256-GCM: the encapsulated key is an uncompressed point, the ciphertext the key and its tag.
 */
function hpkeSuite(
  algorithm: KeyAlgorithm,
  keyType: SuiteKeyType,
  curve: EcCurve,
  ids: { kem: number; kdf: number; aead: number },
): KeySuite {
  const sizes = { encryptedAesKey: HPKE_WRAPPED_KEY_BYTES, encapsulatedKey: 1 + 2 * curve.bytes };
  return {
    algorithm,
    keyType,
    family: "ec",
    curve,
    nodeKeyType: "ec",
    keyWords: `an EC ${curve.name} key`,
    acceptedWords: `EC ${curve.name}`,
    hpke: ids,
    alwaysAadBound: true,
    sizedByKey: false,
    wrappedKeySizes: () => ({ ...sizes }),
  };
}

/** HPKE-P256-SHA256-A256GCM. */
export const HPKE_SUITE: KeySuite = hpkeSuite(HPKE_P256, "p256", P256_CURVE, HPKE_IDS);

/** The registry: every suite by name. */
const SUITES: Readonly<Record<KeyAlgorithm, KeySuite>> = {
  [RSA_OAEP_256]: RSA_SUITE,
  [HPKE_P256]: HPKE_SUITE,
};

/** Every suite, default first. */
export const KEY_SUITES: readonly KeySuite[] = [RSA_SUITE, HPKE_SUITE];

/** Every suite's name, default first. */
export const KEY_ALGORITHMS: readonly KeyAlgorithm[] = KEY_SUITES.map((suite) => suite.algorithm);

/**
 * Whether `value` names a suite (exact spelling, as the API carries it). Compared with the names, not
 * looked up as a property of {@link SUITES}: a string just decoded from a request is not internalized,
 * and a property look-up internalizes it first (hashing it and searching V8's string table): 200-550
 * ns a call in a loop of fresh strings, against 10-40 for comparing it with the two names.
 */
export function isKeyAlgorithm(value: unknown): value is KeyAlgorithm {
  return typeof value === "string" && (KEY_ALGORITHMS as readonly string[]).includes(value);
}

/** The suite named `algorithm`. */
export function suiteOf(algorithm: KeyAlgorithm): KeySuite {
  return SUITES[algorithm];
}

/** The suite whose keys are of `keyType`, or undefined for a key type no suite takes. */
export function suiteOfKeyType(keyType: string): KeySuite | undefined {
  return KEY_SUITES.find((suite) => suite.keyType === keyType);
}

/** The suite of an `ec` key on the curve whose OID is `oid` (hex), or undefined for a curve no suite takes. */
export function suiteOfCurveOid(oid: string): KeySuite | undefined {
  return KEY_SUITES.find((suite) => suite.curve?.oid === oid);
}

/** The suite of an `ec` key on the curve OpenSSL calls `nodeName`, or undefined. */
export function suiteOfNodeCurve(nodeName: string | undefined): KeySuite | undefined {
  return KEY_SUITES.find((suite) => suite.curve !== undefined && suite.curve.nodeName === nodeName);
}

/** The suite of the key family `family` without a curve (RSA), or undefined. */
export function suiteOfFamily(family: "rsa"): KeySuite | undefined {
  return KEY_SUITES.find((suite) => suite.family === family);
}

/** The curves of the `ec` suites, default first. */
export function suiteCurves(): EcCurve[] {
  return KEY_SUITES.flatMap((suite) => (suite.curve === undefined ? [] : [suite.curve]));
}

/** Words in a list: `A`, `A or B`, `A, B or C`. */
export function orList(words: readonly string[]): string {
  return words.length <= 1 ? (words[0] ?? "") : `${words.slice(0, -1).join(", ")} or ${words.at(-1)}`;
}

/** Every suite's keys, for messages: `an RSA (2048 bits or more, exponent 65537) or EC P-256 key`. */
export function acceptedKeysWords(): string {
  return `an ${orList(KEY_SUITES.map((suite) => suite.acceptedWords))} key`;
}

/**
 * The suite a bundle names, `fallback` when it names none (absent or empty), undefined for a name that
 * is no suite's.
 */
export function suiteNamed(name: string | undefined, fallback: KeySuite = RSA_SUITE): KeySuite | undefined {
  if (name === undefined || name === "") return fallback;
  return isKeyAlgorithm(name) ? SUITES[name] : undefined;
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
