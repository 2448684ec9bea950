import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * The quick half of the production install check (the slow half, from a fresh clone, is
 * fresh-clone.test.ts, a CI step of its own): every package the service's code imports at run time
 * is a `dependency`, so `npm prune --omit=dev` keeps it. A package listed under both dependencies and
 * devDependencies counts as dev to npm (the lockfile marks it `dev: true` and the prune removes it):
 * that is how `@noble/curves`, imported by src/kt, once went missing from a production install.
 */
const ROOT = join(import.meta.dirname, "..", "..");
const manifest = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
};
const lock = JSON.parse(readFileSync(join(ROOT, "package-lock.json"), "utf8")) as {
  packages: Record<string, { dev?: boolean }>;
};

/** Every .ts file under `dir`. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith(".ts"))
    .map((entry) => join(entry.parentPath, entry.name));
}

/** The package name of a bare import specifier (`@scope/name/sub` -> `@scope/name`). */
function packageOf(specifier: string): string {
  const parts = specifier.split("/");
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : (parts[0] as string);
}

/** The packages `file` imports at run time (type-only imports and `typeof import()` are erased). */
function runtimeImports(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const found: string[] = [];
  const statement =
    /^\s*(import|export)\s+(type\s+)?[^;]*?\s+from\s+"([^"]+)"|(?<!typeof )import\("([^"]+)"\)/gm;
  for (const match of text.matchAll(statement)) {
    const specifier = match[3] ?? match[4];
    if (specifier === undefined || match[2] !== undefined) continue;
    if (specifier.startsWith(".") || specifier.startsWith("node:")) continue;
    found.push(packageOf(specifier));
  }
  return found;
}

describe("run-time dependencies", () => {
  const imported = new Map<string, string>();
  for (const dir of ["src", "gen"]) {
    for (const file of sources(join(ROOT, dir))) {
      for (const name of runtimeImports(file)) imported.set(name, relative(ROOT, file));
    }
  }

  it("finds the packages the service imports (not vacuous)", () => {
    expect([...imported.keys()]).toEqual(expect.arrayContaining(["fastify", "mongodb", "@noble/curves"]));
  });

  it("lists every one as a dependency, not a devDependency, and the lockfile keeps it in production", () => {
    for (const [name, file] of imported) {
      expect(manifest.dependencies?.[name], `${name} (imported by ${file})`).toBeDefined();
      expect(manifest.devDependencies?.[name], `${name} (imported by ${file}) is also a devDependency`).toBe(
        undefined,
      );
      expect(lock.packages[`node_modules/${name}`]?.dev, `${name} is dev in package-lock.json`).not.toBe(
        true,
      );
    }
  });
});
