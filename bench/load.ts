import autocannon from "autocannon";

/**
 * The two load generators of the benchmark, both bounded by a duration and both reporting the same
 * {@link Measurement}: autocannon for HTTP/1.1 (REST), and a small closed loop of concurrent calls for
 * gRPC over HTTP/2. Latencies are recorded per response with sub-millisecond resolution (autocannon's
 * own histogram rounds to whole milliseconds) and only for successful responses; failures are counted.
 */

/** What one load phase measured. */
export interface Measurement {
  /** Successful responses per second over the phase. */
  rps: number;
  /** Median latency of successful responses, in ms. */
  p50: number;
  /** 99th-percentile latency of successful responses, in ms. */
  p99: number;
  /** Successful responses. */
  ok: number;
  /** Failed responses (non-2xx, gRPC errors), connection errors and timeouts. */
  failed: number;
  /** How long the phase ran, in seconds. */
  seconds: number;
  /** Failure counts by kind (`409`, `ECONNRESET`, `grpc 8`, ...), for the report. */
  failures: Record<string, number>;
}

/** The `p` quantile (0..1) of ascending `sorted` samples, nearest rank; 0 when empty. */
export function quantile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return sorted[index] ?? 0;
}

/** The raw outcome of one load: every successful latency, and the failures. */
export interface Sample {
  /** Successful responses. */
  ok: number;
  /** Latencies of successful responses, in ms (empty when latency is not measured). */
  latencies: number[];
  failed: number;
  failures: Record<string, number>;
  seconds: number;
}

/** Merges samples (e.g. alternating slices of one phase) into one {@link Measurement}. */
export function measure(...samples: Sample[]): Measurement {
  const latencies = samples.flatMap((s) => s.latencies).sort((a, b) => a - b);
  const seconds = samples.reduce((sum, s) => sum + s.seconds, 0);
  const failures: Record<string, number> = {};
  for (const s of samples) {
    for (const [kind, count] of Object.entries(s.failures)) failures[kind] = (failures[kind] ?? 0) + count;
  }
  const ok = samples.reduce((sum, s) => sum + s.ok, 0);
  return {
    rps: ok / seconds,
    p50: quantile(latencies, 0.5),
    p99: quantile(latencies, 0.99),
    ok,
    failed: samples.reduce((sum, s) => sum + s.failed, 0),
    seconds,
    failures,
  };
}

/** An HTTP/1.1 load: one endpoint, a fresh body per request, bounded by `seconds`. */
export interface HttpLoad {
  /** Absolute URL of the endpoint (loopback). */
  url: string;
  method: "GET" | "POST";
  headers: Record<string, string>;
  /** Builds the body of each request (fresh ids); none for GET. */
  body?: () => string;
  /** Concurrent keep-alive connections. */
  connections: number;
  seconds: number;
  /** A fixed rate in requests per second over all connections; as fast as possible when absent. */
  rate?: number;
}

/** Runs an HTTP/1.1 load with autocannon. */
export function runHttp(load: HttpLoad): Promise<Sample> {
  const latencies: number[] = [];
  const failures: Record<string, number> = {};
  let failed = 0;
  const headers = load.body ? { "content-type": "application/json", ...load.headers } : load.headers;
  const makeBody = load.body;
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const instance = autocannon(
      {
        url: load.url,
        connections: load.connections,
        duration: load.seconds,
        timeout: 30,
        ...(load.rate === undefined ? {} : { overallRate: load.rate }),
        requests: [
          {
            method: load.method,
            headers,
            ...(makeBody === undefined
              ? {}
              : { setupRequest: (request) => ({ ...request, body: makeBody() }) }),
          },
        ],
      },
      (error, result) => {
        if (error) {
          reject(error);
          return;
        }
        const transport = result.errors + result.timeouts;
        if (result.errors > 0) failures.connection = result.errors;
        if (result.timeouts > 0) failures.timeout = result.timeouts;
        resolve({
          ok: latencies.length,
          latencies,
          failed: failed + transport,
          failures,
          seconds: (performance.now() - started) / 1000,
        });
      },
    );
    instance.on("response", (_client: unknown, status: number, _bytes: number, ms: number) => {
      if (status >= 200 && status < 300) {
        latencies.push(ms);
      } else {
        failed++;
        failures[String(status)] = (failures[String(status)] ?? 0) + 1;
      }
    });
  });
}

/** A closed-loop load of `concurrency` callers, each making calls back to back until `seconds` pass. */
export interface CallLoad {
  /** Makes one call; rejects on failure. `n` counts calls, for fresh ids. */
  call: (n: number) => Promise<unknown>;
  concurrency: number;
  seconds: number;
}

/** Runs a {@link CallLoad} (gRPC over HTTP/2 in this benchmark). */
export async function runCalls(load: CallLoad): Promise<Sample> {
  const latencies: number[] = [];
  const failures: Record<string, number> = {};
  let failed = 0;
  let n = 0;
  const started = performance.now();
  const deadline = started + load.seconds * 1000;
  const caller = async () => {
    while (performance.now() < deadline) {
      const t = performance.now();
      try {
        await load.call(n++);
        latencies.push(performance.now() - t);
      } catch (err) {
        failed++;
        const kind = describeFailure(err);
        failures[kind] = (failures[kind] ?? 0) + 1;
      }
    }
  };
  await Promise.all(Array.from({ length: load.concurrency }, caller));
  return { ok: latencies.length, latencies, failed, failures, seconds: (performance.now() - started) / 1000 };
}

function describeFailure(err: unknown): string {
  if (typeof err === "object" && err !== null && "code" in err) return `code ${String(err.code)}`;
  return err instanceof Error ? err.name : "error";
}
