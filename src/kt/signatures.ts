import { ed25519 } from "@noble/curves/ed25519.js";
import { p256 } from "@noble/curves/nist.js";
import { sha512 } from "@noble/hashes/sha2.js";
import { bytesEqual, concat, toHex } from "./bytes.js";
import { defaultSha256, type Sha256 } from "./hash.js";

/**
 * Issuer signing keys and signatures, with one rule everywhere (docs/key-transparency.md).
 *
 * Keys are SubjectPublicKeyInfo DER, checked byte by byte here before any library sees them: an
 * Ed25519 key is exactly `302a300506032b6570032100 || A` with A canonical (y < p, no "negative zero")
 * and not of small order; a P-256 key is exactly the named-curve SPKI of an uncompressed point
 * `04 || X || Y` with X, Y < p and on the curve (so not the point at infinity, which has no such
 * encoding). Compressed points and explicit curve parameters are refused.
 *
 * Ed25519 (RFC 8032, pure, no context): S < L; A and R canonical and not of small order; the
 * cofactorless equation [S]B = R + [k]A. This is libsodium's rule, and OpenSSL's once the encodings
 * are checked here, so the server (which may verify with Node's OpenSSL) and the client (noble's point
 * arithmetic) accept exactly the same signatures: the speccheck vectors of "Taming the many EdDSAs"
 * pass only where every strict verifier agrees (their vector 3).
 *
 * ECDSA P-256 with SHA-256: the signature is raw `r || s` (64 bytes, IEEE P1363, as WebCrypto gives
 * it), r and s in [1, n-1]. High s is accepted: WebCrypto, OpenSSL, HSMs and secure elements sign
 * with either half, and nothing here identifies a statement by its signature (the log commits to the
 * statement's bytes, never to the signature), so the malleability of s buys an attacker nothing.
 */

/** The two signing-key algorithms, as `algorithm` is written in statements and answers. */
export type SigningAlgorithm = "Ed25519" | "ECDSA-P256-SHA256";

/** A signing key that passed {@link parseSigningKey}. */
export interface SigningKey {
  algorithm: SigningAlgorithm;
  /** The SubjectPublicKeyInfo DER, as given. */
  spki: Uint8Array;
  /** The raw public key: Ed25519's 32 bytes, or P-256's 65-byte uncompressed point. */
  raw: Uint8Array;
}

/**
 * The verification engine: only the equation checks. {@link verifySignature} always runs the
 * encoding rules above first, so an engine never decides them. The default is noble's arithmetic;
 * a Node server may pass Node's (`node-engine.ts`), which a test proves answers the same.
 */
export interface SignatureEngine {
  /** Ed25519 cofactorless verification of a signature whose encodings passed the rules. */
  ed25519(key: SigningKey, message: Uint8Array, signature: Uint8Array): boolean;
  /** ECDSA P-256 / SHA-256 verification of a raw r || s whose r and s are in [1, n-1]; high s accepted. */
  p256(key: SigningKey, message: Uint8Array, signature: Uint8Array): boolean;
}

const ED25519_SPKI_PREFIX = hexBytes("302a300506032b6570032100");
const P256_SPKI_PREFIX = hexBytes("3059301306072a8648ce3d020106082a8648ce3d030107034200");

/** 2^255 - 19 and the group order L of edwards25519 (RFC 8032 section 5.1). */
const ED_P = 2n ** 255n - 19n;
const ED_L = 2n ** 252n + 27742317777372353535851937790883648493n;

/** P-256 (FIPS 186-4 D.1.2.3): field prime, b, and group order n. */
const P256_P = 0xffffffff00000001000000000000000000000000ffffffffffffffffffffffffn;
const P256_B = 0x5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604bn;
const P256_N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;

/**
 * The canonical encodings of the eight points of small order (the torsion subgroup of edwards25519):
 * the only small-order encodings left once non-canonical ones are refused.
 */
export const ED25519_SMALL_ORDER = [
  "0100000000000000000000000000000000000000000000000000000000000000",
  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "0000000000000000000000000000000000000000000000000000000000000000",
  "0000000000000000000000000000000000000000000000000000000000000080",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
];

function hexBytes(text: string): Uint8Array {
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = Number.parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function bigBE(bytes: Uint8Array): bigint {
  let value = 0n;
  for (const byte of bytes) value = (value << 8n) | BigInt(byte);
  return value;
}

function bigLE(bytes: Uint8Array): bigint {
  let value = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) value = (value << 8n) | BigInt(bytes[i] as number);
  return value;
}

/**
 * Whether 32 bytes are a canonical Ed25519 point encoding that is not of small order: y < p, not
 * x = 0 with the sign bit set, and not one of {@link ED25519_SMALL_ORDER}. (Whether y has a square
 * root, i.e. is on the curve at all, the equation check finds out: no point, no signature.)
 */
export function isStrictEd25519Point(bytes: Uint8Array): boolean {
  if (bytes.length !== 32) return false;
  const last = bytes[31] as number;
  const sign = last >> 7;
  const y = bigLE(concat(bytes.subarray(0, 31), new Uint8Array([last & 0x7f])));
  if (y >= ED_P) return false;
  if (sign === 1 && (y === 1n || y === ED_P - 1n)) return false;
  return !ED25519_SMALL_ORDER.includes(toHex(bytes));
}

function onP256(x: bigint, y: bigint): boolean {
  const mod = (v: bigint) => ((v % P256_P) + P256_P) % P256_P;
  return mod(y * y) === mod(x * x * x - 3n * x + P256_B);
}

/** Why a signing key's SPKI was refused, or the key. */
export type KeyParse = { ok: true; key: SigningKey } | { ok: false; reason: string };

/** Parses and checks an Ed25519 or P-256 SubjectPublicKeyInfo (DER bytes), with the rules above. */
export function parseSigningKey(spki: Uint8Array): KeyParse {
  if (spki.length === 44 && bytesEqual(spki.subarray(0, 12), ED25519_SPKI_PREFIX)) {
    const raw = spki.slice(12);
    if (!isStrictEd25519Point(raw))
      return { ok: false, reason: "Ed25519 key is not canonical or is of small order" };
    try {
      ed25519.Point.fromBytes(raw, false);
    } catch {
      return { ok: false, reason: "Ed25519 key is not a point of the curve" };
    }
    return { ok: true, key: { algorithm: "Ed25519", spki: spki.slice(), raw } };
  }
  if (spki.length === 91 && bytesEqual(spki.subarray(0, 26), P256_SPKI_PREFIX)) {
    const raw = spki.slice(26);
    if (raw[0] !== 4) return { ok: false, reason: "P-256 key must be an uncompressed point" };
    const [x, y] = [bigBE(raw.subarray(1, 33)), bigBE(raw.subarray(33, 65))];
    if (x >= P256_P || y >= P256_P)
      return { ok: false, reason: "P-256 key coordinates are not field elements" };
    if (!onP256(x, y)) return { ok: false, reason: "P-256 key is not a point of the curve" };
    return { ok: true, key: { algorithm: "ECDSA-P256-SHA256", spki: spki.slice(), raw } };
  }
  return { ok: false, reason: "not an Ed25519 or uncompressed P-256 SubjectPublicKeyInfo" };
}

/** The pure-JavaScript engine: noble's point arithmetic and ECDSA. */
export const nobleEngine: SignatureEngine = {
  ed25519(key, message, signature) {
    try {
      const A = ed25519.Point.fromBytes(key.raw, false);
      const R = ed25519.Point.fromBytes(signature.subarray(0, 32), false);
      const s = bigLE(signature.subarray(32, 64));
      const k = bigLE(sha512(concat(signature.subarray(0, 32), key.raw, message))) % ED_L;
      return ed25519.Point.BASE.multiplyUnsafe(s).equals(R.add(A.multiplyUnsafe(k)));
    } catch {
      return false;
    }
  },
  p256(key, message, signature) {
    try {
      return p256.verify(signature, message, key.raw, { lowS: false, prehash: true, format: "compact" });
    } catch {
      return false;
    }
  },
};

/**
 * Whether `signature` is `key`'s signature over `message`, by the one rule of this module: the
 * encoding checks here, then the engine's equation.
 */
export function verifySignature(
  key: SigningKey,
  message: Uint8Array,
  signature: Uint8Array,
  engine: SignatureEngine = nobleEngine,
): boolean {
  if (signature.length !== 64) return false;
  if (key.algorithm === "Ed25519") {
    if (!isStrictEd25519Point(key.raw) || !isStrictEd25519Point(signature.subarray(0, 32))) return false;
    if (bigLE(signature.subarray(32, 64)) >= ED_L) return false;
    return engine.ed25519(key, message, signature);
  }
  const [r, s] = [bigBE(signature.subarray(0, 32)), bigBE(signature.subarray(32, 64))];
  if (r < 1n || r >= P256_N || s < 1n || s >= P256_N) return false;
  return engine.p256(key, message, signature);
}

/** `signerHash`: the first 8 bytes of SHA-256 of the signing key's SPKI DER. */
export function signerHashOf(spki: Uint8Array, sha256: Sha256 = defaultSha256): Uint8Array {
  return sha256(spki).slice(0, 8);
}

/**
 * The `signingKeyId` of a signing key: `sk_` and the first 16 bytes of SHA-256 of its SPKI DER in
 * hex. Derived from the key, so an issuer can write it into a statement before the service answers,
 * and one key has one id everywhere.
 */
export function signingKeyIdOf(spki: Uint8Array, sha256: Sha256 = defaultSha256): string {
  return `sk_${toHex(sha256(spki).slice(0, 16))}`;
}
