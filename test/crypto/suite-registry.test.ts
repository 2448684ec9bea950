import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import {
  acceptedKeysWords,
  bundleSuite,
  HPKE_P256,
  HPKE_SUITE,
  isAadBound,
  isKeyAlgorithm,
  KEY_ALGORITHMS,
  KEY_SUITES,
  orList,
  P256_CURVE,
  RSA_OAEP_256,
  RSA_SUITE,
  storedAadBound,
  suiteCurves,
  suiteNamed,
  suiteOf,
  suiteOfCurveOid,
  suiteOfFamily,
  suiteOfKeyType,
  suiteOfNodeCurve,
} from "../../src/crypto/suites.js";

/**
 * The key suites are one registry (src/crypto/suites.ts): each suite is one object that every path
 * asks, and no other file decides by comparing `algorithm` with a suite's name.
 */

const SRC = join(import.meta.dirname, "../../src");

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sourceFiles(join(dir, entry.name))
      : entry.name.endsWith(".ts")
        ? [join(dir, entry.name)]
        : [],
  );
}

/** Source text with its comments blanked (newlines kept, so line numbers stay). */
function code(text: string): string {
  return text
    .replace(/\/\*[\s\S]*?\*\//g, (comment) => comment.replace(/[^\n]/g, " "))
    .replace(/(^|[^:"'`\\])\/\/.*$/gm, "$1");
}

/** Every line of `src` (but the registry) that matches `pattern`, as `path:line: text`. */
function linesMatching(pattern: RegExp, exempt: readonly string[] = []): string[] {
  const found: string[] = [];
  for (const file of sourceFiles(SRC)) {
    const path = relative(SRC, file);
    if (path === "crypto/suites.ts" || exempt.includes(path)) continue;
    code(readFileSync(file, "utf8"))
      .split("\n")
      .forEach((line, i) => {
        if (pattern.test(line)) found.push(`${path}:${i + 1}: ${line.trim()}`);
      });
  }
  return found;
}

const quoted = (words: readonly string[]) => words.map((w) => `"${w.replace(/[-.]/g, "\\$&")}"`).join("|");
const FAMILIES = new Set<string>(KEY_SUITES.map((suite) => suite.family));
/**
 * What names a suite, from the registry itself: its name, its key type (where that is not the name
 * of a key family, as `rsa` is), its curve's names. A comparison with one, a `case` of one or a choice
 * between two is a decision about that suite outside its registry object.
 */
const SUITE_WORDS = quoted([
  ...KEY_SUITES.map((suite) => suite.algorithm),
  ...KEY_SUITES.map((suite) => suite.keyType).filter((type) => !FAMILIES.has(type)),
  ...suiteCurves().flatMap((curve) => [curve.name, curve.nodeName]),
]);
const SUITE_CONSTANTS =
  "RSA_OAEP_256|HPKE_P256|KEY_WRAP_ALGORITHM|HPKE_KEY_WRAP_ALGORITHM|RSA_SUITE|HPKE_SUITE";
const NAMED_BRANCH = new RegExp(
  `(===|!==)\\s*(${SUITE_WORDS})|(${SUITE_WORDS})\\s*(===|!==)|\\bcase\\s+(${SUITE_WORDS})\\s*:` +
    `|(===|!==)\\s*(${SUITE_CONSTANTS})\\b|\\b(${SUITE_CONSTANTS})\\s*(===|!==)` +
    `|\\?\\s*(${SUITE_CONSTANTS}|${SUITE_WORDS})\\s*:`,
);

/**
 * The signing keys (merchants' and the key log's: Ed25519 and ECDSA P-256) are a set of their own,
 * not key suites; their files name P-256 for ECDSA.
 */
const SIGNING_KEY_FILES = ["kt/signatures.ts", "client/key-binding.ts"];

/** A comparison with a suite's name, or a choice between the two suites' names. */
const SUITE_BRANCH =
  /(===|!==)\s*(RSA_OAEP_256|HPKE_P256|KEY_WRAP_ALGORITHM|HPKE_KEY_WRAP_ALGORITHM|"RSA-OAEP-256"|"HPKE-P256-SHA256-A256GCM")\b|\b(RSA_OAEP_256|HPKE_P256|KEY_WRAP_ALGORITHM|HPKE_KEY_WRAP_ALGORITHM)\s*(===|!==)|\?\s*(HPKE_P256|RSA_OAEP_256|HPKE_KEY_WRAP_ALGORITHM|KEY_WRAP_ALGORITHM|"RSA-OAEP-256"|"HPKE-P256-SHA256-A256GCM")\s*:/;

describe("the key suite registry", () => {
  it("is the only place that branches on a suite's name", () => {
    const branches: string[] = [];
    for (const file of sourceFiles(SRC)) {
      const path = relative(SRC, file);
      if (path === "crypto/suites.ts") continue;
      readFileSync(file, "utf8")
        .split("\n")
        .forEach((line, i) => {
          if (SUITE_BRANCH.test(line)) branches.push(`${path}:${i + 1}: ${line.trim()}`);
        });
    }
    expect(branches).toEqual([]);
  });

  it("is the only place that branches on a suite's name, key type or curve (names read from the registry)", () => {
    expect(linesMatching(NAMED_BRANCH)).toEqual([]);
  });

  it("is the only place that writes a suite's curve or its HPKE primitives", () => {
    const curve = new RegExp(quoted(suiteCurves().flatMap((c) => [c.name, c.nodeName, c.oid])));
    expect(linesMatching(curve, SIGNING_KEY_FILES)).toEqual([]);
    // The KEM, KDF and AEAD classes of @hpke/core are chosen by the suites' identifiers in one place.
    expect(linesMatching(/\b(Dhkem\w+|Hkdf(Sha\d+)|Aes(128|256)Gcm)\b/, ["crypto/hpke-suites.ts"])).toEqual(
      [],
    );
  });

  it("words the keys it accepts from the suites", () => {
    expect(acceptedKeysWords()).toBe("an RSA (2048 bits or more, exponent 65537) or EC P-256 key");
    expect(orList(["A"])).toBe("A");
    expect(orList(["A", "B", "C"])).toBe("A, B or C");
  });

  it("finds a suite by its key's family, curve OID and OpenSSL curve name, and a bundle's by name", () => {
    expect(suiteOfFamily("rsa")).toBe(RSA_SUITE);
    expect(suiteOfCurveOid(P256_CURVE.oid)).toBe(HPKE_SUITE);
    expect(suiteOfCurveOid("2b81040022")).toBeUndefined();
    expect(suiteOfNodeCurve("prime256v1")).toBe(HPKE_SUITE);
    expect(suiteOfNodeCurve("secp384r1")).toBeUndefined();
    expect(suiteOfNodeCurve(undefined)).toBeUndefined();
    expect(suiteCurves()).toEqual([P256_CURVE]);
    expect(suiteNamed(undefined)).toBe(RSA_SUITE);
    expect(suiteNamed("")).toBe(RSA_SUITE);
    expect(suiteNamed("", HPKE_SUITE)).toBe(HPKE_SUITE);
    expect(suiteNamed(HPKE_P256)).toBe(HPKE_SUITE);
    expect(suiteNamed("toString")).toBeUndefined();
    expect(HPKE_SUITE.wrappedKeySizes()).toEqual({ encryptedAesKey: 48, encapsulatedKey: 65 });
  });

  it("names each suite once, and finds it by name and by key type", () => {
    expect(KEY_ALGORITHMS).toEqual([RSA_OAEP_256, HPKE_P256]);
    expect(new Set(KEY_SUITES.map((s) => s.keyType)).size).toBe(KEY_SUITES.length);
    for (const suite of KEY_SUITES) {
      expect(isKeyAlgorithm(suite.algorithm)).toBe(true);
      expect(suiteOf(suite.algorithm)).toBe(suite);
      expect(suiteOfKeyType(suite.keyType)).toBe(suite);
    }
    expect(suiteOfKeyType("ed25519")).toBeUndefined();
    for (const name of ["rsa-oaep-256", "", "toString", "__proto__", "RSA-OAEP"]) {
      expect(isKeyAlgorithm(name)).toBe(false);
    }
  });

  it("says which wraps are bound to the receipt's AAD, and stores the mark only where it is optional", () => {
    expect(isAadBound(RSA_OAEP_256, undefined)).toBe(false);
    expect(isAadBound(RSA_OAEP_256, true)).toBe(true);
    expect(isAadBound(HPKE_P256, undefined)).toBe(true);
    expect(storedAadBound(RSA_OAEP_256, true)).toEqual({ aadBound: true });
    expect(storedAadBound(RSA_OAEP_256, false)).toEqual({});
    expect(storedAadBound(HPKE_P256, true)).toEqual({});
  });

  it("reads the suite of a bundle that names none from its encapsulated key", () => {
    expect(bundleSuite(undefined, false)).toBe(RSA_SUITE);
    expect(bundleSuite(undefined, true)).toBe(HPKE_SUITE);
    expect(bundleSuite(RSA_OAEP_256, true)).toBe(RSA_SUITE);
    expect(bundleSuite(HPKE_P256, false)).toBe(HPKE_SUITE);
  });
});
