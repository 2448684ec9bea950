import { createHash } from "node:crypto";
import { existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { basename } from "node:path";
import { fileURLToPath } from "node:url";

/** Where and how to start a worker thread. */
export interface WorkerEntry {
  url: URL;
  /** Node flags for the worker; absent when the defaults (the parent's flags) will do. */
  execArgv?: string[];
}

/**
 * How to start the worker module `name` that sits next to the module at `parentUrl` (pass
 * `import.meta.url`). Compiled (dist/) code starts `name.js` directly. Under vitest the caller is a
 * `.ts` source with no `.js` beside it, and Node 20 cannot run TypeScript, so the worker starts on a
 * JavaScript bundle of `name.ts` (see {@link bundleOf}); this only ever happens in tests.
 */
export function workerEntry(name: string, parentUrl: string): WorkerEntry {
  if (!parentUrl.endsWith(".ts")) return { url: new URL(`./${name}.js`, parentUrl) };
  return { url: bundleOf(new URL(`./${name}.ts`, parentUrl)) };
}

const bundles = new Map<string, URL>();

/**
 * The worker source at `entry` and the project files it imports, bundled into one ES module by esbuild
 * (a dev dependency), once per process; packages stay imports. Loading each `.ts` file through module
 * hooks with the TypeScript compiler cost about 1.2 s per worker start (each worker's loader thread
 * loaded the compiler), and the test suite starts over a hundred workers; the bundle starts in about
 * 0.15 s. It is written under `node_modules/.cache`, where its package imports resolve, named by a hash
 * of its content, so test processes running at once share it and never read a file half-written.
 */
function bundleOf(entry: URL): URL {
  const cached = bundles.get(entry.href);
  if (cached !== undefined) return cached;
  const esbuild = createRequire(import.meta.url)("esbuild") as typeof import("esbuild");
  const { outputFiles } = esbuild.buildSync({
    entryPoints: [fileURLToPath(entry)],
    bundle: true,
    packages: "external",
    format: "esm",
    platform: "node",
    write: false,
    logLevel: "silent",
  });
  const code = outputFiles[0]?.text ?? "";
  const hash = createHash("sha256").update(code).digest("hex").slice(0, 16);
  const dir = new URL("../../node_modules/.cache/workers/", import.meta.url);
  const file = new URL(`${basename(entry.pathname, ".ts")}-${hash}.mjs`, dir);
  if (!existsSync(file)) {
    mkdirSync(dir, { recursive: true });
    const partial = new URL(`${file.href}.${process.pid}.tmp`);
    writeFileSync(partial, code);
    renameSync(partial, file);
  }
  bundles.set(entry.href, file);
  return file;
}
