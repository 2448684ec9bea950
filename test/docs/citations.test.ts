import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * A test that the code or the documents cite as proof exists: a comment saying "see
 * test/unit/x.test.ts" about a file that was renamed or never written sends the reader nowhere.
 */

const ROOT = join(import.meta.dirname, "../..");

function filesUnder(dir: string, ending: RegExp): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? filesUnder(join(dir, entry.name), ending)
      : ending.test(entry.name)
        ? [join(dir, entry.name)]
        : [],
  );
}

describe("cited tests", () => {
  it("exist", () => {
    const citing = [
      ...filesUnder(join(ROOT, "src"), /\.ts$/),
      ...filesUnder(join(ROOT, "docs"), /\.md$/),
      ...filesUnder(join(ROOT, "proto"), /\.proto$/),
      join(ROOT, "README.md"),
      join(ROOT, "SECURITY.md"),
    ];
    const cited: string[] = [];
    const missing: string[] = [];
    for (const file of citing) {
      for (const [path] of readFileSync(file, "utf8").matchAll(/\btest\/[\w./-]+\.test\.ts\b/g)) {
        cited.push(path);
        if (!existsSync(join(ROOT, path))) missing.push(`${relative(ROOT, file)}: ${path}`);
      }
    }
    expect(cited.length).toBeGreaterThan(0);
    expect(missing).toEqual([]);
  });
});
