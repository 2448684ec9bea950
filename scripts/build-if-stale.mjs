// Builds dist/ with tsc, by default only when a source is newer than the last build, so that
// `npm start` and `npm run cli` start at once after `npm ci` (whose `prepare` script built once)
// instead of compiling for most of a minute every time. Sources: src/, gen/, package.json and the
// tsconfig files. With --force (`npm run build`) it always builds.
import { execFileSync } from "node:child_process";
import { readdirSync, statSync, utimesSync, writeFileSync } from "node:fs";
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

const force = process.argv.includes("--force");
const built = newest(stamp);
const latestSource = Math.max(...SOURCES.map((source) => newest(join(root, source))));
if (force || built === 0 || latestSource > built) {
  if (!force)
    process.stderr.write(
      built === 0 ? "Building dist/ (first run)...\n" : "Sources changed: rebuilding dist/...\n",
    );
  // The stamp records when the build started, so a source saved while tsc runs counts as newer.
  const started = new Date();
  const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
  execFileSync(process.execPath, [tsc, "-p", join(root, "tsconfig.build.json")], { stdio: "inherit" });
  writeFileSync(stamp, `${started.toISOString()}\n`);
  utimesSync(stamp, started, started);
}
