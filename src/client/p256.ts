import { Aes256Gcm, CipherSuite, DhkemP256HkdfSha256, HkdfSha256 } from "@hpke/core";
import { HPKE_ENC_BYTES, HPKE_INFO_TEXT, HPKE_P256, HPKE_WRAPPED_KEY_BYTES } from "../crypto/suites.js";

/**
 * The `HPKE-P256-SHA256-A256GCM` key wrap for the client, with WebCrypto only (no
 * `node:` module, no `Buffer`): RFC 9180 base mode, DHKEM(P-256, HKDF-SHA256), HKDF-SHA256,
 * AES-256-GCM, `info` = UTF-8 `receipts.v1 key wrap`, `aad` = the receipt's AAD, plaintext = the
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

export const ECDH_P256 = { name: "ECDH", namedCurve: "P-256" } as const;

let suite: CipherSuite | undefined;
function hpke(): CipherSuite {
  suite ??= new CipherSuite({ kem: new DhkemP256HkdfSha256(), kdf: new HkdfSha256(), aead: new Aes256Gcm() });
  return suite;
}

function subtle(): Subtle {
  const value = globalThis.crypto?.subtle as Subtle | undefined;
  if (value === undefined) throw new Error("WebCrypto (globalThis.crypto.subtle) is not available here");
  return value;
}

/** Wraps a 32-byte AES key to a P-256 public key (an ECDH `CryptoKey`, extractable as public keys are). */
export async function hpkeWrapKey(
  aesKey: Uint8Array<ArrayBuffer>,
  recipient: Key,
  aad: Uint8Array<ArrayBuffer>,
): Promise<{ encapsulatedKey: Uint8Array; encryptedAesKey: Uint8Array }> {
  const { enc, ct } = await hpke().seal({ recipientPublicKey: recipient, info: HPKE_INFO }, aesKey, aad);
  return { encapsulatedKey: new Uint8Array(enc), encryptedAesKey: new Uint8Array(ct) };
}

/** Unwraps a receipt's AES key with a P-256 key pair; throws (opaquely) when it does not open. */
export async function hpkeUnwrapKey(
  recipient: WebCryptoKeyPair,
  encapsulatedKey: Uint8Array<ArrayBuffer>,
  encryptedAesKey: Uint8Array<ArrayBuffer>,
  aad: Uint8Array<ArrayBuffer>,
): Promise<Uint8Array> {
  const opened = await hpke().open(
    { recipientKey: recipient, enc: encapsulatedKey, info: HPKE_INFO },
    encryptedAesKey,
    aad,
  );
  return new Uint8Array(opened);
}

/** Whether a WebCrypto key is an ECDH P-256 key. */
export function isP256Key(key: Key): boolean {
  const algorithm = key.algorithm as { name?: string; namedCurve?: string };
  return algorithm.name === "ECDH" && algorithm.namedCurve === "P-256";
}

/**
 * The key pairs a P-256 private key may belong to, for HPKE, which needs the recipient's public key.
 * An extractable key gives its public half exactly (through its JWK). A non-extractable one (a key
 * made on the device that never leaves it) does not: its public point's x is recovered by ECDH with
 * the curve's base point, and y is one of two square roots, so both candidates are returned; the
 * wrong one makes the HPKE open fail authentication, and the caller tries the other.
 */
export async function p256KeyPairCandidates(privateKey: Key): Promise<WebCryptoKeyPair[]> {
  if (privateKey.extractable) {
    const {
      d: _d,
      key_ops: _ops,
      ...jwk
    } = (await subtle().exportKey("jwk", privateKey)) as Record<string, unknown>;
    const publicKey = await subtle().importKey("jwk", { ...jwk, ext: true }, ECDH_P256, true, []);
    return [{ privateKey, publicKey }];
  }
  const base = await subtle().importKey("raw", point(GX, GY), ECDH_P256, true, []);
  const x = toBigInt(
    new Uint8Array(await subtle().deriveBits({ name: "ECDH", public: base }, privateKey, 256)),
  );
  const y = modPow(mod(x * x * x - 3n * x + B), (P + 1n) / 4n);
  const candidates: WebCryptoKeyPair[] = [];
  for (const candidate of [y, P - y]) {
    const publicKey = await subtle().importKey("raw", point(x, candidate), ECDH_P256, true, []);
    candidates.push({ privateKey, publicKey });
  }
  return candidates;
}

// NIST P-256 (FIPS 186-4 D.1.2.3): p = 3 mod 4, so a square root is a single exponentiation.
const P = 0xffffffff00000001000000000000000000000000ffffffffffffffffffffffffn;
const B = 0x5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604bn;
const GX = 0x6b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c296n;
const GY = 0x4fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5n;

function mod(value: bigint): bigint {
  const r = value % P;
  return r < 0n ? r + P : r;
}

function modPow(base: bigint, exponent: bigint): bigint {
  let result = 1n;
  let b = mod(base);
  let e = exponent;
  while (e > 0n) {
    if (e & 1n) result = (result * b) % P;
    b = (b * b) % P;
    e >>= 1n;
  }
  return result;
}

function toBigInt(bytes: Uint8Array): bigint {
  let value = 0n;
  for (const byte of bytes) value = (value << 8n) | BigInt(byte);
  return value;
}

/** The uncompressed encoding 0x04 || X || Y of a point. */
function point(x: bigint, y: bigint): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(65);
  out[0] = 4;
  for (let i = 0; i < 32; i++) {
    out[32 - i] = Number((x >> BigInt(8 * i)) & 0xffn);
    out[64 - i] = Number((y >> BigInt(8 * i)) & 0xffn);
  }
  return out;
}
