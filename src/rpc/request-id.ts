import { randomUUID } from "node:crypto";

/**
 * The one rule for request ids, used by every surface: the caller's `X-Request-Id`
 * (gRPC metadata `x-request-id`) when it is a sane token (letters, digits, `._:-`, 1 to 128
 * characters), otherwise a new UUID.
 */

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * The last id this rule gave, sane by construction (a UUID to start with: never equal to a missing or
 * empty header). An HTTP request meets the rule twice, in Fastify's `genReqId` (which writes the id
 * back into the request's headers) and in the chain's first step, which reads it back, most often
 * before any other request's id is given; an equal string needs no second test of the pattern.
 */
let lastGiven: string = randomUUID();

/** The request id for a caller that sent `given` (a header value, repeated headers, or nothing). */
export function requestIdFrom(given: string | readonly string[] | null | undefined): string {
  if (given === lastGiven) return lastGiven;
  lastGiven = typeof given === "string" && SANE_REQUEST_ID.test(given) ? given : randomUUID();
  return lastGiven;
}
