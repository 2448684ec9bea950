import { copyOf, fromBigInt, toBigInt } from "./asn1.js";
import { type EcCurve, P256_CURVE } from "./suites.js";

/**
 * The point checks of the curves the service takes keys on (each key suite's curve, `suites.ts`, and
 * Ed25519 for signing keys), in plain TypeScript with BigInt (no `node:` module: the client library
 * runs them in browsers too). They decide whether bytes are a valid point before OpenSSL or WebCrypto
 * sees them; none of them handles a secret (a private scalar is only compared with the group order),
 * so none needs to run in constant time.
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

/** A point other than infinity, as its two big-endian affine coordinates of the curve's size. */
export interface EcPoint {
  x: Uint8Array;
  y: Uint8Array;
}

/** A P-256 point (kept for the P-256 callers). */
export type P256Point = EcPoint;

function rhs(curve: EcCurve, x: bigint): bigint {
  return mod(x * x * x - 3n * x + curve.b, curve.p);
}

/**
 * Reads a point of `curve` (a suite's, `suites.ts`) in SEC 1 (2.3.4) form: uncompressed `04 || X || Y`
 * or compressed `02/03 || X`, which is decompressed here. Refuses the point at infinity (`00`), the
 * hybrid forms (`06/07`, which no current software writes and which carry a redundant bit a careless
 * reader trusts), coordinates out of range and points that are not on the curve.
 */
export function ecPoint(curve: EcCurve, encoded: Uint8Array): EcPoint {
  const { p, bytes, name } = curve;
  const form = encoded[0];
  if (encoded.length === 0 || form === 0x00) throw new PointError("is the point at infinity");
  if (form === 0x06 || form === 0x07) {
    throw new PointError("is in the hybrid form (06, 07): send it uncompressed (04) or compressed (02, 03)");
  }
  if (form === 0x04 && encoded.length === 1 + 2 * bytes) {
    const x = toBigInt(encoded.subarray(1, 1 + bytes));
    const y = toBigInt(encoded.subarray(1 + bytes));
    if (x >= p || y >= p) throw new PointError("has a coordinate out of range");
    if (mod(y * y, p) !== rhs(curve, x)) throw new PointError(`is not a point on the curve ${name}`);
    return { x: copyOf(encoded, 1, 1 + bytes), y: copyOf(encoded, 1 + bytes) };
  }
  if ((form === 0x02 || form === 0x03) && encoded.length === 1 + bytes) {
    const x = toBigInt(encoded.subarray(1));
    if (x >= p) throw new PointError("has a coordinate out of range");
    const square = rhs(curve, x);
    // p = 3 (mod 4): the square root, if there is one, is rhs^((p + 1) / 4).
    let y = modPow(square, (p + 1n) / 4n, p);
    if (mod(y * y, p) !== square) throw new PointError(`is not a point on the curve ${name}`);
    if ((y & 1n) !== BigInt(form & 1)) y = p - y;
    return { x: copyOf(encoded, 1), y: fromBigInt(y, bytes) };
  }
  throw new PointError(
    `must be uncompressed (${1 + 2 * bytes} bytes from 04) or compressed (${1 + bytes} bytes from 02, 03)`,
  );
}

/** Checks a private scalar of `curve`: the curve's size in bytes, from 1 to n - 1. */
export function checkEcScalar(curve: EcCurve, d: Uint8Array): void {
  if (d.length !== curve.bytes) throw new PointError(`must hold a private scalar of ${curve.bytes} bytes`);
  const value = toBigInt(d);
  if (value === 0n || value >= curve.n)
    throw new PointError(`must hold a private scalar from 1 to n - 1 of ${curve.name}`);
}

/** Reads a P-256 point (see {@link ecPoint}). */
export function p256Point(encoded: Uint8Array): EcPoint {
  return ecPoint(P256_CURVE, encoded);
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
