// @ts-check
import { GROUPS } from "./scripts/mutation-groups.mjs";

/**
 * Mutation testing of the security core (issue 38), one group of files at a time; run it with
 * `npm run test:mutation` (scripts/mutation.mjs), which runs every group, or `--group NAME`. Each
 * mutant is a small change a careless commit could make (a `!==` turned `===`, a condition forced
 * true, a filter dropped); one that no test notices is a promise no test holds. The groups are in
 * scripts/mutation-groups.mjs; this file is the Stryker configuration of the one in
 * `MUTATION_GROUP`. Mutants that cannot change behaviour are listed with their reason in
 * test/mutation/equivalent.json.
 */

const name = process.env.MUTATION_GROUP ?? "";
const group = GROUPS[name];
if (group === undefined) throw new Error(`MUTATION_GROUP must be one of: ${Object.keys(GROUPS).join(", ")}`);
process.env.MUTATION_TESTS = group.tests.join(",");

/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: "vitest",
  vitest: { configFile: "vitest.stryker.config.ts", related: false },
  plugins: ["@stryker-mutator/vitest-runner"],
  coverageAnalysis: "perTest",
  mutate: process.env.MUTATION_MUTATE ? process.env.MUTATION_MUTATE.split(",") : group.mutate,
  ignorePatterns: ["dist", "bench/results", "coverage", "test-artifacts", "reports", ".stryker-tmp"],
  // Two cores, shared: two test processes at most (MUTATION_CONCURRENCY=1 to take one).
  concurrency: Number(process.env.MUTATION_CONCURRENCY ?? 2),
  // Added to what a mutant's tests took without it before it counts as a timeout (a loop forever).
  timeoutMS: group.timeoutMS ?? 60_000,
  reporters: ["clear-text", "progress-append-only", "json", "html"],
  jsonReporter: { fileName: `reports/mutation/${name}.json` },
  htmlReporter: { fileName: `reports/mutation/${name}.html` },
  incrementalFile: `reports/mutation/${name}.incremental.json`,
  thresholds: { high: 90, low: 80, break: null },
  tempDirName: `.stryker-tmp/${name}`,
  cleanTempDir: true,
  warnings: { slow: false },
};
