import { createECDH, createPublicKey, generateKeyPairSync, type KeyObject } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  generateP256KeyPair,
  keyAlgorithmOf,
  parsePrivateKey,
  parsePublicKey,
  privateKeyMatches,
  spkiOfPrivateKey,
} from "../../src/crypto/keys.js";
import {
  HPKE_P256,
  isKeyAlgorithm,
  KEY_ALGORITHMS,
  RSA_OAEP_256,
  wrappedKeySizes,
} from "../../src/crypto/suites.js";
import { checkWrappedKey } from "../../src/crypto/wrapped-key.js";
import { AppError } from "../../src/errors.js";

/** RSA and P-256 keys, each inferred as its suite; everything else refused clearly. */

const der = (key: KeyObject, type: "spki" | "pkcs8") =>
  key.export({ type, format: "der" } as never).toString("base64");
const pem = (key: KeyObject, type: "spki" | "pkcs8" | "sec1") =>
  key.export({ type, format: "pem" } as never).toString();

const p256 = generateKeyPairSync("ec", { namedCurve: "P-256" });
const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 });

function appErrorOf(fn: () => unknown): AppError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(AppError);
    return error as AppError;
  }
  throw new Error("expected an AppError");
}

/** invalid_request on exactly `field`, matching `description`, not quoting any 16 characters of `input`. */
function expectRefused(fn: () => unknown, input: string, field: string, description: RegExp): void {
  const error = appErrorOf(fn);
  expect(error.code).toBe("invalid_request");
  expect(error.violations.map((v) => v.field)).toEqual([field]);
  expect(error.violations[0]?.description).toMatch(description);
  const shown = JSON.stringify({ message: error.message, details: error.details });
  const compact = input.replace(/-----[A-Z0-9 ]+-----|\s/g, "");
  for (let i = 0; i + 16 <= compact.length; i += 16) expect(shown).not.toContain(compact.slice(i, i + 16));
}

describe("suite names", () => {
  it("are the two, spelled exactly", () => {
    expect(KEY_ALGORITHMS).toEqual(["RSA-OAEP-256", "HPKE-P256-SHA256-A256GCM"]);
    for (const name of KEY_ALGORITHMS) expect(isKeyAlgorithm(name)).toBe(true);
    for (const name of ["rsa-oaep-256", "HPKE", "", undefined, 1, "RSA-OAEP"]) {
      expect(isKeyAlgorithm(name)).toBe(false);
    }
  });

  it("are recognised as a property look-up of the suites recognised them, in strings fresh from bytes", () => {
    // The definition before the names were compared: an own property of a table of the suites.
    const table: Record<string, unknown> = Object.fromEntries(KEY_ALGORITHMS.map((name) => [name, true]));
    const byLookUp = (value: string) => Object.hasOwn(table, value);
    // As a request's decoder gives them: strings made from bytes, never internalized.
    const fresh = (value: string) => Buffer.from(value, "utf8").toString("utf8");
    const near = fc.constantFrom(...KEY_ALGORITHMS, "toString", "__proto__", "constructor", "hasOwnProperty");
    // Any string, and the names themselves with one character replaced, inserted or deleted.
    const names = fc.oneof(
      fc.string(),
      near,
      fc
        .tuple(near, fc.nat(30), fc.string({ minLength: 1, maxLength: 1 }), fc.constantFrom(0, 1))
        .map(([name, at, char, drop]) => {
          const cut = at % (name.length + 1);
          return name.slice(0, cut) + char + name.slice(cut + drop);
        }),
      near.map((name) => name.slice(0, -1)),
    );
    fc.assert(
      fc.property(names, (name) => {
        expect(isKeyAlgorithm(fresh(name))).toBe(byLookUp(name));
      }),
      { numRuns: 2000 },
    );
    for (const name of KEY_ALGORITHMS) expect(isKeyAlgorithm(fresh(name))).toBe(true);
  });
});

describe("parsePublicKey with P-256 keys", () => {
  it("accepts base64 DER and PEM SPKI and infers the HPKE suite", () => {
    const spki = der(p256.publicKey, "spki");
    for (const input of [spki, pem(p256.publicKey, "spki")]) {
      const parsed = parsePublicKey(input);
      expect(parsed.algorithm).toBe(HPKE_P256);
      expect(parsed.spki).toBe(spki);
      expect(keyAlgorithmOf(parsed.key)).toBe(HPKE_P256);
    }
    expect(parsePublicKey(der(rsa.publicKey, "spki")).algorithm).toBe(RSA_OAEP_256);
  });

  it("stores a compressed point in its uncompressed form (65 bytes, as WebCrypto and HPKE use it)", () => {
    const ecdh = createECDH("prime256v1");
    ecdh.generateKeys();
    const compressed = ecdh.getPublicKey(undefined, "compressed");
    // SPKI header of an EC P-256 key with a 33-byte point.
    const header = Buffer.from("3039301306072a8648ce3d020106082a8648ce3d030107032200", "hex");
    const input = Buffer.concat([header, compressed]).toString("base64");
    const parsed = parsePublicKey(input);
    const canonical = Buffer.from(parsed.spki, "base64");
    expect(canonical.length).toBe(91);
    expect(canonical.subarray(-65).equals(ecdh.getPublicKey())).toBe(true);
  });

  it("refuses other curves and key types, naming the accepted ones and never quoting the key", () => {
    const others: [string, KeyObject][] = [
      ["P-384", generateKeyPairSync("ec", { namedCurve: "P-384" }).publicKey],
      ["P-521", generateKeyPairSync("ec", { namedCurve: "P-521" }).publicKey],
      ["secp256k1", generateKeyPairSync("ec", { namedCurve: "secp256k1" }).publicKey],
      ["Ed25519", generateKeyPairSync("ed25519").publicKey],
      ["X25519", generateKeyPairSync("x25519").publicKey],
      ["Ed448", generateKeyPairSync("ed448").publicKey],
    ];
    for (const [, key] of others) {
      for (const input of [der(key, "spki"), pem(key, "spki")]) {
        expectRefused(
          () => parsePublicKey(input, "keyBundle.publicKey"),
          input,
          "keyBundle.publicKey",
          /RSA \(2048 bits or more, exponent 65537\) or EC P-256/,
        );
      }
    }
  });

  it("refuses RSA keys with a public exponent other than 65537 (e = 3, e = 17), and RSA-1024", () => {
    for (const publicExponent of [3, 17]) {
      const weak = der(generateKeyPairSync("rsa", { modulusLength: 2048, publicExponent }).publicKey, "spki");
      expectRefused(() => parsePublicKey(weak), weak, "publicKey", /must have the RSA public exponent 65537/);
    }
    const small = der(generateKeyPairSync("rsa", { modulusLength: 1024 }).publicKey, "spki");
    expectRefused(() => parsePublicKey(small), small, "publicKey", /at least 2048 bits/);
  });

  it("refuses a P-256 private key sent as a public key, in every encoding", () => {
    for (const input of [der(p256.privateKey, "pkcs8"), pem(p256.privateKey, "sec1")]) {
      expectRefused(() => parsePublicKey(input), input, "publicKey", /never send a private key/);
    }
    const sec1Der = p256.privateKey.export({ type: "sec1", format: "der" }).toString("base64");
    expectRefused(() => parsePublicKey(sec1Der), sec1Der, "publicKey", /never send a private key/);
  });
});

describe("parsePrivateKey with P-256 keys", () => {
  it("accepts PKCS#8 (base64 DER, PEM) and SEC1 PEM; the suite and public half follow", () => {
    const spki = der(p256.publicKey, "spki");
    for (const input of [
      der(p256.privateKey, "pkcs8"),
      pem(p256.privateKey, "pkcs8"),
      pem(p256.privateKey, "sec1"),
    ]) {
      const key = parsePrivateKey(input);
      expect(keyAlgorithmOf(key)).toBe(HPKE_P256);
      expect(spkiOfPrivateKey(key)).toBe(spki);
      expect(privateKeyMatches(key, spki)).toBe(true);
    }
  });

  it("matches keys only with their own public half, across suites too", () => {
    const other = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const ecKey = parsePrivateKey(der(p256.privateKey, "pkcs8"));
    const rsaKey = parsePrivateKey(der(rsa.privateKey, "pkcs8"));
    expect(privateKeyMatches(ecKey, der(other.publicKey, "spki"))).toBe(false);
    expect(privateKeyMatches(ecKey, der(rsa.publicKey, "spki"))).toBe(false);
    expect(privateKeyMatches(rsaKey, der(p256.publicKey, "spki"))).toBe(false);
    expect(privateKeyMatches(rsaKey, der(rsa.publicKey, "spki"))).toBe(true);
  });

  it("refuses other curves, RSA e = 3 and Ed25519 private keys", () => {
    const inputs = [
      der(generateKeyPairSync("ec", { namedCurve: "P-384" }).privateKey, "pkcs8"),
      der(generateKeyPairSync("ec", { namedCurve: "secp256k1" }).privateKey, "pkcs8"),
      pem(generateKeyPairSync("ec", { namedCurve: "P-384" }).privateKey, "sec1"),
      der(generateKeyPairSync("ed25519").privateKey, "pkcs8"),
      der(generateKeyPairSync("rsa", { modulusLength: 2048, publicExponent: 3 }).privateKey, "pkcs8"),
    ];
    for (const input of inputs) {
      expectRefused(() => parsePrivateKey(input), input, "privateKey", /65537|P-256/);
    }
  });

  it("generates P-256 pairs as base64 DER SPKI and PKCS#8", async () => {
    const pair = await generateP256KeyPair();
    expect(parsePublicKey(pair.publicKey)).toMatchObject({ spki: pair.publicKey, algorithm: HPKE_P256 });
    expect(createPublicKey(parsePrivateKey(pair.privateKey)).asymmetricKeyDetails).toEqual({
      namedCurve: "prime256v1",
    });
    expect(privateKeyMatches(parsePrivateKey(pair.privateKey), pair.publicKey)).toBe(true);
  });
});

describe("checkWrappedKey", () => {
  const b64 = (length: number, first = 4) => {
    const bytes = Buffer.alloc(length, 7);
    bytes[0] = first;
    return bytes.toString("base64");
  };

  it("sizes each suite's wrapped key: RSA by its modulus, HPKE 65 + 48 bytes", () => {
    expect(wrappedKeySizes(RSA_OAEP_256, 256)).toEqual({ encryptedAesKey: 256, encapsulatedKey: undefined });
    expect(wrappedKeySizes(RSA_OAEP_256, 512)).toEqual({ encryptedAesKey: 512, encapsulatedKey: undefined });
    expect(wrappedKeySizes(HPKE_P256)).toEqual({ encryptedAesKey: 48, encapsulatedKey: 65 });
    expect(() => wrappedKeySizes(RSA_OAEP_256)).toThrow(RangeError);
  });

  it("accepts bundles of the right sizes and returns their bytes", () => {
    const hpke = checkWrappedKey(HPKE_P256, undefined, {
      encryptedAesKey: b64(48),
      encapsulatedKey: b64(65),
    });
    expect(hpke.encryptedAesKey.length).toBe(48);
    expect(hpke.encapsulatedKey?.length).toBe(65);
    const rsaBundle = checkWrappedKey(RSA_OAEP_256, 256, { encryptedAesKey: b64(256), encapsulatedKey: "" });
    expect(rsaBundle.encryptedAesKey.length).toBe(256);
    expect(rsaBundle.encapsulatedKey).toBeUndefined();
  });

  it("names every offending field with invalid_request", () => {
    const details = (fn: () => unknown) => appErrorOf(fn).details;
    expect(
      details(() =>
        checkWrappedKey(HPKE_P256, undefined, { encryptedAesKey: b64(48), encapsulatedKey: b64(33) }),
      ),
    ).toBe("keyBundle.encapsulatedKey: must be 65 bytes");
    expect(details(() => checkWrappedKey(HPKE_P256, undefined, { encryptedAesKey: b64(256) }))).toBe(
      "keyBundle.encryptedAesKey: must be 48 bytes; keyBundle.encapsulatedKey: is required",
    );
    expect(
      details(() =>
        checkWrappedKey(HPKE_P256, undefined, { encryptedAesKey: b64(48), encapsulatedKey: b64(65, 2) }),
      ),
    ).toBe("keyBundle.encapsulatedKey: must be an uncompressed P-256 point");
    expect(
      details(() =>
        checkWrappedKey(RSA_OAEP_256, 256, { encryptedAesKey: b64(48), encapsulatedKey: b64(65) }),
      ),
    ).toBe(
      "keyBundle.encryptedAesKey: must be 256 bytes; keyBundle.encapsulatedKey: must be absent for RSA-OAEP-256",
    );
    expect(
      details(() =>
        checkWrappedKey(RSA_OAEP_256, 256, { encryptedAesKey: "not*base64" }, "sealedReceipt.keyBundle"),
      ),
    ).toBe("sealedReceipt.keyBundle.encryptedAesKey: must be base64");
    expect(appErrorOf(() => checkWrappedKey(HPKE_P256, undefined, { encryptedAesKey: "" })).code).toBe(
      "invalid_request",
    );
  });
});
