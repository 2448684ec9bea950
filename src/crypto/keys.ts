/* Over 400 lines on purpose: every key the service is given (public and private; PEM, DER and JWK;
 * RSA and P-256) is parsed here after its encoding checks, so one file shows that no path skips them. */
import {
  createECDH,
  createPrivateKey,
  createPublicKey,
  generateKeyPair,
  type JsonWebKey,
  type KeyObject,
} from "node:crypto";
import { promisify } from "node:util";
import { invalidRequest } from "../errors.js";
import { isOn } from "../fast-paths.js";
import * as derJwk from "./der.js";
import {
  type EcPrivateData,
  KeyEncodingError,
  type KeyType,
  type PublicKeyData,
  RSA_EXPONENT,
  RSA_MAX_BITS,
  RSA_MIN_BITS,
  readEd25519PublicKey,
  readPrivateKey,
  readPublicKey,
} from "./key-encoding.js";
import {
  acceptedKeysWords,
  type EcCurve,
  HPKE_SUITE,
  KEY_SUITES,
  type KeyAlgorithm,
  type KeySuite,
  suiteOfKeyType,
  suiteOfNodeCurve,
} from "./suites.js";

/**
 * Modulus size of generated key pairs, in bits; also the smallest size accepted on input (README, "The sealed
 * receipt").
 */
export const RSA_MODULUS_BITS = RSA_MIN_BITS;

/** Largest RSA modulus accepted on input, in bits (see `key-encoding.ts`). */
export const RSA_MAX_MODULUS_BITS = RSA_MAX_BITS;

/**
 * Public exponent of generated key pairs (F4, the only exponent in common use), and the only one
 * accepted on input (see `key-encoding.ts`).
 */
export const RSA_PUBLIC_EXPONENT = RSA_EXPONENT;

/**
 * Longest key string accepted, in characters. A PEM PKCS#8 private key of {@link RSA_MAX_MODULUS_BITS}
 * bits is about 6,500 characters; anything much longer is not a key and is refused before parsing.
 */
export const MAX_KEY_INPUT_CHARS = 16_384;

/** A freshly generated RSA key pair, both halves base64 DER without PEM armour. */
export interface RsaKeyPair {
  /** Base64 of the DER SubjectPublicKeyInfo. */
  publicKey: string;
  /** Base64 of the DER PKCS#8 PrivateKeyInfo, as mobile key stores and WebCrypto import it. */
  privateKey: string;
}

const generateKeyPairAsync = promisify(generateKeyPair);

/**
 * Generates an RSA-2048 key pair with public exponent 65537. Generation runs on the libuv thread pool
 * (it takes tens to hundreds of milliseconds), so it never stalls the event loop.
 */
export async function generateRsaKeyPair(): Promise<RsaKeyPair> {
  const { publicKey, privateKey } = await generateKeyPairAsync("rsa", {
    modulusLength: RSA_MODULUS_BITS,
    publicExponent: RSA_PUBLIC_EXPONENT,
    publicKeyEncoding: { type: "spki", format: "der" },
    privateKeyEncoding: { type: "pkcs8", format: "der" },
  });
  return { publicKey: publicKey.toString("base64"), privateKey: privateKey.toString("base64") };
}

/** A freshly generated key pair of either suite, both halves base64 DER without PEM armour. */
export interface GeneratedKeyPair extends RsaKeyPair {
  algorithm: KeyAlgorithm;
}

/** Generates an EC P-256 key pair (suite `HPKE-P256-SHA256-A256GCM`) on the libuv thread pool. */
export async function generateP256KeyPair(): Promise<RsaKeyPair> {
  const { publicKey, privateKey } = await generateKeyPairAsync("ec", {
    namedCurve: (HPKE_SUITE.curve as EcCurve).name,
    publicKeyEncoding: { type: "spki", format: "der" },
    privateKeyEncoding: { type: "pkcs8", format: "der" },
  });
  return { publicKey: publicKey.toString("base64"), privateKey: privateKey.toString("base64") };
}

/** A parsed public key, its canonical encoding and its suite. */
export interface ParsedPublicKey {
  key: KeyObject;
  /**
   * Base64 DER SubjectPublicKeyInfo re-exported from `key`: the form to store and compare. A P-256
   * key is always re-encoded with its point uncompressed, the form WebCrypto and HPKE use.
   */
  spki: string;
  /** The suite the key belongs to: RSA keys wrap with RSA-OAEP-256, P-256 keys with HPKE. */
  algorithm: KeyAlgorithm;
}

/** What the service accepts, as the error messages say it (never quoting the input). */
const ACCEPTED_KEYS = acceptedKeysWords();
const PUBLIC_KEY_FORMAT = `must be ${ACCEPTED_KEYS.replace(" key", " public key")}: base64 DER SubjectPublicKeyInfo or PEM`;
const PRIVATE_KEY_FORMAT = `must be ${ACCEPTED_KEYS.replace(" key", " private key")}: base64 DER PKCS#8 or PEM`;

/** The key types of the suites. */
const SUITE_KEY_TYPES: readonly KeyType[] = KEY_SUITES.map((suite) => suite.keyType);

/** DER encodings of the PEM labels accepted for each kind of key. */
const PUBLIC_PEM_TYPES = { "PUBLIC KEY": "spki", "RSA PUBLIC KEY": "pkcs1" } as const;
const PRIVATE_PEM_TYPES = {
  "PRIVATE KEY": "pkcs8",
  "RSA PRIVATE KEY": "pkcs1",
  "EC PRIVATE KEY": "sec1",
} as const;

/**
 * Parses a cardholder's public key given as base64 DER SubjectPublicKeyInfo or as PEM (`PUBLIC KEY`,
 * or PKCS#1 `RSA PUBLIC KEY`) and infers its suite: RSA of 2048..8192 bits with exponent
 * 65537 is `RSA-OAEP-256`, EC P-256 is `HPKE-P256-SHA256-A256GCM`. The encoding is checked by our
 * own code first (`key-encoding.ts`: strict DER, the named curve, a valid point) and Node only builds
 * a key from what passed. Throws `invalid_request` naming `field` when the key does not parse, is a
 * private key, or is anything else (another curve, Ed25519, X25519, RSA-PSS, a small or odd RSA key,
 * a point that is not on the curve or is the point at infinity). Messages never quote the input.
 */
export function parsePublicKey(input: string, field = "publicKey"): ParsedPublicKey {
  const decoded = decodeKeyText(input);
  if (decoded === undefined) throw keyError(field, PUBLIC_KEY_FORMAT);
  if (decoded.label?.includes("PRIVATE")) throw privateSentAsPublic(field);
  const type = decoded.label === undefined ? "spki" : publicDerType(decoded.label);
  if (type === undefined) throw keyError(field, PUBLIC_KEY_FORMAT);
  const data = checked(field, PUBLIC_KEY_FORMAT, () => readPublicKey(decoded.der, type, SUITE_KEY_TYPES));
  const key = publicKeyObject(decoded.der, type, data);
  const { algorithm } = suiteOfKey(data.type, field);
  // Strict DER has one encoding per RSA key: an SPKI that passed is already the canonical form.
  const canonical = data.family === "rsa" && type === "spki";
  return { key, spki: canonical ? decoded.der.toString("base64") : exportSpki(key), algorithm };
}

/**
 * Parses a private key of either suite given as base64 DER PKCS#8 or as PEM (`PRIVATE KEY`, PKCS#1
 * `RSA PRIVATE KEY`, or SEC1 `EC PRIVATE KEY`); {@link keyAlgorithmOf} tells its suite. Checked by our
 * own code first, as {@link parsePublicKey} is; a P-256 key is built from its scalar (a public point
 * it carries must be a valid point, and is otherwise not used). Throws `invalid_request` naming `field` when it does not
 * parse, is encrypted, or is not a key of a suite (RSA 2048..8192 bits with exponent 65537, or EC
 * P-256). The key material never appears in an error.
 */
export function parsePrivateKey(input: string, field = "privateKey"): KeyObject {
  const decoded = decodeKeyText(input);
  if (decoded === undefined) throw keyError(field, PRIVATE_KEY_FORMAT);
  const type = decoded.label === undefined ? "pkcs8" : privateDerType(decoded.label);
  if (type === undefined) throw keyError(field, PRIVATE_KEY_FORMAT);
  const data = checked(field, PRIVATE_KEY_FORMAT, () => readPrivateKey(decoded.der, type));
  if (data.family === "ec") return ecPrivateKeyObject(data);
  const jwk =
    type === "pkcs8"
      ? rsaJwkFromDer.privatePkcs8(decoded.der)
      : type === "pkcs1"
        ? rsaJwkFromDer.privatePkcs1(decoded.der)
        : undefined;
  try {
    return jwk === undefined
      ? createPrivateKey({ key: decoded.der, format: "der", type })
      : createPrivateKey({ key: jwk, format: "jwk" });
  } catch {
    throw keyError(field, PRIVATE_KEY_FORMAT);
  }
}

/**
 * The suite of a key parsed by {@link parsePublicKey} or {@link parsePrivateKey} (or its public half):
 * RSA keys are `RSA-OAEP-256`, P-256 keys `HPKE-P256-SHA256-A256GCM`. Throws `invalid_request` for
 * anything else, as the parsers do. Only for keys those parsers made: Node's key details of a key it
 * built from unchecked bytes can abort the process.
 */
export function keyAlgorithmOf(key: KeyObject, field = "key"): KeyAlgorithm {
  const family = KEY_SUITES.find((s) => s.nodeKeyType === key.asymmetricKeyType);
  if (family === undefined) throw keyError(field, `must be ${ACCEPTED_KEYS}`);
  if (family.curve === undefined) return family.algorithm;
  const suite = suiteOfNodeCurve(key.asymmetricKeyDetails?.namedCurve);
  if (suite === undefined) throw keyError(field, `must be ${ACCEPTED_KEYS}; this EC key is on another curve`);
  return suite.algorithm;
}

/** The suite of a parsed key's type; one that no suite takes never passes the parsers, but is refused here too. */
function suiteOfKey(type: KeyType, field: string): KeySuite {
  const suite = suiteOfKeyType(type);
  if (suite === undefined) throw keyError(field, `must be ${ACCEPTED_KEYS}`);
  return suite;
}

/**
 * Whether a private key is the private half of the public key `spki` (base64 DER SubjectPublicKeyInfo,
 * as stored). Compares the key material, which costs microseconds; re-encoding the private key's
 * public half to compare encodings cost more than the decryption the check guards. The stored key is
 * checked like any input (a store writer's key must not abort the process either).
 */
export function privateKeyMatches(privateKey: KeyObject, spki: string): boolean {
  try {
    const der = Buffer.from(spki, "base64");
    const expected = publicKeyObject(der, "spki", readPublicKey(der, "spki", SUITE_KEY_TYPES));
    const actual = createPublicKey(privateKey);
    // Keys of two types are never equal; and comparing them leaves an error in OpenSSL's queue on
    // Node 24, which the next key parse on the same thread then reports as its own failure.
    if (actual.asymmetricKeyType !== expected.asymmetricKeyType) return false;
    return actual.equals(expected);
  } catch {
    return false;
  }
}

/**
 * The base64 DER SubjectPublicKeyInfo of a key's public half. For a private key this is what decides
 * whether it belongs to a registered public key (same canonical encoding as {@link parsePublicKey}).
 */
export function spkiOfPrivateKey(key: KeyObject): string {
  return exportSpki(key.type === "private" ? createPublicKey(key) : key);
}

const ED25519_KEY_FORMAT =
  "must be an Ed25519 public key: base64 DER SubjectPublicKeyInfo, PEM, or base64 of the raw 32 bytes";

/** Length of a raw Ed25519 public key (RFC 8032), in bytes. */
export const ED25519_RAW_KEY_BYTES = 32;

/** The DER SubjectPublicKeyInfo header of an Ed25519 key (RFC 8410): prepended to the raw 32 bytes. */
const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

/**
 * Parses a merchant's Ed25519 signing key (README, "Merchant signatures") given as base64 DER
 * SubjectPublicKeyInfo, as PEM (`PUBLIC KEY`), or as base64 of the raw 32-byte key (what most Ed25519
 * libraries export). The key must be canonical, on the curve and not of small order (`key-encoding.ts`).
 * Throws
 * `invalid_request` naming `field` when it does not parse, is a private key, or is of another type
 * (RSA, EC, Ed448, ...). Messages never quote the input.
 */
export function parseEd25519PublicKey(
  input: string,
  field = "publicKey",
): Omit<ParsedPublicKey, "algorithm"> {
  const decoded = decodeKeyText(input);
  if (decoded === undefined) throw keyError(field, ED25519_KEY_FORMAT);
  if (decoded.label?.includes("PRIVATE")) throw privateSentAsPublic(field);
  if (decoded.label !== undefined && decoded.label !== "PUBLIC KEY")
    throw keyError(field, ED25519_KEY_FORMAT);
  if (decoded.label !== undefined && decoded.der.length === ED25519_RAW_KEY_BYTES) {
    throw keyError(field, ED25519_KEY_FORMAT);
  }
  const raw = checked(
    field,
    ED25519_KEY_FORMAT,
    () => readEd25519PublicKey(decoded.der),
    "must be an Ed25519 key",
  );
  const der = Buffer.concat([ED25519_SPKI_PREFIX, raw]);
  const key = createPublicKey({ key: der, format: "der", type: "spki" });
  return { key, spki: der.toString("base64") };
}

/** A parsed key of {@link PublicKeyCache}, the SPKI it was parsed from, and its modulus size (RSA). */
interface CachedKey {
  readonly spki: string;
  readonly key: KeyObject;
  readonly modulusBits: number | undefined;
}

/**
 * A bounded least-recently-used cache of parsed public keys, keyed by keyId and checked against the
 * SPKI, so that a registered user's key is parsed once rather than on every encrypt. An entry is
 * returned only for the very SPKI it was parsed from: a stale entry can never be returned for a key
 * whose material changed (that SPKI is parsed afresh and replaces it). The map's key is the short
 * keyId alone: a key of keyId and SPKI together (several hundred characters) was built and hashed on
 * every look-up, about 1% of a sealed receipt's CPU time.
 */
export class PublicKeyCache {
  private readonly entries = new Map<string, CachedKey>();

  /** @param maxEntries how many keys to keep; the least recently used is evicted beyond that. */
  constructor(private readonly maxEntries = 10_000) {
    if (!Number.isInteger(maxEntries) || maxEntries < 1) throw new RangeError("maxEntries must be >= 1");
  }

  /** The parsed key for `keyId` with this SPKI, parsing (and validating) it on a miss. */
  get(keyId: string, spki: string): KeyObject {
    return this.entryOf(keyId, spki).key;
  }

  /**
   * The modulus size in bits of the RSA key for `keyId` with this SPKI (undefined for another key
   * type), read from the parsed key once, when it is parsed: `asymmetricKeyDetails` builds a new
   * details object on every read, about 1.5% of a REST sealed receipt's busy main thread when read per call.
   */
  modulusBits(keyId: string, spki: string): number | undefined {
    return this.entryOf(keyId, spki).modulusBits;
  }

  private entryOf(keyId: string, spki: string): CachedKey {
    const hit = this.entries.get(keyId);
    if (hit !== undefined) {
      this.entries.delete(keyId);
      if (hit.spki === spki) {
        this.entries.set(keyId, hit);
        return hit;
      }
    }
    const { key } = parsePublicKey(spki);
    const entry: CachedKey = { spki, key, modulusBits: key.asymmetricKeyDetails?.modulusLength };
    this.entries.set(keyId, entry);
    if (this.entries.size > this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (oldest.done !== true) this.entries.delete(oldest.value);
    }
    return entry;
  }

  /** Number of cached keys. */
  get size(): number {
    return this.entries.size;
  }
}

/** Key text reduced to DER bytes, with the PEM label when it came armoured. */
interface DecodedKey {
  der: Buffer;
  label?: string;
}

const PEM_BLOCK = /^-----BEGIN ([A-Z0-9 ]+)-----\r?\n([A-Za-z0-9+/=\s]+?)\r?\n?-----END \1-----$/;
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/**
 * Decodes base64 DER or a single PEM block ourselves, so that Node never sees PEM: no certificates,
 * no encrypted keys, no private key silently turned into its public half.
 */
function decodeKeyText(input: string): DecodedKey | undefined {
  if (typeof input !== "string" || input.length > MAX_KEY_INPUT_CHARS) return undefined;
  const text = input.trim();
  const pem = PEM_BLOCK.exec(text);
  if (pem !== null) {
    const der = decodeBase64(pem[2] ?? "");
    return der === undefined ? undefined : { der, label: pem[1] ?? "" };
  }
  if (text.startsWith("-----")) return undefined;
  const der = decodeBase64(text);
  return der === undefined ? undefined : { der };
}

/** Strict base64 (whitespace allowed between lines); Buffer.from alone silently skips bad characters. */
function decodeBase64(text: string): Buffer | undefined {
  const compact = text.replace(/\s+/g, "");
  if (compact.length === 0 || compact.length % 4 !== 0 || !BASE64.test(compact)) return undefined;
  return Buffer.from(compact, "base64");
}

function publicDerType(label: string): "spki" | "pkcs1" | undefined {
  return Object.hasOwn(PUBLIC_PEM_TYPES, label)
    ? PUBLIC_PEM_TYPES[label as keyof typeof PUBLIC_PEM_TYPES]
    : undefined;
}

function privateDerType(label: string): "pkcs8" | "pkcs1" | "sec1" | undefined {
  return Object.hasOwn(PRIVATE_PEM_TYPES, label)
    ? PRIVATE_PEM_TYPES[label as keyof typeof PRIVATE_PEM_TYPES]
    : undefined;
}

/**
 * Runs a reader of `key-encoding.ts`, turning its refusal into `invalid_request` on `field`: the
 * `format` description for a malformed key, `unsupported` (or the accepted keys) for a key of
 * another kind, the reader's own description otherwise.
 */
function checked<T>(
  field: string,
  format: string,
  read: () => T,
  unsupported = `must be ${ACCEPTED_KEYS}`,
): T {
  try {
    return read();
  } catch (error) {
    if (!(error instanceof KeyEncodingError)) throw error;
    switch (error.problem) {
      case "malformed":
        throw keyError(field, format);
      case "private":
        throw privateSentAsPublic(field);
      case "unsupported":
        throw keyError(
          field,
          error.message === "unsupported" ? unsupported : `${unsupported}; ${error.message}`,
        );
      case "invalid":
        throw keyError(field, error.message);
    }
  }
}

/**
 * The KeyObject of a checked public key. A P-256 key is built from its coordinates (a JWK), so
 * OpenSSL never decodes the caller's point encoding; an RSA key from its DER, or from a JWK when the
 * `der` fast path reads it.
 */
function publicKeyObject(der: Buffer, type: "spki" | "pkcs1", data: PublicKeyData): KeyObject {
  if (data.family === "ec") {
    const { x, y } = data.point;
    return createPublicKey({
      key: { kty: "EC", crv: data.curve.name, x: base64url(x), y: base64url(y) },
      format: "jwk",
    });
  }
  const jwk = type === "spki" ? rsaJwkFromDer.publicSpki(der) : rsaJwkFromDer.publicPkcs1(der);
  return jwk === undefined
    ? createPublicKey({ key: der, format: "der", type })
    : createPublicKey({ key: jwk, format: "jwk" });
}

/**
 * The KeyObject of a checked EC private key, built from its scalar: the public point is computed
 * (OpenSSL's ECDH, given a scalar known to be from 1 to n - 1), so the key is the scalar's whatever
 * point it carried. A forged key, another key's point beside this scalar, then matches no grant but
 * the scalar's own, and decrypt answers it `forbidden` as it answers any wrong key.
 */
function ecPrivateKeyObject(data: EcPrivateData): KeyObject {
  const { curve } = data;
  const ecdh = createECDH(curve.nodeName);
  ecdh.setPrivateKey(data.d);
  const point = ecdh.getPublicKey();
  const jwk = {
    kty: "EC",
    crv: curve.name,
    x: base64url(point.subarray(1, 1 + curve.bytes)),
    y: base64url(point.subarray(1 + curve.bytes)),
    d: base64url(data.d),
  };
  return createPrivateKey({ key: jwk, format: "jwk" });
}

function base64url(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64url");
}

function exportSpki(key: KeyObject): string {
  return key.export({ type: "spki", format: "der" }).toString("base64");
}

function privateSentAsPublic(field: string) {
  return keyError(field, "must be a public key; never send a private key here");
}

function keyError(field: string, description: string) {
  return invalidRequest([{ field, description }]);
}

/**
 * An RSA key's JWK read by hand from its DER (the `der` fast path, src/crypto/der.ts), or undefined
 * when `der` is off or the DER is not the canonical shape the reader takes: the caller then lets
 * OpenSSL parse the DER.
 */
const rsaJwkFromDer = {
  privatePkcs1: (bytes: Uint8Array): JsonWebKey | undefined =>
    isOn("der") ? derJwk.rsaPrivateJwkFromPkcs1(bytes) : undefined,
  privatePkcs8: (bytes: Uint8Array): JsonWebKey | undefined =>
    isOn("der") ? derJwk.rsaPrivateJwkFromPkcs8(bytes) : undefined,
  publicPkcs1: (bytes: Uint8Array): JsonWebKey | undefined =>
    isOn("der") ? derJwk.rsaPublicJwkFromPkcs1(bytes) : undefined,
  publicSpki: (bytes: Uint8Array): JsonWebKey | undefined =>
    isOn("der") ? derJwk.rsaPublicJwkFromSpki(bytes) : undefined,
};
