import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * test/ mirrors src/, so that the tests of a source file are found beside its mirror path: the tests
 * of src/rpc/policy.ts in test/rpc, of src/domain/kt/ in test/domain/kt, of src/config.ts in
 * test/config.test.ts. The directories that belong to no one source directory are the cross-cutting
 * ones listed here (docs/architecture.md, "Tests, by tier", says what each holds). A test file placed
 * anywhere else (a new test/unit, say) fails here with its path; helpers and fixtures (files not
 * ending in `.test.ts`) may sit beside the tests that use them.
 */

const ROOT = join(import.meta.dirname, "../..");

/** The top-level directories of test/ that mirror no source directory. */
const CROSS_CUTTING = [
  "browser",
  "docs",
  "e2e",
  "hardening",
  "install",
  "mutation",
  "openapi",
  "structure",
  "support",
];

function testFilesUnder(dir: string, prefix: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = prefix === "" ? entry.name : `${prefix}/${entry.name}`;
    if (entry.isDirectory())
      return entry.name === "node_modules" ? [] : testFilesUnder(join(dir, entry.name), path);
    return entry.name.endsWith(".test.ts") ? [path] : [];
  });
}

/** The source modules at the top of src/, by name: `config` for src/config.ts. */
const TOP_MODULES = readdirSync(join(ROOT, "src"))
  .filter((name) => name.endsWith(".ts"))
  .map((name) => name.slice(0, -".ts".length));

/**
 * Why a test file (its path under test/) is out of place, or undefined when it is where it belongs:
 * under a cross-cutting directory; directly in test/ and named after a module at the top of src/
 * (`logging-card-data.test.ts` for src/logging.ts); or in a directory whose mirror under src/ exists.
 */
function misplaced(path: string): string | undefined {
  const parts = path.split("/");
  const name = parts.pop() ?? "";
  if (parts.length === 0) {
    const stem = name.slice(0, -".test.ts".length);
    const owner = TOP_MODULES.find((module) => stem === module || stem.startsWith(`${module}-`));
    return owner === undefined ? `test/${path}: no src/${stem}.ts at the top of src/` : undefined;
  }
  if (CROSS_CUTTING.includes(parts[0] ?? "")) return undefined;
  const mirror = join("src", ...parts);
  return existsSync(join(ROOT, mirror)) ? undefined : `test/${path}: no ${mirror}/ to mirror`;
}

describe("test/ mirrors src/", () => {
  it("puts every test file beside its source directory's mirror or in a cross-cutting directory", () => {
    const files = testFilesUnder("test", "");
    expect(files.length).toBeGreaterThan(100);
    expect(files.flatMap((path) => misplaced(path) ?? [])).toEqual([]);
  });

  it("names what is out of place", () => {
    expect(misplaced("unit/roles.test.ts")).toBe("test/unit/roles.test.ts: no src/unit/ to mirror");
    expect(misplaced("domain/nowhere/x.test.ts")).toBe(
      "test/domain/nowhere/x.test.ts: no src/domain/nowhere/ to mirror",
    );
    expect(misplaced("roles.test.ts")).toBe("test/roles.test.ts: no src/roles.ts at the top of src/");
    expect(misplaced("rpc/roles.test.ts")).toBeUndefined();
    expect(misplaced("logging-card-data.test.ts")).toBeUndefined();
    expect(misplaced("e2e/anything.test.ts")).toBeUndefined();
  });
});

/** Every cross-cutting directory exists: a stale name here would excuse nothing and hide nothing. */
describe("the cross-cutting directories", () => {
  it("exist", () => {
    expect(CROSS_CUTTING.filter((dir) => !existsSync(join(ROOT, "test", dir)))).toEqual([]);
  });
});
