// Adds the platform-specific optional packages that npm 11 leaves out of package-lock.json
// (npm/cli#8320, #4828): without them `npm ci` refuses the lockfile ("Missing: ... from lock file").
// Each missing entry is filled from the registry's own metadata (version, integrity, os, cpu, libc);
// where the registry does not carry that platform's package, os/cpu/libc are read from its name
// (`cli-darwin-arm64`, `buf-linux-armv7`, `...-musl`), which is enough for npm to skip it elsewhere.
// Run after any dependency change: node scripts/complete-lockfile.mjs
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";

const path = new URL("../package-lock.json", import.meta.url);
const lock = JSON.parse(readFileSync(path, "utf8"));
const packages = lock.packages;
let added = 0;
for (const [location, entry] of Object.entries(packages)) {
  for (const [name, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const nested = `${location}/node_modules/${name}`;
    const hoisted = `node_modules/${name}`;
    if (packages[nested] || packages[hoisted]) continue;
    const meta = registryMeta(name, version) ?? platformFromName(name, version);
    const record = { version: meta.version };
    if (meta["dist.integrity"]) record.integrity = meta["dist.integrity"];
    for (const field of ["cpu", "os", "libc"]) if (meta[field]) record[field] = [meta[field]].flat();
    if (entry.dev) record.dev = true;
    if (meta.license) record.license = meta.license;
    record.optional = true;
    if (meta.engines) record.engines = meta.engines;
    packages[hoisted] = record;
    added += 1;
  }
}
lock.packages = Object.fromEntries(
  Object.entries(packages).sort(([a], [b]) => (a === "" ? -1 : b === "" ? 1 : a.localeCompare(b))),
);
writeFileSync(path, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`added ${added} platform packages to package-lock.json`);

function registryMeta(name, version) {
  try {
    const fields = ["version", "dist.integrity", "os", "cpu", "libc", "license", "engines"];
    const out = execFileSync("npm", ["view", `${name}@${version}`, "--json", ...fields], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    });
    return JSON.parse(out);
  } catch {
    return undefined;
  }
}

function platformFromName(name, version) {
  const parts = name.split("/").pop().split("-");
  const os = parts.find((p) =>
    ["android", "darwin", "linux", "win32", "freebsd", "openbsd", "sunos", "aix"].includes(p),
  );
  const cpuName = parts.find((p) =>
    ["arm64", "x64", "ia32", "armv7", "arm", "ppc64", "s390x", "riscv64"].includes(p),
  );
  if (!os || !cpuName) throw new Error(`cannot tell the platform of ${name}`);
  const meta = { version, os, cpu: cpuName === "armv7" ? "arm" : cpuName };
  if (parts.includes("musl")) meta.libc = "musl";
  else if (os === "linux") meta.libc = "glibc";
  return meta;
}
