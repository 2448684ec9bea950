import {
  createServer as createHttpServer,
  type Server as HttpServer,
  type IncomingMessage,
  type ServerResponse,
  STATUS_CODES,
} from "node:http";
import {
  createServer as createHttp2Server,
  type Http2Server,
  type Http2ServerRequest,
  type Http2ServerResponse,
  type Http2Session,
  type IncomingHttpHeaders,
  type ServerHttp2Stream,
} from "node:http2";
import { createServer as createNetServer, type Server as NetServer, type Socket } from "node:net";
import { type ConnectionCap, createConnectionCap, refuseHttp2Connection } from "./connection-cap.js";
import { createHttp2Guard, type Http2Guard } from "./http2-guard.js";

/**
 * One TCP port for HTTP/1.1 and cleartext HTTP/2 (h2c, "prior knowledge" as gRPC clients use it).
 *
 * Node's cleartext HTTP/2 server cannot fall back to HTTP/1.1 and Node has no h2c Upgrade, so a
 * `net.Server` reads the first bytes of each connection, compares them with the 24-byte HTTP/2 client
 * preface and hands the socket (bytes put back) to an `http2` or an `http` server that never listens
 * itself. Both call the same request handler (Fastify's), which serves both through the compatibility
 * API; an optional {@link Http2Claim} may serve an HTTP/2 stream before the compatibility layer
 * makes request and response objects of it.
 */

/** The HTTP/2 connection preface every HTTP/2 client sends first (RFC 9113, section 3.4). */
const HTTP2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

/** A request handler as Fastify's `serverFactory` hands it over. */
export type RequestHandler = (req: IncomingMessage, res: ServerResponse) => void;

/**
 * Looks at a new HTTP/2 stream before the request handler does: returns true when it serves the
 * stream itself (the handler never sees it), false to leave it to the handler untouched.
 */
export type Http2Claim = (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => boolean;

/**
 * The answer to an HTTP/1.1 request that Node's parser refused (`code` such as
 * `HPE_HEADER_OVERFLOW`) or that did not arrive whole in time (`ERR_HTTP_REQUEST_TIMEOUT`), built by
 * the HTTP server so it can carry the error envelope and the headers every answer carries. `request`
 * is the request whose body timed out, when its headers had been read.
 */
export type ClientErrorAnswer = (
  code: string | undefined,
  request: IncomingMessage | undefined,
  peer: string,
) => Promise<{ status: number; headers: Record<string, string>; body: string }>;

/** Timeouts of a {@link DualProtocolListener}, all in milliseconds. */
export interface ListenerOptions {
  /** How long a new connection may take to send its first bytes before it is closed. Default 5 000. */
  sniffTimeoutMs?: number;
  /** HTTP/1.1: time to receive a request's complete headers (slow-loris bound). Default 10 000. */
  headersTimeoutMs?: number;
  /** HTTP/1.1: time to receive a complete request, body included. Default 30 000. */
  requestTimeoutMs?: number;
  /** HTTP/1.1: how long an idle keep-alive connection is kept open. Default 5 000. */
  keepAliveTimeoutMs?: number;
  /** HTTP/1.1: how often the two request timeouts above are checked. Default 1 000. */
  timeoutCheckIntervalMs?: number;
  /**
   * HTTP/2: how long a session may be idle before it is closed with a GOAWAY. gRPC clients reconnect
   * transparently; a client that sends the preface and then nothing is let go. Streams still open a
   * moment later (`http2CloseGraceMs`) are reset. Default 72 000 (Fastify's).
   */
  http2IdleTimeoutMs?: number;
  /**
   * HTTP/2: streams a client may have open at once on one connection, advertised in SETTINGS; more
   * are refused (RST_STREAM REFUSED_STREAM). Default 100 (RFC 9113 recommends no less than 100).
   */
  http2MaxConcurrentStreams?: number;
  /**
   * HTTP/2: a client that resets more than this many streams in a burst before the server answered
   * them (CVE-2023-44487, "rapid reset") gets GOAWAY ENHANCE_YOUR_CALM and its connection is closed.
   * Refilled at `http2ResetRatePerSecond`. Default 200.
   */
  http2ResetBurst?: number;
  /** HTTP/2: how many early resets per second a connection may sustain. Default 50. */
  http2ResetRatePerSecond?: number;
  /**
   * HTTP/2: connections one client address may hold open at once; more are refused with GOAWAY
   * ENHANCE_YOUR_CALM before a session is made (`connection-cap.ts`). Default 100.
   */
  http2MaxConnectionsPerAddress?: number;
  /** Addresses the per-address cap does not apply to: trusted proxies, whose clients all share it. */
  http2CapExempt?: (address: string) => boolean;
  /**
   * HTTP/2: after a GOAWAY (idle session, or one the client sent), how long streams still open may
   * finish before they are reset and the connection closed. Default 5 000.
   */
  http2CloseGraceMs?: number;
}

/** The one-port listener: the `net.Server` to give Fastify, plus a graceful drain. */
export interface DualProtocolListener {
  /** The server that listens; returned from Fastify's `serverFactory`. */
  readonly server: NetServer;
  /** HTTP/2 streams open right now, on every session (for metrics and tests). */
  openHttp2Streams(): number;
  /**
   * Stops accepting connections, lets requests in flight finish and closes every connection: HTTP/2
   * sessions get a GOAWAY, idle HTTP/1.1 keep-alive sockets are closed at once and busy ones after
   * their response. Whatever is still open after `graceMs` milliseconds is destroyed.
   */
  drain(graceMs: number): Promise<void>;
}

/**
 * Creates the one-port HTTP/1.1 + h2c listener that feeds every request to `handler`, except the
 * HTTP/2 requests that `claim` serves itself.
 */
export function createDualProtocolListener(
  handler: RequestHandler,
  options: ListenerOptions = {},
  claim?: Http2Claim,
  clientErrorAnswer?: ClientErrorAnswer,
): DualProtocolListener {
  const sniffTimeoutMs = options.sniffTimeoutMs ?? 5_000;
  const open: OpenConnections = {
    sockets: new Set(),
    sniffing: new Set(),
    sessions: new Set(),
    responses: new Set(),
    draining: false,
    drained: undefined,
  };
  const requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
  const h1 = createHttp1(handler, options, requestTimeoutMs, open, clientErrorAnswer);
  const { h2, guard } = createHttp2(handler, options, requestTimeoutMs, open, claim);
  const cap = createConnectionCap(options.http2MaxConnectionsPerAddress, options.http2CapExempt);
  const server = createNetServer({ noDelay: true }, (socket) =>
    acceptConnection(socket, sniffTimeoutMs, open, h1, h2, cap),
  );
  // An http.Server only tracks its connections (for closeIdleConnections and the header/request
  // timeouts) once it has seen "listening"; it never listens itself, so it is told when we do.
  server.on("listening", () => h1.emit("listening"));
  return {
    server,
    drain: (graceMs) => drainConnections(graceMs, open, server, h1, guard),
    openHttp2Streams: guard.openStreams,
  };
}

/** What a listener has open, which a drain closes. */
interface OpenConnections {
  /** Every connection, from its acceptance to its close. */
  readonly sockets: Set<Socket>;
  /** The connections whose first bytes have not yet told which protocol they speak. */
  readonly sniffing: Set<Socket>;
  readonly sessions: Set<Http2Session>;
  /** HTTP/1.1 responses from their request to their close. */
  readonly responses: Set<ServerResponse>;
  /**
   * A drain has begun: a new connection is destroyed, a new session gets a GOAWAY and a new response
   * says "Connection: close".
   */
  draining: boolean;
  /** Called during a drain when the last connection closes. */
  drained: (() => void) | undefined;
}

/**
 * The HTTP/1.1 server, which never listens itself: Node's parser with the header, request and
 * keep-alive timeouts, each response tracked in `open`, and the answer to requests the parser refuses.
 */
function createHttp1(
  handler: RequestHandler,
  options: ListenerOptions,
  requestTimeoutMs: number,
  open: OpenConnections,
  clientErrorAnswer: ClientErrorAnswer | undefined,
): HttpServer {
  const h1 = createHttpServer({
    // Node refuses a headers timeout longer than the request timeout.
    headersTimeout: Math.min(options.headersTimeoutMs ?? 10_000, requestTimeoutMs),
    requestTimeout: requestTimeoutMs,
    keepAliveTimeout: options.keepAliveTimeoutMs ?? 5_000,
    connectionsCheckingInterval: options.timeoutCheckIntervalMs ?? 1_000,
  });
  // One listener, shared by every response: a closure and a `once` wrapper per response, and a second
  // "request" listener (an emit with two listeners copies the list), were a few per cent of a small
  // REST answer's CPU time.
  const closed = function (this: ServerResponse): void {
    open.responses.delete(this);
    if (open.draining) setImmediate(() => h1.closeIdleConnections());
  };
  h1.on("request", (req: IncomingMessage, res: ServerResponse) => {
    // Tracked before the handler runs, so that a response started during a drain says "Connection: close".
    open.responses.add(res);
    if (open.draining) res.setHeader("connection", "close");
    res.on("close", closed);
    handler(req, res);
  });
  if (clientErrorAnswer !== undefined) {
    h1.on("clientError", (err: NodeJS.ErrnoException, socket: Socket) =>
      answerClientError(err, socket, clientErrorAnswer),
    );
  }
  return h1;
}

/**
 * The HTTP/2 server, which never listens itself either, and its guard: the stream limit, the idle,
 * request and reset limits of {@link createHttp2Guard}, `claim` before the compatibility layer, and
 * each session tracked in `open`.
 */
function createHttp2(
  handler: RequestHandler,
  options: ListenerOptions,
  requestTimeoutMs: number,
  open: OpenConnections,
  claim: Http2Claim | undefined,
): { h2: Http2Server; guard: Http2Guard } {
  // Fastify serves HTTP/2 through Node's compatibility API, which mirrors the HTTP/1.1 objects.
  const h2Handler = handler as unknown as (req: Http2ServerRequest, res: Http2ServerResponse) => void;
  const h2 = createHttp2Server(
    {
      settings: { maxConcurrentStreams: options.http2MaxConcurrentStreams ?? 100 },
      // Streams refused over the limit before the session is closed (Node closes it with
      // ENHANCE_YOUR_CALM): a client that ignores the advertised limit is let go.
      maxSessionRejectedStreams: 100,
    },
    h2Handler,
  );
  const guard = createHttp2Guard({
    requestTimeoutMs,
    checkIntervalMs: options.timeoutCheckIntervalMs ?? 1_000,
    idleTimeoutMs: options.http2IdleTimeoutMs ?? 72_000,
    closeGraceMs: options.http2CloseGraceMs ?? 5_000,
    resetBurst: options.http2ResetBurst ?? 200,
    resetRatePerSecond: options.http2ResetRatePerSecond ?? 50,
  });
  if (claim !== undefined) claimStreamsFirst(h2, claim);
  // First, so that every stream is tracked before anything serves it.
  h2.prependListener("stream", guard.onStream);
  h2.on("session", (session: Http2Session) => {
    open.sessions.add(session);
    guard.onSession(session);
    session.once("close", () => open.sessions.delete(session));
    if (open.draining) session.close();
  });
  return { h2, guard };
}

/**
 * Takes a new connection: tracks it until it closes, destroys it at once during a drain, and hands
 * it to the HTTP/2 or the HTTP/1.1 server once its first bytes tell which protocol it speaks (an
 * HTTP/2 one only if its address is under the cap).
 */
function acceptConnection(
  socket: Socket,
  sniffTimeoutMs: number,
  open: OpenConnections,
  h1: HttpServer,
  h2: Http2Server,
  cap: ConnectionCap,
): void {
  open.sockets.add(socket);
  socket.once("close", () => {
    open.sockets.delete(socket);
    if (open.sockets.size === 0) open.drained?.();
  });
  if (open.draining) {
    socket.destroy();
    return;
  }
  open.sniffing.add(socket);
  sniff(socket, sniffTimeoutMs, (isHttp2) => {
    open.sniffing.delete(socket);
    if (isHttp2) {
      if (cap.admit(socket)) h2.emit("connection", socket);
      else refuseHttp2Connection(socket);
    } else {
      h1.emit("connection", socket);
      // The HTTP/1.1 parser reads straight from the socket's handle; the bytes put back reach it
      // only once the stream flows again. (The HTTP/2 session drains the put-back bytes itself.)
      socket.resume();
    }
  });
}

/** {@link DualProtocolListener.drain}: stops `server`, lets what `open` holds finish, then closes it all. */
async function drainConnections(
  graceMs: number,
  open: OpenConnections,
  server: NetServer,
  h1: HttpServer,
  guard: Http2Guard,
): Promise<void> {
  open.draining = true;
  if (server.listening) server.close();
  for (const socket of open.sniffing) socket.destroy();
  for (const session of open.sessions) session.close();
  for (const res of open.responses) if (!res.headersSent) res.setHeader("connection", "close");
  h1.closeIdleConnections();
  if (open.sockets.size > 0) {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, graceMs);
      timer.unref();
      open.drained = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }
  for (const session of open.sessions) session.destroy();
  for (const socket of open.sockets) socket.destroy();
  // Stops the timeout checks of the HTTP/1.1 server; it has no connections of its own to wait for.
  h1.close();
  guard.stop();
}

/**
 * Answers a request Node's HTTP/1.1 parser refused or timed out, as Node itself would (only when
 * nothing of a response has been written on the socket, then the connection is closed), but with the
 * server's answer instead of Node's bare status line.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Socket, answer: ClientErrorAnswer): void {
  const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage ?? undefined;
  if (err.code === "ECONNRESET" || !socket.writable || inFlight?.headersSent === true) {
    socket.destroy();
    return;
  }
  const close = setTimeout(() => socket.destroy(), 2_000);
  close.unref();
  socket.once("close", () => clearTimeout(close));
  answer(err.code, inFlight?.req, socket.remoteAddress ?? "").then(
    ({ status, headers, body }) => {
      if (!socket.writable) {
        socket.destroy();
        return;
      }
      const lines = [`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Error"}`];
      for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
      lines.push(`content-length: ${Buffer.byteLength(body)}`, "connection: close", "", body);
      socket.end(lines.join("\r\n"));
    },
    () => socket.destroy(),
  );
}

/**
 * Puts `claim` in front of the compatibility layer. Given a request handler, an `Http2Server` serves
 * each stream through a "stream" listener of its own that wraps the stream in request and response
 * objects and emits "request"; that listener is moved behind `claim`, so a claimed stream costs no
 * such objects. Fails at startup, not per request, if the server is not built that way.
 */
function claimStreamsFirst(h2: Http2Server, claim: Http2Claim): void {
  const compatibility = h2.listeners("stream") as ((...args: unknown[]) => void)[];
  if (compatibility.length !== 1) {
    throw new Error(`expected one "stream" listener on the HTTP/2 server, found ${compatibility.length}`);
  }
  h2.removeAllListeners("stream");
  h2.on("stream", (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, ...rest: unknown[]) => {
    if (!claim(stream, headers)) compatibility[0]?.call(h2, stream, headers, ...rest);
  });
}

/**
 * Reads the first bytes of `socket` until they either match the whole HTTP/2 preface or stop
 * matching it, then puts them back and calls `done`. A socket silent for `timeoutMs` is destroyed.
 */
function sniff(socket: Socket, timeoutMs: number, done: (isHttp2: boolean) => void): void {
  let head: Buffer = Buffer.alloc(0);
  const timer = setTimeout(() => socket.destroy(), timeoutMs);
  const onError = (): void => {
    socket.destroy();
  };
  const cleanup = (): void => {
    clearTimeout(timer);
    socket.off("data", onData);
    socket.off("error", onError);
    socket.off("close", cleanup);
  };
  const onData = (chunk: Buffer): void => {
    head = head.length === 0 ? chunk : Buffer.concat([head, chunk]);
    const n = Math.min(head.length, HTTP2_PREFACE.length);
    const matches = head.subarray(0, n).equals(HTTP2_PREFACE.subarray(0, n));
    if (matches && head.length < HTTP2_PREFACE.length) return;
    cleanup();
    socket.pause();
    socket.unshift(head);
    done(matches);
  };
  socket.on("data", onData);
  socket.on("error", onError);
  socket.once("close", cleanup);
}
