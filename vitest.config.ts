import { availableParallelism } from "node:os";
import { configDefaults, defineConfig } from "vitest/config";

/**
 * The tiers of the suite, as vitest projects: `npm test` runs them all (every test file once, as CI
 * runs it); `npx vitest run --project unit` runs one.
 *
 * test/ mirrors src/ (test/rpc holds the tests of src/rpc, test/config.test.ts of src/config.ts), beside
 * the cross-cutting directories (e2e, hardening, docs, install, browser, openapi, structure, support,
 * mutation): test/structure/test-layout.test.ts holds it. The tiers follow the directories:
 *
 * - `unit`: domain, crypto, client, key transparency, documents, the tree's structure: in process, no
 *   socket.
 * - `rpc`: src/rpc's tests (test/rpc): the policy, the chain's pieces, the codecs, and the services called
 *   in memory through Connect's router transport, with the service's own interceptors but no HTTP.
 * - `store`: the store contract, run against every store, and the store's own pieces (test/store).
 * - `e2e`: over a real socket or a child process: HTTP, gRPC, hardening, events, the CLI, install, and
 *   the key directory (test/domain/kt), whose tests drive it through a running service.
 * - `browser`: the pages in Chromium (test/browser); skipped, loudly, where there is no Chromium.
 */
const TIERS = {
  rpc: ["test/rpc/**/*.test.ts"],
  store: ["test/store/**/*.test.ts"],
  e2e: [
    "test/e2e/**/*.test.ts",
    "test/http/**/*.test.ts",
    "test/domain/kt/**/*.test.ts",
    "test/hardening/**/*.test.ts",
    "test/events/**/*.test.ts",
    "test/cli/**/*.test.ts",
    "test/install/**/*.test.ts",
  ],
  browser: ["test/browser/**/*.test.ts"],
};

export default defineConfig({
  test: {
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // As many test files at a time as there are cores, and at least two. Vitest's default (cores - 1) runs the files one
    // by one on a 2-core machine, yet much of the suite waits on sockets, timers and child processes:
    // two at a time took the whole run from 190 s to 93 s there. Threads instead of forks measured
    // the same, so the files keep their own processes.
    maxWorkers: Math.max(2, availableParallelism()),
    projects: [
      // Everything no other tier takes, so a new directory of tests is never left out of `npm test`.
      {
        extends: true,
        test: {
          name: "unit",
          include: ["test/**/*.test.ts"],
          exclude: [...configDefaults.exclude, ...Object.values(TIERS).flat()],
        },
      },
      ...Object.entries(TIERS).map(([name, include]) => ({
        extends: true as const,
        test: { name, include },
      })),
    ],
  },
});
