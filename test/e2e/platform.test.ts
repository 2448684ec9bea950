import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { status as GrpcStatus, Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { FakeClock } from "../../src/clock.js";
import { hashApiKey } from "../../src/domain/api-keys.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { post, startService, type TestService } from "../support/harness.js";

const GRANT = "/api/v1/keys/grant-access";
const body = { userId: "usr_unknown", keyId: "00000000-0000-4000-8000-000000000000" };

describe("keys, limits and envelopes on every protocol of one port", () => {
  let svc: TestService;
  const clock = new FakeClock("2026-06-01T10:00:05Z");
  beforeAll(async () => {
    svc = await startService({ clock, env: { RATE_LIMIT_TIERS: '{"sandbox":{"requestsPerMinute":6}}' } });
  });
  afterAll(async () => {
    await svc.close();
  });

  function connectKeys(key: string) {
    const transport = createConnectTransport({ baseUrl: svc.baseUrl, httpVersion: "1.1" });
    return {
      client: createClient(KeysService, transport),
      headers: { "x-api-key": key },
    };
  }

  it("decrements one counter per key across REST, gRPC and Connect, then answers 429 on each", async () => {
    const key = await svc.newKey({ role: "issuer", tier: "sandbox", tenantId: "t-limits" });
    const grpc = grpcClient(KeysService, svc.port);
    const md = new Metadata();
    md.set("x-api-key", key);
    const { client, headers } = connectKeys(key);
    try {
      const rest = await post(svc, GRANT, key, body);
      expect(rest.status).toBe(404);
      expect(rest.headers.get("x-ratelimit-limit")).toBe("6");
      expect(rest.headers.get("x-ratelimit-remaining")).toBe("5");
      expect(rest.headers.get("x-ratelimit-reset")).toBe(String(Date.parse("2026-06-01T10:01:00Z") / 1000));

      const g = await grpcUnary(grpc, "grantAccess", body, md);
      expect(g.error?.code).toBe(GrpcStatus.NOT_FOUND);
      expect(g.error?.metadata.get("x-ratelimit-remaining")).toEqual(["4"]);

      let remaining: string | null = null;
      await client.grantAccess(body, { headers }).catch((err: unknown) => {
        remaining = ConnectError.from(err).metadata.get("x-ratelimit-remaining");
      });
      expect(remaining).toBe("3");

      for (let i = 0; i < 3; i++) await post(svc, GRANT, key, body);
      const limited = await post(svc, GRANT, key, body);
      expect(limited.status).toBe(429);
      expect(limited.body.error?.code).toBe("rate_limit_exceeded");
      expect(limited.headers.get("retry-after")).toBe("55");
      expect(limited.headers.get("x-ratelimit-remaining")).toBe("0");

      const gLimited = await grpcUnary(grpc, "grantAccess", body, md);
      expect(gLimited.error?.code).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
      expect(gLimited.error?.metadata.get("retry-after")).toEqual(["55"]);

      const cErr = await client
        .grantAccess(body, { headers })
        .catch((err: unknown) => ConnectError.from(err));
      expect(cErr).toBeInstanceOf(ConnectError);
      expect((cErr as ConnectError).code).toBe(Code.ResourceExhausted);
      expect((cErr as ConnectError).findDetails(ErrorInfoSchema)[0]?.reason).toBe("rate_limit_exceeded");

      clock.advance(60_000);
      expect((await post(svc, GRANT, key, body)).status).toBe(404);
    } finally {
      grpc.close();
    }
  });

  it("refuses missing, unknown, revoked and other-environment keys with 401 in the envelope", async () => {
    const missing = await fetch(`${svc.baseUrl}${GRANT}`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-request-id": "trace-123" },
      body: JSON.stringify(body),
    });
    expect(missing.status).toBe(401);
    expect(missing.headers.get("x-request-id")).toBe("trace-123");
    expect(missing.headers.get("x-ratelimit-limit")).toBe("6");
    const envelope = (await missing.json()) as { success: boolean; error: Record<string, string> };
    expect(envelope.success).toBe(false);
    expect(envelope.error).toMatchObject({ code: "unauthorized", request_id: "trace-123", details: "" });
    expect(Date.parse(envelope.error.timestamp ?? "")).not.toBeNaN();

    const unknown = await post(svc, GRANT, `rk_dev_${"x".repeat(43)}`, body);
    expect(unknown.status).toBe(401);
    expect(unknown.body.error?.message).toBe("Invalid API key.");

    const live = await post(svc, GRANT, `rk_live_${"x".repeat(43)}`, body);
    expect(live.status).toBe(401);
    expect(live.body.error?.message).toMatch(/"live" environment; this server runs "dev"/);

    const key = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "t-revoke" });
    const record = await svc.store.apiKeys.findByHash(hashApiKey(key));
    await svc.store.apiKeys.revoke(record?.id ?? "", new Date());
    const revoked = await post(svc, GRANT, key, body);
    expect(revoked.status).toBe(401);
    expect(revoked.body.error?.message).toBe("This API key has been revoked.");
  });

  it("refuses a role that may not call the method with 403 on REST and PERMISSION_DENIED on Connect", async () => {
    const rest = await post(svc, GRANT, svc.merchantKey, body);
    expect(rest.status).toBe(403);
    expect(rest.body.error?.code).toBe("forbidden");
    expect(rest.body.error?.message).toBe("A merchant API key may not call GrantAccess.");
    const asIssuer = await post(svc, "/api/v1/receipts/encrypt", svc.issuerKey, {});
    expect(asIssuer.body.error?.message).toBe("An issuer API key may not call EncryptReceipt.");
    const { client, headers } = connectKeys(svc.merchantKey);
    const err = await client.grantAccess(body, { headers }).catch((e: unknown) => ConnectError.from(e));
    expect((err as ConnectError).code).toBe(Code.PermissionDenied);
  });

  it("meters requests that never reach an RPC (404, 415, malformed JSON) on the caller's counter", async () => {
    const key = await svc.newKey({ role: "issuer", tier: "sandbox", tenantId: "t-meter" });
    const send = (path: string, contentType: string, body: string) =>
      fetch(`${svc.baseUrl}${path}`, {
        method: "POST",
        headers: { "content-type": contentType, "x-api-key": key },
        body,
      });
    const unknown = await send("/api/v1/nope", "application/json", "{}");
    const wrongType = await send(GRANT, "text/plain", "hello");
    const malformed = await send(GRANT, "application/json", "{not json");
    expect([unknown.status, wrongType.status, malformed.status]).toEqual([404, 415, 400]);
    expect([unknown, wrongType, malformed].map((r) => r.headers.get("x-ratelimit-remaining"))).toEqual([
      "5",
      "4",
      "3",
    ]);
    expect(malformed.headers.get("x-ratelimit-limit")).toBe("6");
    expect((await post(svc, GRANT, key, body)).headers.get("x-ratelimit-remaining")).toBe("2");
  });

  it("serves the OpenAPI document of the REST surface without a key", async () => {
    const res = await fetch(`${svc.baseUrl}/openapi.json`);
    expect(res.status).toBe(200);
    const doc = (await res.json()) as { openapi: string; paths: Record<string, unknown> };
    expect(doc.openapi).toMatch(/^3\.1/);
    expect(Object.keys(doc.paths)).toContain("/api/v1/payments/{gateway}/create");
  });

  it("serves health, readiness, metrics and the gRPC health service without a key", async () => {
    expect((await fetch(`${svc.baseUrl}/healthz`)).status).toBe(200);
    expect((await fetch(`${svc.baseUrl}/readyz`)).status).toBe(200);
    const metrics = await (await fetch(`${svc.baseUrl}/metrics`)).text();
    expect(metrics).toMatch(/http_requests_total\{.*code="forbidden".*\} \d+/);
  });
});
