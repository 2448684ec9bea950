import type { GrantOutcome, GrantRecord, GrantStore } from "../types.js";
import { copy } from "./copy.js";

/** Decrypt grants held in memory, with the per-user cap checked and applied in one synchronous step. */
export class MemoryGrants implements GrantStore {
  private readonly byHash = new Map<string, GrantRecord>();
  private readonly byUser = new Map<string, GrantRecord[]>();

  async create(grant: GrantRecord, cap: number, now: Date): Promise<GrantOutcome> {
    if (!Number.isInteger(cap) || cap < 1) throw new RangeError("The grant cap must be a positive integer.");
    if (this.byHash.has(grant.tokenHash)) throw new Error("A grant with this token hash already exists.");
    const all = this.byUser.get(grant.userId) ?? [];
    // Expired grants are dropped here, as a TTL index would drop them; callers see them as absent.
    const live = all.filter((g) => g.expiresAt > now);
    for (const g of all) if (!live.includes(g)) this.byHash.delete(g.tokenHash);
    if (live.length >= cap) {
      const oldest = Math.min(...live.map((g) => g.expiresAt.getTime()));
      this.byUser.set(grant.userId, live);
      return { kind: "cap_reached", oldestExpiresAt: new Date(oldest) };
    }
    const stored = copy(grant);
    live.push(stored);
    this.byUser.set(grant.userId, live);
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
}
