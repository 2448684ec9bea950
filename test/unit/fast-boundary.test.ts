import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * The hand-written fast paths live in src/fast and are reached through its index only (issue 25):
 * a file elsewhere in src/ that imports a fast-path module directly would bypass `FAST_PATHS`.
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

describe("src/fast", () => {
  it("is imported through its index only", () => {
    const offenders: string[] = [];
    for (const file of sourceFiles(SRC)) {
      const path = relative(SRC, file);
      if (path.startsWith("fast/")) continue;
      for (const [, spec] of readFileSync(file, "utf8").matchAll(/from\s+"([^"]+)"/g)) {
        if (spec?.includes("fast/") && !spec.endsWith("fast/index.js")) offenders.push(`${path}: ${spec}`);
      }
    }
    expect(offenders).toEqual([]);
  });
});
