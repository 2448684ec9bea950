import type { Clock } from "../clock.js";
import { AppError } from "../errors.js";
import type { Store } from "../store/types.js";

/**
 * The service's one rate limiter: fixed windows counted in the store, so that every protocol (REST,
 * gRPC, Connect, gRPC-Web), the operator API, the key log's public reads and every instance of the
 * service count one call once, in one counter. What differs between them is only the counter's name,
 * its limit and its window, and the message of the refusal.
 */

/** What the limiter needs: the store that holds the counters, and the clock that places the windows. */
export interface RateLimiterDeps {
  store: Pick<Store, "rateLimits">;
  clock: Clock;
}

/** One counter and its limit. */
export interface RateWindow {
  /** The counter's name, e.g. `<apiKeyId>:all`, `ip:<address>:kt`, `admin:ip:<address>`. */
  counter: string;
  /** Calls allowed per window. */
  limit: number;
  /** The window's length in seconds; default 60. */
  windowSeconds?: number;
  /** The refusal's message; default `Rate limit of <limit> requests per minute exceeded.` */
  message?: string;
}

/** The response headers of a counted call: `x-ratelimit-limit`, `-remaining` and `-reset` (epoch seconds). */
export type RateLimitHeaders = Record<string, string>;

/**
 * Counts one call against `window` in the current window and returns the rate-limit headers; past the
 * limit throws `rate_limit_exceeded` carrying the same headers and `Retry-After` (the seconds until
 * the window ends).
 */
export async function countInWindow(
  { store, clock }: RateLimiterDeps,
  window: RateWindow,
): Promise<RateLimitHeaders> {
  const { counter, limit } = window;
  const windowMs = (window.windowSeconds ?? 60) * 1000;
  const nowMs = clock.now().getTime();
  const windowStart = Math.floor(nowMs / windowMs) * windowMs;
  const reset = windowStart + windowMs;
  // The store keeps one count per counter and window start.
  const count = await store.rateLimits.increment(counter, new Date(windowStart), new Date(reset + windowMs));
  const headers = {
    "x-ratelimit-limit": String(limit),
    "x-ratelimit-remaining": String(Math.max(0, limit - count)),
    "x-ratelimit-reset": String(reset / 1000),
  };
  if (count > limit) {
    const retryAfterSeconds = Math.max(1, Math.ceil((reset - nowMs) / 1000));
    const message = window.message ?? `Rate limit of ${limit} requests per minute exceeded.`;
    throw new AppError("rate_limit_exceeded", message, { retryAfterSeconds, headers });
  }
  return headers;
}

/** How many names a {@link counterNames} remembers before it starts again from none. */
const REMEMBERED_NAMES = 10_000;

/**
 * The counter names of one kind (`ip:<address>:kt`, `<key id>:all`, ...), each made once per subject
 * and handed out again as the same string. A name built anew for every call is a string of pieces
 * that the counters' map must join and hash on every look-up: in the memory store that was about
 * 2% of the trivial checkpoint call's busy main thread, where one the map has seen is hashed already.
 * Past `max` subjects (a flood of addresses) the remembered names are dropped and made again.
 */
export function counterNames(
  name: (subject: string) => string,
  max = REMEMBERED_NAMES,
): (subject: string) => string {
  const names = new Map<string, string>();
  return (subject) => {
    let found = names.get(subject);
    if (found === undefined) {
      if (names.size >= max) names.clear();
      found = name(subject);
      names.set(subject, found);
    }
    return found;
  };
}
