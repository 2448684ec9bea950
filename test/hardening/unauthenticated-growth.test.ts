import { randomBytes } from "node:crypto";
import { type ClientHttp2Session, connect as connectHttp2 } from "node:http2";
import type { Client } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FakeClock } from "../../src/clock.js";
import { createMetrics, MAX_METHOD_LABELS, UNMATCHED_METHOD } from "../../src/rpc/metrics.js";
import { startService, type TestService } from "../support/harness.js";
import { H2_ERROR, RawH2Connection } from "./h2-raw.js";
import { grpcRaw, rawGrpcClient, send } from "./support.js";

/**
 * Issue 31, item 3, from the attacker's side: nothing a caller without an API key sends may grow the
 * server's memory without bound. Thousands of invented method paths over every RPC protocol leave
 * /metrics as it was (one `unmatched` series per protocol and code); every refused call is counted
 * against the caller's address; and one address cannot hold more HTTP/2 connections than the cap.
 */

/** An RPC path no service has: `/pkg<random>.Svc/M<random>`. */
function inventedPath(): string {
  const word = () => randomBytes(6).toString("hex");
  return `/p${word()}.v1.S${word()}/M${word()}`;
}

/**
 * The series of `http_requests_total`, and the size of the request metrics' lines in /metrics (the
 * process metrics beside them change with the garbage collector's work, not with the requests).
 */
async function metricsOf(svc: TestService): Promise<{ series: string[]; bytes: number }> {
  const lines = (await (await fetch(`${svc.baseUrl}/metrics`)).text()).split("\n");
  return {
    series: lines.filter((line) => line.startsWith("http_requests_total{")),
    bytes: lines.filter((line) => line.startsWith("http_request")).join("\n").length,
  };
}

/** 2,000 requests in the first test: 5-13 s alone, longer beside the rest of the suite. */
const BARRAGE_TIMEOUT = { timeout: 120_000 };

describe("unauthenticated callers cannot grow the server's memory", BARRAGE_TIMEOUT, () => {
  let svc: TestService;
  let grpc: Client;

  beforeAll(async () => {
    svc = await startService();
    grpc = rawGrpcClient(svc.port);
  });
  afterAll(async () => {
    grpc.close();
    await svc.close();
  });

  it("keeps /metrics bounded after 2,000 invented method paths over gRPC, gRPC-Web, Connect and REST", async () => {
    // One call of each kind first, so their `unmatched` series exist before the barrage.
    const once = {
      grpc: () => grpcRaw(grpc, inventedPath(), new Uint8Array(), {}),
      "grpc-web": () =>
        send(svc, "POST", inventedPath(), {
          body: new Uint8Array(5),
          headers: { "content-type": "application/grpc-web+proto" },
        }),
      connect: () =>
        send(svc, "POST", inventedPath(), { body: "{}", headers: { "content-type": "application/json" } }),
      rest: () => send(svc, "GET", `/api/v1/${randomBytes(8).toString("hex")}`),
    };
    for (const call of Object.values(once)) await call();
    await metricsOf(svc); // counts itself once: read before the baseline
    const before = await metricsOf(svc);
    const kinds = Object.values(once);
    for (let i = 0; i < 2_000; i += 50) {
      await Promise.all(
        Array.from({ length: 50 }, (_, j) => (kinds[(i + j) % kinds.length] as () => Promise<unknown>)()),
      );
    }
    const after = await metricsOf(svc);
    expect(
      after.series.filter((line) => !before.series.some((b) => line.startsWith(b.split("}")[0] as string))),
    ).toEqual([]);
    expect(after.series.some((line) => line.includes(`protocol="grpc",method="${UNMATCHED_METHOD}"`))).toBe(
      true,
    );
    // The counters' digits grow, nothing else: well under a kilobyte for 2,000 calls.
    expect(after.bytes - before.bytes).toBeLessThan(1_000);
    console.log(
      `hardening: request metrics ${before.bytes} -> ${after.bytes} bytes after 2,000 invented methods`,
    );
  });

  it("counts every kind of refused call against the caller's address", async () => {
    // A service of its own (the barrage above spent this address's minute), on a clock that stands
    // still, so the window cannot roll over between two readings.
    const fresh = await startService({ clock: new FakeClock() });
    const grpcFresh = rawGrpcClient(fresh.port);
    try {
      await countsEveryRefusal(fresh, grpcFresh);
    } finally {
      grpcFresh.close();
      await fresh.close();
    }
  });

  /** Two of each refusal from one address; each must take two from its remaining calls. */
  async function countsEveryRefusal(svc: TestService, grpc: Client): Promise<void> {
    const from = { "x-forwarded-for": "203.0.113.9" }; // not trusted: ignored, the peer is 127.0.0.1
    const remaining = async () =>
      Number(
        (await send(svc, "GET", "/api/v1/receipts/usr_nobody", { headers: from })).headers.get(
          "x-ratelimit-remaining",
        ),
      );
    const frame = (bytes: number[]) => new Uint8Array([0, 0, 0, 0, bytes.length, ...bytes]);
    const refusals: Record<string, () => Promise<unknown>> = {
      "gRPC unknown method": () => grpcRaw(grpc, inventedPath(), new Uint8Array(), {}),
      "gRPC without a key": () => grpcRaw(grpc, "/receipts.v1.KeysService/GrantAccess", new Uint8Array(), {}),
      "gRPC with an unknown key": () =>
        grpcRaw(grpc, "/receipts.v1.KeysService/GrantAccess", new Uint8Array(), {
          "x-api-key": `rk_dev_${"x".repeat(32)}`,
        }),
      "gRPC undecodable message": () =>
        grpcRaw(grpc, "/receipts.v1.KeysService/GrantAccess", new Uint8Array([0xff, 0xff, 0xff]), {}),
      "gRPC-Web unknown method": () =>
        send(svc, "POST", inventedPath(), {
          body: frame([]),
          headers: { "content-type": "application/grpc-web+proto" },
        }),
      "Connect unknown method": () =>
        send(svc, "POST", inventedPath(), { body: "{}", headers: { "content-type": "application/json" } }),
      "Connect malformed JSON": () =>
        send(svc, "POST", "/receipts.v1.KeysService/GrantAccess", {
          body: "{",
          headers: { "content-type": "application/json" },
        }),
      "REST unknown path": () =>
        send(svc, "POST", "/api/v1/nothing-here", {
          body: "{}",
          headers: { "content-type": "application/json" },
        }),
      "REST wrong content type": () =>
        send(svc, "POST", "/api/v1/keys/grant-access", {
          body: "{}",
          headers: { "content-type": "text/plain" },
        }),
      "REST body over the limit": () =>
        send(svc, "POST", "/api/v1/keys/grant-access", {
          body: "x".repeat(svc.config.bodyLimitBytes + 1),
          headers: { "content-type": "application/json" },
        }),
    };
    expect(Object.keys(refusals).length * 3 + 1).toBeLessThan(60); // all within the sandbox minute
    for (const [kind, refuse] of Object.entries(refusals)) {
      const before = await remaining();
      await refuse();
      await refuse();
      // The probe itself is counted once too.
      expect(before - (await remaining()), kind).toBe(3);
    }
  }

  it("refuses an address's HTTP/2 connections past the cap with GOAWAY ENHANCE_YOUR_CALM, and lets in the next once one closes", async () => {
    const svc = await startService({ listener: { http2MaxConnectionsPerAddress: 4 } });
    try {
      await capsConnections(svc);
    } finally {
      await svc.close();
    }
  });

  /** Four HTTP/2 connections served, the fifth refused, a sixth served once one of the four closed. */
  async function capsConnections(svc: TestService): Promise<void> {
    const sessions: ClientHttp2Session[] = [];
    const served = async (session: ClientHttp2Session) =>
      new Promise<number>((resolve, reject) => {
        const stream = session.request({ ":path": "/healthz" });
        stream.on("response", (headers) => resolve(Number(headers[":status"])));
        stream.on("error", reject);
        stream.resume();
      });
    for (let i = 0; i < 4; i++) {
      const session = connectHttp2(svc.baseUrl);
      session.on("error", () => undefined);
      sessions.push(session);
      expect(await served(session)).toBe(200);
    }
    const refused = new RawH2Connection(svc.port);
    await refused.connected;
    await Promise.race([refused.closed, new Promise((resolve) => setTimeout(resolve, 5_000))]);
    expect(refused.isClosed).toBe(true);
    expect(refused.goaway?.code).toBe(H2_ERROR.ENHANCE_YOUR_CALM);
    // HTTP/1.1 is not counted: still served.
    expect((await send(svc, "GET", "/healthz")).status).toBe(200);
    const first = sessions.shift() as ClientHttp2Session;
    await new Promise<void>((resolve) => first.close(resolve));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const next = connectHttp2(svc.baseUrl);
    next.on("error", () => undefined);
    expect(await served(next)).toBe(200);
    for (const session of [...sessions, next]) session.close();
  }

  it("does not cap a trusted proxy, whose clients all share its address", async () => {
    const proxied = await startService({
      env: { TRUSTED_PROXIES: "127.0.0.1" },
      listener: { http2MaxConnectionsPerAddress: 2 },
    });
    const sessions = Array.from({ length: 5 }, () => connectHttp2(proxied.baseUrl));
    try {
      const statuses = await Promise.all(
        sessions.map(
          (session) =>
            new Promise<number>((resolve, reject) => {
              session.on("error", reject);
              const stream = session.request({ ":path": "/healthz" });
              stream.on("response", (headers) => resolve(Number(headers[":status"])));
              stream.resume();
            }),
        ),
      );
      expect(statuses).toEqual([200, 200, 200, 200, 200]);
    } finally {
      for (const session of sessions) session.close();
      await proxied.close();
    }
  });
});

describe("the metrics registry's own bound", () => {
  it("labels method names past the cap as unmatched, keeping the ones it already had", async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    metrics.observe({ protocol: "grpc", method: "receipts.v1.KeysService/GrantAccess", code: "ok" }, 0.001);
    for (let i = 0; i < 5_000; i++) {
      metrics.observe({ protocol: "connect", method: `invented/${i}`, code: "not_found" }, 0.001);
    }
    metrics.observe({ protocol: "grpc", method: "receipts.v1.KeysService/GrantAccess", code: "ok" }, 0.001);
    const text = await metrics.registry.metrics();
    const series = text.split("\n").filter((line) => line.startsWith("http_requests_total{"));
    expect(series.length).toBeLessThanOrEqual(MAX_METHOD_LABELS + 1);
    expect(series).toContain(
      'http_requests_total{protocol="grpc",method="receipts.v1.KeysService/GrantAccess",code="ok"} 2',
    );
    const unmatched = series.find((line) => line.includes(`method="${UNMATCHED_METHOD}"`));
    expect(unmatched).toBe(
      `http_requests_total{protocol="connect",method="${UNMATCHED_METHOD}",code="not_found"} ${5_000 - (MAX_METHOD_LABELS - 2)}`,
    );
  });
});
