import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = join(import.meta.dirname, "..", "..");

/**
 * Issue 37, "Standalone documents": the repository says everything in its own words (README,
 * SECURITY.md, docs/, the comments), so nothing in it may point a reader to a specification they do
 * not have: no spec file by name, no path to a folder beside the repository, no numbered section of one.
 * This file names them to test its patterns and is left out; a protocol's public spec (gRPC, Standard
 * Webhooks) is fine.
 */
const OUTSIDE_SPEC = [
  /SPEC\.md/i,
  /\.\.\/shared/,
  /\bspec(ification)?\s+sections?\s+\d/i,
  /\bsections?\s+\d+\s+of\s+the\s+spec\b/i,
  // The bare form the code used for the same sections: "(section 17)", "section 22's outbox".
  /\(sections?\s+\d+(?![.\d])/i,
  /\bsection\s+\d+'s\b/i,
];

const SELF = "test/docs/standalone.test.ts";

/** Tracked files but the lock file (package names and URLs, not ours to word) and this one. */
function trackedTextFiles(): string[] {
  const listed = spawnSync("git", ["ls-files", "-z"], { cwd: ROOT, encoding: "utf8" });
  if (listed.status !== 0) throw new Error(`git ls-files failed: ${listed.stderr}`);
  return listed.stdout
    .split("\0")
    .filter((path) => path !== "" && path !== "package-lock.json" && path !== SELF);
}

describe("standalone documents", () => {
  it("finds the patterns it looks for (so a pass below means something)", () => {
    const samples = [
      "see SPEC.md",
      "../shared/TOOLCHAIN",
      "SPEC section 20",
      "section 3 of the spec",
      "(section 17)",
    ];
    for (const sample of samples) {
      const found = OUTSIDE_SPEC.some((p) => p.test(sample));
      expect(found, sample).toBe(true);
    }
    expect(
      OUTSIDE_SPEC.some((p) =>
        p.test("as the gRPC spec says; (RFC 9113, section 7); schedule (section 5.1)"),
      ),
    ).toBe(false);
  });

  it("has no tracked file that refers to a specification outside the repository", () => {
    const offenders: string[] = [];
    for (const path of trackedTextFiles()) {
      let text: string;
      try {
        text = readFileSync(join(ROOT, path), "utf8");
      } catch {
        continue; // listed but absent in this checkout (a deleted, uncommitted file)
      }
      if (text.includes("\0")) continue; // binary
      text.split("\n").forEach((line, i) => {
        if (OUTSIDE_SPEC.some((p) => p.test(line))) offenders.push(`${path}:${i + 1}: ${line.trim()}`);
      });
    }
    expect(offenders).toEqual([]);
  });
});
