import { fork } from "node:child_process";
import { type ClientHttp2Session, connect } from "node:http2";
import { create, fromJson, type JsonObject, toBinary } from "@bufbuild/protobuf";
import { hashPan, receiptJson } from "../../bench/fixtures.js";
import { ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { EncryptReceiptRequestSchema } from "../../gen/receipts/v1/receipts_pb.js";
import { buildApp } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { createApiKey } from "../../src/domain/api-keys.js";
import { createLogger } from "../../src/logging.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { frame } from "./grpc-raw.js";

/**
 * The service's CPU time per EncryptReceipt call over gRPC with the fast path on and off, and over
 * REST (JSON over HTTP/2) for reference. The whole service runs in this process on port 0 (memory
 * store, info-level logs written nowhere); a child process calls it with a `node:http2` client that
 * frames by hand, as `bench/grpc.ts` does, so `process.cpuUsage()` here is the server's alone:
 * measured around N sequential calls and N calls 16 at a time, after a warm-up. Not a load test: a
 * few seconds in all. Not part of `vitest run`; to run it:
 *
 *   npx tsc -p . --outDir /tmp/receipts-cpu; cp package.json /tmp/receipts-cpu/
 *   ln -sfn "$PWD/node_modules" /tmp/receipts-cpu/node_modules; node /tmp/receipts-cpu/test/http/grpc-unary.cpu.js
 */

const WARM_UP = 1_500;
const SEQUENTIAL = 600;
const CONCURRENT = 2_000;
const IN_FLIGHT = 16;
const ROUNDS = 3;

type Variant = "grpc" | "rest";
interface Target {
  port: number;
  apiKey: string;
  hashedPan: string;
  variant: Variant;
}
/** Messages between the server (parent) and the client (child). */
type ToClient = { run: "warm-up" | "sequential" | "concurrent" } | { exit: true };
type ToServer = { ready: true } | { done: string };

if (process.argv[2] === "client") await client(JSON.parse(process.argv[3] ?? "{}") as Target);
else await server();

async function server(): Promise<void> {
  for (let round = 1; round <= ROUNDS; round++) {
    for (const [label, fastPath, variant] of [
      ["gRPC, fast path off", false, "grpc"],
      ["gRPC, fast path on", true, "grpc"],
      ["REST (HTTP/2, JSON)", true, "rest"],
    ] as const) {
      const svc = await service(fastPath);
      const child = fork(process.argv[1] as string, ["client", JSON.stringify({ ...svc.target, variant })]);
      const ask = (message: ToClient) =>
        new Promise<ToServer>((resolve) => {
          child.once("message", (reply) => resolve(reply as ToServer));
          child.send(message);
        });
      await new Promise((resolve) => child.once("message", resolve));
      await ask({ run: "warm-up" });
      const perCall = async (run: "sequential" | "concurrent", count: number) => {
        const start = process.cpuUsage();
        await ask({ run });
        const used = process.cpuUsage(start);
        return ((used.user + used.system) / count).toFixed(0).padStart(5);
      };
      const sequential = await perCall("sequential", SEQUENTIAL);
      const concurrent = await perCall("concurrent", CONCURRENT);
      child.send({ exit: true } satisfies ToClient);
      console.log(
        `${label.padEnd(20)} (${round})  sequential ${sequential} µs/call   ${IN_FLIGHT} in flight ${concurrent} µs/call`,
      );
      await svc.close();
    }
  }
}

/** The whole service with a registered cardholder and a merchant key without a useful rate limit. */
async function service(grpcFastPath: boolean) {
  const tiers = { standard: { requestsPerMinute: 1_000_000_000, generateKeysPerMinute: 1_000 } };
  const config = loadConfig({
    RECEIPTS_ENV: "dev",
    LOG_LEVEL: "info",
    RATE_LIMIT_TIERS: JSON.stringify(tiers),
    FAST_PATHS: grpcFastPath ? "on" : "json-reader,json-writer,one-pass,der",
  });
  const store = createMemoryStore();
  await store.init();
  const logger = createLogger("info", { write: () => undefined } as never);
  const app = await buildApp({ config, store, logger, workers: 1 });
  const { port } = await app.server.listen(0, "127.0.0.1");
  const key = async (role: "issuer" | "merchant") =>
    (await createApiKey(store, "dev", { role, tier: "standard", tenantId: `t-${role}` }, new Date())).key;
  const [issuer, merchant] = [await key("issuer"), await key("merchant")];
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`http://127.0.0.1:${port}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": issuer },
      body: JSON.stringify(body),
    });
    return ((await res.json()) as { data: Record<string, string> }).data;
  };
  const hashedPan = hashPan("4111111111111111");
  const keys = await post("/api/v1/onboarding/generate-keys", {});
  await post("/api/v1/onboarding/register", { hashedPan, publicKey: keys.publicKey, keyId: keys.keyId });
  return { target: { port, apiKey: merchant, hashedPan }, close: () => app.close() };
}

/** The child: calls the service when told to, and says when it is done. */
async function client(target: Target): Promise<void> {
  const session = connect(`http://127.0.0.1:${target.port}`);
  const call = target.variant === "grpc" ? grpcCall(session, target) : restCall(session, target);
  const send = (message: ToServer) => process.send?.(message);
  process.on("message", async (message: ToClient) => {
    if ("exit" in message) {
      session.close();
      process.disconnect();
      return;
    }
    const [count, inFlight] =
      message.run === "warm-up"
        ? [WARM_UP, IN_FLIGHT]
        : message.run === "sequential"
          ? [SEQUENTIAL, 1]
          : [CONCURRENT, IN_FLIGHT];
    let next = 0;
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (next++ < count) await call();
      }),
    );
    send({ done: message.run });
  });
  send({ ready: true });
}

function grpcCall(session: ClientHttp2Session, target: Target) {
  const headers = {
    ":path": "/receipts.v1.ReceiptsService/EncryptReceipt",
    "content-type": "application/grpc",
    te: "trailers",
    "x-api-key": target.apiKey,
  };
  return () => {
    const receipt = fromJson(ReceiptSchema, receiptJson(target.hashedPan) as JsonObject);
    const bytes = toBinary(EncryptReceiptRequestSchema, create(EncryptReceiptRequestSchema, { receipt }));
    return request(session, headers, frame(bytes));
  };
}

function restCall(session: ClientHttp2Session, target: Target) {
  const headers = {
    ":path": "/api/v1/receipts/encrypt",
    "content-type": "application/json",
    "x-api-key": target.apiKey,
  };
  return () => request(session, headers, Buffer.from(JSON.stringify(receiptJson(target.hashedPan))));
}

/** One request; resolves when it closed with `:status` 200 and, for gRPC, `grpc-status` 0. */
function request(session: ClientHttp2Session, headers: Record<string, string>, body: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ":method": "POST", ...headers });
    let ok = false;
    let grpcStatus = "0";
    stream.on("response", (h) => {
      ok = h[":status"] === 200;
    });
    stream.on("trailers", (t) => {
      grpcStatus = String(t["grpc-status"]);
    });
    stream.on("data", () => undefined);
    stream.on("error", reject);
    stream.on("close", () =>
      ok && grpcStatus === "0" ? resolve() : reject(new Error(`failed: ${grpcStatus}`)),
    );
    stream.end(body);
  });
}
