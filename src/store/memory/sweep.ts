/* Expiry in the memory store, standing in for MongoDB's TTL indexes. */

/** How often (in store time) the memory store drops expired records, standing in for a TTL index. */
export const SWEEP_INTERVAL_MS = 60_000;

/**
 * Deletes the entries of `map` that expired at `nowMs` (those whose `expiresAtMs` is undefined stay), at
 * most once per {@link SWEEP_INTERVAL_MS}, and hands each to `onExpired` (to drop it from other indexes);
 * returns the time of the last sweep. Readers check expiry themselves, so sweeping late is harmless.
 */
export function sweepExpired<V>(
  map: Map<string, V>,
  nowMs: number,
  lastSweepMs: number,
  expiresAtMs: (value: V) => number | undefined,
  onExpired?: (value: V) => void,
): number {
  if (nowMs - lastSweepMs < SWEEP_INTERVAL_MS) return lastSweepMs;
  for (const [key, value] of map) {
    const expiry = expiresAtMs(value);
    if (expiry === undefined || expiry > nowMs) continue;
    map.delete(key);
    onExpired?.(value);
  }
  return nowMs;
}

/** The expiry of an entry that keeps it as a Date, for {@link sweepExpired}. */
export function expiryOf(entry: { expiresAt: Date }): number {
  return entry.expiresAt.getTime();
}
