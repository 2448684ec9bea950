import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MemoryRateLimits } from "../../src/store/memory/rate-limits.js";
import { SWEEP_INTERVAL_MS } from "../../src/store/memory/sweep.js";

/**
 * The memory store's rate-limit counters are kept by key, then by window start. They must count as
 * the one map keyed by `<key>\0<window start>` counted (kept here as the model), expiry sweeps
 * included: a window swept as expired starts again from 1, one not yet swept keeps counting.
 */
class ModelRateLimits {
  private readonly counters = new Map<string, { count: number; expiresAtMs: number }>();
  private lastSweepMs = Number.NEGATIVE_INFINITY;

  increment(key: string, windowStart: Date, expiresAt: Date): number {
    const nowMs = windowStart.getTime();
    if (nowMs - this.lastSweepMs >= SWEEP_INTERVAL_MS) {
      for (const [id, counter] of this.counters) if (counter.expiresAtMs <= nowMs) this.counters.delete(id);
      this.lastSweepMs = nowMs;
    }
    const id = `${key}\u0000${nowMs}`;
    const counter = this.counters.get(id) ?? { count: 0, expiresAtMs: expiresAt.getTime() };
    counter.count += 1;
    this.counters.set(id, counter);
    return counter.count;
  }
}

const MINUTE = 60_000;

/** Calls on a few keys, in windows that move forward and now and then back (another clock, a late call). */
const calls = fc.array(
  fc.record({
    key: fc.constantFrom("k1:all", "k1:keygen", "ip:10.0.0.1:kt", "admin:ip:::1", "k1:all\u00000"),
    window: fc.integer({ min: 0, max: 8 }),
    life: fc.constantFrom(1, 2, 3),
  }),
  { minLength: 1, maxLength: 80 },
);

describe("memory rate-limit counters", () => {
  it("count as the single map keyed by key and window did, sweeps included", async () => {
    await fc.assert(
      fc.asyncProperty(calls, async (sequence) => {
        const store = new MemoryRateLimits();
        const model = new ModelRateLimits();
        for (const { key, window, life } of sequence) {
          const start = new Date(window * MINUTE);
          const expires = new Date((window + life) * MINUTE);
          expect(await store.increment(key, start, expires)).toBe(model.increment(key, start, expires));
        }
      }),
    );
  });

  it("starts a window swept as expired from one, and keeps counting one that is not", async () => {
    const store = new MemoryRateLimits();
    const at = (minutes: number) => new Date(minutes * MINUTE);
    expect(await store.increment("k", at(0), at(2))).toBe(1);
    expect(await store.increment("k", at(0), at(2))).toBe(2);
    // A sweep at minute 1 keeps the first window (it expires at 2).
    expect(await store.increment("k", at(1), at(3))).toBe(1);
    expect(await store.increment("k", at(0), at(2))).toBe(3);
    // A sweep at minute 2 drops it: a late call for it counts from 1 again.
    expect(await store.increment("other", at(2), at(4))).toBe(1);
    expect(await store.increment("k", at(0), at(2))).toBe(1);
    expect(await store.increment("k", at(1), at(3))).toBe(2);
  });
});
