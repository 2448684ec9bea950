import { connect as connectHttp2 } from "node:http2";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ConnectRouter, Interceptor, ServiceImpl } from "@connectrpc/connect";
import { pino } from "pino";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { OnboardingService } from "../../gen/receipts/v1/onboarding_pb.js";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { EncryptedReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { loadConfig } from "../../src/config.js";
import { AppError, invalidRequest } from "../../src/errors.js";
import { useFastPaths } from "../../src/fast-paths.js";
import { createHttpServer, type HttpServer, type HttpServerOptions } from "../../src/http/server.js";
import { kLogger, kProtocol, kRemoteAddress, kRequestId } from "../../src/rpc/context.js";
import { errorInterceptor } from "../../src/rpc/error-mapping.js";
import { healthService } from "../../src/rpc/health.js";
import { createMetrics, type Metrics, metricsInterceptor } from "../../src/rpc/metrics.js";

// CI runs the HTTP suites a second time with FAST_PATHS=off. Services built through buildApp read it
// from their config; the servers built here from createHttpServer take it from the switch, set here.
if (process.env.FAST_PATHS !== undefined) {
  useFastPaths(loadConfig({ FAST_PATHS: process.env.FAST_PATHS }).fastPaths);
}

/**
 * A tiny stand-in for the real services (which the lead wires in `src/app.ts`): enough behaviour to
 * exercise every transport path, with fixed answers so tests can assert exact JSON.
 */

export const FIXED_TIME = new Date("2026-01-01T00:00:00Z");

const onboarding: ServiceImpl<typeof OnboardingService> = {
  generateKeys: () => ({ keyId: "key-1", publicKey: "PUB", privateKey: "PRIV", algorithm: "RSA-OAEP-256" }),
  register(req) {
    const problems = [];
    if (!/^[0-9a-fA-F]{64}$/.test(req.hashedPan)) {
      problems.push({ field: "hashedPan", description: "must be 64 hexadecimal characters" });
    }
    if (req.publicKey === "") problems.push({ field: "publicKey", description: "is required" });
    if (problems.length > 0) throw invalidRequest(problems);
    return {
      userId: "usr_1",
      keyId: req.keyId,
      status: "active",
      registeredAt: timestampFromDate(FIXED_TIME),
      releasedReceipts: 0,
    };
  },
  deleteUser: () => ({ deletedReceipts: 0, deletedKeys: 0 }),
};

const keys: ServiceImpl<typeof KeysService> = {
  grantAccess: (req, ctx) => ({
    tokenId: "tok_1",
    userId: req.userId,
    keyId: req.keyId,
    purpose: "decrypt",
    sourceIp: ctx.values.get(kRemoteAddress),
  }),
  lookupKey: () => ({ keyId: "key-1", algorithm: "RSA-OAEP-256", publicKey: "PUB", isEscrowed: false }),
  registerEscrowKey: () => ({ escrowKeyId: "iek_1", algorithm: "RSA-OAEP-256" }),
  listEscrowKeys: () => ({ escrowKeys: [], currentEscrowKeyId: "" }),
  revokeEscrowKey: (req) => ({ escrowKey: { escrowKeyId: req.escrowKeyId }, currentEscrowKeyId: "" }),
  listAuditEvents: (req) => ({ events: [], nextPageToken: req.pageToken }),
  listKtEntries: () => ({ entries: [], nextPageToken: "" }),
  registerIssuerSigningKey: () => ({ signingKeyId: "sk_1", algorithm: "Ed25519", status: "pending" }),
  listIssuerSigningKeys: () => ({ signingKeys: [], requireBindings: false }),
  revokeIssuerSigningKey: (req) => ({ signingKey: { signingKeyId: req.signingKeyId } }),
  ktSelfCheck: () => ({ userId: "usr_1", keyId: "key-1", algorithm: "RSA-OAEP-256", publicKey: "PUB" }),
};

const sealed = (receiptId: string) =>
  create(EncryptedReceiptSchema, {
    version: "1.0",
    receiptId,
    keyId: "key-1",
    ciphertext: new Uint8Array([1, 2, 3]),
    createdAt: timestampFromDate(FIXED_TIME),
  });

const receipts: Partial<ServiceImpl<typeof ReceiptsService>> = {
  listReceipts: (req) => ({ receipts: [sealed(req.userId)], nextPageToken: `size:${req.pageSize}` }),
  getTransactionReceipt(req) {
    switch (req.transactionId) {
      case "boom":
        throw new Error("connection to mongodb://admin:hunter2@db failed");
      case "missing":
        throw new AppError("not_found", "No receipt for this transaction.");
      case "limited":
        throw new AppError("rate_limit_exceeded", "Slow down.", {
          retryAfterSeconds: 7,
          headers: { "x-ratelimit-limit": "60", "x-ratelimit-remaining": "0" },
        });
      default:
        return { receipt: sealed(`${req.transactionId}/${req.merchantId}`) };
    }
  },
};

/**
 * Waits, while set, before GenerateKeys answers: lets a test hold a call in flight. `entered`, when
 * set, is called as a call reaches the wait (the call is then surely in flight).
 */
export const gate: { wait: Promise<void> | undefined; entered?: (() => void) | undefined } = {
  wait: undefined,
};

const payments: Partial<ServiceImpl<typeof PaymentsService>> = {
  createPayment(req) {
    if (req.gateway !== "gateway_a" && req.gateway !== "gateway_b") {
      throw invalidRequest([{ field: "gateway", description: "must be gateway_a or gateway_b" }]);
    }
    const amount = req.receipt?.amount ?? 0n;
    return {
      paymentId: "pay_1",
      gateway: req.gateway,
      status: "succeeded",
      amount,
      currency: req.receipt?.currency ?? "",
      ...(req.gateway === "gateway_a" ? { clientSecret: "pay_1_secret_x" } : {}),
      serviceMetadata: {
        receiptId: req.receipt?.receiptId ?? "",
        amount,
        isEscrowed: false,
        gateway: req.gateway,
      },
    };
  },
};

/** Registers the test services (and the health service) on a router. */
export function testRoutes(ready: () => Promise<boolean>) {
  return (router: ConnectRouter) => {
    router.service(OnboardingService, {
      ...onboarding,
      async generateKeys(req, ctx) {
        gate.entered?.();
        await gate.wait;
        return onboarding.generateKeys(req, ctx);
      },
    });
    router.service(KeysService, keys);
    router.service(ReceiptsService, receipts);
    router.service(PaymentsService, payments);
    router.service(Health, healthService(ready));
  };
}

/** Counts calls per protocol and tags every response (and error) with `x-test-interceptor`. */
export function countingInterceptor(counts: Map<string, number>): Interceptor {
  return (next) => async (req) => {
    const protocol = req.contextValues.get(kProtocol) ?? "none";
    const n = (counts.get(protocol) ?? 0) + 1;
    counts.set(protocol, n);
    try {
      const res = await next(req);
      res.header.set("x-test-interceptor", `${protocol}:${n}`);
      return res;
    } catch (err) {
      if (err instanceof AppError) err.headers["x-test-interceptor"] = `${protocol}:${n}`;
      throw err;
    }
  };
}

/** A stand-in for the lead's request-context interceptor: request id and logger in the context. */
export function requestIdInterceptor(logger: pino.Logger): Interceptor {
  return (next) => async (req) => {
    const id = req.header.get("x-request-id") ?? "no-id";
    req.contextValues.set(kRequestId, id);
    req.contextValues.set(kLogger, () => logger.child({ requestId: id }));
    const res = await next(req);
    res.header.set("x-request-id", id);
    return res;
  };
}

/** A running test server and what it observed. */
export interface TestServer {
  server: HttpServer;
  port: number;
  baseUrl: string;
  counts: Map<string, number>;
  logs: string[];
  metrics: Metrics;
  setReady(ready: boolean): void;
  close(): Promise<void>;
}

/** Starts the HTTP server with the test services on 127.0.0.1:0. */
export async function startTestServer(overrides: Partial<HttpServerOptions> = {}): Promise<TestServer> {
  const counts = new Map<string, number>();
  const logs: string[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => logs.push(line) });
  const metrics = createMetrics({ defaultMetrics: false });
  let isReady = true;
  const ready = async () => isReady;
  const server = await createHttpServer({
    routes: testRoutes(ready),
    services: [OnboardingService, KeysService, ReceiptsService, PaymentsService],
    interceptors: [
      requestIdInterceptor(logger),
      metricsInterceptor(metrics),
      errorInterceptor,
      countingInterceptor(counts),
    ],
    logger,
    bodyLimitBytes: 64 * 1024,
    metrics,
    ready,
    ...overrides,
  });
  const address = await server.listen(0, "127.0.0.1");
  return {
    server,
    port: address.port,
    baseUrl: `http://127.0.0.1:${address.port}`,
    counts,
    logs,
    metrics,
    setReady: (value) => {
      isReady = value;
    },
    close: () => server.close(),
  };
}

/** One HTTP/2 request with `node:http2`: status, headers and body text. */
export function http2Request(
  baseUrl: string,
  headers: Record<string, string>,
  body?: string,
): Promise<{ status: number; headers: Record<string, unknown>; text: string }> {
  return new Promise((resolve, reject) => {
    const session = connectHttp2(baseUrl);
    session.on("error", reject);
    const stream = session.request(headers);
    let text = "";
    let responseHeaders: Record<string, unknown> = {};
    stream.setEncoding("utf8");
    stream.on("response", (h) => {
      responseHeaders = h;
    });
    stream.on("data", (chunk: string) => {
      text += chunk;
    });
    stream.on("end", () => {
      session.close();
      resolve({ status: Number(responseHeaders[":status"]), headers: responseHeaders, text });
    });
    stream.on("error", reject);
    stream.end(body);
  });
}
