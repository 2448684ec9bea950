import type { RandomBytes } from "../domain/gateways/gateway.js";

/**
 * When a failed delivery is tried again (docs/events.md, "Retries"): the wait the schedule gives the
 * attempt that failed, plus up to a tenth more at random so that the retries of many deliveries that
 * failed together spread out, or the receiver's `Retry-After` when it asks for longer (up to a day,
 * or the schedule's longest wait if longer). The randomness
 * is the service's injected source, so a test pins it.
 */

const DAY_MS = 86_400_000;

/** What an attempt's failure tells the schedule. */
export interface FailedAttempt {
  /** Attempts made before this one (0 for the first). */
  attemptsBefore: number;
  /** The receiver answered 410 Gone (or the endpoint or event is gone): no retry. */
  gone: boolean;
  /** Seconds the receiver asked to wait (`Retry-After` on 429 or 503). */
  retryAfterSeconds?: number | undefined;
}

/** The time of the next attempt after a failure at `at`; undefined when the schedule is over. */
export function nextAttemptAt(
  scheduleMs: readonly number[],
  failed: FailedAttempt,
  at: Date,
  random: RandomBytes,
): Date | undefined {
  const wait = scheduleMs[failed.attemptsBefore];
  if (wait === undefined || failed.gone) return undefined;
  const jittered = wait + Math.floor(unitInterval(random) * wait * 0.1);
  // At most a day, or the schedule's longest wait: a receiver cannot park its deliveries for good.
  const asked = Math.min((failed.retryAfterSeconds ?? 0) * 1000, Math.max(DAY_MS, ...scheduleMs));
  return new Date(at.getTime() + Math.max(jittered, asked));
}

/** A uniform number in [0, 1) from 32 random bits of `random`. */
export function unitInterval(random: RandomBytes): number {
  const bytes = random(4);
  return Buffer.from(bytes.buffer, bytes.byteOffset, 4).readUInt32BE(0) / 2 ** 32;
}
