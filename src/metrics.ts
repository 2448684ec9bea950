import { createContextKey, type Interceptor } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { Counter, collectDefaultMetrics, Histogram, Registry } from "prom-client";
import { kProtocol } from "./http/protocol.js";
import { errorCodeOf } from "./rpc/error-mapping.js";

/** Labels of one observed request: wire protocol, RPC or route, and `ok` or the string error code. */
export interface RequestLabels {
  /** `rest`, `grpc`, `grpc-web`, `connect`, or `http` for plain routes and failures before an RPC. */
  protocol: string;
  /** `receipts.v1.OnboardingService/Register`, or a route template such as `/healthz`. */
  method: string;
  /** `ok`, or the error code of the registry (`invalid_request`, ...). */
  code: string;
}

/** The service's Prometheus metrics, on their own registry (never prom-client's global one). */
export interface Metrics {
  readonly registry: Registry;
  /** Counts one request and records its latency in seconds. */
  observe(labels: RequestLabels, seconds: number): void;
}

/**
 * The method label of every request that matched no RPC and no route (an unknown path, an unknown
 * gRPC method): one value, whatever the path, so a caller cannot make a series per path it invents.
 */
export const UNMATCHED_METHOD = "unmatched";

/**
 * Most distinct method labels kept (the service has a few dozen RPCs and routes). A backstop: every
 * way in labels what matched no method {@link UNMATCHED_METHOD}, and were another to pass a caller's
 * text through, values past this many would be counted as unmatched rather than grow the registry.
 */
export const MAX_METHOD_LABELS = 256;

/** Latency buckets in seconds: from cheap reads to an RSA key generation under load. */
const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/**
 * Creates the metrics: default process metrics (CPU, memory, event loop, GC),
 * `http_requests_total{protocol,method,code}` and `http_request_duration_seconds{protocol,method}`.
 * `defaultMetrics: false` leaves the process metrics out (tests that build many servers).
 */
export function createMetrics(options: { defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry();
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry });
  const requests = new Counter({
    name: "http_requests_total",
    help: "Requests served, by wire protocol, RPC method (or route) and result code.",
    labelNames: ["protocol", "method", "code"] as const,
    registers: [registry],
  });
  const latency = new Histogram({
    name: "http_request_duration_seconds",
    help: "Time from receiving a request to its response, in seconds.",
    labelNames: ["protocol", "method"] as const,
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
  // The labelled series, looked up once each: prom-client validates and hashes a label object on
  // every `inc`/`observe`, which showed up in the profile of every call.
  const series = new Map<string, { count: () => void; time: (seconds: number) => void }>();
  const methods = new Set<string>([UNMATCHED_METHOD]);
  const seriesOf = ({ protocol, code, ...labels }: RequestLabels) => {
    let method = labels.method;
    if (!methods.has(method)) {
      if (methods.size >= MAX_METHOD_LABELS) method = UNMATCHED_METHOD;
      else methods.add(method);
    }
    const key = `${protocol} ${method} ${code}`;
    let found = series.get(key);
    if (found === undefined) {
      const counter = requests.labels({ protocol, method, code });
      const histogram = latency.labels({ protocol, method });
      found = { count: () => counter.inc(), time: (seconds) => histogram.observe(seconds) };
      series.set(key, found);
    }
    return found;
  };
  return {
    registry,
    observe(labels, seconds) {
      const { count, time } = seriesOf(labels);
      count();
      time(seconds);
    },
  };
}

/**
 * Set by {@link metricsInterceptor} once it has observed a call, so the HTTP server does not count the
 * same request a second time at the HTTP level.
 */
export const kObserved = createContextKey(false, {
  description: "request counted by the metrics interceptor",
});

/**
 * A Connect interceptor that observes every RPC, whatever its protocol: REST (through the transcoder),
 * gRPC, gRPC-Web and Connect. The code label is read from the mapped error, so place it outside the
 * error interceptor. Streaming calls are observed when their response starts.
 */
export function metricsInterceptor(metrics: Metrics): Interceptor {
  // The method label of each RPC, built once rather than on every call.
  const names = new WeakMap<object, string>();
  const nameOf = (req: { service: { typeName: string }; method: { name: string } }): string => {
    let name = names.get(req.method);
    if (name === undefined) {
      name = `${req.service.typeName}/${req.method.name}`;
      names.set(req.method, name);
    }
    return name;
  };
  return (next) => async (req) => {
    const started = performance.now();
    const protocol = req.contextValues.get(kProtocol) ?? "in-memory";
    req.contextValues.set(kObserved, true);
    try {
      const res = await next(req);
      metrics.observe({ protocol, method: nameOf(req), code: "ok" }, (performance.now() - started) / 1000);
      return res;
    } catch (err) {
      const code = errorCodeOf(err);
      metrics.observe({ protocol, method: nameOf(req), code }, (performance.now() - started) / 1000);
      throw err;
    }
  };
}

/** Registers `GET path` (default `/metrics`) serving the registry in the Prometheus text format. */
export function registerMetricsRoute(app: FastifyInstance, metrics: Metrics, path = "/metrics"): void {
  app.get(path, async (_request, reply) => {
    const body = await metrics.registry.metrics();
    return reply.type(metrics.registry.contentType).send(body);
  });
}
