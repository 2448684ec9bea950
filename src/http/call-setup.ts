import type { IncomingHttpHeaders } from "node:http";
import { Code, type ContextValues, createContextValues } from "@connectrpc/connect";
import type { FastifyBaseLogger, FastifyRequest } from "fastify";
import { ERRORS, type ErrorCode } from "../errors.js";
import { kProtocol, kRemoteAddress, type Protocol } from "../rpc/context.js";
import type { Metrics } from "../rpc/metrics.js";
import { clientAddressOf, NO_TRUSTED_PROXIES, type TrustedProxies } from "./client-address.js";

/**
 * What every way into the service sets a call up with: the raw gRPC server (grpc-unary.ts), the Connect
 * plugin (gRPC, gRPC-Web, Connect) and the REST transcoder each take their client address, the
 * call's first context values, the rate-limit headers of a request that never reaches an RPC, and
 * the log line and metric of such a request from here, so the three cannot drift apart.
 */
export interface CallSetup {
  /** The client's address of a request from `peer` with these headers (see `client-address.ts`). */
  addressOf(peer: string, headers: IncomingHttpHeaders): string;
  /** The client address of a Fastify request. */
  clientAddress(request: FastifyRequest): string;
  /** The context values of a new call from `address` (resolved): what every protocol's calls start with. */
  newContext(address: string, protocol: Protocol): ContextValues;
  /** The context values of the call a Fastify request carries, made on first use. */
  contextFor(request: FastifyRequest, protocol: Protocol): ContextValues;
  /** The rate-limit headers for a request that never reached an RPC, counted against its caller. */
  limits(apiKey: unknown, address: string): Promise<Record<string, string>>;
  /** Whether requests that never reach an RPC are metered (`meter` was given). */
  readonly metered: boolean;
  /**
   * Counts and logs a request that never reached an RPC (whose interceptors do both for the others):
   * unknown paths, rejected bodies, health and metrics routes, gRPC calls refused before the call.
   * `code` is the result code for metrics and logs: from the HTTP status unless given (gRPC answers
   * every call with 200 and says how it went in `grpc-status`).
   */
  observeUnrouted(
    log: FastifyBaseLogger,
    labels: { protocol: string; method: string },
    status: number,
    elapsedMs: number,
    code?: ErrorCode | "ok",
  ): void;
}

/** What {@link callSetup} needs. */
export interface CallSetupOptions {
  trustedProxies?: TrustedProxies | undefined;
  metrics?: Metrics | undefined;
  meter?:
    | ((apiKey: string | undefined, remoteAddress: string) => Promise<Record<string, string>>)
    | undefined;
}

export function callSetup(options: CallSetupOptions): CallSetup {
  const proxies = options.trustedProxies ?? NO_TRUSTED_PROXIES;
  const { metrics, meter } = options;
  const addressOf = (peer: string, headers: IncomingHttpHeaders) =>
    clientAddressOf(peer, headers["x-forwarded-for"], proxies);
  const clientAddress = (request: FastifyRequest): string => addressOf(request.ip ?? "", request.headers);
  const newContext = (address: string, protocol: Protocol): ContextValues => {
    const values = createContextValues();
    values.set(kRemoteAddress, address);
    values.set(kProtocol, protocol);
    return values;
  };
  return {
    addressOf,
    clientAddress,
    newContext,
    contextFor(request, protocol) {
      request.callContext ??= newContext(clientAddress(request), protocol);
      return request.callContext;
    },
    metered: meter !== undefined,
    async limits(apiKey, address) {
      if (meter === undefined) return {};
      return meter(typeof apiKey === "string" ? apiKey : undefined, address);
    },
    observeUnrouted(log, labels, status, elapsedMs, code = codeForStatus(status)) {
      metrics?.observe({ ...labels, code }, elapsedMs / 1000);
      const line = { route: labels.method, status, code, latencyMs: Math.round(elapsedMs * 100) / 100 };
      if (code !== "ok") log.info(line, "request");
      else log.debug(line, "request");
    },
  };
}

/**
 * The error code for the gRPC status of a call answered before its RPC: `ok` for OK. Before an RPC
 * the only RESOURCE_EXHAUSTED is a message over the limit, and a status no code of ours maps to
 * (UNIMPLEMENTED for a unary call without its message) is a malformed request.
 */
export function codeForGrpcStatus(status: number): ErrorCode | "ok" {
  if (status === 0) return "ok";
  if (status === Code.ResourceExhausted) return "payload_too_large";
  return firstCode((entry) => entry.grpc === status) ?? "invalid_request";
}

/** The error code for an HTTP status, for requests that failed before an RPC; `ok` below 400. */
export function codeForStatus(status: number): ErrorCode | "ok" {
  if (status < 400) return "ok";
  return (
    firstCode((entry) => entry.http === status) ??
    (status >= 500 ? "internal_server_error" : "invalid_request")
  );
}

/** The first code of the registry, in its order, whose entry matches. */
function firstCode(matches: (entry: (typeof ERRORS)[ErrorCode]) => boolean): ErrorCode | undefined {
  return (Object.keys(ERRORS) as ErrorCode[]).find((code) => matches(ERRORS[code]));
}
