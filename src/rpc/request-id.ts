import { randomUUID } from "node:crypto";

/**
 * The one rule for request ids, used by every surface: the caller's `X-Request-Id`
 * (gRPC metadata `x-request-id`) when it is a sane token (letters, digits, `._:-`, 1 to 128
 * characters), otherwise a new UUID.
 */

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The request id for a caller that sent `given` (a header value, repeated headers, or nothing). */
export function requestIdFrom(given: string | readonly string[] | null | undefined): string {
  return typeof given === "string" && SANE_REQUEST_ID.test(given) ? given : randomUUID();
}
