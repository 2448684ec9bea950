import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // As many test files at a time as there are cores, and at least two. Vitest's default (cores - 1) runs the files one
    // by one on a 2-core machine, yet much of the suite waits on sockets, timers and child processes:
    // two at a time took the whole run from 190 s to 93 s there. Threads instead of forks measured
    // the same, so the files keep their own processes.
    maxWorkers: Math.max(2, availableParallelism()),
  },
});
