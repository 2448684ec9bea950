import { createContextKey, type Interceptor } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { collectDefaultMetrics, Registry } from "prom-client";
import { kProtocol } from "./context.js";
import { errorCodeOf } from "./error-mapping.js";

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
  /**
   * The series of `labels`, to count requests into with no look-up per request: what `observe` does
   * with the same labels (the method label bounded alike), for callers that keep it per method.
   */
  seriesOf(labels: RequestLabels): RequestSeries;
}

/** One series of the request metrics: counts a request of its labels and records its latency. */
export interface RequestSeries {
  observe(seconds: number): void;
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
 *
 * The two request metrics are counted in place, in one record per series, and handed to the
 * registry in prom-client's own shapes when /metrics is read (`requestMetric`): prom-client's
 * labelled series validate and hash their labels on every `inc` and `observe`, about 1.2 us per call,
 * on every call of every protocol.
 */
export function createMetrics(options: { defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry();
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry });
  const counts = new Map<string, CountSeries>();
  const latencies = new Map<string, LatencySeries>();
  registry.registerMetric(
    requestMetric("http_requests_total", "counter", REQUESTS_HELP, () =>
      [...counts.values()].map(({ labels, count }) => ({ labels, value: count })),
    ),
  );
  registry.registerMetric(
    requestMetric("http_request_duration_seconds", "histogram", LATENCY_HELP, () =>
      [...latencies.values()].flatMap(histogramValues),
    ),
  );
  const series = new Map<string, { count: CountSeries; latency: LatencySeries }>();
  const methods = new Set<string>([UNMATCHED_METHOD]);
  const seriesOf = ({ protocol, code, method: given }: RequestLabels) => {
    let method = given;
    if (!methods.has(method)) {
      if (methods.size >= MAX_METHOD_LABELS) method = UNMATCHED_METHOD;
      else methods.add(method);
    }
    const key = `${protocol} ${method} ${code}`;
    let found = series.get(key);
    if (found === undefined) {
      const count = { labels: { protocol, method, code }, count: 0 };
      counts.set(key, count);
      const timed = `${protocol} ${method}`;
      let latency = latencies.get(timed);
      if (latency === undefined) {
        latency = { labels: { protocol, method }, buckets: LATENCY_BUCKETS.map(() => 0), sum: 0, count: 0 };
        latencies.set(timed, latency);
      }
      found = { count, latency };
      series.set(key, found);
    }
    return found;
  };
  return {
    registry,
    observe(labels, seconds) {
      const { count, latency } = seriesOf(labels);
      record(count, latency, seconds);
    },
    seriesOf(labels) {
      const { count, latency } = seriesOf(labels);
      return { observe: (seconds) => record(count, latency, seconds) };
    },
  };
}

/** Counts one request of a series and records its latency in its bucket. */
function record(count: CountSeries, latency: LatencySeries, seconds: number): void {
  count.count += 1;
  for (let i = 0; i < LATENCY_BUCKETS.length; i++) {
    if (seconds <= (LATENCY_BUCKETS[i] as number)) {
      latency.buckets[i] = (latency.buckets[i] ?? 0) + 1;
      break;
    }
  }
  latency.sum += seconds;
  latency.count += 1;
}

const REQUESTS_HELP = "Requests served, by wire protocol, RPC method (or route) and result code.";
const LATENCY_HELP = "Time from receiving a request to its response, in seconds.";

/** One series of `http_requests_total`. */
interface CountSeries {
  labels: { protocol: string; method: string; code: string };
  count: number;
}

/** One series of `http_request_duration_seconds`: the observations of each bucket (not cumulative). */
interface LatencySeries {
  labels: { protocol: string; method: string };
  buckets: number[];
  sum: number;
  count: number;
}

/** One value of a metric as prom-client's registry reads it (`sharedLabels` follow `labels`). */
interface MetricValue {
  labels: Record<string, string | number>;
  sharedLabels?: Record<string, string>;
  value: number;
  metricName?: string;
}

/** A histogram series as prom-client's own `Histogram` gives it: cumulative buckets, `+Inf`, sum, count. */
function histogramValues(series: LatencySeries): MetricValue[] {
  const name = "http_request_duration_seconds";
  const sharedLabels = series.labels;
  let below = 0;
  const values: MetricValue[] = LATENCY_BUCKETS.map((bound, i) => {
    below += series.buckets[i] ?? 0;
    return { labels: { le: bound }, sharedLabels, value: below, metricName: `${name}_bucket` };
  });
  values.push(
    { labels: { le: "+Inf" }, sharedLabels, value: series.count, metricName: `${name}_bucket` },
    { labels: {}, sharedLabels, value: series.sum, metricName: `${name}_sum` },
    { labels: {}, sharedLabels, value: series.count, metricName: `${name}_count` },
  );
  return values;
}

/**
 * A metric the registry reads as it reads prom-client's own: `getForPromString` for the text of
 * /metrics, `get` (labels merged) for JSON.
 */
function requestMetric(
  name: string,
  type: "counter" | "histogram",
  help: string,
  values: () => MetricValue[],
): Parameters<Registry["registerMetric"]>[0] {
  const shape = (list: MetricValue[]) => ({ name, help, type, aggregator: "sum", values: list });
  const metric = {
    name,
    help,
    type,
    aggregator: "sum",
    getForPromString: async () => shape(values()),
    get: async () =>
      shape(
        values().map(({ labels, sharedLabels, ...rest }) => ({
          ...rest,
          labels: { ...labels, ...sharedLabels },
        })),
      ),
  };
  return metric as unknown as Parameters<Registry["registerMetric"]>[0];
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
  // The successful calls' series of each RPC, per protocol: found once rather than on every call.
  const okSeries = new WeakMap<object, Map<string, RequestSeries>>();
  const okOf = (req: Labelled, protocol: string): RequestSeries => {
    let byProtocol = okSeries.get(req.method);
    if (byProtocol === undefined) {
      byProtocol = new Map();
      okSeries.set(req.method, byProtocol);
    }
    let series = byProtocol.get(protocol);
    if (series === undefined) {
      series = metrics.seriesOf({ protocol, method: methodLabel(req), code: "ok" });
      byProtocol.set(protocol, series);
    }
    return series;
  };
  return (next) => async (req) => {
    const started = performance.now();
    const protocol = req.contextValues.get(kProtocol) ?? "in-memory";
    req.contextValues.set(kObserved, true);
    try {
      const res = await next(req);
      okOf(req, protocol).observe((performance.now() - started) / 1000);
      return res;
    } catch (err) {
      const code = errorCodeOf(err);
      metrics.observe({ protocol, method: methodLabel(req), code }, (performance.now() - started) / 1000);
      throw err;
    }
  };
}

/** What the method label of a call is read from. */
interface Labelled {
  service: { typeName: string };
  method: { name: string };
}

/** The method label of each RPC, built once rather than on every call. */
const methodLabels = new WeakMap<object, string>();

function methodLabel(req: Labelled): string {
  let name = methodLabels.get(req.method);
  if (name === undefined) {
    name = `${req.service.typeName}/${req.method.name}`;
    methodLabels.set(req.method, name);
  }
  return name;
}

/** Registers `GET path` (default `/metrics`) serving the registry in the Prometheus text format. */
export function registerMetricsRoute(app: FastifyInstance, metrics: Metrics, path = "/metrics"): void {
  app.get(path, async (_request, reply) => {
    const body = await metrics.registry.metrics();
    return reply.type(metrics.registry.contentType).send(body);
  });
}
