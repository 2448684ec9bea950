/**
 * The part of autocannon 8's programmatic API the benchmark uses; the package ships no types.
 * See node_modules/autocannon/README.md ("API").
 */
declare module "autocannon" {
  import type { EventEmitter } from "node:events";

  /** One request template; `setupRequest` may rewrite it before each send (fresh ids, bodies). */
  interface Request {
    method?: string;
    path?: string;
    headers?: Record<string, string>;
    body?: string | Buffer;
    setupRequest?: (request: Request, context: Record<string, unknown>) => Request;
  }

  interface Options {
    url: string;
    connections?: number;
    /** Seconds. */
    duration?: number;
    pipelining?: number;
    /** Requests per second over all connections; latencies are then corrected for coordinated omission. */
    overallRate?: number;
    /** Seconds before a request counts as a timeout. */
    timeout?: number;
    method?: string;
    headers?: Record<string, string>;
    body?: string | Buffer;
    requests?: Request[];
  }

  interface Histogram {
    average: number;
    mean: number;
    total: number;
    p50: number;
    p99: number;
  }

  interface Result {
    duration: number;
    errors: number;
    timeouts: number;
    non2xx: number;
    "2xx": number;
    requests: Histogram;
    latency: Histogram;
    statusCodeStats: Record<string, { count: number }>;
  }

  /** A running load test; emits `response` (client, status, bytes, milliseconds) for every answer. */
  interface Instance extends EventEmitter {
    stop(): void;
  }

  function autocannon(options: Options, done: (error: Error | null, result: Result) => void): Instance;
  export default autocannon;
}
