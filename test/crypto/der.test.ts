import { createPrivateKey, createPublicKey, generateKeyPairSync } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  rsaPrivateJwkFromPkcs1,
  rsaPrivateJwkFromPkcs8,
  rsaPublicJwkFromPkcs1,
  rsaPublicJwkFromSpki,
} from "../../src/crypto/der.js";
import { parsePrivateKey, parsePublicKey, privateKeyMatches } from "../../src/crypto/keys.js";

/**
 * The DER fast path must be invisible: for the keys it reads, the same key as OpenSSL's parser; for
 * anything else, a fallback to OpenSSL (never a key OpenSSL would refuse, never a different key).
 */

function pair(bits: number) {
  const { publicKey, privateKey } = generateKeyPairSync("rsa", {
    modulusLength: bits,
    publicExponent: 65537,
  });
  return {
    pkcs8: privateKey.export({ type: "pkcs8", format: "der" }),
    pkcs1: privateKey.export({ type: "pkcs1", format: "der" }),
    spki: publicKey.export({ type: "spki", format: "der" }),
    pkcs1Public: publicKey.export({ type: "pkcs1", format: "der" }),
  };
}

const keys = [pair(2048), pair(2048), pair(3072)];
const [first, second] = keys as [ReturnType<typeof pair>, ReturnType<typeof pair>];

function jwkKey(jwk: ReturnType<typeof rsaPrivateJwkFromPkcs8>) {
  if (jwk === undefined) throw new Error("declined");
  return createPrivateKey({ key: jwk, format: "jwk" });
}

/** A DER element with a minimal length. */
function tlv(tag: number, content: Buffer): Buffer {
  const length = content.length;
  const header =
    length < 0x80
      ? Buffer.from([tag, length])
      : length < 0x100
        ? Buffer.from([tag, 0x81, length])
        : Buffer.from([tag, 0x82, length >> 8, length & 0xff]);
  return Buffer.concat([header, content]);
}

/** The rsaEncryption AlgorithmIdentifier: the OID and NULL parameters. */
const rsaAlgorithm = Buffer.from("300d06092a864886f70d0101010500", "hex");

function sequence(...items: Buffer[]): Buffer {
  return tlv(0x30, Buffer.concat(items));
}

/**
 * An INTEGER of the unsigned `magnitude`: canonical (a leading zero byte when its top bit is set), or
 * with `negative` the same bytes without that zero, which DER reads as a negative number.
 */
function integer(magnitude: Buffer, options: { negative?: boolean } = {}): Buffer {
  const padded = ((magnitude[0] as number) & 0x80) !== 0 && !options.negative;
  return tlv(0x02, padded ? Buffer.concat([Buffer.from([0]), magnitude]) : magnitude);
}

describe("RSA DER fast path", () => {
  it("reads PKCS#8, PKCS#1, SPKI and RSAPublicKey into the same keys OpenSSL reads", () => {
    for (const k of keys) {
      const openssl = createPrivateKey({ key: k.pkcs8, format: "der", type: "pkcs8" });
      expect(jwkKey(rsaPrivateJwkFromPkcs8(k.pkcs8)).equals(openssl)).toBe(true);
      expect(jwkKey(rsaPrivateJwkFromPkcs1(k.pkcs1)).equals(openssl)).toBe(true);
      const publicKey = createPublicKey({ key: k.spki, format: "der", type: "spki" });
      for (const jwk of [rsaPublicJwkFromSpki(k.spki), rsaPublicJwkFromPkcs1(k.pkcs1Public)]) {
        expect(jwk).toBeDefined();
        expect(createPublicKey({ key: jwk ?? {}, format: "jwk" }).equals(publicKey)).toBe(true);
      }
    }
  });

  it("keeps the canonical SPKI and the key checks of parsePublicKey and parsePrivateKey", () => {
    for (const k of keys) {
      const spki = k.spki.toString("base64");
      expect(parsePublicKey(spki).spki).toBe(spki);
      const pem = `-----BEGIN RSA PUBLIC KEY-----\n${k.pkcs1Public.toString("base64")}\n-----END RSA PUBLIC KEY-----`;
      expect(parsePublicKey(pem).spki).toBe(spki);
      const privateKey = parsePrivateKey(k.pkcs8.toString("base64"));
      expect(privateKey.asymmetricKeyType).toBe("rsa");
      expect(privateKeyMatches(privateKey, spki)).toBe(true);
    }
    expect(
      privateKeyMatches(parsePrivateKey(first.pkcs8.toString("base64")), second.spki.toString("base64")),
    ).toBe(false);
    expect(privateKeyMatches(parsePrivateKey(first.pkcs8.toString("base64")), "bm90IGEga2V5")).toBe(false);
    expect(() => parsePublicKey(first.pkcs1.toString("base64"))).toThrow(
      expect.objectContaining({
        violations: [
          { field: "publicKey", description: "must be a public key; never send a private key here" },
        ],
      }),
    );
  });

  it("declines non-canonical encodings: trailing bytes, long-form short lengths, padded integers, p*q != n", () => {
    const der = first.pkcs1;
    expect(rsaPrivateJwkFromPkcs1(Buffer.concat([der, Buffer.from([0])]))).toBeUndefined();
    // The version INTEGER 0 written with a leading zero byte: 02 02 00 00.
    const padded = Buffer.from(der);
    const versionAt = 4;
    expect(padded.subarray(versionAt, versionAt + 3)).toEqual(Buffer.from([2, 1, 0]));
    expect(
      rsaPrivateJwkFromPkcs1(
        Buffer.concat([
          padded.subarray(0, versionAt),
          Buffer.from([2, 2, 0, 0]),
          padded.subarray(versionAt + 3),
        ]),
      ),
    ).toBeUndefined();
    // A changed byte of p breaks p * q = n.
    const jwk = rsaPrivateJwkFromPkcs1(der);
    const p = Buffer.from(jwk?.p ?? "", "base64url");
    const at = der.indexOf(p);
    const broken = Buffer.from(der);
    broken[at + 10] = (broken[at + 10] as number) ^ 1;
    expect(rsaPrivateJwkFromPkcs1(broken)).toBeUndefined();
    expect(rsaPublicJwkFromSpki(first.pkcs8)).toBeUndefined();
    expect(rsaPrivateJwkFromPkcs8(first.spki)).toBeUndefined();
  });

  it("declines a negative INTEGER: a modulus, prime or exponent written without its leading zero byte", () => {
    // DER INTEGERs are two's complement: an RSA value whose top bit is set needs a leading 0x00, and
    // without it the same bytes are a negative number. Read as a bare magnitude it would be the same
    // key, so only the sign check can refuse it.
    const jwk = rsaPrivateJwkFromPkcs1(first.pkcs1);
    if (jwk === undefined) throw new Error("declined");
    const magnitude = (name: string) => Buffer.from(jwk[name as keyof typeof jwk] as string, "base64url");
    const publicKey = (n: Buffer, negative = false) =>
      sequence(integer(n, { negative }), integer(magnitude("e")));
    const spki = (rsaPublicKey: Buffer) =>
      sequence(rsaAlgorithm, tlv(0x03, Buffer.concat([Buffer.from([0]), rsaPublicKey])));
    const pkcs8 = (rsaPrivateKey: Buffer) =>
      sequence(integer(Buffer.from([0])), rsaAlgorithm, tlv(0x04, rsaPrivateKey));
    const n = magnitude("n");
    expect((n[0] as number) & 0x80).not.toBe(0);
    // The builder itself writes the canonical encodings: OpenSSL's bytes, read as before.
    expect(publicKey(n)).toEqual(first.pkcs1Public);
    expect(spki(publicKey(n))).toEqual(first.spki);
    expect(rsaPublicJwkFromPkcs1(publicKey(n))).toEqual({ kty: "RSA", n: jwk.n, e: jwk.e });
    // The modulus as a negative INTEGER.
    const negative = publicKey(n, true);
    expect(rsaPublicJwkFromPkcs1(negative)).toBeUndefined();
    expect(rsaPublicJwkFromSpki(spki(negative))).toBeUndefined();

    const fields = ["n", "e", "d", "p", "q", "dp", "dq", "qi"];
    const privateKey = (negativeField?: string) =>
      sequence(
        integer(Buffer.from([0])),
        ...fields.map((name) => integer(magnitude(name), { negative: name === negativeField })),
      );
    expect(privateKey()).toEqual(first.pkcs1);
    expect(pkcs8(privateKey())).toEqual(first.pkcs8);
    const signed = fields.filter((name) => (magnitude(name)[0] as number) & 0x80);
    // n, p and q are full-width, so their top bit is always set; the others when they happen to be.
    expect(signed).toEqual(expect.arrayContaining(["n", "p", "q"]));
    for (const name of signed) {
      const der = privateKey(name);
      expect(rsaPrivateJwkFromPkcs1(der), name).toBeUndefined();
      expect(rsaPrivateJwkFromPkcs8(pkcs8(der)), name).toBeUndefined();
    }
  });

  it("never reads a mutated key differently from OpenSSL", () => {
    const der = first.pkcs8;
    fc.assert(
      fc.property(
        fc.array(fc.record({ at: fc.nat({ max: der.length - 1 }), byte: fc.nat({ max: 255 }) }), {
          minLength: 1,
          maxLength: 3,
        }),
        (edits) => {
          const mutated = Buffer.from(der);
          for (const { at, byte } of edits) mutated[at] = byte;
          const jwk = rsaPrivateJwkFromPkcs8(mutated);
          if (jwk === undefined) return;
          const openssl = createPrivateKey({ key: mutated, format: "der", type: "pkcs8" });
          expect(createPrivateKey({ key: jwk, format: "jwk" }).equals(openssl)).toBe(true);
        },
      ),
      { numRuns: 500 },
    );
  });
});
