import type { LookupFunction, Socket } from "node:net";
import { type Answer, Http1Client } from "./http1.js";
import {
  AddressNotAllowedError,
  checkWebhookUrl,
  guardedLookup,
  hostOf,
  isPublicAddress,
  type ResolveAll,
} from "./ssrf.js";

/**
 * Sends one webhook: a POST of the signed JSON body, nothing else. Redirects are never followed (a 3xx
 * is a failed attempt: Standard Webhooks asks receivers to update the URL instead); the whole attempt,
 * connecting included, has a time limit; at most a few kilobytes of the answer are read, and never
 * kept. Outside development the SSRF guard (ssrf.ts) checks every address the connection uses.
 * Connections are kept alive per receiver (http1.ts), so a busy endpoint costs one TLS handshake, not one
 * per event, and a delivery costs about a third of the CPU of Node's `http.request`.
 */

/** What the sender needs. */
export interface SenderOptions {
  /** Development: http and private addresses allowed (receivers on this machine). */
  allowPrivate: boolean;
  timeoutMs: number;
  responseLimitBytes: number;
  /** Resolves host names (tests inject one); the system resolver by default. */
  resolve?: ResolveAll;
}

/** The outcome of one attempt. */
export interface SendResult {
  ok: boolean;
  /** 0 when no HTTP answer came. */
  statusCode: number;
  /** Why it failed ("" on success), for the delivery log: never a response body. */
  error: string;
  durationMs: number;
  /** The receiver asked to stop (410 Gone): the endpoint is disabled. */
  gone: boolean;
  /** Seconds the receiver asked to wait (`Retry-After` on 429 or 503), when given. */
  retryAfterSeconds?: number;
}

/** One webhook request. */
export interface WebhookRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
}

export class WebhookSender {
  private readonly client = new Http1Client(MAX_SOCKETS);
  private readonly lookup: LookupFunction | undefined;

  constructor(private readonly options: SenderOptions) {
    this.lookup = options.allowPrivate ? undefined : guardedLookup(options.resolve);
  }

  /** Sends `req` once; never throws (every failure is a result). */
  send(req: WebhookRequest): Promise<SendResult> {
    const started = performance.now();
    const fail = (error: string, statusCode = 0, gone = false): SendResult => ({
      ok: false,
      statusCode,
      error,
      durationMs: Math.round(performance.now() - started),
      gone,
    });
    const check = checkWebhookUrl(req.url, this.options.allowPrivate);
    if (!check.ok) {
      return Promise.resolve(
        fail(check.address === true ? "address not allowed" : `invalid URL: ${check.reason}`),
      );
    }
    const headers = headerLines(req.headers);
    if (headers === undefined) return Promise.resolve(fail("invalid header"));
    const url = check.url;
    const https = url.protocol === "https:";
    const pending = this.client.post(
      {
        https,
        host: hostOf(url),
        port: url.port === "" ? (https ? 443 : 80) : Number(url.port),
        ...(this.lookup === undefined ? {} : { lookup: this.lookup }),
        ...(this.options.allowPrivate ? {} : { checkPeer }),
      },
      `${url.pathname}${url.search}`,
      url.host,
      headers,
      req.body,
      this.options.responseLimitBytes,
    );
    return new Promise<SendResult>((resolve) => {
      const timer = setTimeout(() => {
        pending.abort();
        resolve(fail("timeout"));
      }, this.options.timeoutMs);
      pending.promise.then(
        (answer) => {
          clearTimeout(timer);
          resolve(resultOf(answer, Math.round(performance.now() - started)));
        },
        (err: NodeJS.ErrnoException) => {
          clearTimeout(timer);
          resolve(fail(describe(err)));
        },
      );
    });
  }

  /** Connections opened so far to the scheme and host of `url` (tests and the bench count reuse). */
  connectionsOpened(url: string): number {
    const parsed = new URL(url);
    return this.client.opened(parsed.protocol === "https:", parsed.host);
  }

  /** Closes kept-alive connections (shutdown). */
  close(): void {
    this.client.destroy();
  }
}

/** Kept-alive connections per receiver, at most; further attempts to it wait for one. */
const MAX_SOCKETS = 16;

/** The fixed request headers every delivery carries after the caller's. */
const FIXED_HEADERS = "content-type: application/json\r\nuser-agent: receipts-webhooks/1\r\n";

/** The caller's headers as request lines, or undefined when a name or value could break the framing. */
function headerLines(headers: Record<string, string>): string | undefined {
  let lines = "";
  for (const [name, value] of Object.entries(headers)) {
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name) || /[\r\n\0]/.test(value)) return undefined;
    lines += `${name}: ${value}\r\n`;
  }
  return lines + FIXED_HEADERS;
}

/**
 * Outside development, the peer address of a new connection must be public: for an IP literal (which
 * `net.connect` never resolves) and as a second check after the guarded lookup.
 */
function checkPeer(socket: Socket): void {
  const peer = socket.remoteAddress;
  if (peer === undefined || !isPublicAddress(peer)) throw new AddressNotAllowedError();
}

/** The result of a complete HTTP answer. */
function resultOf(answer: Answer, durationMs: number): SendResult {
  const status = answer.statusCode;
  const ok = status >= 200 && status < 300;
  const result: SendResult = {
    ok,
    statusCode: status,
    error: ok ? "" : status >= 300 && status < 400 ? "redirect not followed" : `HTTP ${status}`,
    durationMs,
    gone: status === 410,
  };
  const retryAfter = Number(answer.retryAfter);
  if ((status === 429 || status === 503) && Number.isInteger(retryAfter) && retryAfter > 0) {
    result.retryAfterSeconds = retryAfter;
  }
  return result;
}

/** A short, safe description of a connection failure for the delivery log. */
function describe(err: NodeJS.ErrnoException): string {
  switch (err.code) {
    case "ERR_WEBHOOK_ADDRESS_NOT_ALLOWED":
      return "address not allowed";
    case "ECONNREFUSED":
      return "connection refused";
    case "ECONNRESET":
    case "EPIPE":
      return "connection reset";
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return "host not found";
    case "ETIMEDOUT":
      return "timeout";
    case "ERR_WEBHOOK_INVALID_RESPONSE":
      return "invalid response";
    default:
      return err.code?.startsWith("ERR_TLS") || err.code?.includes("CERT")
        ? "TLS error"
        : "connection failed";
  }
}
