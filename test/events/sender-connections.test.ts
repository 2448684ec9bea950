import { createServer as createHttpServer, type Server as HttpServer } from "node:http";
import { type AddressInfo, createServer as createNetServer, type Server, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { parseHead } from "../../src/events/http1-answer.js";
import { WebhookSender } from "../../src/events/sender.js";

/**
 * The webhook sender's own HTTP/1.1 client (src/events/http1.ts): connections kept alive and reused
 * per receiver (counted on the receiver's side), each answer's end found from its framing before a
 * connection is reused, and a connection closed whenever that end is not certain.
 */

const servers: (Server | HttpServer)[] = [];
const senders: WebhookSender[] = [];

afterEach(async () => {
  for (const s of senders.splice(0)) s.close();
  for (const server of servers.splice(0)) {
    if ("closeAllConnections" in server) server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  }
});

function sender(timeoutMs = 2_000, responseLimitBytes = 1024): WebhookSender {
  const s = new WebhookSender({ allowPrivate: true, timeoutMs, responseLimitBytes });
  senders.push(s);
  return s;
}

/** A node:http receiver counting the connections it accepted and the requests it answered. */
async function httpReceiver(handler: Parameters<typeof createHttpServer>[1], keepAliveTimeout = 5_000) {
  const seen = { connections: 0, requests: [] as { url: string; body: string; signature: string }[] };
  const server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      seen.requests.push({
        url: req.url ?? "",
        body: Buffer.concat(chunks).toString("utf8"),
        signature: String(req.headers["webhook-signature"]),
      });
      handler?.(req, res);
    });
  });
  server.keepAliveTimeout = keepAliveTimeout;
  server.on("connection", () => seen.connections++);
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

/** A raw TCP receiver answering each request (one per data event) with `answer`. */
async function rawReceiver(answer: (n: number) => string, after?: (socket: Socket) => void) {
  const seen = { connections: 0, requests: 0 };
  const server = createNetServer((socket) => {
    seen.connections++;
    socket.on("data", (data) => {
      if (!data.includes("\r\n\r\n")) return;
      seen.requests++;
      socket.write(answer(seen.requests));
      after?.(socket);
    });
    socket.on("error", () => undefined);
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

/**
 * A raw TCP receiver that frames pipelined requests by Content-Length: per data event, the complete
 * requests it holds (their paths) go to `answer`, which writes what it likes to the socket.
 */
async function pipelineReceiver(answer: (paths: string[], socket: Socket, connection: number) => void) {
  const seen = { connections: 0, batches: [] as string[][] };
  const server = createNetServer((socket) => {
    const connection = ++seen.connections;
    let buf = Buffer.alloc(0);
    socket.on("data", (data: Buffer) => {
      buf = Buffer.concat([buf, data]);
      const paths: string[] = [];
      for (;;) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) break;
        const head = buf.toString("latin1", 0, end);
        const stop = end + 4 + Number(/content-length: (\d+)/.exec(head)?.[1]);
        if (buf.length < stop) break;
        paths.push(head.split(" ")[1] as string);
        buf = buf.subarray(stop);
      }
      if (paths.length > 0) {
        seen.batches.push(paths);
        answer(paths, socket, connection);
      }
    });
    socket.on("error", () => undefined);
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

/** An answer whose status and framing follow the request's `?n=`: the caller sees which it got. */
function numbered(path: string): string {
  const n = Number(path.split("=")[1]);
  const status = statusOf(n);
  if (status === 204) return "HTTP/1.1 204 No Content\r\n\r\n";
  if (n % 3 === 1) return `HTTP/1.1 ${status} OK\r\nContent-Length: 3\r\n\r\nn=${n % 10}`;
  return `HTTP/1.1 ${status} OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n`;
}

/** 204 (no body), or 200-203 (a sized body), or 206-207 (a chunked one), by `n`. */
function statusOf(n: number): number {
  if (n % 3 === 0) return 204;
  return n % 3 === 1 ? 200 + (n % 4) : 206 + (n % 2);
}

const post = (s: WebhookSender, url: string, body = '{"id":"evt_1"}') =>
  s.send({ url, headers: { "webhook-id": "evt_1", "webhook-signature": "v1,abc" }, body });

describe("webhook connections", () => {
  it("reuses one kept-alive connection for deliveries one after another, and sends each request whole", async () => {
    const receiver = await httpReceiver((_req, res) => res.writeHead(204).end());
    const s = sender();
    for (let i = 0; i < 25; i++) {
      expect(await post(s, `${receiver.url}/hooks?n=${i}`, `{"n":${i}}`)).toMatchObject({
        ok: true,
        statusCode: 204,
      });
    }
    expect(receiver.seen.connections).toBe(1);
    expect(s.connectionsOpened(receiver.url)).toBe(1);
    expect(receiver.seen.requests.map((r) => r.url)).toEqual(
      Array.from({ length: 25 }, (_, i) => `/hooks?n=${i}`),
    );
    expect(receiver.seen.requests[7]).toEqual({ url: "/hooks?n=7", body: '{"n":7}', signature: "v1,abc" });
  });

  it("opens at most 16 connections to one receiver however many deliveries are in flight, and reuses them", async () => {
    const receiver = await httpReceiver((_req, res) => setTimeout(() => res.writeHead(200).end("ok"), 5));
    const s = sender();
    for (let round = 0; round < 3; round++) {
      const results = await Promise.all(Array.from({ length: 40 }, () => post(s, `${receiver.url}/hooks`)));
      expect(results.every((r) => r.ok)).toBe(true);
    }
    expect(receiver.seen.requests).toHaveLength(120);
    expect(receiver.seen.connections).toBeLessThanOrEqual(16);
    expect(receiver.seen.connections).toBeGreaterThan(1);
  });

  it("reads chunked and sized answer bodies to their end and keeps the connection", async () => {
    const receiver = await httpReceiver((req, res) => {
      if (req.url === "/chunked") {
        res.writeHead(200, { "content-type": "text/plain" });
        res.write("first part;");
        setTimeout(() => res.end("second part"), 5);
      } else res.writeHead(202, { "content-length": "11" }).end("hello world");
    });
    const s = sender();
    for (let i = 0; i < 4; i++) {
      expect(await post(s, `${receiver.url}/chunked`)).toMatchObject({ ok: true, statusCode: 200 });
      expect(await post(s, `${receiver.url}/sized`)).toMatchObject({ ok: true, statusCode: 202 });
    }
    expect(receiver.seen.connections).toBe(1);
  });

  it("delivers again on a fresh connection when the receiver closes a kept-alive one as it is reused", async () => {
    // The first connection answers once, then closes on the next request without answering (a server
    // whose idle timeout fired as the request left): that request goes again on a new connection.
    let first: Socket | undefined;
    let onFirst = 0;
    const receiver = await rawReceiver(
      () => "HTTP/1.1 204 No Content\r\n\r\n",
      (socket) => {
        first ??= socket;
        if (socket === first) onFirst++;
      },
    );
    const server = servers.at(-1) as Server;
    server.prependListener("connection", (socket: Socket) => {
      socket.prependListener("data", () => {
        if (socket === first && onFirst === 1) socket.destroy();
      });
    });
    const s = sender();
    expect((await post(s, `${receiver.url}/hooks`)).ok).toBe(true);
    expect(await post(s, `${receiver.url}/hooks`)).toMatchObject({ ok: true, statusCode: 204 });
    expect(receiver.seen.connections).toBe(2);
    // A fresh connection that closes without an answer is not tried again.
    const mute = await rawReceiver(
      () => "",
      (socket) => socket.destroy(),
    );
    expect(await post(s, `${mute.url}/hooks`)).toMatchObject({ ok: false, error: "connection reset" });
    expect(mute.seen.connections).toBe(1);
  });

  it("closes a connection whose answer has no length, says Connection: close, or is HTTP/1.0", async () => {
    const answers = [
      "HTTP/1.1 200 OK\r\n\r\nno length, ends with the connection",
      "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
      "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ];
    const receiver = await rawReceiver(
      (n) => answers[(n - 1) % 3] as string,
      (socket) => socket.end(),
    );
    const s = sender();
    for (let i = 0; i < 3; i++) {
      expect(await post(s, `${receiver.url}/hooks`)).toMatchObject({ ok: true });
    }
    expect(receiver.seen.connections).toBe(3);
  });

  it("skips an interim 1xx answer, reads Retry-After, and fails a malformed answer", async () => {
    const answers = [
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
      "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 30\r\nContent-Length: 0\r\n\r\n",
      "SMTP ready\r\n\r\n",
      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
    ];
    const receiver = await rawReceiver((n) => answers[n - 1] ?? "");
    const s = sender();
    expect(await post(s, `${receiver.url}/a`)).toMatchObject({ ok: true, statusCode: 204 });
    expect(await post(s, `${receiver.url}/b`)).toMatchObject({
      ok: false,
      statusCode: 429,
      retryAfterSeconds: 30,
    });
    expect(await post(s, `${receiver.url}/c`)).toMatchObject({
      ok: false,
      statusCode: 0,
      error: "invalid response",
    });
    expect(await post(s, `${receiver.url}/d`)).toMatchObject({
      ok: false,
      statusCode: 0,
      error: "invalid response",
    });
    // The first two shared a connection; each malformed answer closed its own.
    expect(receiver.seen.connections).toBe(2);
  });

  it("counts interim 1xx answers against the response limit: an endless run of them ends the attempt", async () => {
    // Without a limit, a receiver sending 100 Continue without end kept the attempt (and the event loop,
    // parsing them) busy until the time limit.
    const flood = "HTTP/1.1 100 Continue\r\n\r\n".repeat(200);
    const receiver = await rawReceiver(
      () => flood,
      (socket) => {
        const more = setInterval(() => (socket.destroyed ? clearInterval(more) : socket.write(flood)), 5);
      },
    );
    const s = sender(5_000, 1024);
    const result = await post(s, `${receiver.url}/a`);
    expect(result).toMatchObject({ ok: false, statusCode: 0, error: "invalid response" });
    expect(result.durationMs).toBeLessThan(2_000);
  });

  it("stops reading an answer over the response limit and does not reuse its connection", async () => {
    const receiver = await httpReceiver((req, res) => {
      if (req.url === "/big") res.writeHead(200, { "content-length": "4096" }).end(Buffer.alloc(4096, 97));
      else res.writeHead(204).end();
    });
    const s = sender(2_000, 1024);
    expect(await post(s, `${receiver.url}/big`)).toMatchObject({ ok: true, statusCode: 200 });
    expect(await post(s, `${receiver.url}/next`)).toMatchObject({ ok: true, statusCode: 204 });
    expect(receiver.seen.connections).toBe(2);
  });

  it("pipelines requests started together on a connection that persists, and matches answers in order", async () => {
    const receiver = await pipelineReceiver((paths, socket) => socket.write(paths.map(numbered).join("")));
    const s = sender();
    // A fresh connection carries one request until an answer shows that it persists.
    expect(await post(s, `${receiver.url}/hooks?n=0`)).toMatchObject({ ok: true, statusCode: 204 });
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) => post(s, `${receiver.url}/hooks?n=${i + 1}`)),
    );
    expect(results.map((r) => r.statusCode)).toEqual(Array.from({ length: 8 }, (_, i) => statusOf(i + 1)));
    expect(results.every((r) => r.ok)).toBe(true);
    // The eight went out in one write on the one connection, and were answered in one.
    expect(receiver.seen.connections).toBe(1);
    expect(receiver.seen.batches.map((b) => b.length)).toEqual([1, 8]);
    // At most eight at once on a connection: a ninth opens another.
    const more = await Promise.all(
      Array.from({ length: 9 }, (_, i) => post(s, `${receiver.url}/hooks?n=${i}`)),
    );
    expect(more.map((r) => r.statusCode)).toEqual(Array.from({ length: 9 }, (_, i) => statusOf(i)));
    expect(Math.max(...receiver.seen.batches.map((b) => b.length))).toBe(8);
    expect(receiver.seen.connections).toBe(2);
  });

  it("sends pipelined requests left unanswered again on fresh connections, and stops pipelining there", async () => {
    // The first connection answers its first request, then only the first of the pipelined eight, and closes.
    const receiver = await pipelineReceiver((paths, socket, connection) => {
      if (connection === 1 && paths.length > 1) {
        socket.end(numbered(paths[0] as string));
        return;
      }
      socket.write(paths.map(numbered).join(""));
    });
    const s = sender();
    expect((await post(s, `${receiver.url}/hooks?n=0`)).ok).toBe(true);
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) => post(s, `${receiver.url}/hooks?n=${i + 1}`)),
    );
    expect(results.map((r) => r.statusCode)).toEqual(Array.from({ length: 8 }, (_, i) => statusOf(i + 1)));
    expect(receiver.seen.batches[1]).toHaveLength(8);
    // Each of the seven unanswered went once more, on a connection of its own.
    expect(receiver.seen.connections).toBe(8);
    const batches = receiver.seen.batches.length;
    const later = await Promise.all(
      Array.from({ length: 6 }, (_, i) => post(s, `${receiver.url}/hooks?n=${i}`)),
    );
    expect(later.every((r) => r.ok)).toBe(true);
    expect(receiver.seen.batches.slice(batches).every((b) => b.length === 1)).toBe(true);
  });

  it("fails the answer of a request that was never sent", async () => {
    // Bytes after a complete answer while nothing else is in flight: the connection is not trusted again.
    const receiver = await rawReceiver(
      () => "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    );
    const s = sender();
    expect(await post(s, `${receiver.url}/hooks`)).toMatchObject({ ok: true, statusCode: 204 });
    expect(await post(s, `${receiver.url}/hooks`)).toMatchObject({ ok: true, statusCode: 204 });
    expect(receiver.seen.connections).toBe(2);
  });

  it("refuses a header that would break the request's framing, sending nothing", async () => {
    const receiver = await httpReceiver((_req, res) => res.writeHead(204).end());
    const s = sender();
    const result = await s.send({
      url: `${receiver.url}/hooks`,
      headers: { "webhook-id": "evt_1\r\nx-injected: 1" },
      body: "{}",
    });
    expect(result).toMatchObject({ ok: false, error: "invalid header" });
    expect(receiver.seen.requests).toHaveLength(0);
  });

  it("reports a refused connection and a timeout while connections to the receiver are all busy", async () => {
    const s = sender(2_000);
    const closed = await rawReceiver(() => "");
    const url = closed.url;
    await new Promise<void>((r) => (servers.pop() as Server).close(() => r()));
    expect(await post(s, `${url}/hooks`)).toMatchObject({ ok: false, error: "connection refused" });
    const silent = await rawReceiver(() => "");
    const pending = Promise.all(Array.from({ length: 20 }, () => post(s, `${silent.url}/hooks`)));
    // While all 20 wait (none has timed out yet), 16 connections carry 16 of them and 4 queue. After the
    // time limit the aborted connections close and a queued request may open a fresh one, so the total
    // is counted here, before any time limit, not at the end.
    const until = Date.now() + 1_500;
    while (silent.seen.connections < 16 && Date.now() < until) await new Promise((r) => setTimeout(r, 10));
    await new Promise((r) => setTimeout(r, 100));
    expect(silent.seen.connections).toBe(16);
    const results = await pending;
    expect(results.map((r) => r.error)).toEqual(Array.from({ length: 20 }, () => "timeout"));
  });
});

describe("reading the head of an answer", () => {
  it("finds the framing, and refuses conflicting or malformed heads", () => {
    expect(parseHead("HTTP/1.1 200 OK\r\nContent-Length: 5")).toMatchObject({
      statusCode: 200,
      framing: { kind: "length", left: 5 },
      keepAlive: true,
    });
    expect(parseHead("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked")?.framing).toEqual({
      kind: "chunked",
    });
    expect(parseHead("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip")).toMatchObject({
      framing: { kind: "close" },
      keepAlive: false,
    });
    expect(parseHead("HTTP/1.1 204 No Content\r\nContent-Length: 0")?.framing).toEqual({ kind: "none" });
    expect(parseHead("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked")).toBeUndefined();
    expect(parseHead("HTTP/1.1 200 OK\r\nContent-Length: -1")).toBeUndefined();
    expect(parseHead("HTTP/1.1 200 OK\r\nno colon here")).toBeUndefined();
    expect(parseHead("HTTP/2 200")).toBeUndefined();
    expect(parseHead("HTTP/1.1 099 Low")).toBeUndefined();
  });
});
