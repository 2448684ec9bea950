import type { IdempotencyBegin, IdempotencyStore } from "../types.js";
import { expiryOf, sweepExpired } from "./sweep.js";

interface Entry {
  requestHash: string;
  expiresAt: Date;
  /** Until when the call that started the key is presumed alive. */
  leaseUntil: Date;
  response?: string;
}

/** Idempotency records held in memory. Each method checks and writes with no `await` in between. */
export class MemoryIdempotency implements IdempotencyStore {
  private readonly entries = new Map<string, Entry>();
  private lastSweepMs = Number.NEGATIVE_INFINITY;

  async begin(
    key: string,
    requestHash: string,
    expiresAt: Date,
    now: Date,
    leaseUntil: Date,
  ): Promise<IdempotencyBegin> {
    this.lastSweepMs = sweepExpired(this.entries, now.getTime(), this.lastSweepMs, expiryOf);
    const entry = this.entries.get(key);
    if (entry !== undefined && entry.expiresAt > now) {
      if (entry.response !== undefined) {
        return { kind: "completed", requestHash: entry.requestHash, response: entry.response };
      }
      const stale = entry.leaseUntil <= now && entry.requestHash === requestHash;
      if (!stale) return { kind: "in_progress", requestHash: entry.requestHash };
    }
    this.entries.set(key, { requestHash, expiresAt: new Date(expiresAt), leaseUntil: new Date(leaseUntil) });
    return { kind: "started" };
  }

  /** Records the response of a started key; a completed or unknown key is left as it is. */
  async complete(key: string, response: string): Promise<void> {
    const entry = this.entries.get(key);
    if (entry !== undefined && entry.response === undefined) entry.response = response;
  }

  /** Forgets a key its caller still holds; a completed key keeps its response, so a retry still gets it. */
  async abandon(key: string, leaseUntil: Date): Promise<void> {
    const entry = this.entries.get(key);
    if (entry?.response === undefined && entry?.leaseUntil.getTime() === leaseUntil.getTime()) {
      this.entries.delete(key);
    }
  }
}
