import { afterEach, describe, expect, it, vi } from "vitest";
import { HealthCheckRequestSchema } from "../../gen/grpc/health/v1/health_pb.js";
import { buildApp } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { createApiKey } from "../../src/domain/api-keys.js";
import { onePassReading } from "../../src/http/bindings.js";
import { createLogger } from "../../src/logging.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { framed, rawGrpc } from "./grpc-raw.js";

/**
 * `FAST_PATHS` (src/config.ts) reaches what it switches: with it off, no raw-HTTP/2 gRPC unary server
 * is made and REST bodies skip the one-pass read; the service answers gRPC and REST all the same.
 * The two modules are wrapped (not replaced) to count what runs.
 */

const calls = vi.hoisted(() => ({ grpcUnaryHandlers: 0, onePassReads: 0 }));

vi.mock("../../src/http/grpc-unary.js", async (original) => {
  const actual = await original<typeof import("../../src/http/grpc-unary.js")>();
  return {
    ...actual,
    createGrpcUnaryHandler: (...args: Parameters<typeof actual.createGrpcUnaryHandler>) => {
      calls.grpcUnaryHandlers += 1;
      return actual.createGrpcUnaryHandler(...args);
    },
  };
});

vi.mock("../../src/rpc/json-input.js", async (original) => {
  const actual = await original<typeof import("../../src/rpc/json-input.js")>();
  return {
    ...actual,
    compiledJsonReader: (...args: Parameters<typeof actual.compiledJsonReader>) => {
      calls.onePassReads += 1;
      return actual.compiledJsonReader(...args);
    },
  };
});

async function start(fastPaths: "on" | "off") {
  calls.grpcUnaryHandlers = 0;
  calls.onePassReads = 0;
  const config = loadConfig({ RECEIPTS_ENV: "dev", LOG_LEVEL: "silent", FAST_PATHS: fastPaths });
  const store = createMemoryStore();
  await store.init();
  const app = await buildApp({ config, store, logger: createLogger("silent"), workers: 1 });
  const { port } = await app.server.listen(0, "127.0.0.1");
  const issuer = await createApiKey(
    store,
    "dev",
    { role: "issuer", tier: "standard", tenantId: "t" },
    new Date(),
  );
  return { app, baseUrl: `http://127.0.0.1:${port}`, key: issuer.key };
}

let close: (() => Promise<void>) | undefined;
afterEach(async () => {
  await close?.();
  close = undefined;
});

describe("FAST_PATHS", () => {
  for (const setting of ["on", "off"] as const) {
    it(`${setting}: ${setting === "on" ? "uses" : "bypasses"} the gRPC unary server and the one-pass REST read`, async () => {
      const svc = await start(setting);
      close = () => svc.app.close();
      expect(calls.grpcUnaryHandlers).toBe(setting === "on" ? 1 : 0);
      expect(onePassReading()).toBe(setting === "on");

      // REST: a register call with a body is read, and answered.
      const before = calls.onePassReads;
      const rest = await fetch(`${svc.baseUrl}/api/v1/onboarding/register`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": svc.key },
        body: JSON.stringify({ hashedPan: "0".repeat(64) }),
      });
      expect(rest.status).toBeLessThan(500);
      expect((await rest.json()) as object).toHaveProperty("success");
      if (setting === "on") expect(calls.onePassReads).toBeGreaterThan(before);
      else expect(calls.onePassReads).toBe(before);

      // gRPC: the health check answers SERVING on either path.
      const answer = await rawGrpc(
        svc.baseUrl,
        "/grpc.health.v1.Health/Check",
        framed(HealthCheckRequestSchema, {}),
      );
      expect(answer.trailers["grpc-status"] ?? answer.headers["grpc-status"]).toBe("0");
    });
  }
});
