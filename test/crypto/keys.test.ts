import { createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import {
  generateRsaKeyPair,
  PublicKeyCache,
  parsePrivateKey,
  parsePublicKey,
  type RsaKeyPair,
  spkiOfPrivateKey,
} from "../../src/crypto/keys.js";
import { AppError } from "../../src/errors.js";

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

let pair: RsaKeyPair;
beforeAll(async () => {
  pair = await generateRsaKeyPair();
});

/** The AppError `fn` throws; fails the test if it throws anything else or nothing. */
function appErrorOf(fn: () => unknown): AppError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(AppError);
    return error as AppError;
  }
  throw new Error("expected an AppError");
}

/** Asserts `invalid_request` on `field` with `description`, and that no part of `input` leaks. */
function expectKeyRejected(
  fn: () => unknown,
  input: string,
  field: string,
  description: string | RegExp,
): void {
  const error = appErrorOf(fn);
  expect(error.code).toBe("invalid_request");
  expect(error.violations).toHaveLength(1);
  expect(error.violations[0]?.field).toBe(field);
  expect(error.violations[0]?.description).toMatch(description);
  const shown = JSON.stringify({
    message: error.message,
    violations: error.violations,
    details: error.details,
  });
  const compact = input.replace(/-----[A-Z0-9 ]+-----|\s/g, "");
  for (let i = 0; i + 16 <= compact.length; i += 16) expect(shown).not.toContain(compact.slice(i, i + 16));
}

function spkiBase64(key: ReturnType<typeof createPublicKey>): string {
  return key.export({ type: "spki", format: "der" }).toString("base64");
}

describe("generateRsaKeyPair", () => {
  it("returns base64 DER SPKI and PKCS#8 without PEM armour", () => {
    for (const value of [pair.publicKey, pair.privateKey]) {
      expect(value).toMatch(BASE64);
      expect(value).not.toContain("-----");
    }
    const publicKey = createPublicKey({
      key: Buffer.from(pair.publicKey, "base64"),
      format: "der",
      type: "spki",
    });
    const privateKey = createPrivateKey({
      key: Buffer.from(pair.privateKey, "base64"),
      format: "der",
      type: "pkcs8",
    });
    expect(spkiBase64(publicKey)).toBe(pair.publicKey);
    expect(privateKey.export({ type: "pkcs8", format: "der" }).toString("base64")).toBe(pair.privateKey);
  });

  it("makes RSA-2048 keys with exponent 65537 whose halves belong together", () => {
    const publicKey = createPublicKey({
      key: Buffer.from(pair.publicKey, "base64"),
      format: "der",
      type: "spki",
    });
    expect(publicKey.asymmetricKeyType).toBe("rsa");
    expect(publicKey.asymmetricKeyDetails).toEqual({ modulusLength: 2048, publicExponent: 65537n });
    expect(spkiOfPrivateKey(parsePrivateKey(pair.privateKey))).toBe(pair.publicKey);
  });

  it("makes a different pair every time", async () => {
    const other = await generateRsaKeyPair();
    expect(other.publicKey).not.toBe(pair.publicKey);
  });

  it("does not block the event loop while generating", async () => {
    let spins = 0;
    let spinning = true;
    const spin = () => {
      spins++;
      if (spinning) setImmediate(spin);
    };
    setImmediate(spin);
    await Promise.all([generateRsaKeyPair(), generateRsaKeyPair()]);
    spinning = false;
    expect(spins).toBeGreaterThan(5);
  });
});

describe("parsePublicKey", () => {
  it("accepts base64 DER SPKI and returns it unchanged as the canonical form", () => {
    const parsed = parsePublicKey(pair.publicKey);
    expect(parsed.spki).toBe(pair.publicKey);
    expect(parsed.key.type).toBe("public");
  });

  it("accepts PEM (SPKI and PKCS#1) and MIME-wrapped base64, all to the same SPKI", () => {
    const key = createPublicKey({ key: Buffer.from(pair.publicKey, "base64"), format: "der", type: "spki" });
    const spkiPem = key.export({ type: "spki", format: "pem" }).toString();
    const pkcs1Pem = key.export({ type: "pkcs1", format: "pem" }).toString();
    expect(spkiPem).toContain("BEGIN PUBLIC KEY");
    expect(pkcs1Pem).toContain("BEGIN RSA PUBLIC KEY");
    const wrapped = pair.publicKey.replace(/(.{64})/g, "$1\n");
    for (const input of [spkiPem, pkcs1Pem, `  ${spkiPem}\n`, spkiPem.replace(/\n/g, "\r\n"), wrapped]) {
      expect(parsePublicKey(input).spki).toBe(pair.publicKey);
    }
  });

  it("rejects keys that are neither RSA nor EC P-256, saying which are accepted", () => {
    const ec = generateKeyPairSync("ec", { namedCurve: "P-384" }).publicKey;
    const ed25519 = generateKeyPairSync("ed25519").publicKey;
    const ecDer = spkiBase64(ec);
    const edPem = ed25519.export({ type: "spki", format: "pem" }).toString();
    const accepted = /must be an RSA \(2048 bits or more, exponent 65537\) or EC P-256 key/;
    expectKeyRejected(() => parsePublicKey(ecDer), ecDer, "publicKey", accepted);
    expectKeyRejected(() => parsePublicKey(edPem), edPem, "publicKey", accepted);
  });

  it("rejects RSA-PSS keys, which cannot encrypt", () => {
    const pss = spkiBase64(generateKeyPairSync("rsa-pss", { modulusLength: 2048 }).publicKey);
    expectKeyRejected(() => parsePublicKey(pss), pss, "publicKey", /not RSA-PSS/);
  });

  it("rejects RSA keys under 2048 bits and over 8192 bits", () => {
    const small = spkiBase64(generateKeyPairSync("rsa", { modulusLength: 1024 }).publicKey);
    expectKeyRejected(() => parsePublicKey(small), small, "publicKey", "must be at least 2048 bits");
    // A public key only needs a modulus to parse, so a 9000-bit one is made without generating primes.
    const modulus = randomBytes(1125);
    modulus[0] = (modulus[0] ?? 0) | 0x80;
    const n = modulus.toString("base64url");
    const huge = spkiBase64(createPublicKey({ key: { kty: "RSA", n, e: "AQAB" }, format: "jwk" }));
    expectKeyRejected(() => parsePublicKey(huge), huge, "publicKey", "must be at most 8192 bits");
  });

  it("rejects garbage, bad base64, truncated DER and DER with trailing junk", () => {
    const der = Buffer.from(pair.publicKey, "base64");
    const inputs = [
      "",
      "hello world",
      "not base64 at all!!",
      `${pair.publicKey.slice(0, -4)}@@@@`,
      der.subarray(0, der.length - 10).toString("base64"),
      Buffer.concat([der, Buffer.from([0, 0, 0])]).toString("base64"),
      `-----BEGIN PUBLIC KEY-----\n${pair.publicKey}\n-----END RSA PUBLIC KEY-----`,
      `-----BEGIN CERTIFICATE-----\n${pair.publicKey}\n-----END CERTIFICATE-----`,
      "A".repeat(20_000),
    ];
    for (const input of inputs) {
      expectKeyRejected(
        () => parsePublicKey(input),
        input,
        "publicKey",
        "must be an RSA (2048 bits or more, exponent 65537) or EC P-256 public key: base64 DER SubjectPublicKeyInfo or PEM",
      );
    }
  });

  it("rejects a private key sent as a public key, in every encoding", () => {
    const key = parsePrivateKey(pair.privateKey);
    const pkcs8Pem = key.export({ type: "pkcs8", format: "pem" }).toString();
    const pkcs1Pem = key.export({ type: "pkcs1", format: "pem" }).toString();
    const pkcs1Der = key.export({ type: "pkcs1", format: "der" }).toString("base64");
    // Node's createPublicKey would quietly derive the public half of a PKCS#1 private key.
    const disguised = `-----BEGIN RSA PUBLIC KEY-----\n${pkcs1Der}\n-----END RSA PUBLIC KEY-----`;
    for (const input of [pair.privateKey, pkcs8Pem, pkcs1Pem, pkcs1Der, disguised]) {
      expectKeyRejected(() => parsePublicKey(input), input, "publicKey", /never send a private key/);
    }
  });

  it("names the caller's field in the violation", () => {
    expectKeyRejected(() => parsePublicKey("junk", "keys[0].publicKey"), "junk", "keys[0].publicKey", /RSA/);
  });
});

describe("parsePrivateKey", () => {
  it("accepts base64 DER PKCS#8 and PEM (PKCS#8 and PKCS#1)", () => {
    const key = parsePrivateKey(pair.privateKey);
    expect(key.type).toBe("private");
    const pkcs8Pem = key.export({ type: "pkcs8", format: "pem" }).toString();
    const pkcs1Pem = key.export({ type: "pkcs1", format: "pem" }).toString();
    for (const input of [pkcs8Pem, pkcs1Pem]) {
      expect(spkiOfPrivateKey(parsePrivateKey(input))).toBe(pair.publicKey);
    }
  });

  it("rejects public keys, keys of no suite, encrypted keys and garbage without echoing them", () => {
    const ec = generateKeyPairSync("ec", { namedCurve: "P-384" }).privateKey;
    const ecDer = ec.export({ type: "pkcs8", format: "der" }).toString("base64");
    const encrypted = parsePrivateKey(pair.privateKey)
      .export({ type: "pkcs8", format: "pem", cipher: "aes-256-cbc", passphrase: "secret" })
      .toString();
    const truncated = pair.privateKey.slice(0, 400);
    const format =
      "must be an RSA (2048 bits or more, exponent 65537) or EC P-256 private key: base64 DER PKCS#8 or PEM";
    expectKeyRejected(() => parsePrivateKey(ecDer), ecDer, "privateKey", /on another curve/);
    for (const input of [pair.publicKey, encrypted, truncated, "garbage", ""]) {
      expectKeyRejected(() => parsePrivateKey(input), input, "privateKey", format);
    }
  });
});

describe("PublicKeyCache", () => {
  it("parses a key once and returns the same KeyObject afterwards", () => {
    const cache = new PublicKeyCache();
    const first = cache.get("key-1", pair.publicKey);
    expect(cache.get("key-1", pair.publicKey)).toBe(first);
    expect(spkiBase64(first)).toBe(pair.publicKey);
    expect(cache.size).toBe(1);
  });

  it("evicts the least recently used entry beyond its bound", () => {
    const cache = new PublicKeyCache(2);
    const a = cache.get("a", pair.publicKey);
    const b = cache.get("b", pair.publicKey);
    cache.get("a", pair.publicKey);
    cache.get("c", pair.publicKey);
    expect(cache.size).toBe(2);
    expect(cache.get("a", pair.publicKey)).toBe(a);
    expect(cache.get("b", pair.publicKey)).not.toBe(b);
    expect(cache.size).toBe(2);
  });

  it("never returns an entry for other key material under the same keyId", async () => {
    const other = await generateRsaKeyPair();
    const cache = new PublicKeyCache();
    const first = cache.get("key-1", pair.publicKey);
    const changed = cache.get("key-1", other.publicKey);
    expect(spkiBase64(changed)).toBe(other.publicKey);
    expect(spkiBase64(cache.get("key-1", pair.publicKey))).toBe(pair.publicKey);
    expect(cache.get("key-1", pair.publicKey)).not.toBe(first);
    expect(cache.size).toBe(1);
  });

  it("gives the modulus size of the very SPKI asked for, read once per parsed key", () => {
    const der = (bits: number) =>
      generateKeyPairSync("rsa", { modulusLength: bits })
        .publicKey.export({ format: "der", type: "spki" })
        .toString("base64");
    const [small, large] = [der(2048), der(3072)];
    const ec = generateKeyPairSync("ec", { namedCurve: "P-256" })
      .publicKey.export({ format: "der", type: "spki" })
      .toString("base64");
    const cache = new PublicKeyCache();
    // The same keyId with other material each time: a size remembered by keyId alone would be wrong.
    for (const [spki, bits] of [
      [small, 2048],
      [small, 2048],
      [large, 3072],
      [large, 3072],
      [small, 2048],
      [ec, undefined],
      [large, 3072],
    ] as const) {
      expect(cache.modulusBits("key-1", spki)).toBe(bits);
      expect(cache.modulusBits("key-1", spki)).toBe(
        cache.get("key-1", spki).asymmetricKeyDetails?.modulusLength,
      );
    }
    expect(cache.size).toBe(1);
  });

  it("refuses a stored key that does not parse instead of caching it", () => {
    const cache = new PublicKeyCache();
    expect(appErrorOf(() => cache.get("k", "junk")).code).toBe("invalid_request");
    expect(cache.size).toBe(0);
  });
});
