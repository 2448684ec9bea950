import { spawnSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const repo = join(import.meta.dirname, "..", "..");

/** Runs the build script of a project copy; returns what it said on stderr and how long it took. */
function run(root: string, ...args: string[]): { said: string; ms: number } {
  const started = performance.now();
  const result = spawnSync(process.execPath, [join(root, "scripts", "build-if-stale.mjs"), ...args], {
    encoding: "utf8",
  });
  if (result.status !== 0) throw new Error(`build-if-stale failed: ${result.stderr}${result.stdout}`);
  return { said: result.stderr, ms: performance.now() - started };
}

describe("npm start and npm run cli build only when sources changed", () => {
  let root: string;
  beforeAll(() => {
    // A tiny project with the real script and the real TypeScript: the script's decisions, not tsc's speed.
    // Its tsc reads the ES library alone, not the DOM's or every @types package of the linked
    // node_modules: a build then takes about 0.4 s instead of 2 s.
    root = mkdtempSync(join(tmpdir(), "build-if-stale-"));
    mkdirSync(join(root, "scripts"));
    mkdirSync(join(root, "src"));
    mkdirSync(join(root, "gen"));
    copyFileSync(join(repo, "scripts", "build-if-stale.mjs"), join(root, "scripts", "build-if-stale.mjs"));
    symlinkSync(join(repo, "node_modules"), join(root, "node_modules"));
    writeFileSync(join(root, "package.json"), '{"type":"module"}\n');
    writeFileSync(
      join(root, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          outDir: "dist",
          rootDir: ".",
          module: "NodeNext",
          noEmit: true,
          types: [],
          lib: ["es2022"],
        },
      }),
    );
    writeFileSync(
      join(root, "tsconfig.build.json"),
      JSON.stringify({ extends: "./tsconfig.json", compilerOptions: { noEmit: false }, include: ["src"] }),
    );
    writeFileSync(join(root, "src", "main.ts"), "export const answer: number = 1;\n");
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("builds on the first run, not again while nothing changed, and again after an edit", () => {
    expect(run(root).said).toContain("first run");
    expect(readFileSync(join(root, "dist", "src", "main.js"), "utf8")).toContain("answer = 1");
    expect(existsSync(join(root, "dist", ".build-stamp"))).toBe(true);

    const idle = run(root);
    expect(idle.said).toBe("");
    // The last build was a while ago; then a source is edited.
    const earlier = new Date(Date.now() - 10_000);
    utimesSync(join(root, "dist", ".build-stamp"), earlier, earlier);
    writeFileSync(join(root, "src", "main.ts"), "export const answer: number = 2;\n");
    expect(run(root).said).toContain("Sources changed");
    expect(readFileSync(join(root, "dist", "src", "main.js"), "utf8")).toContain("answer = 2");
    expect(run(root).said).toBe("");
  });

  it("is what npm start (one process or a cluster), npm run cli and the install use; npm run build always builds", () => {
    const { scripts, bin } = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as {
      scripts: Record<string, string>;
      bin: Record<string, string>;
    };
    expect(scripts.prepare).toBe("node scripts/build-if-stale.mjs");
    expect(scripts.start).toBe(
      "node scripts/build-if-stale.mjs && node --max-semi-space-size=64 dist/src/main.js",
    );
    expect(scripts["start:cluster"]).toBe(
      "node scripts/build-if-stale.mjs && node --max-semi-space-size=64 dist/src/cluster.js",
    );
    expect(scripts.cli).toBe("node scripts/build-if-stale.mjs && node dist/src/cli/bin.js");
    expect(scripts.build).toBe("node scripts/build-if-stale.mjs --force");
    expect(bin.receipts).toBe("dist/src/cli/bin.js");
    const forced = run(root, "--force");
    expect(forced.said).toBe("");
    expect(readFileSync(join(root, "dist", ".build-stamp"), "utf8")).toMatch(/^\d{4}-\d\d-\d\dT/);
  });
});

describe("without TypeScript (a production install, or npm ci --omit=dev)", () => {
  let root: string;
  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), "build-if-stale-prod-"));
    mkdirSync(join(root, "scripts"));
    mkdirSync(join(root, "src"));
    mkdirSync(join(root, "node_modules"));
    copyFileSync(join(repo, "scripts", "build-if-stale.mjs"), join(root, "scripts", "build-if-stale.mjs"));
    writeFileSync(join(root, "package.json"), '{"type":"module"}\n');
    writeFileSync(join(root, "src", "main.ts"), "export const answer: number = 1;\n");
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  const script = () =>
    spawnSync(process.execPath, [join(root, "scripts", "build-if-stale.mjs")], { encoding: "utf8" });

  it("refuses a missing dist/ with the production install's commands, not a stack trace", () => {
    const result = script();
    expect(result.status).toBe(1);
    expect(result.stderr).toContain("dist/ is not built, and TypeScript is not installed");
    expect(result.stderr).toContain("npm ci && npm prune --omit=dev");
    expect(result.stderr).not.toMatch(/^\s+at /m);
  });

  it("runs a built dist/ as it is, and says so when sources are newer", () => {
    mkdirSync(join(root, "dist"), { recursive: true });
    writeFileSync(join(root, "dist", ".build-stamp"), "built\n");
    const earlier = new Date(Date.now() - 10_000);
    utimesSync(join(root, "dist", ".build-stamp"), earlier, earlier);
    const stale = script();
    expect(stale.status).toBe(0);
    expect(stale.stderr).toContain("running dist/ as built");
    const later = new Date(Date.now() + 10_000);
    utimesSync(join(root, "dist", ".build-stamp"), later, later);
    expect(script()).toMatchObject({ status: 0, stderr: "" });
  });
});
