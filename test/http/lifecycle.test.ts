import { Agent, request as httpRequest } from "node:http";
import { connect as connectHttp2 } from "node:http2";
import { connect as connectTcp } from "node:net";
import { Metadata } from "@grpc/grpc-js";
import { afterEach, describe, expect, it } from "vitest";
import { type GrantAccessResponse, KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { gate, startTestServer, type TestServer } from "./support.js";

/** Resolves with the time (ms) until the server closes a raw TCP connection that sends `bytes`. */
function timeUntilClosed(port: number, bytes?: string): Promise<{ ms: number; received: string }> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    let received = "";
    const socket = connectTcp(port, "127.0.0.1", () => {
      if (bytes !== undefined) socket.write(bytes);
    });
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      received += chunk;
    });
    socket.on("error", reject);
    socket.on("close", () => resolve({ ms: Date.now() - started, received }));
  });
}

/**
 * Holds the next generate-keys call in the service until `release()`; `entered` settles once the call
 * has reached it.
 */
function holdNextCall(): { release: () => void; entered: Promise<void> } {
  let release = () => {};
  gate.wait = new Promise<void>((resolve) => {
    release = resolve;
  });
  const entered = new Promise<void>((resolve) => {
    gate.entered = resolve;
  });
  return { release, entered };
}

describe("connections and shutdown", () => {
  let t: TestServer | undefined;
  afterEach(async () => {
    gate.wait = undefined;
    await t?.close();
    t = undefined;
  });

  it("closes a connection that sends nothing after the sniff timeout", async () => {
    t = await startTestServer({ listener: { sniffTimeoutMs: 200 } });
    const { ms } = await timeUntilClosed(t.port);
    expect(ms).toBeGreaterThanOrEqual(150);
    expect(ms).toBeLessThan(2_000);
  });

  it("answers 408 and closes an HTTP/1.1 connection whose headers never finish", async () => {
    t = await startTestServer({ listener: { headersTimeoutMs: 300, timeoutCheckIntervalMs: 100 } });
    const { ms, received } = await timeUntilClosed(t.port, "GET /healthz HTTP/1.1\r\nHost: x\r\n");
    expect(received).toMatch(/^HTTP\/1\.1 408/);
    expect(ms).toBeLessThan(2_000);
  });

  it("sends GOAWAY to an idle HTTP/2 session after the idle timeout", async () => {
    t = await startTestServer({ listener: { http2IdleTimeoutMs: 200 } });
    const session = connectHttp2(t.baseUrl);
    const started = Date.now();
    await new Promise<void>((resolve) => session.once("goaway", () => resolve()));
    expect(Date.now() - started).toBeLessThan(2_000);
    session.destroy();
  });

  it("closes promptly with an open grpc-js channel", async () => {
    t = await startTestServer();
    const client = grpcClient(KeysService, t.port);
    try {
      const res = await grpcUnary<GrantAccessResponse>(
        client,
        "grantAccess",
        { userId: "u" },
        new Metadata(),
      );
      expect(res.response?.userId).toBe("u");
      const started = Date.now();
      await t.close();
      expect(Date.now() - started).toBeLessThan(1_000);
    } finally {
      client.close();
    }
  });

  it("closes promptly with an idle HTTP/1.1 keep-alive connection", async () => {
    t = await startTestServer();
    const agent = new Agent({ keepAlive: true });
    try {
      const server = t;
      const status = await new Promise<number>((resolve, reject) => {
        const req = httpRequest(`${server.baseUrl}/healthz`, { agent }, (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode ?? 0));
        });
        req.on("error", reject);
        req.end();
      });
      expect(status).toBe(200);
      expect(Object.values(agent.freeSockets).flat()).toHaveLength(1);
      const started = Date.now();
      await t.close();
      expect(Date.now() - started).toBeLessThan(1_000);
    } finally {
      agent.destroy();
    }
  });

  it("lets a call in flight finish before closing, and refuses new connections meanwhile", async () => {
    t = await startTestServer();
    const { release, entered } = holdNextCall();
    const inFlight = fetch(`${t.baseUrl}/api/v1/onboarding/generate-keys`, { method: "POST" });
    await entered;
    gate.entered = undefined;
    let closed = false;
    const closing = t.close().then(() => {
      closed = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(closed).toBe(false);
    await expect(fetch(`${t.baseUrl}/healthz`)).rejects.toThrow();
    release();
    const res = await inFlight;
    expect(res.status).toBe(200);
    expect(((await res.json()) as { data: { keyId: string } }).data.keyId).toBe("key-1");
    await closing;
    expect(closed).toBe(true);
  });

  it("tells an HTTP/1.1 call in flight when the drain began to close its connection", async () => {
    t = await startTestServer();
    const { release, entered } = holdNextCall();
    const agent = new Agent({ keepAlive: true });
    const answer = new Promise<{ status: number; connection: string | undefined }>((resolve, reject) => {
      const req = httpRequest(`${t?.baseUrl}/api/v1/onboarding/generate-keys`, { method: "POST", agent });
      req.on("error", reject);
      req.on("response", (res) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection }));
      });
      req.end();
    });
    await entered;
    gate.entered = undefined;
    const closing = t.close();
    // The drain has begun once a new connection is refused.
    const healthz = `${t.baseUrl}/healthz`;
    for (
      let i = 0;
      i < 100 &&
      (await fetch(healthz).then(
        () => true,
        () => false,
      ));
      i++
    ) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    release();
    expect(await answer).toEqual({ status: 200, connection: "close" });
    await closing;
    agent.destroy();
  });

  it("stops waiting for a call that outlives the shutdown grace period", async () => {
    t = await startTestServer({ shutdownGraceMs: 200 });
    gate.wait = new Promise<void>(() => {});
    const inFlight = fetch(`${t.baseUrl}/api/v1/onboarding/generate-keys`, { method: "POST" }).catch(
      (err: unknown) => err,
    );
    await new Promise((resolve) => setTimeout(resolve, 50));
    const started = Date.now();
    await t.close();
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(await inFlight).toBeInstanceOf(Error);
  });
});
