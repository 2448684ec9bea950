import { Code, ConnectError } from "@connectrpc/connect";
import { isServiceErrorCode, type ServiceErrorCode } from "../error-codes.js";
import {
  httpStatusOf,
  type ReceiptsApiError,
  retryAfterSecondsOf,
  serviceReasonOf,
  toApiError,
} from "./errors.js";

/**
 * The retry rules (README, "TypeScript client"): retry 429, 500, 502, 503, 504 and network failures and
 * timeouts; never 400, 401, 403, 404, 409 nor a declined payment; at most 3 attempts; wait
 * `2^n * baseDelayMs` before retry n (n from 0), or `Retry-After` seconds when the server sent it.
 */

/** Attempts per logical call, the first one included: at most 3. */
export const MAX_ATTEMPTS = 3;

/** Delay before the first retry, in milliseconds; it doubles for each further retry. */
export const BASE_DELAY_MS = 1000;

/** Default of {@link RetryOptions.maxRetryAfterMs}: the longest `Retry-After` the client waits out. */
export const MAX_RETRY_AFTER_MS = 10_000;

/** How a client retries: at most {@link MAX_ATTEMPTS} attempts, delays from `baseDelayMs`. */
export interface RetryOptions {
  /** Attempts per logical call, first included: 1 (never retry) to 3. Default 3. */
  maxAttempts?: number;
  /** Delay before the first retry, in milliseconds; doubled for each further retry. Default 1000. */
  baseDelayMs?: number;
  /**
   * The longest `Retry-After` the client sleeps through before retrying, in milliseconds; default
   * 10 000. A longer one (a grant cap waits up to 180 s) fails the call at once with a
   * `ReceiptsApiError` whose `retryAfterSeconds` says when to try again, rather than hold the caller.
   */
  maxRetryAfterMs?: number;
}

/** A validated {@link RetryOptions}. */
export interface RetryPolicy {
  maxAttempts: number;
  baseDelayMs: number;
  maxRetryAfterMs: number;
}

/** Waits `ms` milliseconds. Injected so that tests run on a fake clock. */
export type Sleep = (ms: number) => Promise<void>;

/** The real {@link Sleep}: a timer. */
export const realSleep: Sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Checks {@link RetryOptions} and fills in the defaults; throws `RangeError` for a value out of range. */
export function retryPolicyOf(options: RetryOptions = {}): RetryPolicy {
  const maxAttempts = options.maxAttempts ?? MAX_ATTEMPTS;
  const baseDelayMs = options.baseDelayMs ?? BASE_DELAY_MS;
  const maxRetryAfterMs = options.maxRetryAfterMs ?? MAX_RETRY_AFTER_MS;
  if (!Number.isInteger(maxAttempts) || maxAttempts < 1 || maxAttempts > MAX_ATTEMPTS) {
    throw new RangeError(`retry.maxAttempts must be an integer from 1 to ${MAX_ATTEMPTS}`);
  }
  if (!Number.isFinite(baseDelayMs) || baseDelayMs < 0) {
    throw new RangeError("retry.baseDelayMs must be a non-negative number of milliseconds");
  }
  if (!Number.isFinite(maxRetryAfterMs) || maxRetryAfterMs < 0) {
    throw new RangeError("retry.maxRetryAfterMs must be a non-negative number of milliseconds");
  }
  return { maxAttempts, baseDelayMs, maxRetryAfterMs };
}

/** Service codes worth another attempt: 429 (rate limit), 500 and 503. Every other service code is final. */
const RETRYABLE_REASONS: ReadonlySet<string> = new Set<ServiceErrorCode>([
  "rate_limit_exceeded",
  "internal_server_error",
  "service_unavailable",
]);

/**
 * Statuses that mean "transient" when no service reason says otherwise: what Connect makes of a 502,
 * 503, 504 or 429 from a proxy (Unavailable) and of a plain 500 (Unknown), a timeout
 * (DeadlineExceeded), a refused or reset connection (Unavailable, Aborted) and a broken stream
 * (Internal). ResourceExhausted is not here: without our reason it may be an oversized message.
 */
const RETRYABLE_CODES: ReadonlySet<Code> = new Set([
  Code.Unavailable,
  Code.DeadlineExceeded,
  Code.Internal,
  Code.Unknown,
  Code.Aborted,
]);

/** HTTP statuses that are retried. */
const RETRYABLE_HTTP_STATUSES: ReadonlySet<number> = new Set([429, 500, 502, 503, 504]);

/** HTTP statuses that are never retried. */
const FINAL_HTTP_STATUSES: ReadonlySet<number> = new Set([400, 401, 403, 404, 409]);

/**
 * Whether a failed attempt may be retried by the retry rules. A reason from the error
 * registry decides; without one (an intermediary's answer, or a code this client does not know yet),
 * the response's HTTP status decides when it is one the rules name (Connect makes a proxy's bare 400
 * Internal and its 409 Unknown, which alone would look transient); otherwise the Connect code does.
 */
export function isRetryable(err: ConnectError): boolean {
  const reason = serviceReasonOf(err);
  if (reason !== undefined && isServiceErrorCode(reason)) return RETRYABLE_REASONS.has(reason);
  const status = httpStatusOf(err);
  if (status !== undefined && RETRYABLE_HTTP_STATUSES.has(status)) return true;
  if (status !== undefined && FINAL_HTTP_STATUSES.has(status)) return false;
  return RETRYABLE_CODES.has(err.code);
}

/**
 * The delay before retry `retry` (0 for the first), in milliseconds: the server's `retry-after`
 * seconds when it sent them, else `2^retry * baseDelayMs`.
 */
export function retryDelayMs(retry: number, err: ConnectError, baseDelayMs: number): number {
  const retryAfter = retryAfterSecondsOf(err);
  return retryAfter === undefined ? 2 ** retry * baseDelayMs : retryAfter * 1000;
}

/**
 * Runs `attempt` until it succeeds, fails for good, or {@link RetryPolicy.maxAttempts} attempts were
 * made, sleeping between attempts. The last failure is thrown as a {@link ReceiptsApiError} that
 * says how many attempts were made. An aborted `signal` stops retrying.
 */
export async function withRetry<T>(
  attempt: () => Promise<T>,
  policy: RetryPolicy,
  sleep: Sleep,
  signal?: AbortSignal,
  baseUrl?: string,
): Promise<T> {
  for (let made = 1; ; made++) {
    let failure: ConnectError;
    try {
      return await attempt();
    } catch (err) {
      failure = ConnectError.from(err);
    }
    const retryable = isRetryable(failure);
    if (!retryable || made >= policy.maxAttempts || signal?.aborted) {
      throw toApiError(failure, made, retryable, undefined, baseUrl);
    }
    const delayMs = retryDelayMs(made - 1, failure, policy.baseDelayMs);
    const retryAfter = retryAfterSecondsOf(failure);
    if (retryAfter !== undefined && retryAfter * 1000 > policy.maxRetryAfterMs) {
      throw toApiError(failure, made, retryable, `retry after ${retryAfter} s`, baseUrl);
    }
    await sleep(delayMs);
    if (signal?.aborted) throw cancelled(made, signal);
  }
}

function cancelled(attempts: number, signal: AbortSignal): ReceiptsApiError {
  return toApiError(
    new ConnectError("The call was cancelled.", Code.Canceled, undefined, undefined, signal.reason),
    attempts,
    false,
  );
}
