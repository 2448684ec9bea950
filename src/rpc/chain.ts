import type { Interceptor } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import type { Config } from "../config.js";
import type { DomainDeps } from "../domain/deps.js";
import { type Metrics, metricsInterceptor } from "../metrics.js";
import { errorInterceptor } from "./error-mapping.js";
import { accessInterceptor, requestContextInterceptor } from "./interceptors.js";

/**
 * The one ordered chain every call passes into the service, whatever its protocol: REST (the
 * transcoder), gRPC (the Connect plugin, or the unary fast path), Connect and gRPC-Web. The adapters
 * only translate the wire to a call and back; every decision about the call is made here, once, by the
 * same interceptor instances (so rate limits are shared):
 *
 * 1. request id and logging: assigns the id, puts the request's logger in the context, echoes
 *    `x-request-id`, writes the request line;
 * 2. metrics: counts the call and its outcome (outside error mapping, so it sees the mapped code);
 * 3. error mapping: every error below becomes the service's error (code, status, details);
 * 4. authentication, policy and rate limit: the API key, the roles the method's policy declares, the
 *    key's counter for the policy's bucket (one pass, so a 401 carries the rate-limit headers too);
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
}

/** The chain's interceptors, outermost first, for every protocol adapter. */
export function callChain({ logger, metrics, config, clock, domain }: ChainDeps): Interceptor[] {
  return [
    requestContextInterceptor(logger),
    metricsInterceptor(metrics),
    errorInterceptor,
    accessInterceptor({ store: domain.store, config, clock }),
  ];
}
