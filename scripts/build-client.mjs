// Builds the client library as an installable npm package: ESM JavaScript with .d.ts declarations,
// in dist/client-package/ (package.json, README.md, lib/). `npm pack dist/client-package` makes the
// tarball; `npm run pack:client` does both.
//
// What goes in: every module of src/client/ (a new one is picked up with no further step, and is
// importable as `<package>/<module>` through the exports map), and whatever those import: the
// generated messages (gen/), and the few modules the service shares with the client (SHARED below).
// The build refuses a package that would ship anything else, a `node:` import or a Node built-in, or
// an import of a server package; the package's dependencies are the npm packages its files import,
// at the versions the repository pins (package.json), so a new import needs no edit either.
//
//   node scripts/build-client.mjs           build (after `tsc`, the whole check runs on the output)
//   node scripts/build-client.mjs --pack D  build, then npm pack into directory D; prints the tarball
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { builtinModules } from "node:module";
import { dirname, join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
/** Where the package is staged. */
export const PACKAGE_DIR = join(ROOT, "dist", "client-package");
const LIB = join(PACKAGE_DIR, "lib");

/**
 * What the package may contain, as paths from the repository's root: the client, the generated
 * messages, and modules written to be shared with devices (no Node, no server state). Adding a
 * module here is a decision about what runs on a cardholder's phone; make it on purpose.
 */
export const SHIPPABLE = [
  "src/client/", // the client library itself
  "gen/", // the generated protobuf messages and service descriptors
  "src/kt/", // the key-transparency verifier (its Node engine is refused below by its imports)
  "src/receipt-fields.", // which receipt fields are sealed and signed, shared with the service
  "src/proto-scalars.", // protobuf scalar facts the signed form of a receipt needs (int64 as numbers)
  "src/error-codes.", // the service's error codes, which the server's error registry is typed against
  // Our own checks of key bytes before WebCrypto reads them (DER, curve points), shared with the service.
  "src/crypto/key-encoding.",
  // The key suites' facts (names, key families and curves, sizes, which wraps are bound), shared with
  // the service; no imports.
  "src/crypto/suites.",
  "src/crypto/asn1.",
  "src/crypto/curves.",
  // The HPKE cipher suite of each HPKE key suite (@hpke/core's KEM, KDF, AEAD by RFC 9180 ids).
  "src/crypto/hpke-suites.",
];

/** Packages of the server that the client must never import. */
export const SERVER_PACKAGES = [
  "fastify",
  "@fastify/",
  "@connectrpc/connect-fastify",
  "mongodb",
  "pino",
  "prom-client",
  "@grpc/grpc-js",
];

/** Every import specifier of a JavaScript or declaration file (static, dynamic and re-exports). */
export function importsOf(text) {
  const found = new Set();
  const patterns = [
    /\bfrom\s*["']([^"']+)["']/g,
    /\bimport\s*["']([^"']+)["']/g,
    /\bimport\s*\(\s*["']([^"']+)["']\s*\)/g,
    /\brequire\s*\(\s*["']([^"']+)["']\s*\)/g,
  ];
  for (const pattern of patterns) for (const match of text.matchAll(pattern)) found.add(match[1]);
  return [...found];
}

/** The npm package a bare specifier names: `@scope/name` or `name`. */
export function packageOf(specifier) {
  const parts = specifier.split("/");
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0];
}

const BUILTINS = new Set(builtinModules.flatMap((name) => [name, name.split("/")[0]]));

/**
 * The problems of a package's files, each a sentence: a file from outside {@link SHIPPABLE}, a
 * `node:` import or one of a Node built-in, an import of a server package. `files` are
 * `{path, text}` with paths from the repository's root (`src/client/index.js`).
 * @param {{path: string, text: string}[]} files
 * @returns {string[]}
 */
export function packageProblems(files) {
  const problems = [];
  for (const { path, text } of files) {
    if (!SHIPPABLE.some((prefix) => path.startsWith(prefix))) {
      problems.push(`${path}: not client code (the package may ship ${SHIPPABLE.join(", ")})`);
    }
    for (const specifier of importsOf(text)) {
      if (specifier.startsWith(".")) continue;
      if (specifier.startsWith("node:") || BUILTINS.has(specifier) || BUILTINS.has(packageOf(specifier))) {
        problems.push(`${path}: imports ${specifier}, a Node built-in (the package runs in browsers too)`);
      } else if (
        SERVER_PACKAGES.some((p) => (p.endsWith("/") ? specifier.startsWith(p) : packageOf(specifier) === p))
      ) {
        problems.push(`${path}: imports ${specifier}, a package of the server`);
      }
    }
  }
  return problems;
}

/** Every file under `dir`, as paths relative to it with forward slashes. */
function walk(dir) {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath, entry.name)).split(sep).join("/"));
}

/** The package's dependencies: each npm package its files import, at the repository's pinned version. */
function dependenciesOf(files, root) {
  const pinned = { ...root.devDependencies, ...root.dependencies };
  const dependencies = {};
  for (const { path, text } of files) {
    for (const specifier of importsOf(text)) {
      if (specifier.startsWith(".")) continue;
      const name = packageOf(specifier);
      if (pinned[name] === undefined)
        throw new Error(`${path} imports ${name}, which package.json does not pin`);
      dependencies[name] = pinned[name];
    }
  }
  return Object.fromEntries(Object.entries(dependencies).sort(([a], [b]) => (a < b ? -1 : 1)));
}

export function build() {
  rmSync(PACKAGE_DIR, { recursive: true, force: true });
  const tsc = join(ROOT, "node_modules", "typescript", "bin", "tsc");
  execFileSync(process.execPath, [tsc, "-p", join(ROOT, "client", "tsconfig.json")], { stdio: "inherit" });
  const files = walk(LIB)
    .filter((path) => path.endsWith(".js") || path.endsWith(".d.ts"))
    .map((path) => ({ path, text: readFileSync(join(LIB, path), "utf8") }));
  const problems = packageProblems(files);
  if (problems.length > 0) {
    throw new Error(`The client package would ship what it must not:\n  ${problems.join("\n  ")}`);
  }
  const root = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));
  const template = JSON.parse(readFileSync(join(ROOT, "client", "package.json"), "utf8"));
  const manifest = { ...template, dependencies: dependenciesOf(files, root) };
  writeFileSync(join(PACKAGE_DIR, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  cpSync(join(ROOT, "client", "README.md"), join(PACKAGE_DIR, "README.md"));
  return { files: files.length, dependencies: manifest.dependencies };
}

function main(argv) {
  const built = build();
  console.log(`client package: ${built.files} files in ${relative(ROOT, PACKAGE_DIR)}`);
  console.log(
    `dependencies: ${Object.entries(built.dependencies)
      .map(([n, v]) => `${n}@${v}`)
      .join(", ")}`,
  );
  const at = argv.indexOf("--pack");
  if (at !== -1) {
    const destination = argv[at + 1] ?? ".";
    mkdirSync(destination, { recursive: true });
    const out = execFileSync("npm", ["pack", PACKAGE_DIR, "--pack-destination", destination, "--json"], {
      encoding: "utf8",
    });
    const [packed] = JSON.parse(out);
    console.log(join(destination, packed.filename));
  }
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  try {
    main(process.argv.slice(2));
  } catch (err) {
    console.error(err.message);
    process.exitCode = 1;
  }
}
