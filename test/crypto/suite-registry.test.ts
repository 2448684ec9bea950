import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import {
  bundleSuite,
  HPKE_P256,
  HPKE_SUITE,
  isAadBound,
  isKeyAlgorithm,
  KEY_ALGORITHMS,
  KEY_SUITES,
  RSA_OAEP_256,
  RSA_SUITE,
  storedAadBound,
  suiteOf,
  suiteOfKeyType,
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
