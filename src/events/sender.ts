import {
  type ClientRequest,
  Agent as HttpAgent,
  request as httpRequest,
  type IncomingMessage,
} from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { isIP, type LookupFunction, type Socket } from "node:net";
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
 * Connections are kept alive per receiver, so a busy endpoint costs one TLS handshake, not one per event.
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
  private readonly http: HttpAgent;
  private readonly https: HttpsAgent;

  constructor(private readonly options: SenderOptions) {
    const lookup: LookupFunction | undefined = options.allowPrivate
      ? undefined
      : guardedLookup(options.resolve);
    const agentOptions = { keepAlive: true, maxSockets: 16, ...(lookup === undefined ? {} : { lookup }) };
    this.http = new HttpAgent(agentOptions);
    this.https = new HttpsAgent(agentOptions);
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
    return new Promise<SendResult>((resolve) => {
      let settled = false;
      const done = (result: SendResult) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(result);
      };
      const url = check.url;
      const make = url.protocol === "https:" ? httpsRequest : httpRequest;
      const outgoing: ClientRequest = make(url, {
        method: "POST",
        agent: url.protocol === "https:" ? this.https : this.http,
        headers: {
          ...req.headers,
          "content-type": "application/json",
          "content-length": String(Buffer.byteLength(req.body)),
          "user-agent": "receipts-webhooks/1",
        },
      });
      const timer = setTimeout(() => {
        done(fail("timeout"));
        outgoing.destroy();
      }, this.options.timeoutMs);
      outgoing.on("socket", (socket) => this.guardPeer(socket, url, outgoing));
      outgoing.on("error", (err) => done(fail(describe(err))));
      outgoing.on("response", (res) => this.readAnswer(res, outgoing, started, done));
      outgoing.end(req.body);
    });
  }

  /** Closes kept-alive connections (shutdown). */
  close(): void {
    this.http.destroy();
    this.https.destroy();
  }

  /**
   * Outside development, checks the peer address of the connection once it is known: for an IP
   * literal (which `net.connect` never resolves) and for a kept-alive socket alike.
   */
  private guardPeer(socket: Socket, url: URL, outgoing: ClientRequest): void {
    if (this.options.allowPrivate) return;
    const verify = () => {
      const peer = socket.remoteAddress;
      if (peer === undefined || !isPublicAddress(peer)) outgoing.destroy(new AddressNotAllowedError());
    };
    if (isIP(hostOf(url)) !== 0 && !isPublicAddress(hostOf(url))) {
      outgoing.destroy(new AddressNotAllowedError());
      return;
    }
    if (socket.remoteAddress !== undefined) verify();
    else socket.once("connect", verify);
  }

  /** Reads (and drops) at most the response limit of the answer, then settles with its status. */
  private readAnswer(
    res: IncomingMessage,
    outgoing: ClientRequest,
    started: number,
    done: (result: SendResult) => void,
  ): void {
    const status = res.statusCode ?? 0;
    let read = 0;
    const finish = () => {
      const ok = status >= 200 && status < 300;
      const result: SendResult = {
        ok,
        statusCode: status,
        error: ok ? "" : status >= 300 && status < 400 ? "redirect not followed" : `HTTP ${status}`,
        durationMs: Math.round(performance.now() - started),
        gone: status === 410,
      };
      const retryAfter = Number(res.headers["retry-after"]);
      if ((status === 429 || status === 503) && Number.isInteger(retryAfter) && retryAfter > 0) {
        result.retryAfterSeconds = retryAfter;
      }
      done(result);
    };
    res.on("data", (chunk: Buffer) => {
      read += chunk.length;
      if (read > this.options.responseLimitBytes) {
        finish();
        outgoing.destroy();
      }
    });
    res.on("end", finish);
    res.on("error", finish);
    res.on("aborted", finish);
  }
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
    default:
      return err.code?.startsWith("ERR_TLS") || err.code?.includes("CERT")
        ? "TLS error"
        : "connection failed";
  }
}
