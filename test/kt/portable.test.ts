import { readdirSync, readFileSync } from "node:fs";
import { build } from "esbuild";
import { describe, expect, it } from "vitest";

/**
 * The key-transparency library runs in Node, browsers and React Native: no `node:` module, no
 * `Buffer`, `atob` or `btoa`, no `structuredClone`, and only these packages, in every file but the
 * server's Node engine. And a browser bundle of the verifier and the monitor builds with no Node
 * built-in at all.
 */

const DIR = new URL("../../src/kt/", import.meta.url);
const NODE_ONLY = ["node-engine.ts"];
const PACKAGES = [
  "@noble/curves/ed25519.js",
  "@noble/curves/nist.js",
  "@noble/hashes/sha2.js",
  "canonicalize",
];

describe("src/kt is portable", () => {
  const files = readdirSync(DIR).filter((f) => f.endsWith(".ts") && !NODE_ONLY.includes(f));

  it.each(files)("%s uses no Node module and only the allowed packages", (file) => {
    const source = readFileSync(new URL(file, DIR), "utf8")
      .replace(/\/\*[\s\S]*?\*\//g, "")
      .replace(/^\s*\/\/.*$/gm, "");
    expect(source).not.toMatch(/from\s+["']node:|require\(|\bBuffer\b|\batob\b|\bbtoa\b|structuredClone/);
    for (const [, spec] of source.matchAll(/from\s+["']([^"']+)["']/g)) {
      // A shared file of the service that imports nothing (test/client/webcrypto.test.ts checks):
      // the key suites' registry.
      const ok =
        spec?.startsWith("./") || spec === "../crypto/suites.js" || PACKAGES.includes(spec as string);
      expect(ok, `${file} imports ${spec}`).toBe(true);
    }
  });

  it("bundles the whole library (index.ts) for a browser with no Node built-in", async () => {
    const result = await build({
      stdin: {
        contents: 'export * from "./index.js";',
        resolveDir: new URL(".", DIR).pathname,
        loader: "ts",
      },
      bundle: true,
      write: false,
      format: "esm",
      platform: "browser",
      logLevel: "silent",
    });
    expect(result.errors).toEqual([]);
    expect(result.outputFiles[0]?.text).not.toMatch(/from\s*["']node:/);
  });
});
