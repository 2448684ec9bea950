import { randomBytes, randomUUID } from "node:crypto";
import { afterEach, describe, expect, it, vi } from "vitest";
import { HealthCheckRequestSchema } from "../../gen/grpc/health/v1/health_pb.js";
import { buildApp } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { createApiKey } from "../../src/domain/api-keys.js";
import { FAST_PATHS, type FastPath, fastPathsOn } from "../../src/fast-paths.js";
import { createLogger } from "../../src/logging.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { ESCROW_FIXTURE } from "../support/fixture-keys.js";
import { framed, rawGrpc } from "./grpc-raw.js";

/**
 * `FAST_PATHS` (src/config.ts) reaches each fast path (src/fast-paths.ts names them), and nothing else does: every
 * module of a fast path is wrapped (not replaced) to count what runs on the main thread while a REST
 * call with a body and an RSA key (register) and a gRPC call are answered. A fast path that is off
 * never runs; one that is on does.
 */

const calls = vi.hoisted(() => ({
  "grpc-server": 0,
  "json-reader": 0,
  "json-writer": 0,
  "one-pass": 0,
  der: 0,
}));

/** Wraps each named export of a module so that calling it counts one for `path`. */
function counting<M extends Record<string, unknown>>(
  actual: M,
  path: keyof typeof calls,
  names: (keyof M)[],
): M {
  const wrapped: Record<string, unknown> = { ...actual };
  for (const name of names) {
    const fn = actual[name] as (...args: unknown[]) => unknown;
    wrapped[name as string] = (...args: unknown[]) => {
      calls[path] += 1;
      return fn(...args);
    };
  }
  return wrapped as M;
}

vi.mock("../../src/http/grpc-unary.js", async (original) =>
  counting(await original<typeof import("../../src/http/grpc-unary.js")>(), "grpc-server", [
    "createGrpcUnaryHandler",
  ]),
);
vi.mock("../../src/rpc/json-input.js", async (original) => {
  const actual = await original<typeof import("../../src/rpc/json-input.js")>();
  // The compiled reader serves `json-reader` through `compiledMessageFromJson` (after the check) and
  // `one-pass` through `compiledJsonReader` (instead of it), which is the compiled reader too.
  const reader = counting(actual, "json-reader", ["compiledMessageFromJson", "compiledJsonReader"]);
  return counting(reader, "one-pass", ["compiledJsonReader"]);
});
vi.mock("../../src/rpc/json-output.js", async (original) =>
  counting(await original<typeof import("../../src/rpc/json-output.js")>(), "json-writer", [
    "compiledMessageToJson",
  ]),
);
vi.mock("../../src/rpc/json-text.js", async (original) =>
  counting(await original<typeof import("../../src/rpc/json-text.js")>(), "json-writer", [
    "compiledMessageToJsonText",
    "compiledFieldToJsonText",
  ]),
);
vi.mock("../../src/crypto/der.js", async (original) =>
  counting(await original<typeof import("../../src/crypto/der.js")>(), "der", [
    "rsaPublicJwkFromSpki",
    "rsaPublicJwkFromPkcs1",
    "rsaPrivateJwkFromPkcs8",
    "rsaPrivateJwkFromPkcs1",
  ]),
);

async function start(fastPaths: string) {
  for (const path of FAST_PATHS) calls[path] = 0;
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

/** The settings tried: all, none, and each path alone (with the one it needs, if any). */
const SETTINGS: [string, FastPath[]][] = [
  ["on", [...FAST_PATHS]],
  ["off", []],
  ["grpc-server", ["grpc-server"]],
  ["json-reader", ["json-reader"]],
  ["json-reader,one-pass", ["json-reader", "one-pass"]],
  ["json-writer", ["json-writer"]],
  ["der", ["der"]],
];

describe("FAST_PATHS", () => {
  for (const [setting, on] of SETTINGS) {
    it(`${setting}: exactly ${on.length === 0 ? "no fast path" : on.join(", ")} runs`, async () => {
      const svc = await start(setting);
      close = () => svc.app.close();
      expect(fastPathsOn()).toEqual(on);

      // REST: a body read into a message, an RSA public key parsed, an answer written.
      const rest = await fetch(`${svc.baseUrl}/api/v1/onboarding/register`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": svc.key },
        body: JSON.stringify({
          hashedPan: randomBytes(32).toString("hex"),
          keyId: randomUUID(),
          publicKey: ESCROW_FIXTURE.publicKey,
        }),
      });
      const body = (await rest.json()) as { success: boolean; error?: unknown };
      expect({ status: rest.status, error: body.error }).toEqual({ status: 200, error: undefined });

      // gRPC: the health check answers SERVING on either path.
      const answer = await rawGrpc(
        svc.baseUrl,
        "/grpc.health.v1.Health/Check",
        framed(HealthCheckRequestSchema, {}),
      );
      expect(answer.trailers["grpc-status"] ?? answer.headers["grpc-status"]).toBe("0");
      expect(answer.body.subarray(5)).toEqual(Buffer.from([0x08, 0x01])); // status: SERVING

      for (const path of FAST_PATHS) {
        expect({ path, ran: calls[path] > 0 }).toEqual({ path, ran: on.includes(path) });
      }
    });
  }

  it("refuses an unknown fast path, and one-pass without the reader it uses", () => {
    expect(() => loadConfig({ FAST_PATHS: "grpc-server,warp" })).toThrow(/FAST_PATHS.*warp/);
    expect(() => loadConfig({ FAST_PATHS: "one-pass" })).toThrow(/one-pass needs json-reader/);
  });
});
