import { ecdhParams, hpkeCipherSuite } from "../crypto/hpke-suites.js";
import {
  type EcCurve,
  HPKE_ENC_BYTES,
  HPKE_INFO_TEXT,
  HPKE_P256,
  HPKE_SUITE,
  HPKE_WRAPPED_KEY_BYTES,
  KEY_SUITES,
  type KeySuite,
} from "../crypto/suites.js";

/**
 * The HPKE key wrap for the client, for every HPKE key suite (`HPKE-P256-SHA256-A256GCM` unless a call
 * names another), with WebCrypto only (no `node:` module, no `Buffer`): RFC 9180 base mode with the
 * suite's KEM, KDF and AEAD (`hpke-suites.ts`; P-256: DHKEM(P-256, HKDF-SHA256), HKDF-SHA256,
 * AES-256-GCM), `info` = UTF-8 `receipts.v1 key wrap`, `aad` = the receipt's AAD, plaintext = the
 * receipt's 32-byte AES key. HPKE itself is @hpke/core's, a maintained implementation.
 */

type Subtle = typeof globalThis.crypto.subtle;
type Key = Awaited<ReturnType<Subtle["importKey"]>>;

/** A WebCrypto key pair, as `crypto.subtle.generateKey` returns it. */
export interface WebCryptoKeyPair {
  privateKey: Key;
  publicKey: Key;
}

/** The JOSE-style name of the P-256 suite, `keyBundle.algorithm`. */
export const HPKE_KEY_WRAP_ALGORITHM = HPKE_P256;

/** HPKE `info` of the key wrap. */
export const HPKE_INFO = new TextEncoder().encode(HPKE_INFO_TEXT);

/** Sizes of the wrapped key: the encapsulated key (an uncompressed point) and the HPKE ciphertext. */
export { HPKE_ENC_BYTES, HPKE_WRAPPED_KEY_BYTES };

export const ECDH_P256 = ecdhParams(HPKE_SUITE);

function subtle(): Subtle {
  const value = globalThis.crypto?.subtle as Subtle | undefined;
  if (value === undefined) throw new Error("WebCrypto (globalThis.crypto.subtle) is not available here");
  return value;
}

/** Wraps a 32-byte AES key to a public key of `suite` (an ECDH `CryptoKey`, extractable as public keys are). */
export async function hpkeWrapKey(
  aesKey: Uint8Array<ArrayBuffer>,
  recipient: Key,
  aad: Uint8Array<ArrayBuffer>,
  suite: KeySuite = HPKE_SUITE,
): Promise<{ encapsulatedKey: Uint8Array; encryptedAesKey: Uint8Array }> {
  const { enc, ct } = await hpkeCipherSuite(suite).seal(
    { recipientPublicKey: recipient, info: HPKE_INFO },
    aesKey,
    aad,
  );
  return { encapsulatedKey: new Uint8Array(enc), encryptedAesKey: new Uint8Array(ct) };
}

/** Unwraps a receipt's AES key with a key pair of `suite`; throws (opaquely) when it does not open. */
export async function hpkeUnwrapKey(
  recipient: WebCryptoKeyPair,
  encapsulatedKey: Uint8Array<ArrayBuffer>,
  encryptedAesKey: Uint8Array<ArrayBuffer>,
  aad: Uint8Array<ArrayBuffer>,
  suite: KeySuite = HPKE_SUITE,
): Promise<Uint8Array> {
  const opened = await hpkeCipherSuite(suite).open(
    { recipientKey: recipient, enc: encapsulatedKey, info: HPKE_INFO },
    encryptedAesKey,
    aad,
  );
  return new Uint8Array(opened);
}

/** Whether a WebCrypto key is an ECDH P-256 key. */
export function isP256Key(key: Key): boolean {
  return isEcKeyOf(key, HPKE_SUITE);
}

/** Whether a WebCrypto key is an ECDH key on the curve of `suite`. */
export function isEcKeyOf(key: Key, suite: KeySuite): boolean {
  const algorithm = key.algorithm as { name?: string; namedCurve?: string };
  return algorithm.name === "ECDH" && algorithm.namedCurve === suite.curve?.name;
}

/** The HPKE suite of a WebCrypto ECDH key, by its curve; undefined for any other key. */
export function ecSuiteOfKey(key: Key): KeySuite | undefined {
  return KEY_SUITES.find((suite) => suite.curve !== undefined && isEcKeyOf(key, suite));
}

/** The key pairs a P-256 private key may belong to (see {@link ecKeyPairCandidates}). */
export function p256KeyPairCandidates(privateKey: Key): Promise<WebCryptoKeyPair[]> {
  return ecKeyPairCandidates(privateKey, HPKE_SUITE);
}

/**
 * The key pairs a private key of `suite` may belong to, for HPKE, which needs the recipient's public
 * key. An extractable key gives its public half exactly (through its JWK). A non-extractable one (a
 * key made on the device that never leaves it) does not: its public point's x is recovered by ECDH
 * with the curve's base point, and y is one of two square roots, so both candidates are returned; the
 * wrong one makes the HPKE open fail authentication, and the caller tries the other.
 */
export async function ecKeyPairCandidates(privateKey: Key, suite: KeySuite): Promise<WebCryptoKeyPair[]> {
  const params = ecdhParams(suite);
  if (privateKey.extractable) {
    const {
      d: _d,
      key_ops: _ops,
      ...jwk
    } = (await subtle().exportKey("jwk", privateKey)) as Record<string, unknown>;
    const publicKey = await subtle().importKey("jwk", { ...jwk, ext: true }, params, true, []);
    return [{ privateKey, publicKey }];
  }
  const curve = suite.curve as EcCurve;
  const { p } = curve;
  const base = await subtle().importKey("raw", point(curve, curve.gx, curve.gy), params, true, []);
  const x = toBigInt(
    new Uint8Array(await subtle().deriveBits({ name: "ECDH", public: base }, privateKey, 8 * curve.bytes)),
  );
  // The suites' curves have p = 3 mod 4, so a square root is a single exponentiation.
  const y = modPow(mod(x * x * x - 3n * x + curve.b, p), (p + 1n) / 4n, p);
  const candidates: WebCryptoKeyPair[] = [];
  for (const candidate of [y, p - y]) {
    const publicKey = await subtle().importKey("raw", point(curve, x, candidate), params, true, []);
    candidates.push({ privateKey, publicKey });
  }
  return candidates;
}

function mod(value: bigint, m: bigint): bigint {
  const r = value % m;
  return r < 0n ? r + m : r;
}

function modPow(base: bigint, exponent: bigint, m: bigint): bigint {
  let result = 1n;
  let b = mod(base, m);
  let e = exponent;
  while (e > 0n) {
    if (e & 1n) result = (result * b) % m;
    b = (b * b) % m;
    e >>= 1n;
  }
  return result;
}

function toBigInt(bytes: Uint8Array): bigint {
  let value = 0n;
  for (const byte of bytes) value = (value << 8n) | BigInt(byte);
  return value;
}

/** The uncompressed encoding 0x04 || X || Y of a point of `curve`. */
function point(curve: EcCurve, x: bigint, y: bigint): Uint8Array<ArrayBuffer> {
  const n = curve.bytes;
  const out = new Uint8Array(1 + 2 * n);
  out[0] = 4;
  for (let i = 0; i < n; i++) {
    out[n - i] = Number((x >> BigInt(8 * i)) & 0xffn);
    out[2 * n - i] = Number((y >> BigInt(8 * i)) & 0xffn);
  }
  return out;
}
