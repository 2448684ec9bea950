import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

/** Where and how to start a worker thread. */
export interface WorkerEntry {
  url: URL;
  /** Node flags for the worker; absent when the defaults (the parent's flags) will do. */
  execArgv?: string[];
}

/**
 * How to start the worker module `name` that sits next to the module at `parentUrl` (pass
 * `import.meta.url`). Compiled (dist/) code starts `name.js` directly. Under vitest the caller is a
 * `.ts` source with no `.js` beside it, and Node 20 cannot run TypeScript, so the worker is started on
 * `name.ts` with a module loader that strips types on the fly (see {@link TS_HOOKS}); this costs about a
 * second per worker start and only ever happens in tests.
 */
export function workerEntry(name: string, parentUrl: string): WorkerEntry {
  if (!parentUrl.endsWith(".ts")) return { url: new URL(`./${name}.js`, parentUrl) };
  return { url: new URL(`./${name}.ts`, parentUrl), execArgv: ["--import", typescriptLoaderUrl()] };
}

/**
 * Module hooks (run on Node's loader thread) that load `.ts` files through the TypeScript compiler's
 * `transpileModule` (a dev dependency) and map the `.js` specifiers of relative imports to their `.ts`
 * sources, as `tsc` with NodeNext resolution expects them to be written.
 */
const TS_HOOKS = `
import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
let ts;
export async function initialize(data) {
  ts = (await import(data.typescript)).default;
}
export async function resolve(specifier, context, nextResolve) {
  if (context.parentURL?.endsWith(".ts") && /^\\.\\.?\\//.test(specifier) && specifier.endsWith(".js")) {
    const candidate = new URL(specifier.slice(0, -3) + ".ts", context.parentURL);
    if (existsSync(fileURLToPath(candidate))) return { url: candidate.href, shortCircuit: true };
  }
  return nextResolve(specifier, context);
}
export async function load(url, context, nextLoad) {
  if (!url.startsWith("file:") || !url.endsWith(".ts")) return nextLoad(url, context);
  const output = ts.transpileModule(readFileSync(fileURLToPath(url), "utf8"), {
    fileName: fileURLToPath(url),
    compilerOptions: {
      module: ts.ModuleKind.ESNext,
      target: ts.ScriptTarget.ES2022,
      verbatimModuleSyntax: true,
    },
  });
  return { format: "module", source: output.outputText, shortCircuit: true };
}
`;

let loaderUrl: string | undefined;

/** A `data:` module that registers {@link TS_HOOKS}; built once, for `--import`. */
function typescriptLoaderUrl(): string {
  if (loaderUrl === undefined) {
    const typescript = pathToFileURL(createRequire(import.meta.url).resolve("typescript")).href;
    const hooks = `data:text/javascript,${encodeURIComponent(TS_HOOKS)}`;
    const register = `import { register } from "node:module";
register(${JSON.stringify(hooks)}, { data: { typescript: ${JSON.stringify(typescript)} } });`;
    loaderUrl = `data:text/javascript,${encodeURIComponent(register)}`;
  }
  return loaderUrl;
}
