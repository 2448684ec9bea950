import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { ERRORS, type ErrorCode } from "../../src/errors.js";
import { type Envelope, startService, type TestService } from "../support/harness.js";
import { frame, rawGrpc } from "./grpc-raw.js";

/**
 * Answers given before any handler runs (a header block over the limit, a body that trickles in, a
 * body too large, a wrong Content-Type, an unknown path or procedure) are answers like any other:
 * the error envelope (or the RPC protocol's error), `X-Request-Id`, and on /api/v1 and RPC paths the
 * rate-limit headers. Health, readiness, metrics and the OpenAPI document carry
 * `X-Request-Id`.
 */

interface RawAnswer {
  status: number;
  headers: Map<string, string>;
  body: string;
}

/** Writes `head` (and `body`, if any) on a fresh connection and reads the answer until the server closes. */
function rawHttp(port: number, head: string, body = ""): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1", () => socket.write(head + body));
    let text = "";
    socket.setEncoding("latin1");
    socket.on("data", (chunk: string) => {
      text += chunk;
    });
    socket.on("error", reject);
    socket.setTimeout(10_000, () => socket.destroy(new Error("no answer within 10 s")));
    socket.on("close", () => {
      const [headText = "", ...rest] = text.split("\r\n\r\n");
      const [statusLine = "", ...lines] = headText.split("\r\n");
      const headers = new Map<string, string>();
      for (const line of lines) {
        const colon = line.indexOf(":");
        headers.set(line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim());
      }
      resolve({ status: Number(statusLine.split(" ")[1]), headers, body: rest.join("\r\n\r\n") });
    });
  });
}

function expectEnvelope(answer: RawAnswer, code: ErrorCode, label: string): void {
  expect(answer.status, label).toBe(ERRORS[code].http);
  const envelope = JSON.parse(answer.body) as Envelope;
  expect(envelope.success, label).toBe(false);
  expect(envelope.error?.code, label).toBe(code);
  expect(envelope.error?.request_id, label).toBe(answer.headers.get("x-request-id"));
}

function expectRateLimitHeaders(headers: { get(name: string): string | null | undefined }, label: string) {
  expect(headers.get("x-ratelimit-limit"), label).toMatch(/^\d+$/);
  expect(headers.get("x-ratelimit-remaining"), label).toMatch(/^\d+$/);
  expect(headers.get("x-ratelimit-reset"), label).toMatch(/^\d+$/);
}

describe("answers before any handler", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService({
      listener: { requestTimeoutMs: 1_000, headersTimeoutMs: 1_000, timeoutCheckIntervalMs: 100 },
      shutdownGraceMs: 500,
    });
  });
  afterAll(async () => {
    await svc.close();
  });

  it("answers a header block over the limit with 431 in the envelope, with request id and rate limits", async () => {
    const head = `GET /api/v1/receipts/usr_1 HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`;
    const answer = await rawHttp(svc.port, head);
    expectEnvelope(answer, "headers_too_large", "431");
    expect(answer.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
    expectRateLimitHeaders(answer.headers, "431");
  });

  it("answers a body that trickles in with 408 in the envelope, keeping the caller's request id", async () => {
    for (const path of ["/api/v1/keys/grant-access", "/receipts.v1.KeysService/GrantAccess"]) {
      const head =
        `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
        `Content-Length: 100\r\nX-Request-Id: slow-body-1\r\n\r\n`;
      const answer = await rawHttp(svc.port, head, '{"userId":');
      expectEnvelope(answer, "request_timeout", path);
      expect(answer.headers.get("x-request-id"), path).toBe("slow-body-1");
      expectRateLimitHeaders(answer.headers, path);
    }
  });

  it("answers 413, 415 and 404 under /api/v1 with request id and rate limits", async () => {
    const cases: Array<[string, RequestInit, ErrorCode]> = [
      [
        "/api/v1/receipts/encrypt",
        { method: "POST", headers: { "content-type": "application/json" }, body: "x".repeat(1_048_577) },
        "payload_too_large",
      ],
      [
        "/api/v1/receipts/encrypt",
        { method: "POST", headers: { "content-type": "text/plain" }, body: "hello" },
        "unsupported_media_type",
      ],
      ["/api/v1/nope", { method: "GET" }, "not_found"],
    ];
    for (const [path, init, code] of cases) {
      const res = await fetch(`${svc.baseUrl}${path}`, init);
      const envelope = (await res.json()) as Envelope;
      expect(res.status, code).toBe(ERRORS[code].http);
      expect(envelope.error?.code, code).toBe(code);
      expect(res.headers.get("x-request-id"), code).toBe(envelope.error?.request_id);
      expectRateLimitHeaders(res.headers, code);
    }
  });

  it("answers RPCs refused before their handler with request id and rate limits", async () => {
    const cases: Array<[string, RequestInit]> = [
      [
        "/receipts.v1.ReceiptsService/EncryptReceipt",
        {
          method: "POST",
          headers: { "content-type": "application/json", "connect-protocol-version": "1" },
          body: `{"receiptId":"${"x".repeat(1_048_577)}"}`,
        },
      ],
      [
        "/receipts.v1.ReceiptsService/EncryptReceipt",
        {
          method: "POST",
          headers: { "content-type": "application/proto", "connect-protocol-version": "1" },
          body: new Uint8Array([0xff, 0xff, 0xff]),
        },
      ],
      [
        "/receipts.v1.ReceiptsService/EncryptReceipt",
        { method: "POST", headers: { "content-type": "text/plain" }, body: "hello" },
      ],
      [
        "/receipts.v1.ReceiptsService/Nope",
        { method: "POST", headers: { "content-type": "application/json" } },
      ],
    ];
    for (const [path, init] of cases) {
      const label = `${path} ${JSON.stringify(init.headers)}`;
      const res = await fetch(`${svc.baseUrl}${path}`, init);
      await res.arrayBuffer();
      expect(res.status, label).toBeGreaterThanOrEqual(400);
      expect(res.status, label).toBeLessThan(500);
      expect(res.headers.get("x-request-id"), label).toMatch(/\S/);
      expectRateLimitHeaders(res.headers, label);
    }
  });

  it("answers a body over the limit over HTTP/2 with payload_too_large on every surface, then stops the upload", async () => {
    // With or without a Content-Length: without one, the body is only known to be too large once the
    // limit has been read. The client sends the whole body and waits: once the answer is out, the
    // rest of the upload is cut with RST_STREAM NO_ERROR, not left stuck in flow control for good.
    const over = 2 * 1_048_576;
    const json = Buffer.from(`{"receiptId":"${"x".repeat(over)}"}`);
    const grpc = frame(new Uint8Array(over));
    const rpc = "/receipts.v1.ReceiptsService/EncryptReceipt";
    const cases: Array<[string, string, Record<string, string>, Buffer]> = [
      ["Connect JSON", rpc, { "content-type": "application/json" }, json],
      ["Connect proto", rpc, { "content-type": "application/proto" }, grpc.subarray(5)],
      ["gRPC", rpc, { "content-type": "application/grpc" }, grpc],
      ["gRPC JSON", rpc, { "content-type": "application/grpc+json" }, grpc],
      ["gRPC-Web", rpc, { "content-type": "application/grpc-web+proto" }, grpc],
      ["REST", "/api/v1/receipts/encrypt", { "content-type": "application/json" }, json],
    ];
    // Fastify asks for a close with a Connection header, which HTTP/2 has no place for: Node would
    // drop it and write a warning to stderr, outside the JSON log.
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
    process.on("warning", onWarning);
    onTestFinished(() => {
      process.off("warning", onWarning);
    });
    for (const [surface, path, headers, body] of cases) {
      for (const length of [true, false]) {
        const label = `${surface}, ${length ? "with" : "without"} Content-Length`;
        const sent = length ? { ...headers, "content-length": String(body.length) } : headers;
        const answer = await rawGrpc(svc.baseUrl, path, body, sent);
        // The answer names the reason: in the body (REST, Connect) or in the status details of the
        // trailers (gRPC), which gRPC-Web sends in the body.
        const text = answer.body.toString("latin1");
        const details =
          answer.trailers["grpc-status-details-bin"] ?? /grpc-status-details-bin: (\S+)/.exec(text)?.[1];
        const said = text + Buffer.from(details ?? "", "base64").toString("latin1");
        expect(said, label).toContain("payload_too_large");
        expect(answer.headers["x-request-id"], label).toMatch(/\S/);
        expect({ closed: answer.closed, rstCode: answer.rstCode }, label).toEqual({
          closed: true,
          rstCode: 0,
        });
      }
    }
    // Warnings are emitted on the next turn.
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings).toEqual([]);
  });

  it("gives health, readiness, metrics and the OpenAPI document a request id", async () => {
    for (const path of ["/healthz", "/readyz", "/metrics", "/openapi.json"]) {
      const res = await fetch(`${svc.baseUrl}${path}`, {
        headers: { "x-request-id": `probe-${path.slice(1)}` },
      });
      await res.arrayBuffer();
      expect(res.status, path).toBe(200);
      expect(res.headers.get("x-request-id"), path).toBe(`probe-${path.slice(1)}`);
    }
  });
});
