import { createHash, timingSafeEqual } from "node:crypto";
import type { StreamRequest, UnaryRequest } from "@connectrpc/connect";
import type { Clock } from "../clock.js";
import { recordFailedLogin } from "../domain/admin.js";
import { countInWindow, type RateLimitHeaders } from "../domain/rate-limit.js";
import { AppError } from "../errors.js";
import type { Store } from "../store/types.js";
import { kLogger, kRemoteAddress, kRequestId } from "./context.js";

/**
 * Who may call the operator API, the chain's access step for its calls: the rate limit per client
 * address (the service's one limiter, domain/rate-limit.ts) and the bearer token, compared in
 * constant time. Apart from the rest of the chain so that this, the part an attacker meets first, is
 * small enough to be mutation-tested on its own (issue 38).
 */

/** The operator API's rate limit per client address and minute: far above an operator's, far below a guesser's. */
export const ADMIN_REQUESTS_PER_MINUTE = 120;

/** The operator token and the operator API's limit, as the chain's access step takes them. */
export interface OperatorAccess {
  /** `ADMIN_TOKEN`. */
  token: string;
  /** Calls per client address per minute; default {@link ADMIN_REQUESTS_PER_MINUTE}. */
  requestsPerMinute?: number | undefined;
}

/** What the operator's access step needs besides the token: the store (counters, audit) and the clock. */
export interface OperatorAccessDeps {
  store: Store;
  clock: Clock;
}

/** SHA-256 of a token: equal-length digests, so the comparison's time says nothing about the token. */
export function digest(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}

/**
 * The check every operator call passes first: counts the call against the client address's limit
 * (with the three rate-limit headers, returned), then checks the bearer token against the digest of
 * `access.token`. Counting first makes a guess of the token cost the same as a call. Without `access`
 * (no `ADMIN_TOKEN`) every call is `unauthorized`.
 */
export function operatorCheck(
  deps: OperatorAccessDeps,
  access: OperatorAccess | undefined,
): (req: UnaryRequest | StreamRequest) => Promise<RateLimitHeaders> {
  const expected = digest(access?.token ?? "");
  const limit = access?.requestsPerMinute ?? ADMIN_REQUESTS_PER_MINUTE;
  return async (req) => {
    const headers = await countInWindow(deps, {
      counter: `admin:ip:${req.contextValues.get(kRemoteAddress)}`,
      limit,
      message: "Too many operator calls: wait and try again.",
    });
    const header = req.header.get("authorization") ?? "";
    const given = header.startsWith("Bearer ") ? header.slice("Bearer ".length) : "";
    if (access === undefined || given === "" || !timingSafeEqual(digest(given), expected)) {
      await auditFailedLogin(deps, req, header !== "");
      throw new AppError("unauthorized", "The operator API needs Authorization: Bearer <ADMIN_TOKEN>.", {
        headers,
      });
    }
    return headers;
  };
}

/**
 * Writes a failed login to the audit log (never the token sent). A store that cannot take it does not
 * change the answer, which stays 401; the failure is logged instead.
 */
async function auditFailedLogin(
  deps: OperatorAccessDeps,
  req: UnaryRequest | StreamRequest,
  tokenSent: boolean,
): Promise<void> {
  try {
    await recordFailedLogin(deps.store, {
      now: deps.clock.now(),
      requestId: req.contextValues.get(kRequestId),
      sourceIp: req.contextValues.get(kRemoteAddress),
      method: req.requestMethod,
      path: req.url.split("?")[0] ?? "",
      tokenSent,
    });
  } catch (err) {
    req.contextValues
      .get(kLogger)()
      .error({ err }, "a failed operator login could not be written to the audit log");
  }
}
