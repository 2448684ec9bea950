/**
 * Leases of background jobs (the key log's sequencer): one holder at a time, with a fencing token.
 * A holder can pause (a long GC, a stopped VM) past its lease while another instance takes over; when
 * it wakes it must not write over its successor's work, so every write of the job carries the token,
 * and the job's own store refuses it once a larger token has written (`KtLogStore.append`).
 */

/** A lease: its name, holder, fencing token and end. */
export interface Lease {
  lease: string;
  holder: string;
  token: number;
  expiresAt: Date;
}

export interface LeaseStore {
  /**
   * Takes the lease `name` for `holder` until `now + ttlMs`, atomically: when nobody holds it, its
   * holder's time ran out, or `holder` holds it already (a renewal, which keeps the token). A takeover
   * gets a token larger than every one given before. Undefined when another holder's lease is live.
   */
  acquire(name: string, holder: string, now: Date, ttlMs: number): Promise<Lease | undefined>;
  /** Gives the lease up if `lease` still holds it, so another instance takes over at once. */
  release(lease: Lease): Promise<void>;
}
