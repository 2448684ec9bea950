import type { JsonWebKey } from "node:crypto";

/**
 * A strict reader for the DER encodings of RSA keys (RFC 8017 appendix A.1, RFC 5208, RFC 5280) that
 * turns them into JWKs, because Node imports an RSA JWK about sixty times faster than the same key
 * in DER: with OpenSSL 3, `createPrivateKey` of a PKCS#8 DER key took longer than the RSA decryption
 * it was parsed for, and a decrypt request parses the caller's key every time.
 *
 * Only the canonical shape is read: two-prime RSA with the rsaEncryption algorithm (NULL
 * parameters), minimal DER lengths and integers, nothing before or after, and for private keys
 * `p * q = n`. Anything else returns `undefined` and the caller falls back to OpenSSL's own parser,
 * so these functions never accept a key OpenSSL would refuse, and never decide that a key is invalid.
 */

const SEQUENCE = 0x30;
const INTEGER = 0x02;
const BIT_STRING = 0x03;
const OCTET_STRING = 0x04;

/** DER of the rsaEncryption OID (1.2.840.113549.1.1.1) followed by NULL parameters. */
const RSA_ALGORITHM = Buffer.from("06092a864886f70d0101010500", "hex");

/** One DER element: its tag and where its content starts and ends in the buffer. */
interface Element {
  tag: number;
  start: number;
  end: number;
}

/** The element at `offset`, or undefined when its header is not minimal DER or overruns `limit`. */
function element(der: Uint8Array, offset: number, limit: number): Element | undefined {
  if (offset + 2 > limit) return undefined;
  const tag = der[offset] as number;
  const first = der[offset + 1] as number;
  let length = first;
  let start = offset + 2;
  if (first & 0x80) {
    const count = first & 0x7f;
    if (count === 0 || count > 3 || start + count > limit || der[start] === 0) return undefined;
    length = 0;
    for (let i = 0; i < count; i++) length = length * 256 + (der[start + i] as number);
    if (length < 0x80) return undefined;
    start += count;
  }
  const end = start + length;
  return end > limit ? undefined : { tag, start, end };
}

/** The elements of a constructed element's content, in order, or undefined if they do not tile it. */
function children(der: Uint8Array, parent: Element): Element[] | undefined {
  const items: Element[] = [];
  let offset = parent.start;
  while (offset < parent.end) {
    const item = element(der, offset, parent.end);
    if (item === undefined) return undefined;
    items.push(item);
    offset = item.end;
  }
  return items;
}

/** The children of the SEQUENCE that is the whole buffer. */
function sequenceOf(der: Uint8Array): Element[] | undefined {
  const root = element(der, 0, der.length);
  if (root === undefined || root.tag !== SEQUENCE || root.end !== der.length) return undefined;
  return children(der, root);
}

/** The magnitude of a positive, minimally encoded INTEGER, or undefined. */
function positive(der: Uint8Array, item: Element | undefined): Buffer | undefined {
  if (item === undefined || item.tag !== INTEGER || item.end === item.start) return undefined;
  const first = der[item.start] as number;
  if (first & 0x80) return undefined;
  let start = item.start;
  if (first === 0) {
    if (item.end - item.start === 1 || !((der[start + 1] as number) & 0x80)) return undefined;
    start++;
  }
  return Buffer.from(der.subarray(start, item.end));
}

function isZeroInteger(der: Uint8Array, item: Element | undefined): boolean {
  return item?.tag === INTEGER && item.end - item.start === 1 && der[item.start] === 0;
}

function bigint(bytes: Buffer): bigint {
  return BigInt(`0x${bytes.toString("hex")}`);
}

const RSA_PRIVATE_FIELDS = ["n", "e", "d", "p", "q", "dp", "dq", "qi"] as const;

/** An RSAPrivateKey (PKCS#1) as a JWK, or undefined. */
export function rsaPrivateJwkFromPkcs1(der: Uint8Array): JsonWebKey | undefined {
  const items = sequenceOf(der);
  if (items?.length !== 9 || !isZeroInteger(der, items[0])) return undefined;
  const values = RSA_PRIVATE_FIELDS.map((_, i) => positive(der, items[i + 1]));
  if (values.some((v) => v === undefined)) return undefined;
  const [n, e, d, p, q, dp, dq, qi] = values as Buffer[];
  if (n === undefined || p === undefined || q === undefined || bigint(p) * bigint(q) !== bigint(n)) {
    return undefined;
  }
  const jwk: JsonWebKey = { kty: "RSA" };
  RSA_PRIVATE_FIELDS.forEach((name, i) => {
    jwk[name] = (values[i] as Buffer).toString("base64url");
  });
  return e && d && dp && dq && qi ? jwk : undefined;
}

/** A PrivateKeyInfo (PKCS#8, version 0, rsaEncryption, no attributes) as a JWK, or undefined. */
export function rsaPrivateJwkFromPkcs8(der: Uint8Array): JsonWebKey | undefined {
  const items = sequenceOf(der);
  if (items?.length !== 3 || !isZeroInteger(der, items[0])) return undefined;
  const [, algorithm, key] = items as [Element, Element, Element];
  if (algorithm.tag !== SEQUENCE || !sameBytes(der.subarray(algorithm.start, algorithm.end), RSA_ALGORITHM)) {
    return undefined;
  }
  return key.tag === OCTET_STRING ? rsaPrivateJwkFromPkcs1(der.subarray(key.start, key.end)) : undefined;
}

/** An RSAPublicKey (PKCS#1) as a JWK, or undefined. */
export function rsaPublicJwkFromPkcs1(der: Uint8Array): JsonWebKey | undefined {
  const items = sequenceOf(der);
  if (items?.length !== 2) return undefined;
  const n = positive(der, items[0]);
  const e = positive(der, items[1]);
  return n && e ? { kty: "RSA", n: n.toString("base64url"), e: e.toString("base64url") } : undefined;
}

/** A SubjectPublicKeyInfo with the rsaEncryption algorithm as a JWK, or undefined. */
export function rsaPublicJwkFromSpki(der: Uint8Array): JsonWebKey | undefined {
  const items = sequenceOf(der);
  if (items?.length !== 2) return undefined;
  const [algorithm, key] = items as [Element, Element];
  if (algorithm.tag !== SEQUENCE || !sameBytes(der.subarray(algorithm.start, algorithm.end), RSA_ALGORITHM)) {
    return undefined;
  }
  if (key.tag !== BIT_STRING || key.end - key.start < 2 || der[key.start] !== 0) return undefined;
  return rsaPublicJwkFromPkcs1(der.subarray(key.start + 1, key.end));
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && Buffer.compare(a, b) === 0;
}
