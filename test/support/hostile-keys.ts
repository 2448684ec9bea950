import { createECDH, createPrivateKey, createPublicKey } from "node:crypto";
import { readFileSync } from "node:fs";

/**
 * The corpus of hostile keys: every key encoding an attacker would pick against the places the
 * service parses a key (register, issuer escrow keys, merchant signing keys, the decrypt endpoints,
 * configured escrow keys, the client library). Each entry must be refused with `invalid_request`
 * (400 / INVALID_ARGUMENT) and must never reach Node's key parser unchecked. Entries marked
 * `abortsNode` are the crash class of issue 31: handed to Node 20 or 22 as they are, a single one
 * aborts the process (`asymmetricKeyDetails` asserts on a point at infinity).
 *
 * Forged keys (a valid key's public half beside another key's secret half) are not here: they are
 * well-formed, and decrypt answers them `forbidden` (test/crypto/key-consistency.test.ts).
 *
 * Everything is built here from fixed material (a fixture RSA-2048 pair, fixed P-256, P-384 and
 * Ed25519 scalars) with a small DER writer of its own, independent of the reader under test, so the
 * corpus is the same on every run and costs no key generation.
 */

/** One hostile key: what it is, and the text sent in the key field. */
export interface HostileKey {
  label: string;
  text: string;
  /**
   * Node aborts (SIGABRT) on this key when it builds a KeyObject from it unchecked and reads its
   * details: seen on 20.20 and 22.23; 24.21 throws instead.
   */
  abortsNode?: true;
}

// --- a minimal DER writer -------------------------------------------------------------------------

type Bytes = Uint8Array | number[];

function bytes(part: Bytes): Buffer {
  return Buffer.isBuffer(part) ? part : Buffer.from(part);
}

function length(n: number): number[] {
  if (n < 0x80) return [n];
  if (n < 0x100) return [0x81, n];
  if (n < 0x10000) return [0x82, n >> 8, n & 0xff];
  return [0x83, n >> 16, (n >> 8) & 0xff, n & 0xff];
}

/** A TLV with the shortest length. */
export function tlv(tag: number, ...parts: Bytes[]): Buffer {
  const body = Buffer.concat(parts.map(bytes));
  return Buffer.concat([Buffer.from([tag, ...length(body.length)]), body]);
}

const seq = (...parts: Bytes[]) => tlv(0x30, ...parts);
const oid = (hex: string) => tlv(0x06, Buffer.from(hex, "hex"));
const int = (magnitude: Bytes) => {
  const m = bytes(magnitude);
  return tlv(0x02, (m[0] ?? 0) & 0x80 ? Buffer.concat([Buffer.from([0]), m]) : m);
};
const octets = (...parts: Bytes[]) => tlv(0x04, ...parts);
const bits = (content: Bytes) => tlv(0x03, [0], content);
const NULL = Buffer.from([0x05, 0x00]);

const OID = {
  rsa: "2a864886f70d010101",
  rsaPss: "2a864886f70d01010a",
  ec: "2a8648ce3d0201",
  p256: "2a8648ce3d030107",
  p384: "2b81040022",
  secp256k1: "2b8104000a",
  primeField: "2a8648ce3d0101",
  ed25519: "2b6570",
  x25519: "2b656e",
  ed448: "2b6571",
  dsa: "2a8648ce380401",
};

// --- fixed key material -----------------------------------------------------------------------------

const P = 0xffffffff00000001000000000000000000000000ffffffffffffffffffffffffn;
const B = 0x5ac635d8aa3a93e7b3ebbd55769886bc651d06b0cc53b0f63bce3c3e27d2604bn;
const N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;
const GX = 0x6b17d1f2e12c4247f8bce6e563a440f277037d812deb33a0f4a13945d898c296n;
const GY = 0x4fe342e2fe1a7f9b8ee7eb4a7c0f9e162bce33576b315ececbb6406837bf51f5n;

function be(value: bigint, size: number): Buffer {
  return Buffer.from(value.toString(16).padStart(size * 2, "0"), "hex");
}

function modPow(base: bigint, exponent: bigint, m: bigint): bigint {
  let result = 1n;
  let b = ((base % m) + m) % m;
  for (let e = exponent; e > 0n; e >>= 1n) {
    if (e & 1n) result = (result * b) % m;
    b = (b * b) % m;
  }
  return result;
}

/** A fixed P-256 key: scalar and uncompressed public point, computed by OpenSSL. */
const P256_D = Buffer.from("c9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721", "hex");
const p256 = createECDH("prime256v1");
p256.setPrivateKey(P256_D);
const P256_POINT = p256.getPublicKey();
const P256_COMPRESSED = p256.getPublicKey(null, "compressed");

const p384 = createECDH("secp384r1");
p384.setPrivateKey(Buffer.alloc(48, 7));

/** A P-256 x-coordinate with no point on the curve (x^3 - 3x + b is not a square mod p). */
const OFF_CURVE_X = (() => {
  for (let x = 1n; ; x++) {
    const rhs = (((x * x * x - 3n * x + B) % P) + P) % P;
    if (modPow(rhs, (P - 1n) / 2n, P) === P - 1n) return x;
  }
})();

const ecAlgorithm = (curve: Bytes = oid(OID.p256)) => seq(oid(OID.ec), curve);
const ecSpki = (point: Bytes, algorithm = ecAlgorithm()) => seq(algorithm, bits(point));

/** SEC 1 ECParameters spelling P-256 out: what "explicit curve parameters" means. */
const EXPLICIT_P256 = seq(
  int([1]),
  seq(oid(OID.primeField), int(be(P, 32))),
  seq(octets(be(P - 3n, 32)), octets(be(B, 32))),
  octets(Buffer.concat([Buffer.from([4]), be(GX, 32), be(GY, 32)])),
  int(be(N, 32)),
  int([1]),
);

const ecPrivate = (d: Bytes, point?: Bytes, parameters?: Buffer) =>
  seq(
    int([1]),
    octets(d),
    ...(parameters === undefined ? [] : [tlv(0xa0, parameters)]),
    ...(point === undefined ? [] : [tlv(0xa1, bits(point))]),
  );
const ecPkcs8 = (d: Bytes, point?: Bytes, algorithm = ecAlgorithm()) =>
  seq(int([0]), algorithm, octets(ecPrivate(d, point)));

/** The fixture RSA-2048 pair the RSA entries are made from. */
const RSA_FIXTURE = (() => {
  const { keys } = JSON.parse(readFileSync(new URL("./rsa-keys.json", import.meta.url), "utf8")) as {
    keys: Array<{ bits: number; spki: string; pkcs8: string }>;
  };
  const key = keys.filter((k) => k.bits === 2048).at(-1) as { spki: string; pkcs8: string };
  const jwk = createPrivateKey({
    key: Buffer.from(key.pkcs8, "base64"),
    format: "der",
    type: "pkcs8",
  }).export({
    format: "jwk",
  });
  const field = (name: string) => Buffer.from(jwk[name as keyof typeof jwk] as string, "base64url");
  return { spki: key.spki, pkcs8: key.pkcs8, field };
})();
const RSA_N = RSA_FIXTURE.field("n");

const rsaSpki = (n: Bytes, e: Bytes = [1, 0, 1], algorithm: Buffer = seq(oid(OID.rsa), NULL)) =>
  seq(algorithm, bits(seq(int(n), int(e))));

/** An RSAPrivateKey (PKCS#1) from the fixture's integers, with `change` applied to them first. */
function rsaPrivate(change: (fields: Record<string, Buffer>) => void = () => {}, version = [0]): Buffer {
  const names = ["n", "e", "d", "p", "q", "dp", "dq", "qi"];
  const fields = Object.fromEntries(names.map((name) => [name, RSA_FIXTURE.field(name)]));
  change(fields);
  return seq(int(version), ...names.map((name) => int(fields[name] as Buffer)));
}
const rsaPkcs8 = (inner: Buffer) => seq(int([0]), seq(oid(OID.rsa), NULL), octets(inner));

/** A fixed Ed25519 key (RFC 8032 test 1's secret), its raw 32-byte public key. */
const ED25519_RAW = createPublicKey(
  createPrivateKey({
    key: Buffer.concat([
      Buffer.from("302e020100300506032b657004220420", "hex"),
      Buffer.from("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", "hex"),
    ]),
    format: "der",
    type: "pkcs8",
  }),
).export({ format: "jwk" }).x as string;
const edSpki = (raw: Bytes, algorithm = seq(oid(OID.ed25519))) => seq(algorithm, bits(raw));

const b64 = (der: Buffer) => der.toString("base64");
const pem = (label: string, der: Buffer, eol = "\n") =>
  `-----BEGIN ${label}-----${eol}${(b64(der).match(/.{1,64}/g) ?? []).join(eol)}${eol}-----END ${label}-----`;

const INFINITY_SPKI = ecSpki([0]);

// --- the corpus ------------------------------------------------------------------------------------

/** Public keys for register and issuer escrow keys (RSA or P-256 expected): all refused. */
export const HOSTILE_PUBLIC_KEYS: readonly HostileKey[] = [
  { label: "P-256 point at infinity (00)", text: b64(INFINITY_SPKI), abortsNode: true },
  { label: "P-256 point at infinity, PEM", text: pem("PUBLIC KEY", INFINITY_SPKI), abortsNode: true },
  {
    label: "P-256 point at infinity, CRLF PEM",
    text: pem("PUBLIC KEY", INFINITY_SPKI, "\r\n"),
    abortsNode: true,
  },
  { label: "P-256 point at infinity, 65 bytes from 00", text: b64(ecSpki(Buffer.alloc(65))) },
  { label: "P-256 empty point", text: b64(ecSpki([])) },
  { label: "P-256 (0, 0)", text: b64(ecSpki([4, ...Buffer.alloc(64)])) },
  {
    label: "P-256 point off the curve",
    text: b64(ecSpki(Buffer.concat([P256_POINT.subarray(0, 64), Buffer.from([(P256_POINT[64] ?? 0) ^ 1])]))),
  },
  {
    label: "P-256 x = p",
    text: b64(ecSpki(Buffer.concat([Buffer.from([4]), be(P, 32), P256_POINT.subarray(33)]))),
  },
  { label: "P-256 y = y + p", text: b64(ecSpki([4, ...P256_POINT.subarray(1, 33), ...be(P, 32)])) },
  {
    label: "P-256 hybrid point (06/07)",
    text: b64(ecSpki([6 + ((P256_POINT[64] ?? 0) & 1), ...P256_POINT.subarray(1)])),
  },
  {
    label: "P-256 hybrid point with the wrong parity bit",
    text: b64(ecSpki([7 - ((P256_POINT[64] ?? 0) & 1), ...P256_POINT.subarray(1)])),
  },
  { label: "P-256 compressed point with no y", text: b64(ecSpki([2, ...be(OFF_CURVE_X, 32)])) },
  { label: "P-256 compressed point, x = p", text: b64(ecSpki([3, ...be(P, 32)])) },
  { label: "P-256 point one byte short", text: b64(ecSpki(P256_POINT.subarray(0, 64))) },
  { label: "P-256 point one byte long", text: b64(ecSpki([...P256_POINT, 0])) },
  { label: "P-256 compressed point one byte long", text: b64(ecSpki([...P256_COMPRESSED, 0])) },
  { label: "P-256 point form 05", text: b64(ecSpki([5, ...P256_POINT.subarray(1)])) },
  {
    label: "P-256 point in a BIT STRING with unused bits",
    text: b64(seq(ecAlgorithm(), tlv(0x03, [4], P256_POINT))),
  },
  {
    label: "explicit curve parameters (P-256 spelled out)",
    text: b64(ecSpki(P256_POINT, ecAlgorithm(EXPLICIT_P256))),
  },
  {
    label: "explicit curve parameters, point at infinity",
    text: b64(ecSpki([0], ecAlgorithm(EXPLICIT_P256))),
  },
  { label: "implicit curve (NULL parameters)", text: b64(ecSpki(P256_POINT, ecAlgorithm(NULL))) },
  { label: "EC key without curve parameters", text: b64(ecSpki(P256_POINT, seq(oid(OID.ec)))) },
  { label: "P-384 key", text: b64(ecSpki(p384.getPublicKey(), ecAlgorithm(oid(OID.p384)))) },
  { label: "P-384 point at infinity", text: b64(ecSpki([0], ecAlgorithm(oid(OID.p384)))) },
  {
    label: "secp256k1 OID with a P-256 point",
    text: b64(ecSpki(P256_POINT, ecAlgorithm(oid(OID.secp256k1)))),
  },
  {
    label: "P-256 key with trailing bytes",
    text: b64(Buffer.concat([ecSpki(P256_POINT), Buffer.from([0, 0])])),
  },
  {
    label: "point at infinity with trailing bytes",
    text: b64(Buffer.concat([INFINITY_SPKI, Buffer.from([0])])),
  },
  { label: "P-256 key, truncated", text: b64(ecSpki(P256_POINT).subarray(0, 60)) },
  {
    label: "P-256 key, length in long form (not DER)",
    text: b64(Buffer.concat([Buffer.from([0x30, 0x81, 0x59]), ecSpki(P256_POINT).subarray(2)])),
  },
  {
    label: "P-256 key, indefinite length (BER)",
    text: b64(
      Buffer.concat([Buffer.from([0x30, 0x80]), ecSpki(P256_POINT).subarray(2), Buffer.from([0, 0])]),
    ),
  },
  {
    label: "P-256 key, length claiming 16 MiB",
    text: b64(Buffer.concat([Buffer.from([0x30, 0x83, 0xff, 0xff, 0xff]), ecSpki(P256_POINT).subarray(2)])),
  },
  { label: "P-256 key with an extra element", text: b64(seq(ecAlgorithm(), bits(P256_POINT), NULL)) },
  {
    label: "P-256 key, algorithm OID misspelt",
    text: b64(ecSpki(P256_POINT, seq(oid("2a8648ce3d0202"), oid(OID.p256)))),
  },
  {
    label: "P-256 SEC1 private key with its point at infinity",
    text: pem("EC PRIVATE KEY", ecPrivate(P256_D, [0], oid(OID.p256))),
  },
  { label: "P-256 PKCS#8 private key", text: b64(ecPkcs8(P256_D, P256_POINT)) },
  { label: "P-256 PKCS#8 private key with its point at infinity", text: b64(ecPkcs8(P256_D, [0])) },
  { label: "point at infinity under an RSA PUBLIC KEY label", text: pem("RSA PUBLIC KEY", INFINITY_SPKI) },
  { label: "point at infinity under an EC PUBLIC KEY label", text: pem("EC PUBLIC KEY", INFINITY_SPKI) },
  {
    label: "two PEM blocks",
    text: `${pem("PUBLIC KEY", ecSpki(P256_POINT))}\n${pem("PUBLIC KEY", INFINITY_SPKI)}`,
  },
  {
    label: "RSA-1024 modulus",
    text: b64(rsaSpki(Buffer.concat([RSA_N.subarray(0, 127), Buffer.from([1])]))),
  },
  {
    label: "RSA-8200 modulus",
    text: b64(rsaSpki(Buffer.concat([Buffer.alloc(1, 0xff), Buffer.alloc(1024, 0xab), Buffer.from([0xff])]))),
  },
  { label: "RSA e = 3", text: b64(rsaSpki(RSA_N, [3])) },
  { label: "RSA e = 1", text: b64(rsaSpki(RSA_N, [1])) },
  { label: "RSA e = 65539", text: b64(rsaSpki(RSA_N, [1, 0, 3])) },
  { label: "RSA e = 0", text: b64(seq(seq(oid(OID.rsa), NULL), bits(seq(int(RSA_N), tlv(0x02, [0]))))) },
  {
    label: "RSA e negative",
    text: b64(seq(seq(oid(OID.rsa), NULL), bits(seq(int(RSA_N), tlv(0x02, [0xff, 0, 1]))))),
  },
  {
    label: "RSA even modulus",
    text: b64(rsaSpki(Buffer.concat([RSA_N.subarray(0, 255), Buffer.from([2])]))),
  },
  {
    label: "RSA negative modulus",
    text: b64(seq(seq(oid(OID.rsa), NULL), bits(seq(tlv(0x02, RSA_N), int([1, 0, 1]))))),
  },
  {
    label: "RSA modulus padded with a zero byte",
    text: b64(seq(seq(oid(OID.rsa), NULL), bits(seq(tlv(0x02, [0, 0], RSA_N), int([1, 0, 1]))))),
  },
  {
    label: "RSA modulus of zero",
    text: b64(seq(seq(oid(OID.rsa), NULL), bits(seq(tlv(0x02, [0]), int([1, 0, 1]))))),
  },
  { label: "RSA without NULL parameters", text: b64(rsaSpki(RSA_N, [1, 0, 1], seq(oid(OID.rsa)))) },
  { label: "RSA-PSS algorithm", text: b64(rsaSpki(RSA_N, [1, 0, 1], seq(oid(OID.rsaPss)))) },
  {
    label: "RSA key with trailing bytes",
    text: b64(Buffer.concat([Buffer.from(RSA_FIXTURE.spki, "base64"), Buffer.from([0])])),
  },
  { label: "RSA key, truncated", text: b64(Buffer.from(RSA_FIXTURE.spki, "base64").subarray(0, 200)) },
  { label: "RSA PKCS#8 private key", text: RSA_FIXTURE.pkcs8 },
  {
    label: "RSA PKCS#1 private key under an RSA PUBLIC KEY label",
    text: pem("RSA PUBLIC KEY", rsaPrivate()),
  },
  { label: "Ed25519 key", text: b64(edSpki(Buffer.from(ED25519_RAW, "base64url"))) },
  { label: "X25519 key", text: b64(edSpki(Buffer.alloc(32, 9), seq(oid(OID.x25519)))) },
  { label: "Ed448 key", text: b64(edSpki(Buffer.alloc(57, 1), seq(oid(OID.ed448)))) },
  {
    label: "DSA key",
    text: b64(seq(seq(oid(OID.dsa), seq(int([0x17]), int([0x0b]), int([2]))), bits(int([3])))),
  },
  { label: "empty OBJECT IDENTIFIER", text: b64(seq(seq(tlv(0x06)), bits(P256_POINT))) },
  { label: "a certificate PEM", text: pem("CERTIFICATE", ecSpki(P256_POINT)) },
  { label: "encrypted PEM", text: pem("ENCRYPTED PRIVATE KEY", ecSpki(P256_POINT)) },
  { label: "base64 that is not DER", text: Buffer.from("not a key at all").toString("base64") },
  { label: "bad base64", text: "!!!!" },
  { label: "empty DER sequence", text: b64(seq()) },
  { label: "20,000 characters", text: "A".repeat(20_000) },
];

const RSA_PKCS8_DER = Buffer.from(RSA_FIXTURE.pkcs8, "base64");

/** Private keys for the decrypt endpoints (and configured escrow keys): all refused. */
export const HOSTILE_PRIVATE_KEYS: readonly HostileKey[] = [
  {
    label: "PKCS#8 P-256 key whose point is at infinity",
    text: b64(ecPkcs8(P256_D, [0])),
    abortsNode: true,
  },
  {
    label: "PKCS#8 P-256 key whose point is at infinity, PEM",
    text: pem("PRIVATE KEY", ecPkcs8(P256_D, [0])),
    abortsNode: true,
  },
  {
    label: "SEC1 P-256 key whose point is at infinity",
    text: pem("EC PRIVATE KEY", ecPrivate(P256_D, [0], oid(OID.p256))),
    abortsNode: true,
  },
  {
    label: "PKCS#8 P-256 key, scalar 0 and point at infinity",
    text: b64(ecPkcs8(Buffer.alloc(32), [0])),
    abortsNode: true,
  },
  { label: "PKCS#8 P-256 key with an empty point", text: b64(ecPkcs8(P256_D, [])) },
  {
    label: "PKCS#8 P-256 key with its point off the curve",
    text: b64(ecPkcs8(P256_D, [...P256_POINT.subarray(0, 64), (P256_POINT[64] ?? 0) ^ 1])),
  },
  {
    label: "PKCS#8 P-256 key with a hybrid point",
    text: b64(ecPkcs8(P256_D, [6 + ((P256_POINT[64] ?? 0) & 1), ...P256_POINT.subarray(1)])),
  },
  { label: "PKCS#8 P-256 scalar 0", text: b64(ecPkcs8(Buffer.alloc(32))) },
  { label: "PKCS#8 P-256 scalar n", text: b64(ecPkcs8(be(N, 32))) },
  { label: "PKCS#8 P-256 scalar n + 1", text: b64(ecPkcs8(be(N + 1n, 32))) },
  { label: "PKCS#8 P-256 scalar 2^256 - 1", text: b64(ecPkcs8(Buffer.alloc(32, 0xff))) },
  { label: "PKCS#8 P-256 scalar of 31 bytes", text: b64(ecPkcs8(P256_D.subarray(1))) },
  { label: "PKCS#8 P-256 scalar of 33 bytes", text: b64(ecPkcs8(Buffer.concat([Buffer.from([0]), P256_D]))) },
  {
    label: "PKCS#8 explicit curve parameters",
    text: b64(ecPkcs8(P256_D, P256_POINT, ecAlgorithm(EXPLICIT_P256))),
  },
  {
    label: "PKCS#8 P-384 key",
    text: b64(seq(int([0]), ecAlgorithm(oid(OID.p384)), octets(ecPrivate(Buffer.alloc(48, 7))))),
  },
  { label: "PKCS#8 secp256k1 OID", text: b64(ecPkcs8(P256_D, P256_POINT, ecAlgorithm(oid(OID.secp256k1)))) },
  {
    label: "PKCS#8 version 1 with attributes",
    text: b64(seq(int([1]), ecAlgorithm(), octets(ecPrivate(P256_D, P256_POINT)), tlv(0xa0))),
  },
  {
    label: "PKCS#8 with trailing bytes",
    text: b64(Buffer.concat([ecPkcs8(P256_D, P256_POINT), Buffer.from([0])])),
  },
  { label: "PKCS#8 truncated", text: b64(ecPkcs8(P256_D, P256_POINT).subarray(0, 50)) },
  { label: "SEC1 without its curve", text: pem("EC PRIVATE KEY", ecPrivate(P256_D, P256_POINT)) },
  {
    label: "SEC1 on P-384",
    text: pem("EC PRIVATE KEY", ecPrivate(Buffer.alloc(48, 7), p384.getPublicKey(), oid(OID.p384))),
  },
  {
    label: "SEC1 explicit parameters",
    text: pem("EC PRIVATE KEY", ecPrivate(P256_D, P256_POINT, EXPLICIT_P256)),
  },
  {
    label: "SEC1 version 2",
    text: pem("EC PRIVATE KEY", seq(int([2]), octets(P256_D), tlv(0xa0, oid(OID.p256)))),
  },
  { label: "RSA multi-prime (version 1)", text: b64(rsaPkcs8(rsaPrivate(() => {}, [1]))) },
  {
    label: "RSA e = 3 private key",
    text: b64(
      rsaPkcs8(
        rsaPrivate((f) => {
          f.e = Buffer.from([3]);
        }),
      ),
    ),
  },
  { label: "RSA PKCS#8 with trailing bytes", text: b64(Buffer.concat([RSA_PKCS8_DER, Buffer.from([0, 0])])) },
  { label: "RSA PKCS#8 truncated", text: b64(RSA_PKCS8_DER.subarray(0, 400)) },
  { label: "RSA PKCS#1 under a PRIVATE KEY label", text: pem("PRIVATE KEY", rsaPrivate()) },
  { label: "a public key (SPKI)", text: b64(ecSpki(P256_POINT)) },
  { label: "the point at infinity public key", text: b64(INFINITY_SPKI) },
  {
    label: "Ed25519 private key",
    text: b64(seq(int([0]), seq(oid(OID.ed25519)), octets(octets(Buffer.alloc(32, 1))))),
  },
  { label: "bad base64", text: "%%%" },
  { label: "20,000 characters", text: "A".repeat(20_000) },
];

/** The Ed25519 encodings of small order, as libsodium blocks them (each y also with the sign bit set). */
export const ED25519_SMALL_ORDER = [
  "0000000000000000000000000000000000000000000000000000000000000000",
  "0100000000000000000000000000000000000000000000000000000000000000",
  "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
  "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
  "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
].flatMap((hex) => {
  const signed = Buffer.from(hex, "hex");
  signed[31] = (signed[31] ?? 0) | 0x80;
  return [hex, signed.toString("hex")];
});

/** An Ed25519 y with no point on the curve ((y^2 - 1) / (d y^2 + 1) is not a square). */
const ED_OFF_CURVE = (() => {
  const p = 2n ** 255n - 19n;
  const d = (((-121665n * modPow(121666n, p - 2n, p)) % p) + p) % p;
  for (let y = 2n; ; y++) {
    const u = (y * y - 1n) % p;
    const v = (d * y * y + 1n) % p;
    if (modPow((u * modPow(v, p - 2n, p)) % p, (p - 1n) / 2n, p) === p - 1n) {
      return Buffer.from(y.toString(16).padStart(64, "0"), "hex").reverse();
    }
  }
})();

const ED_RAW = Buffer.from(ED25519_RAW, "base64url");

/** Keys for the merchant signing-key endpoint (Ed25519 expected): all refused. */
export const HOSTILE_SIGNING_KEYS: readonly HostileKey[] = [
  ...ED25519_SMALL_ORDER.map((hex) => ({
    label: `small-order point ${hex.slice(0, 8)}..${hex.slice(-2)}`,
    text: Buffer.from(hex, "hex").toString("base64"),
  })),
  { label: "small-order point in an SPKI", text: b64(edSpki(Buffer.alloc(32))) },
  {
    label: "y = p + 2 (not canonical)",
    text: b64(edSpki(Buffer.from("efffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", "hex"))),
  },
  { label: "y = 2^255 - 1 (not canonical)", text: b64(edSpki(Buffer.from(`${"ff".repeat(31)}7f`, "hex"))) },
  { label: "y with no point on the curve", text: b64(edSpki(ED_OFF_CURVE)) },
  { label: "y with no point on the curve, raw", text: ED_OFF_CURVE.toString("base64") },
  { label: "31 raw bytes", text: ED_RAW.subarray(1).toString("base64") },
  { label: "33 raw bytes", text: Buffer.concat([ED_RAW, Buffer.from([0])]).toString("base64") },
  { label: "Ed25519 SPKI with NULL parameters", text: b64(edSpki(ED_RAW, seq(oid(OID.ed25519), NULL))) },
  { label: "Ed25519 SPKI with a 31-byte key", text: b64(edSpki(ED_RAW.subarray(1))) },
  { label: "Ed25519 SPKI with trailing bytes", text: b64(Buffer.concat([edSpki(ED_RAW), Buffer.from([0])])) },
  { label: "Ed448 key", text: b64(edSpki(Buffer.alloc(57, 1), seq(oid(OID.ed448)))) },
  { label: "X25519 key", text: b64(edSpki(ED_RAW, seq(oid(OID.x25519)))) },
  { label: "P-256 point at infinity", text: b64(INFINITY_SPKI), abortsNode: true },
  { label: "P-256 key", text: b64(ecSpki(P256_POINT)) },
  { label: "raw key under a PEM label", text: pem("PUBLIC KEY", ED_RAW) },
  {
    label: "Ed25519 private key PEM",
    text: pem("PRIVATE KEY", seq(int([0]), seq(oid(OID.ed25519)), octets(octets(Buffer.alloc(32, 1))))),
  },
  { label: "bad base64", text: "@@@@" },
];

/** Valid keys made from the same material: each must be accepted where its kind is taken. */
export const VALID_KEYS = {
  p256Spki: b64(ecSpki(P256_POINT)),
  p256CompressedSpki: b64(ecSpki(P256_COMPRESSED)),
  p256Pkcs8: b64(ecPkcs8(P256_D, P256_POINT)),
  p256Pkcs8WithoutPoint: b64(ecPkcs8(P256_D)),
  p256Sec1Pem: pem("EC PRIVATE KEY", ecPrivate(P256_D, P256_POINT, oid(OID.p256))),
  rsaSpki: RSA_FIXTURE.spki,
  rsaPkcs8: RSA_FIXTURE.pkcs8,
  ed25519Raw: ED_RAW.toString("base64"),
  ed25519Spki: b64(edSpki(ED_RAW)),
} as const;
