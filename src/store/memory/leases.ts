import type { Lease, LeaseStore } from "../lease-types.js";
import { copy } from "./copy.js";

/** Leases held in memory; each call decides and writes in one synchronous step. */
export class MemoryLeases implements LeaseStore {
  private readonly leases = new Map<string, Lease>();
  /** The largest token given per lease name, kept after a release so tokens only grow. */
  private readonly tokens = new Map<string, number>();

  async acquire(name: string, holder: string, now: Date, ttlMs: number): Promise<Lease | undefined> {
    const current = this.leases.get(name);
    const expiresAt = new Date(now.getTime() + ttlMs);
    if (current !== undefined && current.holder === holder && current.expiresAt > now) {
      current.expiresAt = expiresAt;
      return copy(current);
    }
    if (current !== undefined && current.expiresAt > now) return undefined;
    const token = (this.tokens.get(name) ?? 0) + 1;
    this.tokens.set(name, token);
    const lease: Lease = { lease: name, holder, token, expiresAt };
    this.leases.set(name, lease);
    return copy(lease);
  }

  async release(lease: Lease): Promise<void> {
    const current = this.leases.get(lease.lease);
    // secret-compare: lease fencing tokens the store hands out, never sent by a caller.
    if (current?.holder === lease.holder && current.token === lease.token) this.leases.delete(lease.lease);
  }
}
