import type { RateLimitStore } from "../types.js";
import { expiryOf, sweepExpired } from "./sweep.js";

/** Fixed-window counters held in memory; one process only, so not shared between instances. */
export class MemoryRateLimits implements RateLimitStore {
  private readonly counters = new Map<string, { count: number; expiresAt: Date }>();
  private lastSweepMs = Number.NEGATIVE_INFINITY;

  async increment(key: string, windowStart: Date, expiresAt: Date): Promise<number> {
    // The window start stands in for "now": the caller computes it from its clock.
    this.lastSweepMs = sweepExpired(this.counters, windowStart.getTime(), this.lastSweepMs, expiryOf);
    const id = `${key}\u0000${windowStart.getTime()}`;
    const counter = this.counters.get(id) ?? { count: 0, expiresAt: new Date(expiresAt) };
    counter.count += 1;
    this.counters.set(id, counter);
    return counter.count;
  }
}
