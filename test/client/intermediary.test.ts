import { createServer as createHttpServer, type Server } from "node:http";
import { createServer as createHttp2Server, type Http2Server } from "node:http2";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { createReceiptsClient as createAnywhere, ReceiptsApiError } from "../../src/client/index.js";
import { createReceiptsClient as createInNode } from "../../src/client/node.js";
import { rejectionOf } from "./support.js";

/**
 * The retry rules (README, "TypeScript client") against an intermediary (a proxy, a load balancer) that
 * answers with a bare HTTP status and its own body, over a real socket: Connect maps a bare 400 to Internal
 * and a 409 to Unknown, so only the status tells the client not to retry.
 */

/** One scripted answer: status, body, content type and extra headers. */
interface Answer {
  status: number;
  body?: string;
  type?: string;
  headers?: Record<string, string>;
}

/**
 * The client's transports: the Connect protocol over `fetch` (the default on every platform), over
 * Node's HTTP/1.1 client, and gRPC over Node's HTTP/2.
 */
type Protocol = "fetch" | "connect" | "grpc";

/** An intermediary on HTTP/1.1 (Connect protocol) or cleartext HTTP/2 (gRPC) answering `answer`. */
async function intermediary(protocol: Protocol, answer: Answer) {
  let hits = 0;
  const respond = (res: {
    writeHead(status: number, headers: Record<string, string>): unknown;
    end(body: string): unknown;
  }) => {
    hits++;
    res.writeHead(answer.status, {
      "content-type": answer.type ?? "text/html",
      ...answer.headers,
    });
    res.end(answer.body ?? `<html><body>${answer.status} from the proxy</body></html>`);
  };
  const server: Server | Http2Server =
    protocol === "grpc"
      ? createHttp2Server((req, res) => req.resume().on("end", () => respond(res)))
      : createHttpServer((req, res) => req.resume().on("end", () => respond(res)));
  // HTTP/2 sessions stay open for the client's next call: closing the server ends them.
  const sessions = new Set<{ destroy(): void }>();
  server.on("session", (session: { destroy(): void }) => sessions.add(session));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const delays: number[] = [];
  const baseUrl = `http://127.0.0.1:${port}`;
  const options = {
    baseUrl,
    apiKey: "rk_dev_intermediary",
    sleep: async (ms: number) => {
      delays.push(ms);
    },
  };
  const client =
    protocol === "fetch" ? createAnywhere(options) : createInNode({ ...options, transport: protocol });
  return {
    baseUrl,
    client,
    delays,
    hits: () => hits,
    close: () =>
      new Promise<void>((resolve) => {
        if ("closeAllConnections" in server) server.closeAllConnections();
        for (const session of sessions) session.destroy();
        server.close(() => resolve());
      }),
  };
}

describe("retries through an intermediary that answers a bare HTTP status", () => {
  const closers: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
  });
  const start = async (protocol: Protocol, answer: Answer) => {
    const proxy = await intermediary(protocol, answer);
    closers.push(proxy.close);
    return proxy;
  };

  for (const protocol of ["fetch", "connect", "grpc"] as const) {
    it.each([400, 401, 403, 404, 409])(`never retries a bare %i (${protocol})`, async (status) => {
      const proxy = await start(protocol, { status });
      const err = await rejectionOf(proxy.client.grantAccess({ userId: "usr_1", keyId: "k-1" }));
      expect(err).toBeInstanceOf(ReceiptsApiError);
      expect(err).toMatchObject({ attempts: 1, retryable: false, httpStatus: status });
      expect(proxy.hits()).toBe(1);
      expect(proxy.delays).toEqual([]);
    });

    it.each([429, 500, 502, 503, 504])(`retries a bare %i three times (${protocol})`, async (status) => {
      const proxy = await start(protocol, { status });
      const err = await rejectionOf(proxy.client.grantAccess({ userId: "usr_1", keyId: "k-1" }));
      expect(err).toMatchObject({ attempts: 3, retryable: true, httpStatus: status });
      expect(proxy.hits()).toBe(3);
      expect(proxy.delays).toEqual([1000, 2000]);
    });
  }

  it("never retries a 409 whose body is JSON but not a Connect error", async () => {
    const proxy = await start("connect", {
      status: 409,
      type: "application/json",
      body: '{"message":"duplicate request"}',
    });
    const err = await rejectionOf(proxy.client.createPayment("gateway_a", { receiptId: "r-1" }));
    expect(err).toMatchObject({ attempts: 1, retryable: false, httpStatus: 409 });
    expect(proxy.hits()).toBe(1);
  });

  it("waits out a short Retry-After", async () => {
    const proxy = await start("connect", { status: 503, headers: { "retry-after": "4" } });
    await rejectionOf(proxy.client.generateKeys());
    expect(proxy.delays).toEqual([4000, 4000]);
    expect(proxy.hits()).toBe(3);
  });

  it("fails at once, saying when to retry, when Retry-After is past the cap", async () => {
    const proxy = await start("connect", { status: 429, headers: { "retry-after": "180" } });
    const err = await rejectionOf(proxy.client.grantAccess({ userId: "usr_1", keyId: "k-1" }));
    expect(err).toMatchObject({ attempts: 1, retryable: true, retryAfterSeconds: 180, httpStatus: 429 });
    expect((err as ReceiptsApiError).message).toContain("retry after 180 s");
    expect(proxy.hits()).toBe(1);
    expect(proxy.delays).toEqual([]);
  });

  it("waits a long Retry-After when the cap allows it", async () => {
    const proxy = await start("connect", { status: 429, headers: { "retry-after": "180" } });
    const delays: number[] = [];
    const patient = createAnywhere({
      baseUrl: proxy.baseUrl,
      apiKey: "rk_dev_intermediary",
      retry: { maxRetryAfterMs: 200_000 },
      sleep: async (ms: number) => {
        delays.push(ms);
      },
    });
    await rejectionOf(patient.generateKeys());
    expect(delays).toEqual([180_000, 180_000]);
    expect(proxy.hits()).toBe(3);
  });

  it("refuses a negative Retry-After cap", () => {
    expect(() =>
      createAnywhere({
        baseUrl: "http://localhost:8080",
        apiKey: "rk_dev_x",
        retry: { maxRetryAfterMs: -1 },
      }),
    ).toThrow(RangeError);
  });
});
