import fc from "fast-check";
import { Counter, Histogram, Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import {
  createMetrics,
  MAX_METHOD_LABELS,
  type RequestLabels,
  UNMATCHED_METHOD,
} from "../../src/rpc/metrics.js";

/*
 * The request metrics are counted in place and read by the registry only when /metrics is asked for:
 * what /metrics says must be exactly what prom-client's own Counter and Histogram say for the same
 * observations, byte for byte (names, label order and escaping, cumulative buckets, +Inf, sum, count).
 */

const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** /metrics as prom-client's own metrics give it for `observations`. */
async function promClientText(observations: Array<[RequestLabels, number]>): Promise<string> {
  const registry = new Registry();
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
    buckets: BUCKETS,
    registers: [registry],
  });
  for (const [{ protocol, method, code }, seconds] of observations) {
    requests.labels({ protocol, method, code }).inc();
    latency.labels({ protocol, method }).observe(seconds);
  }
  return registry.metrics();
}

const labels = fc.record({
  protocol: fc.constantFrom("rest", "grpc", "grpc-web", "connect", "http"),
  method: fc.oneof(
    fc.constantFrom("receipts.v1.KeysService/LookupKey", "/healthz", UNMATCHED_METHOD),
    // Escaping: quotes, backslashes and new lines in a label value.
    fc.string({ maxLength: 12 }),
  ),
  code: fc.constantFrom("ok", "invalid_request", "unauthorized", "internal_server_error"),
});
const seconds = fc.oneof(
  fc.constantFrom(0, 0.005, 0.01, 10, 10.5),
  fc.double({ min: 0, max: 20, noNaN: true }),
);

describe("the request metrics", () => {
  it("say in /metrics exactly what prom-client's Counter and Histogram say for the same calls", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(labels, seconds), { maxLength: 60 }), async (observations) => {
        const metrics = createMetrics({ defaultMetrics: false });
        for (const [l, s] of observations) metrics.observe(l, s);
        expect(await metrics.registry.metrics()).toBe(await promClientText(observations));
      }),
    );
  });

  it("count methods past the label cap as unmatched", async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    const observations: Array<[RequestLabels, number]> = [];
    for (let i = 0; i < MAX_METHOD_LABELS + 5; i++) {
      observations.push([{ protocol: "grpc", method: `made.up/M${i}`, code: "invalid_request" }, 0.001]);
    }
    for (const [l, s] of observations) metrics.observe(l, s);
    const text = await metrics.registry.metrics();
    // The set of names starts with the unmatched label: 255 more fit.
    const capped = observations.map(([l, s], i): [RequestLabels, number] => [
      { ...l, method: i < MAX_METHOD_LABELS - 1 ? l.method : UNMATCHED_METHOD },
      s,
    ]);
    expect(text).toBe(await promClientText(capped));
    expect(text).toContain(
      `http_requests_total{protocol="grpc",method="${UNMATCHED_METHOD}",code="invalid_request"} 6`,
    );
  });
});
