import { createHash, timingSafeEqual } from "node:crypto";
import type { FastifyReply, FastifyRequest } from "fastify";
import { recordFailedLogin } from "../domain/admin.js";
import { countInWindow } from "../domain/rate-limit.js";
import { AppError } from "../errors.js";
import type { AdminRoutesOptions, ClientOf } from "./admin.js";

/**
 * Who may call the operator API: the rate limit per client address (the service's one limiter,
 * domain/rate-limit.ts) and the bearer token, compared in constant time. Apart from the routes so that this, the part an attacker meets
 * first, is small enough to be mutation-tested on its own (issue 38).
 */

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
    try {
      reply.headers(
        await countInWindow(options, {
          counter: `admin:ip:${clientOf(request)}`,
          limit,
          message: "Too many operator calls: wait and try again.",
        }),
      );
    } catch (err) {
      if (err instanceof AppError) reply.headers(err.headers);
      throw err;
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
