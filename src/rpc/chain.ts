import type { Interceptor } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { DomainDeps } from "../domain/deps.js";
import { errorInterceptor } from "./error-mapping.js";
import { accessInterceptor, requestContextInterceptor } from "./interceptors.js";
import { type Metrics, metricsInterceptor } from "./metrics.js";
import type { OperatorAccess } from "./operator-access.js";

/**
 * The one ordered chain every call passes into the service, whatever its protocol: REST (the
 * transcoder), gRPC (the Connect plugin, or the unary fast path), Connect, gRPC-Web, the operator API
 * (`/admin/v1`) and the key log's public reads (`/kt/v1`), these two as methods of the services of
 * `route-services.ts`. The adapters only translate the wire to a call and back; every decision about
 * the call is made here, once, by the same interceptor instances (so rate limits are shared):
 *
 * 1. request id and logging: assigns the id, puts the request's logger in the context, echoes
 *    `x-request-id`, writes the request line;
 * 2. metrics: counts the call and its outcome (outside error mapping, so it sees the mapped code);
 * 3. error mapping: every error below becomes the service's error (code, status, details);
 * 4. authentication, policy and rate limit: for the API the API key, the roles the method's policy
 *    declares and the key's counter for the policy's bucket; for the operator API the client
 *    address's counter, then the operator token; for the key log's reads the client address's counter
 *    (one pass, so a 401 carries the rate-limit headers too);
 * 5. idempotency: for the methods whose policy says so, at most one run per `Idempotency-Key`;
 *    applied where the services are registered (`idempotentMethods`, src/rpc/idempotent.ts), as a
 *    replay must answer with the handler context's headers.
 *
 * The first interceptor is the outermost.
 */
export interface ChainDeps {
  logger: Logger;
  metrics: Metrics;
  config: Pick<Config, "env" | "tiers">;
  clock: Clock;
  domain: Pick<DomainDeps, "store">;
  /** The operator token and its limit (`ADMIN_TOKEN`); without it every operator call is `unauthorized`. */
  operator?: OperatorAccess | undefined;
  /** The key log's public reads per client address and minute (`KT_READS_PER_MINUTE`). */
  keyLogReadsPerMinute?: number | undefined;
  /**
   * The chain's own hook: called as a call enters each step, with the step's name and the call's
   * method (`package.Service/Method`). For tests and diagnostics; nothing is wrapped without it.
   */
  onStep?: ((step: ChainStep, method: string) => void) | undefined;
}

/** The names of the chain's steps, outermost first. */
export const CHAIN_STEPS = ["request", "metrics", "errors", "access"] as const;

export type ChainStep = (typeof CHAIN_STEPS)[number];

/** The chain's interceptors, outermost first, for every protocol adapter. */
export function callChain(deps: ChainDeps): Interceptor[] {
  const { logger, metrics, config, clock, domain } = deps;
  const steps: Record<ChainStep, Interceptor> = {
    request: requestContextInterceptor(logger),
    metrics: metricsInterceptor(metrics),
    errors: errorInterceptor,
    access: accessInterceptor({
      store: domain.store,
      config,
      clock,
      operator: deps.operator,
      keyLogReadsPerMinute: deps.keyLogReadsPerMinute,
    }),
  };
  const { onStep } = deps;
  return CHAIN_STEPS.map((name) => {
    const step = steps[name];
    if (onStep === undefined) return step;
    return (next) => {
      const inner = step(next);
      return (req) => {
        onStep(name, `${req.service.typeName}/${req.method.name}`);
        return inner(req);
      };
    };
  });
}
