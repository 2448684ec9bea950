import { connect as connectHttp2 } from "node:http2";
import { connect as connectTcp, type Socket } from "node:net";
import { status } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { get, post, receiptBody, startService, type TestService } from "../support/harness.js";
import { storeDouble } from "./store-double.js";
import { grpcTyped, onboard, rawGrpcClient, rpcPath } from "./support.js";

/** Opens a TCP connection, writes `bytes` (if any), and reports what came back and when it closed. */
function rawConnection(port: number, bytes?: string) {
  const started = performance.now();
  let received = "";
  let socket: Socket | undefined;
  const opened = new Promise<Socket>((resolve, reject) => {
    socket = connectTcp(port, "127.0.0.1", () => {
      if (bytes !== undefined) socket?.write(bytes);
      resolve(socket as Socket);
    });
    socket.on("error", reject);
  });
  const closed = new Promise<{ ms: number; received: string }>((resolve) => {
    void opened.then((s) => {
      s.setEncoding("utf8");
      s.on("data", (chunk: string) => {
        received += chunk;
      });
      s.on("error", () => undefined);
      s.on("close", () => resolve({ ms: performance.now() - started, received }));
    });
  });
  return { opened, closed, write: (more: string) => socket?.write(more) };
}

describe("slow and idle clients are cut off and cannot starve the server", () => {
  let svc: TestService;

  beforeAll(async () => {
    svc = await startService({
      listener: {
        sniffTimeoutMs: 500,
        headersTimeoutMs: 500,
        requestTimeoutMs: 1_000,
        timeoutCheckIntervalMs: 100,
        http2IdleTimeoutMs: 500,
      },
    });
  });
  afterAll(async () => {
    await svc.close();
  });

  it("serves requests while 200 idle connections are open, and closes every one of them", async () => {
    const idle = Array.from({ length: 200 }, () => rawConnection(svc.port));
    await Promise.all(idle.map((c) => c.opened));
    const answer = await get(svc, "/api/v1/receipts/usr_nobody", svc.issuerKey);
    expect(answer.status).toBe(404);
    const grpc = rawGrpcClient(svc.port);
    try {
      const outcome = await grpcTyped(
        grpc,
        ReceiptsService.method.listReceipts,
        { userId: "usr_nobody" },
        {
          "x-api-key": svc.issuerKey,
        },
      );
      expect(outcome.code).toBe(status.NOT_FOUND);
    } finally {
      grpc.close();
    }
    const closed = await Promise.all(idle.map((c) => c.closed));
    expect(Math.max(...closed.map((c) => c.ms))).toBeLessThan(3_000);
  });

  it("answers 408 to headers that trickle in, and to a body that trickles in, then closes", async () => {
    const slowHeaders = Array.from({ length: 20 }, () =>
      rawConnection(svc.port, "GET /healthz HTTP/1.1\r\nHost: x\r\n"),
    );
    const slowBody = rawConnection(
      svc.port,
      "POST /api/v1/keys/grant-access HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
    );
    await Promise.all([...slowHeaders.map((c) => c.opened), slowBody.opened]);
    const drip = setInterval(() => {
      for (const c of slowHeaders) c.write("X-Slow: 1\r\n");
      slowBody.write(" ");
    }, 100);
    try {
      const results = await Promise.all([...slowHeaders.map((c) => c.closed), slowBody.closed]);
      for (const { ms, received } of results) {
        expect(received).toMatch(/^HTTP\/1\.1 408/);
        expect(ms).toBeLessThan(3_000);
      }
    } finally {
      clearInterval(drip);
    }
  });

  it("lets go of an HTTP/2 client that sends the preface and then nothing", async () => {
    const session = connectHttp2(svc.baseUrl);
    const started = performance.now();
    await new Promise<void>((resolve) => session.once("close", () => resolve()));
    expect(performance.now() - started).toBeLessThan(3_000);
    expect((await get(svc, "/api/v1/receipts/usr_nobody", svc.issuerKey)).status).toBe(404);
  });
});

describe("shutdown finishes the calls in flight, and always closes the store", () => {
  it("completes a REST and a gRPC call that are in flight, refuses new connections, then closes", async () => {
    const double = storeDouble();
    const svc = await startService({ store: double.store });
    const holder = await onboard(svc, "4111111111111111");
    const grpc = rawGrpcClient(svc.port);
    try {
      double.inject("users.findByPanHash", "stall");
      double.inject("users.findById", "stall");
      const encrypt = post(
        svc,
        "/api/v1/receipts/encrypt",
        svc.merchantKey,
        receiptBody({ recipientHashedPan: holder.hashedPan }),
      );
      const list = grpcTyped(
        grpc,
        ReceiptsService.method.listReceipts,
        { userId: holder.userId },
        { "x-api-key": svc.issuerKey },
      );
      await Promise.all([double.stalled("users.findByPanHash"), double.stalled("users.findById")]);

      let closed = false;
      const closing = svc.close().then(() => {
        closed = true;
      });
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(closed).toBe(false);
      await expect(fetch(`${svc.baseUrl}/healthz`, { signal: AbortSignal.timeout(2_000) })).rejects.toThrow();

      double.release();
      const [rest, rpc] = await Promise.all([encrypt, list]);
      expect(rest.status).toBe(200);
      expect(rest.body.data.isEscrowed).toBe(false);
      expect(rpc.code).toBe(status.OK);
      await closing;
      expect(closed).toBe(true);
    } finally {
      grpc.close();
    }
  });

  it("resolves close() and closes the store when a client holds a call open past the grace period", async () => {
    const double = storeDouble();
    let storeClosed = false;
    const store = {
      ...double.store,
      close: async () => {
        storeClosed = true;
      },
    };
    // Longer than Fastify's default plugin timeout (10 s), which also bounds close hooks.
    const svc = await startService({ store, shutdownGraceMs: 10_500 });
    const session = connectHttp2(svc.baseUrl);
    session.on("error", () => undefined);
    // A gRPC call whose request body never comes: it stays in flight until the server gives up.
    const stream = session.request({
      ":method": "POST",
      ":path": rpcPath(ReceiptsService.method.listReceipts),
      "content-type": "application/grpc",
      te: "trailers",
      "x-api-key": svc.issuerKey,
    });
    stream.on("error", () => undefined);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const started = performance.now();
    await expect(svc.close()).resolves.toBeUndefined();
    expect(performance.now() - started).toBeLessThan(13_000);
    expect(storeClosed).toBe(true);
    session.destroy();
  }, 20_000);
});
