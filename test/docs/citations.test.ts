import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * A test that the code, the documents, the scripts or other tests cite as proof exists: a comment
 * citing a test file that was moved, renamed or never written sends the reader nowhere.
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
      ...filesUnder(join(ROOT, "scripts"), /\.m?[jt]s$/),
      ...filesUnder(join(ROOT, "bench"), /\.[jt]s$/),
      join(ROOT, ".ci/run"),
      join(ROOT, "vitest.config.ts"),
      join(ROOT, "README.md"),
      join(ROOT, "SECURITY.md"),
    ];
    // In the tests themselves, only their comments cite (their strings may name paths as data).
    const testComments = filesUnder(join(ROOT, "test"), /\.ts$/).map((file) => ({
      file,
      text: readFileSync(file, "utf8")
        .split("\n")
        .filter((line) => /^\s*(\/\/|\/\*|\*)/.test(line))
        .join("\n"),
    }));
    const cited: string[] = [];
    const missing: string[] = [];
    for (const { file, text } of [
      ...citing.map((file) => ({ file, text: readFileSync(file, "utf8") })),
      ...testComments,
    ]) {
      for (const [path] of text.matchAll(/\btest\/[\w./-]+\.test\.ts\b/g)) {
        cited.push(path);
        if (!existsSync(join(ROOT, path))) missing.push(`${relative(ROOT, file)}: ${path}`);
      }
    }
    expect(cited.length).toBeGreaterThan(0);
    expect(missing).toEqual([]);
  });
});
