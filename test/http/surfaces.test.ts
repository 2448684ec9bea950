import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { status as GrpcStatus, Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import {
  Health,
  type HealthCheckResponse,
  HealthCheckResponse_ServingStatus,
} from "../../gen/grpc/health/v1/health_pb.js";
import { type GrantAccessResponse, KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { OnboardingService, type RegisterResponse } from "../../gen/receipts/v1/onboarding_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { http2Request, startTestServer, type TestServer } from "./support.js";

describe("one port, four protocols, one interceptor chain", () => {
  let t: TestServer;
  let grpcKeys: ReturnType<typeof grpcClient>;
  let grpcOnboarding: ReturnType<typeof grpcClient>;
  let grpcHealth: ReturnType<typeof grpcClient>;
  beforeAll(async () => {
    t = await startTestServer();
    grpcKeys = grpcClient(KeysService, t.port);
    grpcOnboarding = grpcClient(OnboardingService, t.port);
    grpcHealth = grpcClient(Health, t.port);
  });
  afterAll(async () => {
    for (const c of [grpcKeys, grpcOnboarding, grpcHealth]) c.close();
    await t.close();
  });

  /** Runs `call` and checks that the interceptor ran exactly once, for `protocol`. */
  async function once<T>(protocol: string, call: () => Promise<T>): Promise<T> {
    const before = new Map(t.counts);
    const result = await call();
    for (const key of new Set([...before.keys(), ...t.counts.keys()])) {
      const delta = (t.counts.get(key) ?? 0) - (before.get(key) ?? 0);
      expect(delta, `interceptor runs for ${key}`).toBe(key === protocol ? 1 : 0);
    }
    return result;
  }

  it("serves REST over HTTP/1.1 with the caller's address and interceptor headers", async () => {
    const res = await once("rest", () =>
      fetch(`${t.baseUrl}/api/v1/keys/grant-access`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-request-id": "rest-h1" },
        body: JSON.stringify({ userId: "usr_1", keyId: "key-1" }),
      }),
    );
    expect(res.status).toBe(200);
    expect(res.headers.get("x-request-id")).toBe("rest-h1");
    expect(res.headers.get("x-test-interceptor")).toMatch(/^rest:\d+$/);
    expect(await res.json()).toEqual({
      success: true,
      data: {
        tokenId: "tok_1",
        userId: "usr_1",
        keyId: "key-1",
        purpose: "decrypt",
        sourceIp: "127.0.0.1",
      },
    });
  });

  it("serves REST over HTTP/2 on the same port", async () => {
    const res = await once("rest", () =>
      http2Request(
        t.baseUrl,
        {
          ":method": "POST",
          ":path": "/api/v1/keys/grant-access",
          "content-type": "application/json",
          "x-request-id": "rest-h2",
        },
        JSON.stringify({ userId: "usr_2", keyId: "key-2" }),
      ),
    );
    expect(res.status).toBe(200);
    expect(res.headers["x-request-id"]).toBe("rest-h2");
    expect(res.headers["x-test-interceptor"]).toMatch(/^rest:\d+$/);
    expect(JSON.parse(res.text).data).toMatchObject({ userId: "usr_2", sourceIp: "127.0.0.1" });
  });

  for (const httpVersion of ["1.1", "2"] as const) {
    it(`serves the Connect protocol over HTTP/${httpVersion}`, async () => {
      const client = createClient(KeysService, createConnectTransport({ baseUrl: t.baseUrl, httpVersion }));
      let header: Headers | undefined;
      const res = await once("connect", () =>
        client.grantAccess(
          { userId: "usr_3", keyId: "key-3" },
          { headers: { "x-request-id": `connect-${httpVersion}` }, onHeader: (h) => (header = h) },
        ),
      );
      expect(res.sourceIp).toBe("127.0.0.1");
      expect(header?.get("x-test-interceptor")).toMatch(/^connect:\d+$/);
      expect(header?.get("x-request-id")).toBe(`connect-${httpVersion}`);
    });
  }

  it("serves gRPC-Web", async () => {
    const client = createClient(
      KeysService,
      createGrpcWebTransport({ baseUrl: t.baseUrl, httpVersion: "1.1" }),
    );
    let header: Headers | undefined;
    const res = await once("grpc-web", () =>
      client.grantAccess({ userId: "usr_4", keyId: "key-4" }, { onHeader: (h) => (header = h) }),
    );
    expect(res.sourceIp).toBe("127.0.0.1");
    expect(header?.get("x-test-interceptor")).toMatch(/^grpc-web:\d+$/);
  });

  it("serves gRPC to a real grpc-js client, with interceptor headers as initial metadata", async () => {
    const metadata = new Metadata();
    metadata.set("x-request-id", "grpc-1");
    const res = await once("grpc", () =>
      grpcUnary<GrantAccessResponse>(grpcKeys, "grantAccess", { userId: "usr_5", keyId: "key-5" }, metadata),
    );
    expect(res.error).toBeUndefined();
    expect(res.response?.sourceIp).toBe("127.0.0.1");
    expect(res.header.get("x-test-interceptor")[0]).toMatch(/^grpc:\d+$/);
    expect(res.header.get("x-request-id")).toEqual(["grpc-1"]);
  });

  it("sends ErrorInfo and BadRequest in grpc-status-details-bin, and x-request-id in trailers", async () => {
    const metadata = new Metadata();
    metadata.set("x-request-id", "grpc-err");
    const res = await once("grpc", () =>
      grpcUnary<RegisterResponse>(grpcOnboarding, "register", { hashedPan: "nope", publicKey: "" }, metadata),
    );
    expect(res.error?.code).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(res.error?.details).toBe("The request is invalid.");
    const trailers = res.error?.metadata;
    expect(trailers?.get("x-request-id")[0]).toBe("grpc-err");
    expect(trailers?.get("x-test-interceptor")[0]).toMatch(/^grpc:\d+$/);
    const raw = trailers?.get("grpc-status-details-bin")[0] as Buffer;
    const status = fromBinary(StatusSchema, raw);
    expect(status.code).toBe(Code.InvalidArgument);
    const [infoAny, badAny] = status.details;
    expect(infoAny && anyUnpack(infoAny, ErrorInfoSchema)).toMatchObject({
      reason: "invalid_request",
      domain: "receipts.v1",
    });
    expect(badAny && anyUnpack(badAny, BadRequestSchema)?.fieldViolations).toEqual([
      expect.objectContaining({ field: "hashedPan", description: "must be 64 hexadecimal characters" }),
      expect.objectContaining({ field: "publicKey", description: "is required" }),
    ]);
  });

  it("hides internal errors from gRPC clients", async () => {
    const client = grpcClient(ReceiptsService, t.port);
    try {
      const res = await grpcUnary(client, "getTransactionReceipt", { transactionId: "boom" }, new Metadata());
      expect(res.error?.code).toBe(GrpcStatus.INTERNAL);
      expect(res.error?.details).toBe("Internal server error.");
      expect(JSON.stringify(res.error?.metadata.getMap())).not.toContain("hunter2");
      expect(t.logs.some((line) => line.includes("hunter2") && line.includes('"level":50'))).toBe(true);
    } finally {
      client.close();
    }
  });

  it("sends Connect errors with the details and metadata of the one mapping", async () => {
    const client = createClient(
      ReceiptsService,
      createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "1.1" }),
    );
    const err = await client.getTransactionReceipt({ transactionId: "limited" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    const connectError = err as ConnectError;
    expect(connectError.code).toBe(Code.ResourceExhausted);
    expect(connectError.findDetails(ErrorInfoSchema)[0]?.reason).toBe("rate_limit_exceeded");
    expect(connectError.metadata.get("retry-after")).toBe("7");
    expect(connectError.metadata.get("x-ratelimit-remaining")).toBe("0");
    expect(connectError.metadata.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
  });

  it("answers the standard gRPC health check over grpc-js", async () => {
    const check = (service: string) =>
      grpcUnary<HealthCheckResponse>(grpcHealth, "check", { service }, new Metadata());
    expect((await check("")).response?.status).toBe(HealthCheckResponse_ServingStatus.SERVING);
    expect((await check("receipts.v1.PaymentsService")).response?.status).toBe(
      HealthCheckResponse_ServingStatus.SERVING,
    );
    expect((await check("no.such.Service")).error?.code).toBe(GrpcStatus.NOT_FOUND);
    t.setReady(false);
    try {
      expect((await check("")).response?.status).toBe(HealthCheckResponse_ServingStatus.NOT_SERVING);
    } finally {
      t.setReady(true);
    }
  });

  it("streams the current status once from Health.Watch", async () => {
    const client = createClient(Health, createConnectTransport({ baseUrl: t.baseUrl, httpVersion: "2" }));
    const statuses = [];
    for await (const res of client.watch({ service: "" })) statuses.push(res.status);
    expect(statuses).toEqual([HealthCheckResponse_ServingStatus.SERVING]);
    const unknown = [];
    for await (const res of client.watch({ service: "nope" })) unknown.push(res.status);
    expect(unknown).toEqual([HealthCheckResponse_ServingStatus.SERVICE_UNKNOWN]);
  });

  it("counts every RPC in /metrics by protocol, method and code", async () => {
    const res = await fetch(`${t.baseUrl}/metrics`);
    expect(res.headers.get("content-type")).toContain("text/plain");
    const text = await res.text();
    for (const protocol of ["rest", "connect", "grpc-web", "grpc"]) {
      expect(text).toContain(
        `http_requests_total{protocol="${protocol}",method="receipts.v1.KeysService/GrantAccess",code="ok"}`,
      );
    }
    expect(text).toContain(
      'http_requests_total{protocol="grpc",method="receipts.v1.OnboardingService/Register",code="invalid_request"}',
    );
    expect(text).toContain("http_request_duration_seconds_bucket");
  });
});
