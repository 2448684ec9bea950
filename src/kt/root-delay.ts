import type { IssuerEntry } from "./directory.js";
import { parseTime } from "./statements.js";

/**
 * KT_ROOT_DELAY in the merchant's verification (docs/key-transparency.md): an issuer's root counts
 * only `rootDelaySeconds` (default 72 h; 0 for a development service) after the first checkpoint that
 * contained it, so that a root slipped in by the operator or a store writer is in the public log, for
 * the issuer's monitor to alarm on, days before any merchant seals to a key it signed.
 *
 * Which time, and why. The verifier cannot learn when the log first contained the root: the service
 * could claim any time (the snapshot's `effectiveFrom` is its word), and an answer proves only the
 * checkpoint it carries. The one time nobody at the service can move is a witness quorum's cosignature
 * time (`witnessedAt`): a checkpoint cosigned at t whose proven snapshot lists the root shows the root
 * was public at t. So the verifier remembers, per root, the earliest `witnessedAt` at which it saw the
 * root current in a proven snapshot, and the root counts once the `witnessedAt` of the answer in hand
 * is at least the delay later. Both ends are witness times, so neither the merchant's clock nor the
 * service can shorten the delay (the local clock only bounds freshness, `maxCheckpointAge`). The first
 * checkpoint this verifier saw is never earlier than the first one that existed: the delay it enforces
 * is at least KT_ROOT_DELAY, and longer for a verifier that starts late; a merchant that keeps its
 * memory across restarts (`KeyTrustOptions.rootsSeen`), or pins the root after an out-of-band check
 * (`pinnedRoots`, which counts at once), does not wait again.
 */

/** KT_ROOT_DELAY's default: 72 hours, in seconds. */
export const DEFAULT_ROOT_DELAY_SECONDS = 72 * 3600;

/**
 * The earliest witnessed time (seconds) at which the verifier saw `rootId` of `issuer` current,
 * after recording `witnessedAt` (the answer's) as a sighting.
 */
export type RootSightings = (issuer: string, rootId: string, witnessedAt: number) => number;

/** The issuer's current root at `now` (ms) as the snapshot lists it. */
export function currentRoot(issuer: IssuerEntry, now: number) {
  return issuer.signingKeys.find(
    (k) => k.role === "root" && k.status === "current" && (parseTime(k.effectiveFrom) as number) <= now,
  );
}

/**
 * Why the issuer's root does not count yet under a checkpoint witnessed at `witnessedAt`, or
 * undefined when it does. `pinned`: the merchant pinned this root (it counts at once). Without
 * `sightings` the verifier has seen the root only now.
 */
export function rootDelayProblem(
  issuer: IssuerEntry,
  input: {
    now: number;
    witnessedAt: number;
    delaySeconds: number;
    pinned: boolean;
    sightings?: RootSightings;
  },
): string | undefined {
  const root = currentRoot(issuer, input.now);
  if (root === undefined) return "the issuer has no current root";
  if (input.pinned || input.delaySeconds === 0) return undefined;
  const first = input.sightings?.(issuer.issuer, root.signingKeyId, input.witnessedAt) ?? input.witnessedAt;
  if (input.witnessedAt - first >= input.delaySeconds) return undefined;
  return `the issuer's root is newer than the root delay (${input.delaySeconds} s) for this verifier`;
}
