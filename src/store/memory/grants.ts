import type { GrantOutcome, GrantRecord, GrantStore } from "../types.js";
import { copy } from "./copy.js";
import { SWEEP_INTERVAL_MS, sweepExpired } from "./sweep.js";

/**
 * Decrypt grants held in memory, with the per-user cap checked and applied in one synchronous step.
 * Expired grants stay readable until a sweep a minute or more after they expire, as MongoDB's TTL
 * index deletes them late: an expired token then answers "expired" on both stores, whatever its user
 * did since (dropping it at the user's next grant made it "not found" here only).
 */
export class MemoryGrants implements GrantStore {
  private readonly byHash = new Map<string, GrantRecord>();
  /** Every stored grant of a user, expired ones included until swept. */
  private readonly byUser = new Map<string, GrantRecord[]>();
  private lastSweepMs = 0;

  async create(grant: GrantRecord, cap: number, now: Date): Promise<GrantOutcome> {
    if (!Number.isInteger(cap) || cap < 1) throw new RangeError("The grant cap must be a positive integer.");
    if (this.byHash.has(grant.tokenHash)) throw new Error("A grant with this token hash already exists.");
    this.sweep(now);
    const all = this.byUser.get(grant.userId) ?? [];
    const live = all.filter((g) => g.expiresAt > now);
    if (live.length >= cap) {
      const oldest = Math.min(...live.map((g) => g.expiresAt.getTime()));
      return { kind: "cap_reached", oldestExpiresAt: new Date(oldest) };
    }
    const stored = copy(grant);
    all.push(stored);
    this.byUser.set(grant.userId, all);
    this.byHash.set(stored.tokenHash, stored);
    return { kind: "created" };
  }

  async findByHash(tokenHash: string): Promise<GrantRecord | undefined> {
    return copy(this.byHash.get(tokenHash));
  }

  async deleteByUser(userId: string): Promise<number> {
    const grants = this.byUser.get(userId) ?? [];
    for (const g of grants) this.byHash.delete(g.tokenHash);
    this.byUser.delete(userId);
    return grants.length;
  }

  /** Drops grants expired a sweep interval ago or more, standing in for the TTL index. */
  private sweep(now: Date): void {
    this.lastSweepMs = sweepExpired(
      this.byHash,
      now.getTime(),
      this.lastSweepMs,
      (g) => g.expiresAt.getTime() + SWEEP_INTERVAL_MS,
      (expired) => {
        const left = (this.byUser.get(expired.userId) ?? []).filter((g) => g !== expired);
        if (left.length > 0) this.byUser.set(expired.userId, left);
        else this.byUser.delete(expired.userId);
      },
    );
  }
}
