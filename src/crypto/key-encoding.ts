import {
  bitLength,
  bitStringBytes,
  childrenCount,
  childrenOf,
  contentOf,
  copyOf,
  type DerElement,
  DerError,
  expectNull,
  expectTag,
  oidHex,
  positiveInteger,
  smallInteger,
  TAG,
  toBigInt,
  wholeElement,
} from "./asn1.js";
import {
  checkEcScalar,
  checkEd25519Point,
  type EcPoint,
  ED25519_BYTES,
  ecPoint,
  PointError,
} from "./curves.js";
import {
  type EcCurve,
  type KeySuite,
  orList,
  type SuiteKeyType,
  suiteCurves,
  suiteOfCurveOid,
  suiteOfFamily,
} from "./suites.js";

/**
 * Every key the service or the client library takes is read here first, by our own code, before Node
 * builds a KeyObject or WebCrypto imports it: on Node 20 a P-256 key whose point is the point at
 * infinity aborts the process inside `KeyObject#asymmetricKeyDetails` (no try/catch helps), and
 * OpenSSL accepts much that no honest key is (hybrid points, scalars past the group order, a
 * private key whose public point is the point at infinity). Plain TypeScript (no `node:` module, no `Buffer`), so the
 * client library runs the same checks in browsers.
 *
 * What passes: SubjectPublicKeyInfo, PKCS#8 (version 0, no attributes), PKCS#1 and SEC1 in strict
 * DER with nothing after them, of the key suites' keys (`suites.ts`: each suite says its key family
 * and curve, so a suite on a new curve needs nothing here) and of Ed25519:
 * - RSA with the rsaEncryption algorithm (NULL parameters), a positive odd modulus of
 *   {@link RSA_MIN_BITS}..{@link RSA_MAX_BITS} bits, exponent {@link RSA_EXPONENT}; private keys
 *   two-prime (version 0) with every integer positive;
 * - EC on the named curve of a suite only (never explicit parameters), its point uncompressed or
 *   compressed, in range, on the curve; private keys a scalar from 1 to n - 1, and their embedded
 *   public point (optional) itself a valid point.
 * Whether a private key's halves belong together is not checked here: a forged key (another key's
 * public half) is well-formed, and the decrypt path answers it `forbidden` (`key-consistency.ts`).
 * - Ed25519 (RFC 8410, no parameters): canonical, on the curve, not of small order.
 * Anything else throws {@link KeyEncodingError}, whose message never quotes the input.
 */

/** Smallest RSA modulus accepted, in bits. */
export const RSA_MIN_BITS = 2048;
/**
 * Largest RSA modulus accepted, in bits. Private-key operations grow with the cube of the modulus
 * size, so an unbounded key would let one caller buy seconds of CPU per decrypt.
 */
export const RSA_MAX_BITS = 8192;
/** The only RSA public exponent accepted (F4); small exponents are where RSA's classic attacks live. */
export const RSA_EXPONENT = 65537;

/**
 * Why a key was refused: not a well-formed encoding at all (`malformed`), a well-formed key of a
 * kind the caller does not take (`unsupported`; the message, if any, says which), a private key
 * where a public one belongs (`private`), or a key of the right kind with a bad value (`invalid`; the
 * message is a description for the caller's field, e.g. `must be at least 2048 bits`).
 */
export type KeyProblem = "malformed" | "unsupported" | "private" | "invalid";

/** A key that is refused, and why. */
export class KeyEncodingError extends Error {
  constructor(
    readonly problem: KeyProblem,
    message = "",
  ) {
    super(message || problem);
    this.name = "KeyEncodingError";
  }
}

/** The kinds of key there are checks for: each suite's key type, and Ed25519 (signing keys). */
export type KeyType = SuiteKeyType | "ed25519";

/** An RSA public key: modulus and exponent as big-endian magnitudes; `type` is its suite's key type. */
export interface RsaPublicData {
  family: "rsa";
  type: SuiteKeyType;
  n: Uint8Array;
  e: Uint8Array;
  bits: number;
}

/** An EC public key of a suite's curve. */
export interface EcPublicData {
  family: "ec";
  type: SuiteKeyType;
  curve: EcCurve;
  point: EcPoint;
}

/** A public key as read and checked. */
export type PublicKeyData =
  | RsaPublicData
  | EcPublicData
  | { family: "ed25519"; type: "ed25519"; raw: Uint8Array };

/** The integers of a two-prime RSA private key (PKCS#1), as big-endian magnitudes. */
export interface RsaPrivateData extends RsaPublicData {
  d: Uint8Array;
  p: Uint8Array;
  q: Uint8Array;
  dp: Uint8Array;
  dq: Uint8Array;
  qi: Uint8Array;
}

/** An EC private key of a suite's curve, with its embedded public point when it has one. */
export interface EcPrivateData {
  family: "ec";
  type: SuiteKeyType;
  curve: EcCurve;
  d: Uint8Array;
  point?: EcPoint;
}

/** A private key as read and checked. */
export type PrivateKeyData = RsaPrivateData | EcPrivateData;

// OBJECT IDENTIFIER contents, hex.
const OID_RSA = "2a864886f70d010101";
const OID_RSA_PSS = "2a864886f70d01010a";
const OID_EC = "2a8648ce3d0201";
const OID_ED25519 = "2b6570";

/**
 * Reads a public key: `spki` (SubjectPublicKeyInfo) or `pkcs1` (RSAPublicKey), of one of the
 * `accepted` types. A private key in any encoding is `private`, whatever `encoding` says.
 */
export function readPublicKey(
  der: Uint8Array,
  encoding: "spki" | "pkcs1",
  accepted: readonly KeyType[],
): PublicKeyData {
  if (isPrivateKeyShape(der)) throw new KeyEncodingError("private");
  return guarded(() => {
    if (encoding === "pkcs1") {
      const rsa = suiteOfFamily("rsa");
      if (rsa === undefined || !accepted.includes(rsa.keyType)) throw new KeyEncodingError("unsupported");
      return rsaPublicKey(der, rsa);
    }
    const [algorithm, key] = childrenCount(der, wholeElement(der, TAG.SEQUENCE), 2);
    const kind = algorithmOf(der, algorithm as DerElement);
    const type = kind === "ed25519" ? kind : kind.keyType;
    if (!accepted.includes(type)) throw new KeyEncodingError("unsupported", unsupportedDetail(type));
    const bits = bitStringBytes(der, key);
    if (kind !== "ed25519") {
      if (kind.curve === undefined) return rsaPublicKey(bits, kind);
      return { family: "ec", type: kind.keyType, curve: kind.curve, point: checkedPoint(kind.curve, bits) };
    }
    try {
      checkEd25519Point(bits);
    } catch (cause) {
      throw pointProblem("Ed25519", cause);
    }
    return { family: "ed25519", type: "ed25519", raw: copyOf(bits) };
  });
}

/**
 * Reads a private key of a suite: `pkcs8` (PrivateKeyInfo holding an RSA or EC key), `pkcs1`
 * (RSAPrivateKey) or `sec1` (ECPrivateKey, which must name a suite's curve).
 */
export function readPrivateKey(der: Uint8Array, encoding: "pkcs8" | "pkcs1" | "sec1"): PrivateKeyData {
  return guarded(() => {
    if (encoding === "pkcs1") return rsaPrivateKey(der, rsaSuite());
    if (encoding === "sec1") return ecPrivateKey(der, undefined);
    const [version, algorithm, key] = childrenCount(der, wholeElement(der, TAG.SEQUENCE), 3);
    if (smallInteger(der, version) !== 0) throw new DerError("PKCS#8 version other than 0");
    const kind = algorithmOf(der, algorithm as DerElement);
    const inner = contentOf(der, expectTag(key, TAG.OCTET_STRING));
    if (kind === "ed25519") throw new KeyEncodingError("unsupported", unsupportedDetail(kind));
    return kind.curve === undefined ? rsaPrivateKey(inner, kind) : ecPrivateKey(inner, kind);
  });
}

/**
 * Reads an Ed25519 public key given as SubjectPublicKeyInfo or as the raw 32 bytes (what most
 * Ed25519 libraries export).
 */
export function readEd25519PublicKey(bytes: Uint8Array): Uint8Array {
  if (bytes.length === ED25519_BYTES) {
    try {
      checkEd25519Point(bytes);
    } catch (cause) {
      throw pointProblem("Ed25519", cause);
    }
    return copyOf(bytes);
  }
  const key = readPublicKey(bytes, "spki", ["ed25519"]);
  return (key as { raw: Uint8Array }).raw;
}

/**
 * Whether bytes have the outer shape of a private key (PKCS#8, PKCS#1 RSAPrivateKey or SEC1
 * ECPrivateKey), valid or not: a private key sent where a public key belongs is refused as such,
 * without asking OpenSSL to parse it.
 */
export function isPrivateKeyShape(der: Uint8Array): boolean {
  try {
    const items = childrenOf(der, wholeElement(der, TAG.SEQUENCE));
    const [first, second] = items;
    if (first?.tag !== TAG.INTEGER) return false;
    const version = smallInteger(der, first);
    // PKCS#8 v1/v2: version, AlgorithmIdentifier, OCTET STRING.
    if (version <= 1 && second?.tag === TAG.SEQUENCE && items[2]?.tag === TAG.OCTET_STRING) return true;
    // SEC1: version 1, OCTET STRING (the scalar).
    if (version === 1 && second?.tag === TAG.OCTET_STRING) return true;
    // PKCS#1 RSAPrivateKey: version, then eight INTEGERs (or more, multi-prime).
    return items.length >= 9 && items.every((item) => item.tag === TAG.INTEGER);
  } catch {
    return false;
  }
}

/** Runs a reader, turning the DER reader's failures into `malformed`. */
function guarded<T>(read: () => T): T {
  try {
    return read();
  } catch (error) {
    if (error instanceof KeyEncodingError) throw error;
    if (error instanceof DerError) throw new KeyEncodingError("malformed");
    throw error;
  }
}

/** The suite of the RSA key family, or `unsupported` when no suite takes RSA keys. */
function rsaSuite(): KeySuite {
  const suite = suiteOfFamily("rsa");
  if (suite === undefined) throw new KeyEncodingError("unsupported");
  return suite;
}

/** The suite whose curve the named-curve parameter `curve` names, or `unsupported`. */
function suiteOfCurve(der: Uint8Array, curve: DerElement | undefined): KeySuite {
  if (curve?.tag !== TAG.OID) throw new KeyEncodingError("unsupported", explicitCurveDetail());
  const suite = suiteOfCurveOid(oidHex(der, curve));
  if (suite === undefined) throw new KeyEncodingError("unsupported", "this EC key is on another curve");
  return suite;
}

/** Why an EC key with explicit parameters is refused, naming the suites' curves. */
function explicitCurveDetail(): string {
  const names = suiteCurves().map((curve) => curve.name);
  const accepted =
    names.length === 1 ? `the named curve ${names[0]} is` : `the named curves ${orList(names)} are`;
  return `this EC key gives its curve by explicit parameters; only ${accepted} accepted`;
}

/** The suite (or Ed25519) of the key an AlgorithmIdentifier names, with its parameters checked. */
function algorithmOf(der: Uint8Array, algorithm: DerElement): KeySuite | "ed25519" {
  const [oid, parameters, ...extra] = childrenOf(der, expectTag(algorithm, TAG.SEQUENCE));
  if (extra.length > 0) throw new DerError("AlgorithmIdentifier with extra elements");
  switch (oidHex(der, oid)) {
    case OID_RSA:
      expectNull(parameters);
      return rsaSuite();
    case OID_EC:
      return suiteOfCurve(der, parameters);
    case OID_ED25519:
      if (parameters !== undefined) throw new DerError("Ed25519 with parameters");
      return "ed25519";
    case OID_RSA_PSS:
      throw new KeyEncodingError("unsupported", "an RSA key must be an encryption key, not RSA-PSS");
    default:
      throw new KeyEncodingError("unsupported");
  }
}

function unsupportedDetail(type: KeyType): string {
  return type === "ed25519" ? "this is an Ed25519 key" : "";
}

/** An RSAPublicKey (PKCS#1): `SEQUENCE { n, e }`. */
function rsaPublicKey(der: Uint8Array, suite: KeySuite): RsaPublicData {
  const [n, e] = childrenCount(der, wholeElement(der, TAG.SEQUENCE), 2);
  return checkedRsaPublic(positiveInteger(der, n), positiveInteger(der, e), suite);
}

function checkedRsaPublic(n: Uint8Array, e: Uint8Array, suite: KeySuite): RsaPublicData {
  const bits = bitLength(n);
  if (bits < RSA_MIN_BITS) throw new KeyEncodingError("invalid", `must be at least ${RSA_MIN_BITS} bits`);
  if (bits > RSA_MAX_BITS) throw new KeyEncodingError("invalid", `must be at most ${RSA_MAX_BITS} bits`);
  if (toBigInt(e) !== BigInt(RSA_EXPONENT)) {
    throw new KeyEncodingError("invalid", `must have the RSA public exponent ${RSA_EXPONENT}`);
  }
  if (((n[n.length - 1] as number) & 1) === 0)
    throw new KeyEncodingError("invalid", "must have an odd RSA modulus");
  return { family: "rsa", type: suite.keyType, n, e, bits };
}

/**
 * An RSAPrivateKey (PKCS#1), two-prime: version 0 and eight positive INTEGERs, the public half as
 * {@link checkedRsaPublic} wants it. Whether the secret half belongs to the public half (`p * q = n`,
 * the CRT values) is not an encoding question: the decrypt path checks it (`key-consistency.ts`) and
 * answers a forged key `forbidden`.
 */
function rsaPrivateKey(der: Uint8Array, suite: KeySuite): RsaPrivateData {
  const items = childrenOf(der, wholeElement(der, TAG.SEQUENCE));
  const version = smallInteger(der, items[0]);
  if (version !== 0 || items.length !== 9) {
    throw new KeyEncodingError("invalid", "must be a two-prime RSA key (PKCS#1 version 0)");
  }
  const [n, e, d, p, q, dp, dq, qi] = items.slice(1).map((item) => positiveInteger(der, item)) as [
    Uint8Array,
    Uint8Array,
    Uint8Array,
    Uint8Array,
    Uint8Array,
    Uint8Array,
    Uint8Array,
    Uint8Array,
  ];
  return { ...checkedRsaPublic(n, e, suite), d, p, q, dp, dq, qi };
}

/**
 * An ECPrivateKey (SEC1, RFC 5915): version 1, the scalar, `[0]` the curve (required when there is no
 * `outer` suite, as SEC1 on its own has no other place for it; inside PKCS#8 optional, and then the
 * curve of the PKCS#8 algorithm), `[1]` the public point.
 */
function ecPrivateKey(der: Uint8Array, outer: KeySuite | undefined): EcPrivateData {
  const [version, scalar, ...optional] = childrenCount(der, wholeElement(der, TAG.SEQUENCE), 2, 4);
  if (smallInteger(der, version) !== 1) throw new DerError("ECPrivateKey version other than 1");
  const d = contentOf(der, expectTag(scalar, TAG.OCTET_STRING));
  let parameters: DerElement | undefined;
  let publicKey: DerElement | undefined;
  for (const item of optional) {
    if (item.tag === TAG.CONTEXT_0 && parameters === undefined && publicKey === undefined) parameters = item;
    else if (item.tag === TAG.CONTEXT_1 && publicKey === undefined) publicKey = item;
    else throw new DerError("unexpected element in ECPrivateKey");
  }
  let suite = outer;
  if (parameters !== undefined) {
    const [curve] = childrenCount(der, parameters, 1);
    const named = suiteOfCurve(der, curve);
    if (outer !== undefined && named !== outer) {
      throw new KeyEncodingError("unsupported", "this EC key is on another curve");
    }
    suite = named;
  }
  if (suite?.curve === undefined) throw new DerError("SEC1 key without its curve");
  const { curve } = suite;
  try {
    checkEcScalar(curve, d);
  } catch (cause) {
    throw new KeyEncodingError("invalid", (cause as Error).message);
  }
  const key: EcPrivateData = { family: "ec", type: suite.keyType, curve, d: copyOf(d) };
  if (publicKey === undefined) return key;
  const [bits] = childrenCount(der, publicKey, 1);
  return { ...key, point: checkedPoint(curve, bitStringBytes(der, bits)) };
}

function checkedPoint(curve: EcCurve, encoded: Uint8Array): EcPoint {
  try {
    return ecPoint(curve, encoded);
  } catch (cause) {
    throw pointProblem(curve.name, cause);
  }
}

function pointProblem(curve: string, cause: unknown): Error {
  if (!(cause instanceof PointError)) return cause as Error;
  return new KeyEncodingError("invalid", `must be a valid ${curve} key: its public point ${cause.message}`);
}
