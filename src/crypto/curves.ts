import { copyOf, fromBigInt, toBigInt } from "./asn1.js";

/**
 * The point checks of the two curves the service takes keys on, in plain TypeScript with BigInt (no
 * `node:` module: the client library runs them in browsers too). They decide whether bytes are a
 * valid point before OpenSSL or WebCrypto sees them; none of them handles a secret (a P-256 private
 * scalar is only compared with the group order), so none needs to run in constant time.
 */

/** A point check that failed; the message says why in words a caller can be shown. */
export class PointError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PointError";
  }
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

// NIST P-256 (FIPS 186-4 D.1.2.3, SEC 2 2.4.2): y^2 = x^3 - 3x + b over GF(p), prime order n,
// cofactor 1, so every point on the curve other than the point at infinity is in the group.
const P256_P = 0xffffffff00000001000000000000000000000000ffffffffffffffffffffffffn;
const P256_B = 0x5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604bn;
/** The order of the P-256 group: private scalars are from 1 to n - 1. */
export const P256_N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;

/** Bytes of one P-256 coordinate or scalar. */
export const P256_BYTES = 32;

/** A P-256 point other than infinity, as its two 32-byte big-endian affine coordinates. */
export interface P256Point {
  x: Uint8Array;
  y: Uint8Array;
}

function p256Rhs(x: bigint): bigint {
  return mod(x * x * x - 3n * x + P256_B, P256_P);
}

/**
 * Reads a P-256 point in SEC 1 (2.3.4) form: uncompressed `04 || X || Y` (65 bytes) or compressed
 * `02/03 || X` (33 bytes), which is decompressed here. Refuses the point at infinity (`00`), the
 * hybrid forms (`06/07`, which no current software writes and which carry a redundant bit a careless
 * reader trusts), coordinates out of range and points that are not on the curve.
 */
export function p256Point(encoded: Uint8Array): P256Point {
  const form = encoded[0];
  if (encoded.length === 0 || form === 0x00) throw new PointError("is the point at infinity");
  if (form === 0x06 || form === 0x07) {
    throw new PointError("is in the hybrid form (06, 07): send it uncompressed (04) or compressed (02, 03)");
  }
  if (form === 0x04 && encoded.length === 1 + 2 * P256_BYTES) {
    const x = toBigInt(encoded.subarray(1, 33));
    const y = toBigInt(encoded.subarray(33));
    if (x >= P256_P || y >= P256_P) throw new PointError("has a coordinate out of range");
    if (mod(y * y, P256_P) !== p256Rhs(x)) throw new PointError("is not a point on the curve P-256");
    return { x: copyOf(encoded, 1, 33), y: copyOf(encoded, 33) };
  }
  if ((form === 0x02 || form === 0x03) && encoded.length === 1 + P256_BYTES) {
    const x = toBigInt(encoded.subarray(1));
    if (x >= P256_P) throw new PointError("has a coordinate out of range");
    const rhs = p256Rhs(x);
    // p = 3 (mod 4): the square root, if there is one, is rhs^((p + 1) / 4).
    let y = modPow(rhs, (P256_P + 1n) / 4n, P256_P);
    if (mod(y * y, P256_P) !== rhs) throw new PointError("is not a point on the curve P-256");
    if ((y & 1n) !== BigInt(form & 1)) y = P256_P - y;
    return { x: copyOf(encoded, 1), y: fromBigInt(y, P256_BYTES) };
  }
  throw new PointError("must be uncompressed (65 bytes from 04) or compressed (33 bytes from 02, 03)");
}

/** Checks a P-256 private scalar: 32 bytes, from 1 to n - 1. */
export function checkP256Scalar(d: Uint8Array): void {
  if (d.length !== P256_BYTES) throw new PointError(`must hold a private scalar of ${P256_BYTES} bytes`);
  const value = toBigInt(d);
  if (value === 0n || value >= P256_N)
    throw new PointError("must hold a private scalar from 1 to n - 1 of P-256");
}

// Ed25519 (RFC 8032 5.1): -x^2 + y^2 = 1 + d x^2 y^2 over GF(2^255 - 19).
const ED_P = 2n ** 255n - 19n;
const ED_D = mod(-121665n * modPow(121666n, ED_P - 2n, ED_P), ED_P);
const ED_SQRT_M1 = modPow(2n, (ED_P - 1n) / 4n, ED_P);

/** Bytes of an Ed25519 public key. */
export const ED25519_BYTES = 32;

/**
 * Checks an Ed25519 public key (the 32-byte encoding of RFC 8032 5.1.2): canonical (y < p, and no
 * sign bit on x = 0), a point of the curve (5.1.3's decoding succeeds), and not of small order (8P is
 * not the neutral point; the eight such points let a signature verify for any message under some
 * verifiers, and no honest key is one of them).
 */
export function checkEd25519Point(encoded: Uint8Array): void {
  if (encoded.length !== ED25519_BYTES) throw new PointError(`must be ${ED25519_BYTES} bytes`);
  // Little-endian y, with x's sign in the top bit of the last byte.
  const bigEndian = copyOf(encoded).reverse();
  const sign = BigInt((bigEndian[0] as number) >> 7);
  bigEndian[0] = (bigEndian[0] as number) & 0x7f;
  const y = toBigInt(bigEndian);
  if (y >= ED_P) throw new PointError("is not a canonical Ed25519 encoding");
  const u = mod(y * y - 1n, ED_P);
  const v = mod(ED_D * y * y + 1n, ED_P);
  // x = u v^3 (u v^7)^((p - 5) / 8), then fixed up by sqrt(-1) (RFC 8032 5.1.3 step 2-3).
  let x = mod(u * modPow(v, 3n, ED_P) * modPow(u * modPow(v, 7n, ED_P), (ED_P - 5n) / 8n, ED_P), ED_P);
  const vx2 = mod(v * x * x, ED_P);
  if (vx2 !== u) {
    if (vx2 !== mod(-u, ED_P)) throw new PointError("is not a point on the curve Ed25519");
    x = mod(x * ED_SQRT_M1, ED_P);
  }
  if (x === 0n && sign === 1n) throw new PointError("is not a canonical Ed25519 encoding");
  if ((x & 1n) !== sign) x = ED_P - x;
  if (hasSmallOrder(x, y)) throw new PointError("is a small-order point, which is never an honest key");
}

/** Whether 8 (x, y) is the neutral point, by three doublings in extended coordinates (RFC 8032 5.1.4). */
function hasSmallOrder(x: bigint, y: bigint): boolean {
  let X = x;
  let Y = y;
  let Z = 1n;
  for (let i = 0; i < 3; i++) {
    const A = (X * X) % ED_P;
    const B = (Y * Y) % ED_P;
    const C = (2n * Z * Z) % ED_P;
    const H = A + B;
    const E = mod(H - (X + Y) * (X + Y), ED_P);
    const G = mod(A - B, ED_P);
    const F = C + G;
    X = mod(E * F, ED_P);
    Y = mod(G * H, ED_P);
    Z = mod(F * G, ED_P);
  }
  return X === 0n && Y === Z;
}
