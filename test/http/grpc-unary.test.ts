import { constants } from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { type ConnectRouter, createClient, type Interceptor } from "@connectrpc/connect";
import {
  compressionGzip,
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import { Client, credentials, Metadata, type ServiceError, status } from "@grpc/grpc-js";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Health, HealthCheckResponse_ServingStatus } from "../../gen/grpc/health/v1/health_pb.js";
import {
  GrantAccessRequestSchema,
  type GrantAccessResponse,
  KeysService,
} from "../../gen/receipts/v1/keys_pb.js";
import { RegisterRequestSchema } from "../../gen/receipts/v1/onboarding_pb.js";
import { GetTransactionReceiptRequestSchema } from "../../gen/receipts/v1/receipts_pb.js";
import { FAST_PATHS, fastPathsOn, useFastPaths } from "../../src/fast-paths.js";
import { kGrpcFastPath } from "../../src/http/grpc-unary.js";
import { errorInterceptor } from "../../src/rpc/error-mapping.js";
import { createMetrics, type Metrics, metricsInterceptor } from "../../src/rpc/metrics.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { cancelledGrpc, frame, framed, type RawAnswer, rawGrpc } from "./grpc-raw.js";
import { countingInterceptor, requestIdInterceptor, startTestServer, type TestServer } from "./support.js";

const GRANT = "/receipts.v1.KeysService/GrantAccess";
const REGISTER = "/receipts.v1.OnboardingService/Register";
const RECEIPT = "/receipts.v1.ReceiptsService/GetTransactionReceipt";

/** A test server whose calls report whether the fast path served them. */
interface Served {
  t: TestServer;
  metrics: Metrics;
  /** One entry per call that reached the interceptors: true when the fast path served it. */
  fast: boolean[];
}

async function serve(grpcFastPath: boolean, extra: { routes?: (router: ConnectRouter) => void } = {}) {
  const fast: boolean[] = [];
  const marker: Interceptor = (next) => (req) => {
    fast.push(req.contextValues.get(kGrpcFastPath));
    return next(req);
  };
  const metrics = createMetrics({ defaultMetrics: false });
  const interceptors = [
    requestIdInterceptor(pino({ level: "silent" })),
    metricsInterceptor(metrics),
    errorInterceptor,
    countingInterceptor(new Map()),
    marker,
  ];
  // A short request timeout: a stream left half-open by a refused call is reset (and so ends) soon.
  const listener = { requestTimeoutMs: 1_000 };
  // The gRPC server is made (or not) when the server is built; every other fast path stays on.
  const before = fastPathsOn();
  useFastPaths(grpcFastPath ? FAST_PATHS : FAST_PATHS.filter((p) => p !== "grpc-server"));
  try {
    const t = await startTestServer({ interceptors, metrics, listener, ...extra });
    return { t, metrics, fast } satisfies Served;
  } finally {
    useFastPaths(before);
  }
}

/**
 * An answer with what legitimately differs between two servers blanked: interceptor counters, the
 * timestamp of a REST error envelope; the body as text.
 */
function comparable(answer: RawAnswer) {
  const blank = (h: Record<string, string>) => {
    const copy = { ...h };
    if (copy["x-test-interceptor"] !== undefined) copy["x-test-interceptor"] = "<count>";
    return copy;
  };
  return {
    headers: blank(answer.headers),
    trailers: blank(answer.trailers),
    body: answer.body.toString("latin1").replace(/"timestamp":"[^"]*"/, '"timestamp":""'),
  };
}

/** The request counters of a server's /metrics, by series. */
async function counters(s: Served): Promise<Map<string, number>> {
  const text = await s.metrics.registry.metrics();
  const lines = text.split("\n").filter((line) => line.startsWith("http_requests_total{"));
  return new Map(lines.map((line) => [line.slice(0, line.lastIndexOf(" ")), Number(line.split(" ").at(-1))]));
}

/** How much each counter grew from `before` to `after`. */
function growth(before: Map<string, number>, after: Map<string, number>): Record<string, number> {
  const result: Record<string, number> = {};
  for (const [series, value] of after) {
    const delta = value - (before.get(series) ?? 0);
    if (delta !== 0) result[series] = delta;
  }
  return result;
}

describe("unary gRPC calls on the fast path", () => {
  let on: Served;
  let off: Served;
  beforeAll(async () => {
    // One after the other: each sets the process-wide switch while its server is built.
    on = await serve(true);
    off = await serve(false);
  });
  afterAll(async () => {
    await Promise.all([on.t.close(), off.t.close()]);
  });

  it("serves a grpc-js call itself, with the interceptors' headers and the caller's address", async () => {
    for (const s of [on, off]) {
      s.fast.splice(0);
      const client = grpcClient(KeysService, s.t.port);
      const metadata = new Metadata();
      metadata.set("x-request-id", "fast-1");
      const res = await grpcUnary<GrantAccessResponse>(client, "grantAccess", { userId: "u1" }, metadata);
      client.close();
      expect(res.error).toBeUndefined();
      expect(res.response?.sourceIp).toBe("127.0.0.1");
      expect(res.header.get("x-request-id")).toEqual(["fast-1"]);
      expect(res.header.get("x-test-interceptor")[0]).toMatch(/^grpc:\d+$/);
      expect(s.fast).toEqual([s === on]);
    }
  });

  it("honours a grpc-timeout that is not reached", async () => {
    const client = new Client(`127.0.0.1:${on.t.port}`, credentials.createInsecure());
    on.fast.splice(0);
    const bytes = toBinary(GrantAccessRequestSchema, create(GrantAccessRequestSchema, { userId: "u2" }));
    const code = await new Promise<number>((resolve) => {
      client.makeUnaryRequest(
        GRANT,
        (b: Uint8Array) => Buffer.from(b),
        (b: Buffer) => b,
        bytes,
        new Metadata(),
        { deadline: Date.now() + 5_000 },
        (err: ServiceError | null) => resolve(err ? err.code : status.OK),
      );
    });
    client.close();
    expect(code).toBe(status.OK);
    expect(on.fast).toEqual([true]);
  });

  it("leaves gRPC-Web, Connect, gRPC-JSON, compressed requests and streaming methods to Connect", async () => {
    const baseUrl = on.t.baseUrl;
    on.fast.splice(0);
    const clients = [
      createClient(KeysService, createGrpcWebTransport({ baseUrl, httpVersion: "2" })),
      createClient(KeysService, createConnectTransport({ baseUrl, httpVersion: "2" })),
      createClient(KeysService, createGrpcTransport({ baseUrl, useBinaryFormat: false })),
      createClient(
        KeysService,
        createGrpcTransport({ baseUrl, sendCompression: compressionGzip, compressMinBytes: 0 }),
      ),
    ];
    for (const client of clients) {
      expect((await client.grantAccess({ userId: "u3" })).sourceIp).toBe("127.0.0.1");
    }
    const health = createClient(Health, createGrpcTransport({ baseUrl }));
    const statuses = [];
    for await (const res of health.watch({ service: "" })) statuses.push(res.status);
    expect(statuses).toEqual([HealthCheckResponse_ServingStatus.SERVING]);
    expect(on.fast).toEqual([false, false, false, false, false]);
  });

  it("answers unknown methods as Connect's side does, and leaves other HTTP methods and malformed timeouts to Connect", async () => {
    const body = framed(GrantAccessRequestSchema, { userId: "u4" });
    const cases: Array<[string, Record<string, string>]> = [
      ["/receipts.v1.KeysService/Nope", {}],
      [GRANT, { ":method": "PUT" }],
      [GRANT, { "grpc-timeout": "soon" }],
      [GRANT, { "grpc-encoding": "snappy" }],
    ];
    for (const [path, headers] of cases) {
      const id = { "x-request-id": "fallback" };
      const [fast, slow] = await Promise.all(
        [on, off].map((s) => rawGrpc(s.t.baseUrl, path, body, { ...headers, ...id })),
      );
      // Trailers-only either way; Fastify adds a "content-length: 0" that the fast path has no use for.
      const withoutLength = (answer: RawAnswer) => {
        const { "content-length": length, ...rest } = answer.headers;
        return comparable({ ...answer, headers: length === "0" ? rest : answer.headers });
      };
      expect(withoutLength(fast as RawAnswer), `${path} ${JSON.stringify(headers)}`).toEqual(
        withoutLength(slow as RawAnswer),
      );
    }
    expect(on.fast).not.toContain(true);
  });

  it("answers successes, errors and malformed bodies exactly as the Connect path does", async () => {
    const grant = framed(GrantAccessRequestSchema, { userId: "u5", keyId: "k5" });
    const receipt = (transactionId: string) => framed(GetTransactionReceiptRequestSchema, { transactionId });
    const cases: Array<[string, string, Buffer]> = [
      ["success", GRANT, grant],
      ["violations", REGISTER, framed(RegisterRequestSchema, { hashedPan: "nope" })],
      ["rate limited", RECEIPT, receipt("limited")],
      ["not found", RECEIPT, receipt("missing")],
      ["internal", RECEIPT, receipt("boom")],
      ["undecodable", GRANT, frame(Uint8Array.from([0xff, 0xff, 0xff]))],
      ["invalid UTF-8", GRANT, frame(Uint8Array.from([0x0a, 0x02, 0xc3, 0x28]))],
      ["no message", GRANT, Buffer.alloc(0)],
      ["two messages", GRANT, Buffer.concat([grant, grant])],
      ["incomplete", GRANT, grant.subarray(0, grant.length - 1)],
      ["header only", GRANT, grant.subarray(0, 5)],
      ["compressed flag, no grpc-encoding", GRANT, frame(grant.subarray(5), 1)],
      ["over the limit", GRANT, frame(new Uint8Array(64 * 1024 + 1))],
      ["over the limit, second", GRANT, Buffer.concat([grant, frame(new Uint8Array(64 * 1024 + 1))])],
      // One chunk: connect-es reads every envelope header in it before it decodes a message.
      [
        "undecodable, then over the limit",
        GRANT,
        Buffer.concat([frame(Uint8Array.from([0xff, 0xff, 0xff])), frame(new Uint8Array(64 * 1024 + 1))]),
      ],
    ];
    const before = await Promise.all([counters(on), counters(off)]);
    for (const [label, path, body] of cases) {
      on.fast.splice(0);
      const id = { "x-request-id": `cmp-${label.replaceAll(" ", "-").replaceAll(",", "")}` };
      const fast = await rawGrpc(on.t.baseUrl, path, body, id);
      const slow = await rawGrpc(off.t.baseUrl, path, body, id);
      expect(fast.headers[":status"], label).toBe("200");
      expect(comparable(fast), label).toEqual(comparable(slow));
      expect(on.fast, label).not.toContain(false);
    }
    // Calls refused before the RPC are counted as the Connect path counts them (which it does once
    // the response has finished): with the code they were answered with, not as "ok". On Node 22 and
    // later a response to a request that never fully arrived (over the size limit) finishes only when
    // its stream ends, which on the Connect path is when the request timeout resets it.
    let after = await Promise.all([counters(on), counters(off)]);
    for (let waited = 0; waited < 5_000; waited += 100) {
      if (JSON.stringify(growth(before[0], after[0])) === JSON.stringify(growth(before[1], after[1]))) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
      after = await Promise.all([counters(on), counters(off)]);
    }
    expect(growth(before[0], after[0])).toEqual(growth(before[1], after[1]));
    // Each with its own code and the RPC's name, as the interceptors count the calls that reach them.
    const series = (method: string, code: string) =>
      `http_requests_total{protocol="grpc",method="receipts.v1.${method}",code="${code}"}`;
    expect(growth(before[0], after[0])).toEqual({
      [series("KeysService/GrantAccess", "ok")]: 1,
      [series("KeysService/GrantAccess", "invalid_request")]: 6,
      [series("KeysService/GrantAccess", "internal_server_error")]: 1,
      [series("KeysService/GrantAccess", "payload_too_large")]: 3,
      [series("OnboardingService/Register", "invalid_request")]: 1,
      [series("ReceiptsService/GetTransactionReceipt", "rate_limit_exceeded")]: 1,
      [series("ReceiptsService/GetTransactionReceipt", "not_found")]: 1,
      [series("ReceiptsService/GetTransactionReceipt", "internal_server_error")]: 1,
    });
  });

  it("reads a message of exactly the body limit, and refuses one byte more without holding the stream", async () => {
    const client = grpcClient(KeysService, on.t.port);
    try {
      const at = await grpcUnary<GrantAccessResponse>(
        client,
        "grantAccess",
        { userId: "u".repeat(65_532) },
        new Metadata(),
      );
      expect(at.error).toBeUndefined();
      expect(at.response?.userId).toHaveLength(65_532);
      const over = await grpcUnary(client, "grantAccess", { userId: "u".repeat(65_533) }, new Metadata());
      expect(over.error?.code).toBe(status.RESOURCE_EXHAUSTED);
      // The service's payload_too_large, as on REST and Connect.
      expect(over.error?.details).toBe("The body is larger than 65536 bytes.");
    } finally {
      client.close();
    }
    // A body far over the limit: the answer comes at once, then the stream is reset with NO_ERROR
    // rather than left half-open with the client stuck in flow control.
    const answer = await rawGrpc(on.t.baseUrl, GRANT, frame(new Uint8Array(1_000_000)));
    expect(answer.trailers["grpc-status"]).toBe(String(status.RESOURCE_EXHAUSTED));
    expect(answer).toMatchObject({ closed: true, rstCode: 0 });
  });
});

describe("calls in flight on the fast path", () => {
  const held: { signals: AbortSignal[]; release: () => void; entered: Promise<void>; enter: () => void } = {
    signals: [],
    release: () => undefined,
    entered: Promise.resolve(),
    enter: () => undefined,
  };
  const hold = () => {
    held.entered = new Promise((resolve) => {
      held.enter = resolve;
    });
  };
  const routes = (router: ConnectRouter) => {
    router.service(KeysService, {
      async grantAccess(req, ctx) {
        held.signals.push(ctx.signal);
        const released = new Promise<void>((resolve) => {
          held.release = resolve;
        });
        held.enter();
        await released;
        return { userId: req.userId };
      },
    });
  };
  let s: Served;
  beforeAll(async () => {
    s = await serve(true, { routes });
  });
  afterAll(async () => {
    held.release();
    await s.t.close();
  });

  it("answers DEADLINE_EXCEEDED once the grpc-timeout passes, and aborts the call's signal", async () => {
    hold();
    const started = performance.now();
    const call = rawGrpc(s.t.baseUrl, GRANT, framed(GrantAccessRequestSchema, { userId: "d" }), {
      "grpc-timeout": "100m",
    });
    await held.entered;
    const answer = await call;
    expect(performance.now() - started).toBeGreaterThanOrEqual(90);
    expect(answer.trailers).toMatchObject({
      "grpc-status": "4",
      "grpc-message": "the operation timed out",
    });
    expect(held.signals.at(-1)?.aborted).toBe(true);
    held.release();
  });

  it("survives a client that goes away mid-call or mid-body, and keeps serving", async () => {
    hold();
    const body = framed(GrantAccessRequestSchema, { userId: "c" });
    await cancelledGrpc(s.t.baseUrl, GRANT, body, { afterMs: 50, endRequest: true });
    await held.entered;
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(held.signals.at(-1)?.aborted).toBe(true);
    held.release();
    await cancelledGrpc(s.t.baseUrl, GRANT, body.subarray(0, 7), { afterMs: 20, endRequest: false });
    // A reset with an error code reaches the server's stream as an "error" event.
    for (const endRequest of [false, true]) {
      if (endRequest) hold();
      await cancelledGrpc(s.t.baseUrl, GRANT, endRequest ? body : body.subarray(0, 7), {
        afterMs: 20,
        endRequest,
        code: constants.NGHTTP2_PROTOCOL_ERROR,
      });
      if (endRequest) {
        await held.entered;
        await new Promise((resolve) => setTimeout(resolve, 20));
        expect(held.signals.at(-1)?.aborted).toBe(true);
        held.release();
      }
    }
    hold();
    const next = rawGrpc(s.t.baseUrl, GRANT, body);
    await held.entered;
    held.release();
    expect((await next).trailers["grpc-status"]).toBe("0");
  });

  it("finishes a call in flight during a graceful shutdown", async () => {
    hold();
    s.fast.splice(0);
    const client = grpcClient(KeysService, s.t.port);
    const call = grpcUnary<GrantAccessResponse>(client, "grantAccess", { userId: "late" }, new Metadata());
    await held.entered;
    let closed = false;
    const closing = s.t.close().then(() => {
      closed = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(closed).toBe(false);
    held.release();
    const res = await call;
    client.close();
    expect(res.response?.userId).toBe("late");
    await closing;
    expect(s.fast).toEqual([true]);
  });
});

describe("handlers on the fast path", () => {
  it("see the protocol name the Connect path gives them: grpc", async () => {
    const seen: string[] = [];
    const routes = (router: ConnectRouter) => {
      router.service(KeysService, {
        grantAccess: (req, ctx) => {
          seen.push(ctx.protocolName);
          return { userId: req.userId };
        },
      });
    };
    for (const grpcFastPath of [true, false]) {
      const s = await serve(grpcFastPath, { routes });
      const client = grpcClient(KeysService, s.t.port);
      const res = await grpcUnary<GrantAccessResponse>(
        client,
        "grantAccess",
        { userId: "u1" },
        new Metadata(),
      );
      client.close();
      await s.t.close();
      expect(res.error).toBeUndefined();
      expect(s.fast).toEqual([grpcFastPath]);
    }
    expect(seen).toEqual(["grpc", "grpc"]);
  });
});

describe("an answer HTTP/2 must not carry", () => {
  it("resets the stream when a handler sets a header value with a line break, and keeps serving", async () => {
    const routes = (router: ConnectRouter) => {
      router.service(KeysService, {
        grantAccess: (req, ctx) => {
          if (req.userId === "bad") ctx.responseHeader.set("x-note", "one\r\nx-injected: two");
          if (req.userId === "bad-trailer") ctx.responseTrailer.set("x-note", "one\ntwo");
          return { userId: req.userId };
        },
      });
    };
    const s = await serve(true, { routes });
    try {
      for (const userId of ["bad", "bad-trailer"]) {
        const answer = await rawGrpc(s.t.baseUrl, GRANT, framed(GrantAccessRequestSchema, { userId }));
        expect(answer.rstCode).toBe(2); // NGHTTP2_INTERNAL_ERROR
        expect(answer.headers["x-injected"]).toBeUndefined();
        expect(answer.trailers["grpc-status"]).toBeUndefined();
      }
      const ok = await rawGrpc(s.t.baseUrl, GRANT, framed(GrantAccessRequestSchema, { userId: "fine" }));
      expect(ok.trailers["grpc-status"]).toBe("0");
      expect(s.fast).toEqual([true, true, true]);
    } finally {
      await s.t.close();
    }
  });
});
