import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyReply, FastifyRequest } from "fastify";
import { recordFailedLogin } from "../domain/admin.js";
import { AppError } from "../errors.js";
import type { AdminRoutesOptions, ClientOf } from "./admin.js";

/**
 * Who may call the operator API: the rate limit per client address and the bearer
 * token, compared in constant time. Apart from the routes so that this, the part an attacker meets
 * first, is small enough to be mutation-tested on its own (issue 38).
 */

const WINDOW_MS = 60_000;

/** SHA-256 of a token: equal-length digests, so the comparison's time says nothing about the token. */
export function digest(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}

/**
 * The hook every operator call passes first: counts the call against the client address's limit
 * (`limit` per minute, with the three rate-limit headers), then checks the bearer token against its
 * digest `expected`. Counting first makes a guess of the token cost the same as a call.
 */
export function limitThenAuthenticate(
  options: AdminRoutesOptions,
  limit: number,
  expected: Buffer,
  clientOf: ClientOf,
): (request: FastifyRequest, reply: FastifyReply) => Promise<void> {
  return async (request, reply) => {
    const now = options.clock.now().getTime();
    const windowStart = Math.floor(now / WINDOW_MS) * WINDOW_MS;
    const count = await options.store.rateLimits.increment(
      `admin:ip:${clientOf(request)}`,
      new Date(windowStart),
      new Date(windowStart + 2 * WINDOW_MS),
    );
    const reset = (windowStart + WINDOW_MS) / 1000;
    reply.headers({
      "x-ratelimit-limit": String(limit),
      "x-ratelimit-remaining": String(Math.max(0, limit - count)),
      "x-ratelimit-reset": String(reset),
    });
    if (count > limit) {
      const retryAfterSeconds = Math.max(1, Math.ceil(reset - now / 1000));
      throw new AppError("rate_limit_exceeded", "Too many operator calls: wait and try again.", {
        retryAfterSeconds,
      });
    }
    const header = request.headers.authorization ?? "";
    const given = header.startsWith("Bearer ") ? header.slice("Bearer ".length) : "";
    if (given === "" || !timingSafeEqual(digest(given), expected)) {
      await auditFailedLogin(options, request, clientOf, header !== "");
      throw new AppError("unauthorized", "The operator API needs Authorization: Bearer <ADMIN_TOKEN>.");
    }
  };
}

/**
 * Writes a failed login to the audit log (never the token sent). A store that cannot take it does not
 * change the answer, which stays 401; the failure is logged instead.
 */
async function auditFailedLogin(
  options: AdminRoutesOptions,
  request: FastifyRequest,
  clientOf: ClientOf,
  tokenSent: boolean,
): Promise<void> {
  try {
    await recordFailedLogin(options.store, {
      now: options.clock.now(),
      requestId: request.id,
      sourceIp: clientOf(request),
      method: request.method,
      path: request.url.split("?")[0] ?? "",
      tokenSent,
    });
  } catch (err) {
    request.log.error({ err }, "a failed operator login could not be written to the audit log");
  }
}
