import { generateKeyPairSync, sign } from "node:crypto";
import { readFileSync } from "node:fs";
import { ED25519_TORSION_SUBGROUP, ed25519 } from "@noble/curves/ed25519.js";
import { describe, expect, it } from "vitest";
import { nodeEngine } from "../../src/kt/node-engine.js";
import {
  ED25519_SMALL_ORDER,
  nobleEngine,
  parseSigningKey,
  type SigningKey,
  signingKeyIdOf,
  verifySignature,
} from "../../src/kt/signatures.js";
import { flipBit, hex } from "./support.js";

/**
 * The one signature rule (docs/key-transparency.md), on shared vectors, for both engines:
 * - the 12 vectors of "Taming the many EdDSAs" (novifinancial/ed25519-speccheck, cases.json), of which
 *   the strict rule (S < L, canonical A and R, small-order A and R refused, cofactorless) accepts
 *   only vector 3, as libsodium and ed25519-dalek's verify_strict do;
 * - Wycheproof's ed25519_test.json and ecdsa_secp256r1_sha256_p1363_test.json (C2SP/wycheproof),
 *   every "valid" accepted and every "invalid" refused (high-s P-256 signatures are "valid" there too).
 */

const fixture = (name: string) =>
  JSON.parse(readFileSync(new URL(`fixtures/${name}`, import.meta.url), "utf8"));
const engines = { noble: nobleEngine, node: nodeEngine };
const ED25519_SPKI = "302a300506032b6570032100";

function edKey(raw: string): SigningKey | undefined {
  const parsed = parseSigningKey(hex(ED25519_SPKI + raw));
  return parsed.ok ? parsed.key : undefined;
}

describe.each(Object.entries(engines))("with the %s engine", (_name, engine) => {
  it("accepts of the speccheck vectors only the one every strict verifier accepts (3)", () => {
    const { cases } = fixture("ed25519-speccheck.json") as {
      cases: Array<{ message: string; pub_key: string; signature: string }>;
    };
    expect(cases.length).toBe(12);
    const accepted = cases.flatMap((c, i) => {
      const key = edKey(c.pub_key);
      if (key === undefined) return [];
      return verifySignature(key, hex(c.message), hex(c.signature), engine) ? [i] : [];
    });
    expect(accepted).toEqual([3]);
  });

  it("answers every Wycheproof Ed25519 vector as Wycheproof says", () => {
    const { vectors } = fixture("wycheproof-ed25519.json");
    let count = 0;
    for (const group of vectors.testGroups) {
      const parsed = parseSigningKey(hex(group.publicKeyDer));
      for (const t of group.tests) {
        const ok = parsed.ok && verifySignature(parsed.key, hex(t.msg), hex(t.sig), engine);
        expect(ok, `tcId ${t.tcId} ${t.comment}`).toBe(t.result === "valid");
        count++;
      }
    }
    expect(count).toBe(151);
  });

  it("answers every Wycheproof P-256 / SHA-256 raw-signature vector as Wycheproof says", () => {
    const { vectors } = fixture("wycheproof-ecdsa-p256-sha256-p1363.json");
    let count = 0;
    for (const group of vectors.testGroups) {
      const parsed = parseSigningKey(hex(group.publicKeyDer));
      expect(parsed.ok, group.publicKeyDer).toBe(true);
      for (const t of group.tests) {
        const ok = parsed.ok && verifySignature(parsed.key, hex(t.msg), hex(t.sig), engine);
        expect(ok, `tcId ${t.tcId} ${t.comment}`).toBe(t.result === "valid");
        count++;
      }
    }
    expect(count).toBe(262);
  });

  it("refuses every flipped bit of a signature, a message and a key, for both algorithms", () => {
    for (const type of ["ed25519", "ec"] as const) {
      const pair =
        type === "ed25519"
          ? generateKeyPairSync("ed25519")
          : generateKeyPairSync("ec", { namedCurve: "P-256" });
      const spki = new Uint8Array(pair.publicKey.export({ format: "der", type: "spki" }));
      const parsed = parseSigningKey(spki);
      if (!parsed.ok) throw new Error(parsed.reason);
      const message = new TextEncoder().encode("a statement");
      const signature = new Uint8Array(
        type === "ed25519"
          ? sign(null, message, pair.privateKey)
          : sign("sha256", message, { key: pair.privateKey, dsaEncoding: "ieee-p1363" }),
      );
      expect(verifySignature(parsed.key, message, signature, engine)).toBe(true);
      const passed: string[] = [];
      for (let bit = 0; bit < 512; bit++) {
        if (verifySignature(parsed.key, message, flipBit(signature, bit), engine)) passed.push(`sig ${bit}`);
      }
      for (let bit = 0; bit < message.length * 8; bit++) {
        if (verifySignature(parsed.key, flipBit(message, bit), signature, engine)) passed.push(`msg ${bit}`);
      }
      for (let bit = 0; bit < parsed.key.raw.length * 8; bit++) {
        const other = parseSigningKey(flipBit(spki, (spki.length - parsed.key.raw.length) * 8 + bit));
        if (other.ok && verifySignature(other.key, message, signature, engine)) passed.push(`key ${bit}`);
      }
      expect(passed, type).toEqual([]);
    }
  }, 180_000); // hundreds of verifications: seconds alone, more beside a loaded suite; no time measured
});

describe("signing keys", () => {
  it("lists exactly the canonical encodings of the torsion subgroup as small order", () => {
    const canonical = ED25519_TORSION_SUBGROUP.filter((h) => {
      try {
        ed25519.Point.fromHex(h, false);
        return true;
      } catch {
        return false;
      }
    });
    expect([...ED25519_SMALL_ORDER].sort()).toEqual([...canonical].sort());
    for (const h of ED25519_SMALL_ORDER) expect(ed25519.Point.fromHex(h, false).isSmallOrder()).toBe(true);
  });

  it("refuses small-order and non-canonical Ed25519 keys before any library sees them", () => {
    for (const h of ED25519_SMALL_ORDER) expect(edKey(h), h).toBeUndefined();
    // y = p (non-canonical 0), y = p + 1 (non-canonical 1), x = 0 with the sign bit set.
    expect(edKey("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f")).toBeUndefined();
    expect(edKey("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f")).toBeUndefined();
    expect(edKey("0100000000000000000000000000000000000000000000000000000000000080")).toBeUndefined();
    // y = 2 has no x on the curve.
    expect(edKey(`02${"00".repeat(31)}`)).toBeUndefined();
  });

  it("refuses the P-256 keys that crash or mislead: infinity, compressed, off the curve, too large", () => {
    const prefix = "3059301306072a8648ce3d020106082a8648ce3d030107034200";
    const good = generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey.export({
      format: "der",
      type: "spki",
    });
    expect(parseSigningKey(new Uint8Array(good)).ok).toBe(true);
    const cases = {
      infinity: "3019301306072a8648ce3d020106082a8648ce3d03010703020000",
      compressed: `3039301306072a8648ce3d020106082a8648ce3d03010703220002${"11".repeat(32)}`,
      zero: `${prefix}04${"00".repeat(64)}`,
      // The last byte of y changed (flipped, not set: a random y may already end in 00).
      offCurve: `${prefix}04${Buffer.from(good.subarray(27, 91)).toString("hex").slice(0, -2)}${((good[90] ?? 0) ^ 1).toString(16).padStart(2, "0")}`,
      xIsP: `${prefix}04ffffffff00000001000000000000000000000000ffffffffffffffffffffffff${"00".repeat(32)}`,
      trailingByte: `${Buffer.from(good).toString("hex")}00`,
    };
    for (const [name, value] of Object.entries(cases))
      expect(parseSigningKey(hex(value)).ok, name).toBe(false);
  });

  it("accepts exactly the Wycheproof P-256 public keys that are valid named-curve uncompressed points", () => {
    // ecdh_secp256r1_test.json's keys: "invalid" ones (wrong curve, invalid-curve attack points,
    // modified groups) and "acceptable" ones (odd DER, explicit parameters, compressed points) are all
    // refused by the strict parser; every "valid" one is accepted.
    const { tests } = fixture("wycheproof-p256-public-keys.json") as {
      tests: Array<{ tcId: number; flags: string[]; public: string; result: string }>;
    };
    expect(tests.length).toBeGreaterThan(600);
    const wrong = tests.filter((t) => parseSigningKey(hex(t.public)).ok !== (t.result === "valid"));
    expect(wrong.map((t) => `${t.tcId} ${t.result} ${t.flags.join(",")}`)).toEqual([]);
  });

  it("derives one signingKeyId per key", () => {
    const spki = new Uint8Array(
      generateKeyPairSync("ed25519").publicKey.export({ format: "der", type: "spki" }),
    );
    expect(signingKeyIdOf(spki)).toMatch(/^sk_[0-9a-f]{32}$/);
    expect(signingKeyIdOf(spki)).toBe(signingKeyIdOf(spki.slice()));
  });
});
