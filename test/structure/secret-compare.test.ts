import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { plainSecretComparisons } from "../../scripts/secret-compare.mjs";

/**
 * Issue 38: the operator token compared with `!==` instead of in constant time looked the same from
 * outside and no test noticed. scripts/secret-compare.mjs (run by CI and `npm run lint`) fails on a
 * plain comparison of a secret; this proves it does, on the real operator check turned plain, and
 * that src/ as it stands has none.
 */
const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const SCRIPT = join(ROOT, "scripts/secret-compare.mjs");

describe("secrets are compared in constant time", () => {
  it("finds no plain comparison of a secret in src/", () => {
    const files = execFileSync("git", ["ls-files", "src/**/*.ts"], { cwd: ROOT, encoding: "utf8" })
      .split("\n")
      .filter(Boolean);
    expect(files.length).toBeGreaterThan(50);
    const found = files.flatMap((f) =>
      plainSecretComparisons(f, readFileSync(join(ROOT, f), "utf8")).map((c) => `${f}:${c.line} ${c.text}`),
    );
    expect(found).toEqual([]);
  });

  it("fails on the operator token compared with !== or === instead of timingSafeEqual", () => {
    const source = readFileSync(join(ROOT, "src/rpc/operator-access.ts"), "utf8");
    const constantTime = "!timingSafeEqual(digest(given), expected)";
    expect(source).toContain(constantTime);
    expect(plainSecretComparisons("operator-access.ts", source)).toEqual([]);
    for (const plain of [
      "given !== adminToken",
      "!(given === options.adminToken)",
      "digest(given) != expected",
    ]) {
      const mutated = source.replace(constantTime, plain);
      const found = plainSecretComparisons("operator-access.ts", mutated);
      expect(found.map((f) => f.text)).toEqual([plain.replace(/^!\(|\)$/g, "")]);
      expect(mutated.split("\n")[(found[0]?.line ?? 0) - 1]).toContain(plain);
    }
  });

  it("fails on each kind of secret, and lets presence, size and type checks pass", () => {
    const flagged = [
      // biome-ignore lint/suspicious/noTemplateCurlyInString: source text holding a template literal
      "if (req.headers.authorization === `Bearer ${config.adminToken}`) ok();",
      "if (body.clientSecret !== stored.clientSecret) deny();",
      "const ok = grant.tokenId == input.tokenId;",
      "if (header['x-api-key'] !== key.apiKey) deny();",
      "if (computedMac !== request.mac) deny();",
      "if (hmacOf(body) !== given) deny();",
      "if (sig !== event.signature) deny();",
      "if (expectedDigest === digest) ok();",
      "if (config.hashedPanPepper === other) ok();",
      "if (user.password !== attempt) deny();",
      "if (webhookSecret !== (given as string)) deny();",
    ];
    for (const line of flagged) expect(plainSecretComparisons("x.ts", line), line).toHaveLength(1);
    const harmless = [
      'if (token === "") deny();',
      "if (secret === undefined || secret === null) deny();",
      "if (token.length !== 64) deny();",
      "if (signature.byteLength !== SIG_BYTES) deny();",
      'if (typeof apiKey !== "string") deny();',
      "if (type !== COSIGNATURE_ED25519) deny();",
      "if (page.nextPageToken === pageToken) loop();",
      "if (k.id === apiKeyId) found();",
      "return grants.find((g) => g.tokenHash === tokenHash);",
      "// secret-compare: both from the caller's own request\nif (input.tokenId !== input.accessTokenId) deny();",
    ];
    for (const line of harmless) expect(plainSecretComparisons("x.ts", line), line).toEqual([]);
  });

  it("exits with status 1 and names the line when run on such a file", () => {
    const dir = mkdtempSync(join(tmpdir(), "secret-compare-"));
    try {
      const file = join(dir, "check.ts");
      writeFileSync(
        file,
        "export function ok(given: string, adminToken: string) {\n  return given === adminToken;\n}\n",
      );
      const run = spawnSync(process.execPath, [SCRIPT, file], { encoding: "utf8" });
      expect(run.status).toBe(1);
      expect(run.stdout).toContain("check.ts:2\tgiven === adminToken");
      writeFileSync(file, "export const ok = (a: string) => a.length === 3;\n");
      expect(spawnSync(process.execPath, [SCRIPT, file], { encoding: "utf8" }).status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
