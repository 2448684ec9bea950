import { describe, expect, it } from "vitest";
import { LeaseRunner } from "../../src/background/lease-runner.js";
import { systemClock } from "../../src/clock.js";
import { createLogger } from "../../src/logging.js";
import type { Lease } from "../../src/store/lease-types.js";
import { MemoryLeases } from "../../src/store/memory/leases.js";

/**
 * The lease runner's life: a job runs on the one holder, `stop()` gives the lease up at once, and a
 * runner stopped (a service draining, then resuming; a test stepping an instance down and up) starts
 * again and runs its job again, under a new token, rather than staying silently idle.
 */

/** Resolves once `check` holds, polling every few milliseconds (at most `ms`). */
async function until(check: () => boolean, ms = 5_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("condition not reached in time");
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

function runner(leases: MemoryLeases, holder: string, runs: Lease[]) {
  return new LeaseRunner({
    leases,
    name: "test-job",
    holder,
    ttlMs: 3_000,
    standbyMs: 10,
    clock: systemClock,
    logger: createLogger("silent"),
    job: async (lease, signal) => {
      runs.push(lease);
      await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
    },
  });
}

describe("LeaseRunner", () => {
  it("starts again after a stop, running its job under a new lease; the stop gave the lease up", async () => {
    const leases = new MemoryLeases();
    const runs: Lease[] = [];
    const a = runner(leases, "instance-a", runs);
    a.start();
    await until(() => runs.length === 1);
    expect(a.holding).toBe(true);
    await a.stop();
    expect(a.holding).toBe(false);
    // Given up: another instance takes it at once, not after the lease's lifetime.
    const taken = await leases.acquire("test-job", "instance-b", new Date(), 3_000);
    expect(taken?.holder).toBe("instance-b");
    if (taken !== undefined) await leases.release(taken);

    a.start();
    await until(() => runs.length === 2);
    expect(a.holding).toBe(true);
    expect(runs[1]?.token).toBeGreaterThan(runs[0]?.token ?? Number.POSITIVE_INFINITY);
    // start() while running changes nothing: one loop, one job.
    a.start();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(runs).toHaveLength(2);
    await a.stop();
    expect(a.holding).toBe(false);
  });

  it("stops when stopped before it ever held the lease, and a second stop is harmless", async () => {
    const leases = new MemoryLeases();
    const holderRuns: Lease[] = [];
    const holder = runner(leases, "holder", holderRuns);
    holder.start();
    await until(() => holderRuns.length === 1);
    const waitingRuns: Lease[] = [];
    const waiting = runner(leases, "waiting", waitingRuns);
    waiting.start();
    await new Promise((resolve) => setTimeout(resolve, 50));
    await waiting.stop();
    await waiting.stop();
    expect(waitingRuns).toHaveLength(0);
    // The holder steps down; the stopped runner does not take the job, a restarted one does.
    await holder.stop();
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(waitingRuns).toHaveLength(0);
    waiting.start();
    await until(() => waitingRuns.length === 1);
    await waiting.stop();
  });
});
