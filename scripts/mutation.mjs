// Mutation testing of the security core (issue 38): runs StrykerJS for each group of
// stryker.config.mjs and prints the score of each file, not counting the mutants listed as
// equivalent (with their reason) in test/mutation/equivalent.json.
//
//   npm run test:mutation                          every group; exit 1 if a file scores under 90%
//   npm run test:mutation -- --group roles,domain  those groups
//   npm run test:mutation -- --since REF           only the lines of the security files changed since
//                                                   the merge base with REF (CI); exit 1 if any mutant
//                                                   of a changed line survives unlisted
//   ... --budget SECONDS                           stop there: the groups left are named, not run
//   ... --incremental                              reuse the group's last report: only the mutants whose
//                                                   code or covering tests changed run again (locally)
//
// Stryker needs Node 22 or later: run it through npm, which runs the Node 24 that npm ci installs.
// It runs under `nice -n 15` (MUTATION_NICE) with two test processes (MUTATION_CONCURRENCY).
import { execFileSync, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { GROUPS } from "./mutation-groups.mjs";

const ROOT = join(fileURLToPath(new URL(".", import.meta.url)), "..");
const THRESHOLD = 90;
const EQUIVALENT_FILE = "test/mutation/equivalent.json";

/** Statuses that count: a mutant the tests noticed, or one they did not. */
const DETECTED = new Set(["Killed", "Timeout"]);
const UNDETECTED = new Set(["Survived", "NoCoverage"]);

/**
 * The changed line ranges of `file` since `base`, as Stryker's `file:start-end` mutate ranges.
 * @param {string} base
 * @param {string} file
 * @returns {string[]}
 */
function changedRanges(base, file) {
  const diff = execFileSync("git", ["diff", "-U0", base, "--", file], { cwd: ROOT, encoding: "utf8" });
  const ranges = [];
  for (const match of diff.matchAll(/^@@ -\S+ \+(\d+)(?:,(\d+))? @@/gm)) {
    const start = Number(match[1]);
    const count = match[2] === undefined ? 1 : Number(match[2]);
    if (count > 0) ranges.push(`${file}:${start}-${start + count - 1}`);
  }
  return ranges;
}

/**
 * @typedef {{ file: string; line: number; mutator: string; replacement: string; reason: string }} Equivalent
 * @returns {Equivalent[]}
 */
function equivalents() {
  const path = join(ROOT, EQUIVALENT_FILE);
  return existsSync(path) ? JSON.parse(readFileSync(path, "utf8")).mutants : [];
}

/**
 * Runs Stryker for one group, killing it (and the test processes it started) after `timeoutMs`;
 * resolves to "done", "failed" or "timeout".
 * @param {string} group
 * @param {string[] | undefined} mutate
 * @param {number} timeoutMs
 * @param {boolean} incremental
 * @returns {Promise<"done" | "failed" | "timeout">}
 */
function runGroup(group, mutate, timeoutMs, incremental) {
  const stryker = join(ROOT, "node_modules/@stryker-mutator/core/bin/stryker.js");
  const niceness = process.env.MUTATION_NICE ?? "15";
  const command =
    niceness === "0" ? [process.execPath, stryker] : ["nice", "-n", niceness, process.execPath, stryker];
  const env = { ...process.env, MUTATION_GROUP: group };
  if (mutate !== undefined) env.MUTATION_MUTATE = mutate.join(",");
  // A process group of its own, so that a timeout ends Stryker's test processes too.
  const child = spawn(command[0], [...command.slice(1), "run", ...(incremental ? ["--incremental"] : [])], {
    cwd: ROOT,
    env,
    stdio: "inherit",
    detached: true,
  });
  return new Promise((resolve) => {
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      if (child.pid !== undefined) process.kill(-child.pid, "SIGTERM");
    }, timeoutMs);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve(timedOut ? "timeout" : code === 0 ? "done" : "failed");
    });
  });
}

/**
 * The score of each file in a group's report, and its mutants no test noticed and no entry excuses.
 * @param {string} group
 * @param {Equivalent[]} excused
 */
function scores(group, excused) {
  const report = JSON.parse(readFileSync(join(ROOT, `reports/mutation/${group}.json`), "utf8"));
  const rows = [];
  for (const [file, { mutants }] of Object.entries(report.files)) {
    let detected = 0;
    let equivalent = 0;
    const survivors = [];
    /** @type {Set<Equivalent>} */
    const matched = new Set();
    for (const m of mutants) {
      const line = m.location.start.line;
      if (DETECTED.has(m.status)) detected += 1;
      if (!UNDETECTED.has(m.status)) continue;
      const entry = excused.find(
        (e) =>
          e.file === file &&
          e.line === line &&
          e.mutator === m.mutatorName &&
          e.replacement === m.replacement,
      );
      if (entry === undefined) {
        survivors.push(`${file}:${line} ${m.status} ${m.mutatorName}: ${JSON.stringify(m.replacement)}`);
      } else {
        matched.add(entry);
        equivalent += 1;
      }
    }
    const counted = detected + survivors.length;
    const score = counted === 0 ? 100 : (100 * detected) / counted;
    rows.push({ file, score, detected, survived: survivors.length, equivalent, survivors, matched });
  }
  return rows;
}

async function main() {
  const { values } = parseArgs({
    options: {
      group: { type: "string" },
      since: { type: "string" },
      budget: { type: "string" },
      incremental: { type: "boolean" },
    },
  });
  // CI's time budget for the whole run, in seconds; groups it leaves no time for are named, not run.
  const deadline = values.budget === undefined ? Infinity : Date.now() + Number(values.budget) * 1000;
  /** @type {string[]} */
  const notRun = [];
  const names = values.group ? values.group.split(",") : Object.keys(GROUPS);
  for (const n of names) if (!GROUPS[n]) throw new Error(`no group ${n}: ${Object.keys(GROUPS).join(", ")}`);
  const base =
    values.since === undefined
      ? undefined
      : execFileSync("git", ["merge-base", values.since, "HEAD"], { cwd: ROOT, encoding: "utf8" }).trim();
  const excused = equivalents();
  const rows = [];
  let failed = false;
  for (const name of names) {
    const group = GROUPS[name];
    const mutate = base === undefined ? undefined : group.mutate.flatMap((f) => changedRanges(base, f));
    if (mutate !== undefined && mutate.length === 0) {
      console.log(`mutation: group ${name}: no line of its files changed since ${values.since}`);
      continue;
    }
    const left = deadline - Date.now();
    const outcome =
      left <= 0
        ? "timeout"
        : await runGroup(name, mutate, Math.min(left, 2 ** 31 - 1), values.incremental === true);
    if (outcome === "timeout") {
      notRun.push(name);
      continue;
    }
    if (outcome === "failed") {
      console.error(`mutation: Stryker failed for group ${name}`);
      failed = true;
      continue;
    }
    rows.push(...scores(name, excused));
  }
  console.log(
    "\nmutation score per file (equivalent mutants listed in test/mutation/equivalent.json not counted)",
  );
  for (const r of rows) {
    console.log(
      `${r.score.toFixed(1).padStart(6)}%  ${r.file}  (${r.detected} killed, ${r.survived} survived, ${r.equivalent} equivalent)`,
    );
  }
  const survivors = rows.flatMap((r) => r.survivors);
  // In a run of changed lines only, an entry for a line not mutated is not stale.
  const stale = excused.filter(
    (e) => base === undefined && rows.some((r) => r.file === e.file) && !rows.some((r) => r.matched.has(e)),
  );
  for (const e of stale) console.log(`stale entry in ${EQUIVALENT_FILE}: ${e.file}:${e.line} ${e.mutator}`);
  if (survivors.length > 0) console.log(`\nsurvivors:\n${survivors.join("\n")}`);
  if (notRun.length > 0) {
    console.log(`\nnot run within the budget of ${values.budget} s: ${notRun.join(", ")} (run them locally)`);
  }
  failed ||= stale.length > 0;
  if (base !== undefined) failed ||= survivors.length > 0;
  else failed ||= rows.some((r) => r.score < THRESHOLD);
  if (failed) process.exit(1);
}

await main();
