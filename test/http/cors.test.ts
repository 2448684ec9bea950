import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config.js";
import { startService, type TestService } from "../support/harness.js";

const ORIGIN = "http://app.example:5173";

/** What a browser sends before a cross-origin call with custom headers. */
function preflight(svc: TestService, path: string, headers: string, origin = ORIGIN) {
  return fetch(`${svc.baseUrl}${path}`, {
    method: "OPTIONS",
    headers: {
      origin,
      "access-control-request-method": "POST",
      "access-control-request-headers": headers,
    },
  });
}

const listOf = (value: string | null) => (value ?? "").split(",").map((h) => h.trim().toLowerCase());

describe("CORS with CORS_ORIGINS set", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService({ env: { CORS_ORIGINS: `${ORIGIN},https://other.example` } });
  });
  afterAll(() => svc.close());

  const cases = [
    ["REST", "/api/v1/onboarding/generate-keys", "content-type,x-api-key,idempotency-key"],
    [
      "Connect",
      "/receipts.v1.OnboardingService/GenerateKeys",
      "content-type,connect-protocol-version,connect-timeout-ms,x-api-key",
    ],
    [
      "gRPC-Web",
      "/receipts.v1.OnboardingService/GenerateKeys",
      "content-type,x-grpc-web,x-user-agent,grpc-timeout,x-api-key",
    ],
  ] as const;

  for (const [surface, path, requested] of cases) {
    it(`answers a ${surface} preflight for an allowed origin`, async () => {
      const res = await preflight(svc, path, requested);
      expect(res.status).toBe(204);
      expect(res.headers.get("access-control-allow-origin")).toBe(ORIGIN);
      expect(listOf(res.headers.get("access-control-allow-methods"))).toContain("post");
      const allowed = listOf(res.headers.get("access-control-allow-headers"));
      for (const header of requested.split(",")) expect(allowed).toContain(header);
      expect(res.headers.get("access-control-allow-credentials")).toBeNull();
    });
  }

  it("exposes the request-id, rate-limit and gRPC status headers on a real call", async () => {
    const res = await fetch(`${svc.baseUrl}/api/v1/receipts/usr_nobody`, {
      headers: { origin: ORIGIN, "x-api-key": svc.issuerKey },
    });
    expect(res.headers.get("access-control-allow-origin")).toBe(ORIGIN);
    const exposed = listOf(res.headers.get("access-control-expose-headers"));
    for (const header of [
      "x-request-id",
      "x-ratelimit-limit",
      "x-ratelimit-remaining",
      "x-ratelimit-reset",
      "retry-after",
      "grpc-status",
      "grpc-message",
      "grpc-status-details-bin",
    ]) {
      expect(exposed).toContain(header);
    }
    expect(res.headers.get("x-ratelimit-limit")).not.toBeNull();
  });

  it("answers a Connect call from an allowed origin with CORS headers", async () => {
    const res = await fetch(`${svc.baseUrl}/receipts.v1.KeysService/GrantAccess`, {
      method: "POST",
      headers: { origin: ORIGIN, "content-type": "application/json", "x-api-key": svc.issuerKey },
      body: JSON.stringify({ userId: "usr_nobody", keyId: crypto.randomUUID() }),
    });
    expect(res.status).toBe(404);
    expect(res.headers.get("access-control-allow-origin")).toBe(ORIGIN);
    expect(listOf(res.headers.get("access-control-expose-headers"))).toContain("x-request-id");
  });

  it("gives an origin not on the list no CORS headers", async () => {
    const res = await preflight(
      svc,
      "/api/v1/onboarding/generate-keys",
      "content-type",
      "http://evil.example",
    );
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    const call = await fetch(`${svc.baseUrl}/healthz`, { headers: { origin: "http://evil.example" } });
    expect(call.headers.get("access-control-allow-origin")).toBeNull();
  });
});

describe("CORS without CORS_ORIGINS", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(() => svc.close());

  it("is off: no preflight answer, no CORS headers", async () => {
    const res = await preflight(svc, "/api/v1/onboarding/generate-keys", "content-type,x-api-key");
    expect(res.status).not.toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    const call = await fetch(`${svc.baseUrl}/healthz`, { headers: { origin: ORIGIN } });
    expect(call.headers.get("access-control-allow-origin")).toBeNull();
  });
});

describe("CORS_ORIGINS validation", () => {
  it("accepts origins and refuses anything else by name", () => {
    expect(loadConfig({ CORS_ORIGINS: "http://localhost:5173, https://app.example" }).corsOrigins).toEqual([
      "http://localhost:5173",
      "https://app.example",
    ]);
    expect(loadConfig({}).corsOrigins).toEqual([]);
    for (const bad of [
      "*",
      "localhost:5173",
      "http://localhost:5173/",
      "ftp://x.example",
      "https://a.example/app",
    ]) {
      expect(() => loadConfig({ CORS_ORIGINS: bad }), bad).toThrow(ConfigError);
      expect(() => loadConfig({ CORS_ORIGINS: bad }), bad).toThrow(/CORS_ORIGINS/);
    }
  });
});
