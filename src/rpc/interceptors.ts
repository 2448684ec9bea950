import {
  ConnectError,
  type Interceptor,
  type StreamRequest,
  type StreamResponse,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";
import type { Logger } from "pino";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { Clock } from "../clock.js";
import type { Config, TierLimits } from "../config.js";
import { apiKeyHashOf, authenticate, keyRecordRefusal } from "../domain/api-keys.js";
import { counterNames, countInWindow, type RateWindow } from "../domain/rate-limit.js";
import { AppError } from "../errors.js";
import type { ApiKeyRecord, Store } from "../store/types.js";
import { kLogger, kPrincipal, kRemoteAddress, kRequestId } from "./context.js";
import { type OperatorAccess, operatorCheck } from "./operator-access.js";
import { accessOf, policyOf, type RateBucketName } from "./policy.js";
import { requestIdFrom } from "./request-id.js";

/**
 * The outermost interceptor: assigns the request id, puts a child logger in the context, echoes
 * `x-request-id` on every response (errors included), and writes one log line per call with route,
 * status, latency and tenant (never the key). Every line goes through the root's redaction
 * (`logging.ts`); on the request line's five plain members it costs well under a microsecond.
 */
export function requestContextInterceptor(root: Logger): Interceptor {
  return (next) => async (req) => {
    const started = performance.now();
    // A way in that gave the call its id already (the gRPC fast path) put it in the context values.
    const requestId = req.contextValues.get(kRequestId) || requestIdFrom(req.header.get("x-request-id"));
    req.contextValues.set(kRequestId, requestId);
    let logger: Logger | undefined;
    req.contextValues.set(kLogger, () => {
      logger ??= root.child({ requestId });
      return logger;
    });
    try {
      const res = await next(req);
      res.header.set("x-request-id", requestId);
      logRequest(root, req, requestId, started, "ok");
      return res;
    } catch (err) {
      const connectError = ConnectError.from(err);
      connectError.metadata.set("x-request-id", requestId);
      logRequest(root, req, requestId, started, errorReason(connectError));
      throw connectError;
    }
  };
}

/**
 * The request line of a call, at info: a function of its own rather than a closure made for every
 * call (most calls are served with info lines off).
 */
function logRequest(
  lines: Logger,
  req: UnaryRequest | StreamRequest,
  requestId: string,
  started: number,
  status: string,
): void {
  if (!lines.isLevelEnabled("info")) return;
  const line = {
    requestId,
    route: `/${req.service.typeName}/${req.method.name}`,
    status,
    latencyMs: Math.round((performance.now() - started) * 100) / 100,
    tenant: req.contextValues.get(kPrincipal)?.tenantId,
  };
  lines.info(line, "request");
}

/** The service's string error code carried by a mapped error, for logs. */
function errorReason(err: ConnectError): string {
  return err.findDetails(ErrorInfoSchema)[0]?.reason || `grpc_${err.code}`;
}

/** What the access interceptor and the meter need. */
export interface AccessOptions {
  store: Store;
  config: Pick<Config, "env" | "tiers">;
  clock: Clock;
  /** The operator token and the operator API's limit; without it every operator call is `unauthorized`. */
  operator?: OperatorAccess | undefined;
  /** The key log's public reads allowed per client address and minute (`KT_READS_PER_MINUTE`). */
  keyLogReadsPerMinute?: number | undefined;
}

/** The key log's public reads per client address and minute when none is given (`KT_READS_PER_MINUTE`'s default). */
const KEY_LOG_READS_PER_MINUTE = 600;

/**
 * The chain's access step: who the caller is, whether the call's policy lets them in, and the
 * caller's rate-limit counter, in one pass so that every response carries the rate-limit headers,
 * 401s included. How a call is let in depends on what it calls ({@link accessOf}): an API key and
 * the method's policy for the API, the operator token for the operator API, nothing but a counter per
 * client address for the key log's public reads. Counters live in the store, so every protocol and
 * every instance of the service share one counter per caller.
 */
export function accessInterceptor(options: AccessOptions): Interceptor {
  const operator = operatorCheck(options, options.operator);
  const keyLogReads = options.keyLogReadsPerMinute ?? KEY_LOG_READS_PER_MINUTE;
  // Not an async function: each branch's own promise is the step's answer, with no promise of the
  // step's own around it (which cost two more turns of the microtask queue per call).
  return (next) => (req) => {
    switch (accessOf(req.method)) {
      case "public":
        return next(req);
      case "operator":
        return operatorAccess(operator, next, req);
      case "key-log": {
        const counter = keyLogCounter(req.contextValues.get(kRemoteAddress));
        return countedAccess(options, { counter, limit: keyLogReads }, next, req);
      }
      default:
        return apiKeyAccess(options, next, req);
    }
  };
}

/** An operator call: the client address's counter, then the operator token. */
async function operatorAccess(
  operator: (req: UnaryRequest | StreamRequest) => Promise<Record<string, string>>,
  next: Next,
  req: UnaryRequest | StreamRequest,
): Promise<UnaryResponse | StreamResponse> {
  return withLimitHeaders(await operator(req), next, req);
}

/** A key log read: its client address's counter. */
async function countedAccess(
  options: AccessOptions,
  window: RateWindow,
  next: Next,
  req: UnaryRequest | StreamRequest,
): Promise<UnaryResponse | StreamResponse> {
  return withLimitHeaders(await countInWindow(options, window), next, req);
}

/**
 * An API call: its key, the roles the method's policy names, the key's counter for the policy's
 * bucket, then the rest of the call with the rate-limit headers on its answer. One async function
 * with one `await` per store call and one for the rest of the call: the same steps as
 * {@link identify}, {@link countCall} and {@link withLimitHeaders} (which the request meter and the
 * other accesses use), without a promise of their own each, on every call of the API.
 */
async function apiKeyAccess(
  options: AccessOptions,
  next: Next,
  req: UnaryRequest | StreamRequest,
): Promise<UnaryResponse | StreamResponse> {
  const policy = policyOf(req.method);
  if (policy === "public") return next(req);
  const hash = apiKeyHashOf(options.config.env, req.header.get("x-api-key"));
  let principal: ApiKeyRecord | undefined;
  let refusal: AppError | undefined;
  if (hash instanceof AppError) refusal = hash;
  else {
    principal = await options.store.apiKeys.findByHash(hash);
    refusal = keyRecordRefusal(principal);
    if (refusal !== undefined) principal = undefined;
  }
  const address = req.contextValues.get(kRemoteAddress);
  const headers = await countInWindow(options, callWindow(options, policy.rateBucket, principal, address));
  refusal ??= roleRefusal(policy.roles, principal, req.method.name);
  if (refusal === undefined) req.contextValues.set(kPrincipal, principal);
  try {
    if (refusal !== undefined) throw refusal;
    const res = await next(req);
    for (const name in headers) res.header.set(name, headers[name] as string);
    return res;
  } catch (err) {
    throw withHeaders(err, headers);
  }
}

/** `forbidden` when `principal`'s role is not one of `roles`; nothing without a principal or when it is. */
function roleRefusal(
  roles: readonly string[],
  principal: ApiKeyRecord | undefined,
  methodName: string,
): AppError | undefined {
  if (principal === undefined || roles.includes(principal.role)) return undefined;
  const article = principal.role === "issuer" ? "An" : "A";
  return new AppError("forbidden", `${article} ${principal.role} API key may not call ${methodName}.`);
}

/** The rest of a call below an interceptor, unary or streaming. */
type Next = (req: UnaryRequest | StreamRequest) => Promise<UnaryResponse | StreamResponse>;

/**
 * Throws `refusal` if there is one, else runs the rest of the call, and puts the rate-limit `headers`
 * on its answer, error or not (an `AppError` or a `ConnectError`).
 */
async function withLimitHeaders(
  headers: Record<string, string>,
  next: Next,
  req: UnaryRequest | StreamRequest,
  refusal?: AppError,
): Promise<UnaryResponse | StreamResponse> {
  try {
    if (refusal !== undefined) throw refusal;
    const res = await next(req);
    for (const name in headers) res.header.set(name, headers[name] as string);
    return res;
  } catch (err) {
    throw withHeaders(err, headers);
  }
}

/** `err` with the rate-limit `headers` added, if it is an `AppError` or a `ConnectError`. */
function withHeaders(err: unknown, headers: Record<string, string>): unknown {
  if (err instanceof AppError) Object.assign(err.headers, headers);
  else if (err instanceof ConnectError)
    for (const name in headers) err.metadata.set(name, headers[name] as string);
  return err;
}

/**
 * Counts a request that failed before reaching an RPC (unknown path, unreadable or oversized body)
 * against its caller's limit, and returns the rate-limit headers for its response. Such requests cost
 * the server too, and every response carries the headers.
 */
export function requestMeter(options: AccessOptions) {
  return async (apiKey: string | undefined, remoteAddress: string): Promise<Record<string, string>> => {
    const { principal } = await identify(options, apiKey ?? null);
    try {
      return await countCall(options, "all", principal, remoteAddress);
    } catch (err) {
      if (err instanceof AppError && err.code === "rate_limit_exceeded") return err.headers;
      throw err;
    }
  };
}

/** The caller's key record, or the `unauthorized` error to answer with once the call is counted. */
async function identify(
  { store, config }: AccessOptions,
  apiKey: string | null,
): Promise<{ principal?: ApiKeyRecord; authError?: AppError }> {
  try {
    return { principal: await authenticate(store, config.env, apiKey) };
  } catch (err) {
    if (!(err instanceof AppError) || err.code !== "unauthorized") throw err;
    return { authError: err };
  }
}

/** Counts one call in the current fixed window; throws `rate_limit_exceeded` past the limit. */
async function countCall(
  options: AccessOptions,
  bucket: RateBucketName,
  principal: ApiKeyRecord | undefined,
  remoteAddress: string,
): Promise<Record<string, string>> {
  return countInWindow(options, callWindow(options, bucket, principal, remoteAddress));
}

/** The counter and limit of a call in `bucket`: the key's with a principal, else the client address's. */
function callWindow(
  { config }: AccessOptions,
  bucket: RateBucketName,
  principal: ApiKeyRecord | undefined,
  remoteAddress: string,
): RateWindow {
  const tier: TierLimits = config.tiers[principal?.tier ?? "sandbox"];
  const limit = bucket === "keygen" ? tier.generateKeysPerMinute : tier.requestsPerMinute;
  const names = CALL_COUNTERS[bucket];
  const counter = principal ? names.key(principal.id) : names.address(remoteAddress || "unknown");
  return { counter, limit };
}

/** The counters of the key log's reads, by client address. */
const keyLogCounter = counterNames((address) => `ip:${address}:kt`);

/** The counters of API calls, by bucket: `<key id>:<bucket>`, or `ip:<address>:<bucket>` without a key. */
const CALL_COUNTERS: Record<
  RateBucketName,
  { key: (id: string) => string; address: (ip: string) => string }
> = {
  all: { key: counterNames((id) => `${id}:all`), address: counterNames((ip) => `ip:${ip}:all`) },
  keygen: { key: counterNames((id) => `${id}:keygen`), address: counterNames((ip) => `ip:${ip}:keygen`) },
};
