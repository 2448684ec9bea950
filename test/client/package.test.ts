import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, relative, sep } from "node:path";
import { promisify } from "node:util";
import { build } from "esbuild";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { importsOf, PACKAGE_DIR, packageOf, packageProblems } from "../../scripts/build-client.mjs";
import { startService, type TestService } from "../support/harness.js";

/**
 * The client library as a package, as a developer gets it: `npm pack` of the build, installed into an
 * empty project from the tarball and the npm cache only (no network), a sample type-checked with
 * tsc (with Node's types, and with only the browser's), bundled for the browser, and run against a
 * running service. Takes a while (an npm install): run alone with `npx vitest run test/client/package`.
 */

const ROOT = join(import.meta.dirname, "..", "..");
const SAMPLE = join(import.meta.dirname, "package-sample");
const run = promisify(execFile);

/** The repository's pinned version of a package, to install the same in the sample project. */
function pinned(name: string): string {
  const manifest = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
  const version = manifest.devDependencies?.[name] ?? manifest.dependencies?.[name];
  if (version === undefined) throw new Error(`${name} is not pinned in package.json`);
  return version;
}

type LockEntry = { version: string; dependencies?: Record<string, string>; [key: string]: unknown };

/**
 * The sample project's package-lock.json: the packed client from its tarball, and every other
 * package (the client's dependencies, TypeScript, Node's types, and what they need) exactly as the
 * repository's own lockfile has it, so `npm ci --offline` installs it from the npm cache alone. (An
 * `npm install --offline` by name would need the registry's package documents, which no cache holds
 * after an `npm ci`.)
 */
function sampleLockfile(tarballName: string, integrity: string, clientDependencies: Record<string, string>) {
  const root = JSON.parse(readFileSync(join(ROOT, "package-lock.json"), "utf8")) as {
    packages: Record<string, LockEntry>;
  };
  const packages: Record<string, LockEntry> = {};
  const add = (name: string, parent: string) => {
    const nested = `${parent}/node_modules/${name}`;
    const path = parent !== "" && root.packages[nested] !== undefined ? nested : `node_modules/${name}`;
    const entry = root.packages[path];
    if (entry === undefined) throw new Error(`${name} is not in the repository's lockfile`);
    if (packages[path] !== undefined) return;
    const { dev: _dev, optional: _optional, devOptional: _devOptional, peer: _peer, ...kept } = entry;
    packages[path] = kept as LockEntry;
    for (const dependency of Object.keys(entry.dependencies ?? {})) add(dependency, path);
  };
  const direct = { typescript: pinned("typescript"), "@types/node": pinned("@types/node") };
  for (const name of [...Object.keys(clientDependencies), ...Object.keys(direct)]) add(name, "");
  const spec = `file:../${tarballName}`;
  packages["node_modules/receipt-encryption-client"] = {
    version: "0.1.0",
    resolved: spec,
    integrity,
    dependencies: clientDependencies,
  };
  const dependencies = { "receipt-encryption-client": spec, ...direct };
  const project = { name: "sample-app", version: "0.0.0" };
  return {
    manifest: { ...project, private: true, type: "module", dependencies },
    lock: {
      ...project,
      lockfileVersion: 3,
      requires: true,
      packages: { "": { ...project, dependencies }, ...packages },
    },
  };
}

/** Every file under `dir`, relative, with forward slashes. */
function walk(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath, entry.name)).split(sep).join("/"));
}

describe("the package guard (scripts/build-client.mjs)", () => {
  it("refuses Node built-ins, server packages and files from outside the client", () => {
    const problems = packageProblems([
      { path: "src/client/ok.js", text: 'import { x } from "./y.js";\nimport "@bufbuild/protobuf";' },
      { path: "src/client/a.js", text: 'import { readFileSync } from "node:fs";' },
      { path: "src/client/b.js", text: 'const c = require("crypto");' },
      { path: "src/client/c.d.ts", text: 'export type X = import("fastify").FastifyInstance;' },
      { path: "src/client/d.js", text: 'export { a } from "mongodb";\nawait import("@fastify/cors");' },
      { path: "src/domain/payments.js", text: "" },
      { path: "src/kt/node-engine.js", text: 'import { verify } from "node:crypto";' },
    ]);
    expect(problems).toEqual([
      "src/client/a.js: imports node:fs, a Node built-in (the package runs in browsers too)",
      "src/client/b.js: imports crypto, a Node built-in (the package runs in browsers too)",
      "src/client/c.d.ts: imports fastify, a package of the server",
      "src/client/d.js: imports mongodb, a package of the server",
      "src/client/d.js: imports @fastify/cors, a package of the server",
      "src/domain/payments.js: not client code (the package may ship src/client/, gen/, src/kt/, src/receipt-fields., src/proto-scalars., src/error-codes., src/crypto/key-encoding., src/crypto/suites., src/crypto/asn1., src/crypto/curves., src/crypto/hpke-suites.)",
      "src/kt/node-engine.js: imports node:crypto, a Node built-in (the package runs in browsers too)",
    ]);
    expect(packageOf("@noble/curves/ed25519.js")).toBe("@noble/curves");
    expect(importsOf('import a from "x";\nexport * from "./y.js";')).toEqual(["x", "./y.js"]);
  });
});

describe("the client package, packed, installed and used", () => {
  let dir: string;
  let tarball: string;
  let app: string;
  let svc: TestService;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "client-package-"));
    const built = await run(process.execPath, [join(ROOT, "scripts", "build-client.mjs"), "--pack", dir], {
      cwd: ROOT,
    });
    tarball = built.stdout.trim().split("\n").at(-1) ?? "";
    app = join(dir, "app");
    mkdirSync(app);
    const packed = JSON.parse(readFileSync(join(PACKAGE_DIR, "package.json"), "utf8"));
    const integrity = `sha512-${createHash("sha512").update(readFileSync(tarball)).digest("base64")}`;
    const { manifest, lock } = sampleLockfile(basename(tarball), integrity, packed.dependencies);
    writeFileSync(join(app, "package.json"), JSON.stringify(manifest, null, 2));
    writeFileSync(join(app, "package-lock.json"), JSON.stringify(lock, null, 2));
    for (const file of ["sample.ts", "browser.ts"]) copyFileSync(join(SAMPLE, file), join(app, file));
    // The page is checked with every declaration file (ours included); the Node sample as most
    // projects are, with skipLibCheck (Connect's own declarations name DOM types Node's lack).
    const strict = { strict: true, target: "ES2022", noEmit: true };
    const tsconfig = (compilerOptions: object, files: string[]) => JSON.stringify({ compilerOptions, files });
    writeFileSync(
      join(app, "tsconfig.node.json"),
      tsconfig(
        {
          ...strict,
          module: "NodeNext",
          moduleResolution: "NodeNext",
          lib: ["ES2023"],
          types: ["node"],
          skipLibCheck: true,
        },
        ["sample.ts"],
      ),
    );
    writeFileSync(
      join(app, "tsconfig.browser.json"),
      tsconfig(
        {
          ...strict,
          module: "ESNext",
          moduleResolution: "Bundler",
          lib: ["ES2023", "DOM"],
          types: [],
          skipLibCheck: false,
        },
        ["browser.ts"],
      ),
    );
    // Offline: the tarball, and the packages it needs from the npm cache the repository filled. Not
    // in this run's npm context (npx sets npm_* variables naming the repository).
    const env = Object.fromEntries(
      Object.entries(process.env).filter(([name]) => !/^npm_/i.test(name) || name === "npm_config_cache"),
    );
    await run("npm", ["ci", "--offline", "--no-audit", "--no-fund", "--loglevel=error"], { cwd: app, env });
    svc = await startService();
  }, 600_000);

  afterAll(async () => {
    await svc?.close();
    if (dir !== undefined && process.env.KEEP_SAMPLE === undefined)
      rmSync(dir, { recursive: true, force: true });
  });

  it("holds ESM JavaScript and declarations of the client, and nothing of the server", async () => {
    const installed = join(app, "node_modules", "receipt-encryption-client");
    const manifest = JSON.parse(readFileSync(join(installed, "package.json"), "utf8"));
    expect(manifest).toMatchObject({ type: "module", engines: { node: ">=22" } });
    expect(manifest.exports["."]).toEqual({
      types: "./lib/src/client/index.d.ts",
      default: "./lib/src/client/index.js",
    });
    const files = walk(join(installed, "lib"));
    expect(files).toContain("src/client/index.d.ts");
    expect(files).toContain("src/client/signing.js");
    // Every module of src/client is in it, as JavaScript and declarations, with no extra step.
    for (const module of readdirSync(join(ROOT, "src", "client")).filter((f) => f.endsWith(".ts"))) {
      const name = module.replace(/\.ts$/, "");
      expect(files, module).toEqual(
        expect.arrayContaining([`src/client/${name}.js`, `src/client/${name}.d.ts`]),
      );
    }
    const code = files
      .filter((f) => f.endsWith(".js") || f.endsWith(".d.ts"))
      .map((path) => ({ path, text: readFileSync(join(installed, "lib", path), "utf8") }));
    expect(packageProblems(code)).toEqual([]);
    // Its dependencies are what its files import, no more.
    const imported = new Set(
      code.flatMap(({ text }) =>
        importsOf(text)
          .filter((s) => !s.startsWith("."))
          .map(packageOf),
      ),
    );
    expect(Object.keys(manifest.dependencies).sort()).toEqual([...imported].sort());
  });

  it("type-checks a sample with Node's types, and a page with only the browser's", async () => {
    const tsc = join(app, "node_modules", "typescript", "bin", "tsc");
    await run(process.execPath, [tsc, "-p", "tsconfig.node.json"], { cwd: app });
    await run(process.execPath, [tsc, "-p", "tsconfig.browser.json"], { cwd: app });
  }, 120_000);

  it("bundles for the browser with no Node module in it", async () => {
    const result = await build({
      absWorkingDir: app,
      entryPoints: [join(app, "browser.ts")],
      bundle: true,
      write: false,
      format: "esm",
      platform: "browser",
      target: "chrome120",
      logLevel: "silent",
    });
    expect(result.errors).toEqual([]);
    expect(result.outputFiles[0]?.text.length ?? 0).toBeGreaterThan(10_000);
  });

  it("runs the sample against a running service", async () => {
    const tsc = join(app, "node_modules", "typescript", "bin", "tsc");
    await run(process.execPath, [tsc, "-p", "tsconfig.node.json", "--noEmit", "false", "--outDir", "out"], {
      cwd: app,
    });
    const { stdout } = await run(process.execPath, [join(app, "out", "sample.js")], {
      cwd: app,
      env: {
        ...process.env,
        BASE_URL: svc.baseUrl,
        ISSUER_KEY: svc.issuerKey,
        MERCHANT_KEY: svc.merchantKey,
      },
    });
    const seen = JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}");
    expect(seen.paymentId).toMatch(/^pay_/);
    expect(seen.encrypted).toBe("r5-1");
    // Both signed receipts, listed newest first and opened with the device's key.
    const signed = { items: ["Espresso"], merchantKeyId: expect.stringMatching(/^mk_/), signed: true };
    expect(seen.opened).toEqual([
      { receiptId: "r5-1", ...signed },
      { receiptId: "r-1", ...signed },
    ]);
    expect(seen.twice).toEqual({
      code: "conflict",
      docUrl: `${svc.baseUrl}/docs/errors#conflict`,
      paymentId: seen.paymentId,
    });
    // A declined payment is kept, and the error names it.
    expect(seen.declined).toEqual({
      code: "payment_declined",
      docUrl: `${svc.baseUrl}/docs/errors#payment_declined`,
      declineCode: "insufficient_funds",
      paymentId: expect.stringMatching(/^pay_/),
    });
    expect(seen.declined.paymentId).not.toBe(seen.paymentId);
    expect(seen.unsigned).toMatchObject({ code: "invalid_signature" });
  }, 120_000);
});
