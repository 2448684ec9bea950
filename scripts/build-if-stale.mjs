// Builds dist/ with tsc, by default only when a source is newer than the last build, so that
// `npm start` and `npm run cli` start at once after `npm ci` (whose `prepare` script built once)
// instead of compiling for most of a minute every time. Sources: src/, gen/, package.json and the
// tsconfig files. With --force (`npm run build`) it always builds.
//
// TypeScript is a dev dependency. Without it (`npm ci --omit=dev`, or after the production install's
// `npm prune --omit=dev`) a built dist/ is used as it is, and a missing one is a clear error naming the
// production install, never a stack trace.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const stamp = join(root, "dist", ".build-stamp");
const SOURCES = ["src", "gen", "package.json", "tsconfig.json", "tsconfig.build.json"];

/** The newest modification time under `path` (a file or a directory), in ms; 0 when it does not exist. */
function newest(path) {
  let info;
  try {
    info = statSync(path);
  } catch {
    return 0;
  }
  if (!info.isDirectory()) return info.mtimeMs;
  let latest = info.mtimeMs;
  for (const entry of readdirSync(path)) latest = Math.max(latest, newest(join(path, entry)));
  return latest;
}

const PRODUCTION_INSTALL =
  "A production install builds with the dev dependencies, then removes them:\n" +
  "  npm ci && npm prune --omit=dev\n" +
  '(README.md, "Production install").';

const force = process.argv.includes("--force");
const built = newest(stamp);
const latestSource = Math.max(...SOURCES.map((source) => newest(join(root, source))));
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
if (!existsSync(tsc)) {
  if (built === 0 || force) {
    process.stderr.write(
      `${built === 0 ? "dist/ is not built" : "Cannot rebuild dist/"}, and TypeScript is not installed ` +
        `(npm ci --omit=dev leaves the dev dependencies out).\n${PRODUCTION_INSTALL}\n`,
    );
    process.exit(1);
  }
  if (latestSource > built) {
    process.stderr.write(
      "Sources changed since dist/ was built, but TypeScript is not installed (a production install): " +
        "running dist/ as built. Run npm ci to rebuild.\n",
    );
  }
} else if (force || built === 0 || latestSource > built) {
  if (!force)
    process.stderr.write(
      built === 0 ? "Building dist/ (first run)...\n" : "Sources changed: rebuilding dist/...\n",
    );
  // The stamp records when the build started, so a source saved while tsc runs counts as newer.
  const started = new Date();
  try {
    execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.build.json")], { stdio: "inherit" });
  } catch (err) {
    // tsc has said what is wrong; a stack trace of this script would only bury it.
    process.stderr.write("Building dist/ failed (see tsc's messages above).\n");
    process.exit(typeof err.status === "number" && err.status > 0 ? err.status : 1);
  }
  writeFileSync(stamp, `${started.toISOString()}\n`);
  utimesSync(stamp, started, started);
}
