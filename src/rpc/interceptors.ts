import { randomUUID } from "node:crypto";
import type { DescMethod } from "@bufbuild/protobuf";
import { ConnectError, type Interceptor } from "@connectrpc/connect";
import type { Logger } from "pino";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { Clock } from "../clock.js";
import type { Config, TierLimits } from "../config.js";
import { authenticate } from "../domain/api-keys.js";
import { AppError } from "../errors.js";
import type { ApiKeyRecord, Store } from "../store/types.js";
import { kLogger, kPrincipal, kRemoteAddress, kRequestId } from "./context.js";
import { rolesFor } from "./roles.js";

const SANE_REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** The caller's request id if it is a sane token of at most 128 characters, otherwise a new UUID. */
export function requestIdFrom(header: string | null): string {
  return header !== null && SANE_REQUEST_ID.test(header) ? header : randomUUID();
}

/**
 * The outermost interceptor: assigns the request id, puts a child logger in the context, echoes
 * `x-request-id` on every response (errors included), and writes one log line per call with route,
 * status, latency and tenant (never the key).
 */
export function requestContextInterceptor(root: Logger): Interceptor {
  return (next) => async (req) => {
    const started = performance.now();
    const requestId = requestIdFrom(req.header.get("x-request-id"));
    const log = root.child({ requestId });
    req.contextValues.set(kRequestId, requestId);
    req.contextValues.set(kLogger, log);
    const line = (status: string) => ({
      route: `/${req.service.typeName}/${req.method.name}`,
      status,
      latencyMs: Math.round((performance.now() - started) * 100) / 100,
      tenant: req.contextValues.get(kPrincipal)?.tenantId,
    });
    try {
      const res = await next(req);
      res.header.set("x-request-id", requestId);
      log.info(line("ok"), "request");
      return res;
    } catch (err) {
      const connectError = ConnectError.from(err);
      connectError.metadata.set("x-request-id", requestId);
      log.info(line(errorReason(connectError)), "request");
      throw connectError;
    }
  };
}

/** The service's string error code carried by a mapped error, for logs. */
function errorReason(err: ConnectError): string {
  return err.findDetails(ErrorInfoSchema)[0]?.reason || `grpc_${err.code}`;
}

/** What the access interceptor needs. */
export interface AccessOptions {
  store: Store;
  config: Pick<Config, "env" | "tiers">;
  clock: Clock;
}

const WINDOW_MS = 60_000;

/**
 * Authentication, role check and rate limiting, in one pass so that every response carries the
 * rate-limit headers, 401s included. Calls without a valid key are limited per client address at the
 * sandbox tier, which also slows down key guessing. Counters live in the store, so REST, gRPC and
 * Connect, and every instance of the service, share one counter per key.
 */
export function accessInterceptor({ store, config, clock }: AccessOptions): Interceptor {
  return (next) => async (req) => {
    const roles = rolesFor(req.method);
    if (roles === "public") return next(req);

    let principal: ApiKeyRecord | undefined;
    let authError: AppError | undefined;
    try {
      principal = await authenticate(store, config.env, req.header.get("x-api-key"));
    } catch (err) {
      if (!(err instanceof AppError) || err.code !== "unauthorized") throw err;
      authError = err;
    }

    const headers = await countCall(req.method, principal, req.contextValues.get(kRemoteAddress));
    try {
      if (authError) throw authError;
      if (principal && !roles.includes(principal.role)) {
        throw new AppError("forbidden", `A ${principal.role} API key may not call ${req.method.name}.`);
      }
      req.contextValues.set(kPrincipal, principal);
      const res = await next(req);
      for (const [name, value] of Object.entries(headers)) res.header.set(name, value);
      return res;
    } catch (err) {
      if (err instanceof AppError) Object.assign(err.headers, headers);
      else if (err instanceof ConnectError)
        for (const [k, v] of Object.entries(headers)) err.metadata.set(k, v);
      throw err;
    }
  };

  /** Counts one call in the current window; throws `rate_limit_exceeded` past the limit. */
  async function countCall(
    method: DescMethod,
    principal: ApiKeyRecord | undefined,
    remoteAddress: string,
  ): Promise<Record<string, string>> {
    const tier: TierLimits = config.tiers[principal?.tier ?? "sandbox"];
    const isKeygen = method.name === "GenerateKeys";
    const limit = isKeygen ? tier.generateKeysPerMinute : tier.requestsPerMinute;
    const subject = principal ? principal.id : `ip:${remoteAddress || "unknown"}`;
    const nowMs = clock.now().getTime();
    const windowStart = Math.floor(nowMs / WINDOW_MS) * WINDOW_MS;
    const reset = windowStart + WINDOW_MS;
    const count = await store.rateLimits.increment(
      `${subject}:${isKeygen ? "keygen" : "all"}:${windowStart}`,
      new Date(windowStart),
      new Date(reset + WINDOW_MS),
    );
    const headers = {
      "x-ratelimit-limit": String(limit),
      "x-ratelimit-remaining": String(Math.max(0, limit - count)),
      "x-ratelimit-reset": String(reset / 1000),
    };
    if (count > limit) {
      const retryAfterSeconds = Math.max(1, Math.ceil((reset - nowMs) / 1000));
      throw new AppError("rate_limit_exceeded", `Rate limit of ${limit} requests per minute exceeded.`, {
        retryAfterSeconds,
        headers,
      });
    }
    return headers;
  }
}
