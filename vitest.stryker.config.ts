import { defineConfig } from "vitest/config";

/**
 * The tests StrykerJS runs against the mutants of one group of the security core (stryker.config.mjs
 * names the group's tests in `MUTATION_TESTS`, comma-separated): fast in-process unit, domain and
 * store tests, no sockets and no child processes. The HTTP, e2e and hardening suites test the same
 * promises over the wire but take minutes per run; a mutant only they would kill shows up as a
 * survivor here, and gets a fast test of its own.
 */
const tests = (process.env.MUTATION_TESTS ?? "").split(",").filter(Boolean);
if (tests.length === 0) throw new Error("MUTATION_TESTS is empty: run Stryker through scripts/mutation.mjs.");

export default defineConfig({
  test: {
    include: tests,
    // One fixed set of fake-driver latencies: a mutant is killed or not by the same run every time.
    env: { MONGO_FAKE_SEED: "38" },
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
