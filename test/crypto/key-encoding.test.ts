import { spawnSync } from "node:child_process";
import { createECDH, createPublicKey, generateKeyPairSync } from "node:crypto";
import { readFileSync } from "node:fs";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { importP256Key, importRsaKey } from "../../src/client/client-keys.js";
import { p256Point } from "../../src/crypto/curves.js";
import { escrowKeysOf } from "../../src/crypto/escrow-keys.js";
import {
  parseEd25519PublicKey,
  parsePrivateKey,
  parsePublicKey,
  privateKeyMatches,
  spkiOfPrivateKey,
} from "../../src/crypto/keys.js";
import { AppError } from "../../src/errors.js";
import { fuzzSettings } from "../hardening/support.js";
import {
  ED25519_SMALL_ORDER,
  HOSTILE_PRIVATE_KEYS,
  HOSTILE_PUBLIC_KEYS,
  HOSTILE_SIGNING_KEYS,
  type HostileKey,
  VALID_KEYS,
} from "../support/hostile-keys.js";

/**
 * Issue 31, item 1: every key is checked by our own code before Node builds a KeyObject. Each key of
 * the hostile corpus is refused by each parser that takes its kind, with `invalid_request` on the
 * caller's field and a reason, never quoting it; valid keys in every accepted form still parse; and
 * random damage to valid keys only ever gives `invalid_request`. The corpus's crash entries are shown
 * to abort an unchecked Node 20 or 22 (in a child process), so the corpus keeps testing what it
 * claims to.
 */

/** The AppError `fn` throws (failing on anything else, or nothing). */
function refusal(fn: () => unknown, label: string): AppError {
  try {
    fn();
  } catch (error) {
    expect(error, label).toBeInstanceOf(AppError);
    return error as AppError;
  }
  throw new Error(`${label}: accepted`);
}

/** Asserts `invalid_request` on `field` whose description does not quote the key. */
function expectRefused(fn: () => unknown, key: HostileKey, field: string): string {
  const error = refusal(fn, key.label);
  expect(error.code, key.label).toBe("invalid_request");
  expect(
    error.violations?.map((v) => v.field),
    key.label,
  ).toEqual([field]);
  const description = error.violations?.[0]?.description ?? "";
  const compact = key.text.replace(/\s+/g, "");
  for (let i = 0; i + 24 <= compact.length; i += 24) {
    expect(description, key.label).not.toContain(compact.slice(i, i + 24));
  }
  return description;
}

function descriptionOf(parse: (text: string) => unknown, text: string): string {
  const error = refusal(() => parse(text), text.slice(0, 40));
  return error.violations?.[0]?.description ?? error.message;
}

const find = (list: readonly HostileKey[], label: string) => {
  const key = list.find((k) => k.label === label);
  if (key === undefined) throw new Error(`no corpus key ${label}`);
  return key.text;
};

describe("the hostile key corpus, key by key", () => {
  it.each(HOSTILE_PUBLIC_KEYS.map((k) => [k.label, k] as const))("parsePublicKey refuses %s", (_, key) => {
    expectRefused(() => parsePublicKey(key.text, "publicKey"), key, "publicKey");
  });

  it.each(HOSTILE_PRIVATE_KEYS.map((k) => [k.label, k] as const))("parsePrivateKey refuses %s", (_, key) => {
    expectRefused(() => parsePrivateKey(key.text, "privateKey"), key, "privateKey");
  });

  it.each(HOSTILE_SIGNING_KEYS.map((k) => [k.label, k] as const))(
    "parseEd25519PublicKey refuses %s",
    (_, key) => {
      expectRefused(() => parseEd25519PublicKey(key.text, "publicKey"), key, "publicKey");
    },
  );

  it("refuses the configured escrow keys of the corpus at start, naming the key", () => {
    for (const key of HOSTILE_PRIVATE_KEYS) {
      const error = refusal(() => escrowKeysOf([VALID_KEYS.rsaPkcs8, key.text]), key.label);
      expect(error.violations?.[0]?.field, key.label).toBe("escrowPrivateKeys[1]");
    }
  });

  it("says why, in words a developer can act on", () => {
    const pub = (label: string) => descriptionOf(parsePublicKey, find(HOSTILE_PUBLIC_KEYS, label));
    const priv = (label: string) => descriptionOf(parsePrivateKey, find(HOSTILE_PRIVATE_KEYS, label));
    const ed = (label: string) => descriptionOf(parseEd25519PublicKey, find(HOSTILE_SIGNING_KEYS, label));
    expect(pub("P-256 point at infinity (00)")).toBe(
      "must be a valid P-256 key: its public point is the point at infinity",
    );
    expect(pub("P-256 point off the curve")).toMatch(/is not a point on the curve P-256/);
    expect(pub("P-256 x = p")).toMatch(/coordinate out of range/);
    expect(pub("P-256 hybrid point (06/07)")).toMatch(/hybrid form/);
    expect(pub("P-256 compressed point with no y")).toMatch(/is not a point on the curve/);
    expect(pub("explicit curve parameters (P-256 spelled out)")).toMatch(
      /explicit parameters; only the named curve P-256/,
    );
    expect(pub("P-384 key")).toMatch(/on another curve/);
    expect(pub("RSA e = 3")).toBe("must have the RSA public exponent 65537");
    expect(pub("RSA even modulus")).toBe("must have an odd RSA modulus");
    expect(pub("RSA-8200 modulus")).toBe("must be at most 8192 bits");
    expect(pub("RSA-PSS algorithm")).toMatch(/not RSA-PSS/);
    expect(pub("P-256 PKCS#8 private key")).toMatch(/never send a private key/);
    expect(pub("RSA PKCS#1 private key under an RSA PUBLIC KEY label")).toMatch(/never send a private key/);
    expect(priv("PKCS#8 P-256 key whose point is at infinity")).toMatch(
      /public point is the point at infinity/,
    );
    expect(priv("PKCS#8 P-256 scalar n")).toBe("must hold a private scalar from 1 to n - 1 of P-256");
    expect(priv("RSA multi-prime (version 1)")).toMatch(/two-prime/);
    expect(ed("small-order point 00000000..00")).toMatch(/small-order point/);
    expect(ed("y with no point on the curve")).toMatch(/not a point on the curve Ed25519/);
    expect(ed("y = p + 2 (not canonical)")).toMatch(/not a canonical Ed25519 encoding/);
  });

  it("refuses every small-order Ed25519 encoding libsodium blocks, and no key Node generates", () => {
    expect(ED25519_SMALL_ORDER).toHaveLength(14);
    for (const hex of ED25519_SMALL_ORDER) {
      const text = Buffer.from(hex, "hex").toString("base64");
      expect(descriptionOf(parseEd25519PublicKey, text), hex).toMatch(/small-order|not a canonical/);
    }
    for (let i = 0; i < 50; i++) {
      const spki = generateKeyPairSync("ed25519").publicKey.export({ type: "spki", format: "der" });
      expect(parseEd25519PublicKey(spki.toString("base64")).spki).toBe(spki.toString("base64"));
    }
  });
});

describe("Wycheproof's 612 P-256 public keys (C2SP/wycheproof ecdh_secp256r1_test.json)", () => {
  it("accepts every valid one, refuses every invalid one, and of the acceptable ones only compressed points", () => {
    // The fixture of the key-directory library's own parser (test/kt): an oracle written by others.
    const { tests } = JSON.parse(
      readFileSync(new URL("../kt/fixtures/wycheproof-p256-public-keys.json", import.meta.url), "utf8"),
    ) as { tests: Array<{ tcId: number; flags: string[]; public: string; result: string }> };
    expect(tests).toHaveLength(612);
    const tally: Record<string, number> = {};
    for (const t of tests) {
      let accepted = true;
      try {
        parsePublicKey(Buffer.from(t.public, "hex").toString("base64"));
      } catch (error) {
        expect((error as AppError).code, `tcId ${t.tcId}`).toBe("invalid_request");
        accepted = false;
      }
      const expected =
        t.result === "valid" || (t.result === "acceptable" && t.flags.includes("CompressedPoint"));
      expect(accepted, `tcId ${t.tcId} ${t.result} ${t.flags.join(",")}`).toBe(expected);
      tally[`${t.result} ${accepted ? "accepted" : "refused"}`] =
        (tally[`${t.result} ${accepted ? "accepted" : "refused"}`] ?? 0) + 1;
    }
    // Acceptable but refused: explicit curve parameters (7) and DER that is not DER (222).
    expect(tally).toEqual({
      "valid accepted": 330,
      "acceptable accepted": 1,
      "invalid refused": 52,
      "acceptable refused": 229,
    });
  });
});

describe("valid keys in every accepted form", () => {
  it("accepts P-256 keys uncompressed and compressed, as the same canonical SPKI", () => {
    const plain = parsePublicKey(VALID_KEYS.p256Spki);
    expect(plain.spki).toBe(VALID_KEYS.p256Spki);
    expect(parsePublicKey(VALID_KEYS.p256CompressedSpki).spki).toBe(VALID_KEYS.p256Spki);
  });

  it("accepts P-256 private keys with and without their point, PKCS#8 and SEC1, all the same key", () => {
    for (const text of [VALID_KEYS.p256Pkcs8, VALID_KEYS.p256Pkcs8WithoutPoint, VALID_KEYS.p256Sec1Pem]) {
      const key = parsePrivateKey(text);
      expect(spkiOfPrivateKey(key)).toBe(VALID_KEYS.p256Spki);
      expect(privateKeyMatches(key, VALID_KEYS.p256Spki)).toBe(true);
    }
  });

  it("accepts RSA and Ed25519 keys as before", () => {
    expect(parsePublicKey(VALID_KEYS.rsaSpki).spki).toBe(VALID_KEYS.rsaSpki);
    expect(spkiOfPrivateKey(parsePrivateKey(VALID_KEYS.rsaPkcs8))).toBe(VALID_KEYS.rsaSpki);
    expect(parseEd25519PublicKey(VALID_KEYS.ed25519Raw).spki).toBe(VALID_KEYS.ed25519Spki);
    expect(parseEd25519PublicKey(VALID_KEYS.ed25519Spki).spki).toBe(VALID_KEYS.ed25519Spki);
  });

  it("builds a P-256 private key from its scalar: a carried point of another key does not make it that key", () => {
    const other = createECDH("prime256v1");
    other.generateKeys();
    const otherSpki = createPublicKey({
      key: {
        kty: "EC",
        crv: "P-256",
        x: other.getPublicKey().subarray(1, 33).toString("base64url"),
        y: other.getPublicKey().subarray(33).toString("base64url"),
      },
      format: "jwk",
    })
      .export({ type: "spki", format: "der" })
      .toString("base64");
    // VALID_KEYS.p256Pkcs8's scalar, with the other key's point in place of its own.
    const der = Buffer.from(VALID_KEYS.p256Pkcs8, "base64");
    const forged = Buffer.concat([der.subarray(0, der.length - 64), other.getPublicKey().subarray(1)]);
    const key = parsePrivateKey(forged.toString("base64"));
    expect(privateKeyMatches(key, otherSpki)).toBe(false);
    expect(privateKeyMatches(key, VALID_KEYS.p256Spki)).toBe(true);
  });

  it("never matches a stored key that is not a valid key (a store writer's plant)", () => {
    const key = parsePrivateKey(VALID_KEYS.p256Pkcs8);
    expect(privateKeyMatches(key, find(HOSTILE_PUBLIC_KEYS, "P-256 point at infinity (00)"))).toBe(false);
  });

  it("decompresses points as OpenSSL does, for any scalar", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 32, maxLength: 32 }), (scalar) => {
        const ecdh = createECDH("prime256v1");
        try {
          ecdh.setPrivateKey(scalar);
        } catch {
          return; // 0 or >= n: not a scalar
        }
        const point = p256Point(ecdh.getPublicKey(null, "compressed"));
        expect(Buffer.concat([Buffer.from([4]), point.x, point.y])).toEqual(ecdh.getPublicKey());
      }),
      fuzzSettings(300),
    );
  });
});

describe("random damage to valid keys", () => {
  const damaged = (texts: string[]) =>
    fc
      .tuple(
        fc.constantFrom(...texts),
        fc.array(
          fc.record({
            at: fc.nat(),
            kind: fc.constantFrom("flip", "set", "cut", "insert"),
            byte: fc.nat(255),
          }),
          { minLength: 1, maxLength: 4 },
        ),
      )
      .map(([text, edits]) => {
        let der = Buffer.from(
          text.includes("-----") ? text.replace(/-----[^-]+-----|\s/g, "") : text,
          "base64",
        );
        for (const { at, kind, byte } of edits) {
          const i = at % Math.max(1, der.length);
          if (kind === "flip") der[i] = (der[i] ?? 0) ^ (1 << (byte % 8));
          else if (kind === "set") der[i] = byte;
          else if (kind === "cut") der = Buffer.concat([der.subarray(0, i), der.subarray(i + 1)]);
          else der = Buffer.concat([der.subarray(0, i), Buffer.from([byte]), der.subarray(i)]);
        }
        return der.toString("base64");
      });

  /** Runs `parse` on damaged keys: it may accept one (a flipped bit can leave a valid key), or refuse it. */
  function survives(parse: (text: string) => unknown, texts: string[]) {
    fc.assert(
      fc.property(damaged(texts), (text) => {
        try {
          parse(text);
        } catch (error) {
          expect(error).toBeInstanceOf(AppError);
          expect((error as AppError).code).toBe("invalid_request");
        }
      }),
      fuzzSettings(1_000),
    );
  }

  it("public keys: only ever invalid_request", () => {
    survives(parsePublicKey, [VALID_KEYS.p256Spki, VALID_KEYS.p256CompressedSpki, VALID_KEYS.rsaSpki]);
  });

  it("private keys: only ever invalid_request", () => {
    survives(parsePrivateKey, [VALID_KEYS.p256Pkcs8, VALID_KEYS.p256Pkcs8WithoutPoint, VALID_KEYS.rsaPkcs8]);
  });

  it("signing keys: only ever invalid_request", () => {
    survives(parseEd25519PublicKey, [VALID_KEYS.ed25519Spki, VALID_KEYS.ed25519Raw]);
  });
});

describe("the client library checks keys as the service does, before WebCrypto", () => {
  it("refuses the corpus's P-256 and RSA keys as invalid_key, with the reason", async () => {
    const infinity = find(HOSTILE_PUBLIC_KEYS, "P-256 point at infinity (00)");
    await expect(importP256Key(infinity, "public")).rejects.toMatchObject({
      code: "invalid_key",
      message:
        "the public key is refused: it must be a valid P-256 key: its public point is the point at infinity",
    });
    for (const key of HOSTILE_PUBLIC_KEYS) {
      const rejected = await Promise.all([
        importP256Key(key.text, "public").then(
          () => "accepted",
          (e: { code?: string }) => e.code,
        ),
        importRsaKey(key.text, "public").then(
          () => "accepted",
          (e: { code?: string }) => e.code,
        ),
      ]);
      expect(rejected, key.label).toEqual(["invalid_key", "invalid_key"]);
    }
    for (const key of HOSTILE_PRIVATE_KEYS) {
      const rejected = await Promise.all([
        importP256Key(key.text, "private").then(
          () => "accepted",
          (e: { code?: string }) => e.code,
        ),
        importRsaKey(key.text, "private").then(
          () => "accepted",
          (e: { code?: string }) => e.code,
        ),
      ]);
      expect(rejected, key.label).toEqual(["invalid_key", "invalid_key"]);
    }
  });

  it("still imports the valid keys", async () => {
    await expect(importP256Key(VALID_KEYS.p256Spki, "public")).resolves.toBeDefined();
    await expect(importP256Key(VALID_KEYS.p256Pkcs8, "private")).resolves.toBeDefined();
    await expect(importRsaKey(VALID_KEYS.rsaSpki, "public")).resolves.toBeDefined();
    await expect(importRsaKey(VALID_KEYS.rsaPkcs8, "private")).resolves.toBeDefined();
  });
});

/** Node majors whose key details abort on the crash entries (24 throws instead). */
const ABORTING_NODE_MAJORS = ["20", "22"];

describe.runIf(ABORTING_NODE_MAJORS.includes(process.versions.node.split(".")[0] ?? ""))(
  "the corpus's crash entries, unchecked, on Node 20 and 22",
  () => {
    it("abort a Node process that builds a KeyObject from them and reads its details", () => {
      const crashers = [...HOSTILE_PUBLIC_KEYS, ...HOSTILE_PRIVATE_KEYS, ...HOSTILE_SIGNING_KEYS].filter(
        (k) => k.abortsNode,
      );
      expect(crashers.length).toBeGreaterThanOrEqual(6);
      const script = `
      const { createPublicKey, createPrivateKey } = require("node:crypto");
      const text = process.env.HOSTILE_KEY;
      const pem = text.match(/-----BEGIN ([A-Z ]+)-----/);
      const der = Buffer.from(pem ? text.replace(/-----[^-]+-----|\\s/g, "") : text, "base64");
      const type = pem?.[1] === "EC PRIVATE KEY" ? "sec1" : "pkcs8";
      let key;
      try { key = createPrivateKey({ key: der, format: "der", type }); }
      catch { key = createPublicKey({ key: der, format: "der", type: "spki" }); }
      void key.asymmetricKeyDetails;`;
      for (const key of crashers) {
        const run = spawnSync(process.execPath, ["-e", script], {
          encoding: "utf8",
          env: { ...process.env, HOSTILE_KEY: key.text },
        });
        expect(run.signal, `${key.label}: ${run.stderr.slice(0, 200)}`).toBe("SIGABRT");
      }
      // And a valid key does not: the harness itself is sound.
      const valid = spawnSync(process.execPath, ["-e", script], {
        env: { ...process.env, HOSTILE_KEY: VALID_KEYS.p256Spki },
      });
      expect(valid.status).toBe(0);
      expect(
        createPublicKey({ key: Buffer.from(VALID_KEYS.p256Spki, "base64"), format: "der", type: "spki" })
          .asymmetricKeyDetails,
      ).toEqual({ namedCurve: "prime256v1" });
    });
  },
);
