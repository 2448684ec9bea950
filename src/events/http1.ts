/* Over 400 lines on purpose: a connection's socket, its queue of requests in flight and the reading of
 * its answers are one state machine (pipelining ties them together); the answer's parsing itself is
 * in http1-answer.ts. */
import { type LookupFunction, connect as netConnect, type Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";
import { ChunkReader, HEAD_END, type Head, MAX_HEAD, parseHead } from "./http1-answer.js";

/**
 * A small HTTP/1.1 client for webhook deliveries: one POST per call, kept-alive connections per
 * origin (at most `maxSockets`, the rest wait in order). Node's `http.request` costs about 90 us of CPU
 * per request on this work (request object, header checks, agent, response stream); writing the request
 * as one string and reading only the status line, the headers it needs and the body's framing costs
 * about a third of that, and a subscribed endpoint pays it on every event.
 *
 * What it reads of an answer: the status code, `Retry-After`, and enough of the framing to know where
 * the answer ends (`Content-Length`, chunked, or the connection's close); the body is counted and
 * dropped. A connection is reused only after an answer whose end it knows for certain; anything else
 * (no length, `Connection: close`, HTTP/1.0, a malformed or conflicting header, a body over the limit)
 * closes it. 1xx answers are skipped. Redirects are not followed: the caller sees the 3xx.
 *
 * Pipelining. Once a connection has shown that the receiver keeps it alive (a complete HTTP/1.1 answer
 * without `Connection: close`), up to {@link PIPELINE_DEPTH} requests may be in flight on it, and the
 * requests started in one turn of the event loop are written together (the socket is corked until the
 * turn's end). A loopback or LAN write costs far more than building a request (one system call, the
 * receiver woken, an answer read, per request), so under load this is most of a delivery's cost; the
 * receiver answers in order (RFC 9112, 9.3.2). POST is not idempotent, which is why a client must be
 * able to recover from a pipeline that breaks: here every request not answered when its connection
 * closes fails like any dropped attempt and is sent again (once at once on a fresh connection, then on
 * the retry schedule); webhooks are delivered at least once and receivers deduplicate by `webhook-id`.
 * A receiver that closes a connection with two or more requests unanswered is taken to dislike
 * pipelining: its origin gets one request per connection from then on.
 */

/** Where a connection goes, and how it is opened. */
export interface Origin {
  https: boolean;
  /** Host name or IP literal (IPv6 without brackets). */
  host: string;
  port: number;
  /** A custom resolver for host names (the SSRF guard), or the system's. */
  lookup?: LookupFunction;
  /** Called once the connection is open, before anything is written; throws to refuse the peer. */
  checkPeer?: (socket: Socket) => void;
}

/** An answer as far as a delivery needs it. */
export interface Answer {
  statusCode: number;
  retryAfter?: string;
}

/** One request handed to a connection. */
interface Exchange {
  head: string;
  body: string;
  limit: number;
  settle: (err: NodeJS.ErrnoException | undefined, answer?: Answer) => void;
  /** Whether any byte of an answer arrived (a reused connection that closes before may be retried). */
  answered: boolean;
  /** The connection carrying it, once it has one. */
  carrier?: Connection;
}

/** Idle connections are closed after this long (servers commonly close theirs after 5 s). */
const IDLE_MS = 4_000;

/** Requests in flight at once on one connection, at most, once it has shown it persists. */
export const PIPELINE_DEPTH = 8;

/** What a connection tells its pool. */
interface PoolSide {
  /** It has room for more requests (an answer completed, or it has just connected). */
  onFree(c: Connection): void;
  /** It closed; `unanswered` requests were still in flight. */
  onClose(c: Connection, unanswered: number): void;
}

/** One kept-alive connection: its requests answered in order, the oldest first. */
class Connection {
  private readonly inFlight: Exchange[] = [];
  private head: Buffer[] = [];
  private headBytes = 0;
  private parsed: Head | undefined;
  private chunks: ChunkReader | undefined;
  private bodyBytes = 0;
  /** Bytes of interim (1xx) answers before the current one's final answer: they count against its limit. */
  private interimBytes = 0;
  private idleTimer: NodeJS.Timeout | undefined;
  /** Exchanges this connection has carried (a fresh one has carried none). */
  uses = 0;
  closed = false;
  /** Whether an answer completed and left it open: the receiver keeps connections alive. */
  persistent = false;
  /** Whether writes are being gathered for the end of this turn of the event loop. */
  corked = false;

  constructor(
    readonly socket: Socket,
    private readonly pool: PoolSide,
  ) {
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("error", (err) => this.close(err));
    socket.on("close", () => this.close());
    socket.on("end", () => this.close());
  }

  /** Requests sent on it and not answered yet. */
  get pending(): number {
    return this.inFlight.length;
  }

  /** Sends one request on this connection, written with the others started in this turn. */
  start(exchange: Exchange): void {
    clearTimeout(this.idleTimer);
    exchange.carrier = this;
    this.inFlight.push(exchange);
    this.uses++;
    if (!this.corked) {
      this.corked = true;
      this.socket.cork();
      process.nextTick(() => {
        this.corked = false;
        this.socket.uncork();
      });
    }
    this.socket.write(exchange.head + exchange.body);
  }

  /**
   * Closes the connection. The request being answered gets its answer if its head was read (an
   * answer that ends with the connection), `err` (or a reset) otherwise; those behind it a reset.
   */
  close(err?: NodeJS.ErrnoException): void {
    if (!this.closed) {
      this.closed = true;
      clearTimeout(this.idleTimer);
      this.socket.destroy();
      this.pool.onClose(this, this.inFlight.length);
    }
    const [current, ...behind] = this.inFlight.splice(0);
    if (current !== undefined) {
      if (this.parsed !== undefined) current.settle(undefined, answerOf(this.parsed));
      else current.settle(err ?? resetError());
    }
    for (const exchange of behind) exchange.settle(resetError());
  }

  private onData(chunk: Buffer): void {
    const exchange = this.inFlight[0];
    if (exchange === undefined) {
      this.close();
      return;
    }
    exchange.answered = true;
    if (this.parsed === undefined) this.readHead(chunk);
    else this.readBody(chunk, 0);
  }

  private readHead(chunk: Buffer): void {
    this.head.push(chunk);
    this.headBytes += chunk.length;
    const all = this.head.length === 1 ? chunk : Buffer.concat(this.head);
    const end = all.indexOf(HEAD_END);
    if (end < 0) {
      if (this.headBytes > MAX_HEAD) this.close(invalidError());
      return;
    }
    this.head = [];
    this.headBytes = 0;
    const head = end <= MAX_HEAD ? parseHead(all.toString("latin1", 0, end)) : undefined;
    if (head === undefined) {
      this.close(invalidError());
      return;
    }
    // 1xx: an interim answer; the real one follows (within the answer's byte limit, so that a receiver
    // cannot keep the attempt busy with an endless run of them).
    if (head.statusCode < 200) {
      this.interimBytes += end + 4;
      if (this.interimBytes > (this.inFlight[0] as Exchange).limit) this.close(invalidError());
      else if (all.length > end + 4) this.readHead(all.subarray(end + 4));
      return;
    }
    this.parsed = head;
    if (head.framing.kind === "chunked") this.chunks = new ChunkReader();
    this.readBody(all, end + 4);
  }

  private readBody(buf: Buffer, at: number): void {
    const head = this.parsed as Head;
    const framing = head.framing;
    // No body (a 204, or a length of 0 said otherwise): what follows is the next answer.
    let used = framing.kind === "none" ? 0 : buf.length - at;
    let complete = framing.kind === "none";
    if (framing.kind === "length") {
      used = Math.min(used, framing.left);
      framing.left -= used;
      complete = framing.left === 0;
    } else if (this.chunks !== undefined) {
      used = this.chunks.read(buf, at) - at;
      if (this.chunks.invalid) head.keepAlive = false;
      complete = this.chunks.done || this.chunks.invalid;
    }
    this.bodyBytes += used;
    const exchange = this.inFlight[0] as Exchange;
    // Bytes after a complete answer are the next request's answer; with none in flight, a fault.
    const extra = at + used < buf.length;
    if (
      this.bodyBytes > exchange.limit ||
      (complete && (!head.keepAlive || (extra && this.inFlight.length < 2)))
    ) {
      this.close();
      return;
    }
    if (!complete) return;
    this.finish(head);
    if (extra) this.onData(buf.subarray(at + used));
  }

  /** The answer is complete and the connection clean: settle, and offer the connection again. */
  private finish(head: Head): void {
    const exchange = this.inFlight.shift() as Exchange;
    this.parsed = undefined;
    this.chunks = undefined;
    this.bodyBytes = 0;
    this.interimBytes = 0;
    this.persistent = true;
    exchange.settle(undefined, answerOf(head));
    this.pool.onFree(this);
  }

  /** Waits idle in the pool; closed after {@link IDLE_MS} unused. */
  rest(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => this.close(), IDLE_MS);
    this.idleTimer.unref();
  }
}

function answerOf(head: Head): Answer {
  return head.retryAfter === undefined
    ? { statusCode: head.statusCode }
    : { statusCode: head.statusCode, retryAfter: head.retryAfter };
}

function resetError(): NodeJS.ErrnoException {
  const err: NodeJS.ErrnoException = new Error("connection closed before an answer");
  err.code = "ECONNRESET";
  return err;
}

function invalidError(): NodeJS.ErrnoException {
  const err: NodeJS.ErrnoException = new Error("not an HTTP/1.1 answer");
  err.code = "ERR_WEBHOOK_INVALID_RESPONSE";
  return err;
}

/** A request in flight: settles once, and can be abandoned (timeout). */
export interface Pending {
  promise: Promise<Answer>;
  /** Gives up: the connection carrying it (if any) is closed, a queued one is dropped. */
  abort(): void;
}

/** The connections of one origin and the requests waiting for one. */
class OriginPool implements PoolSide {
  private readonly open = new Set<Connection>();
  private readonly waiting: Exchange[] = [];
  private connecting = 0;
  /** False once a connection of this origin closed with requests pipelined on it. */
  private pipelining = true;

  constructor(
    private readonly origin: Origin,
    private readonly maxSockets: number,
  ) {}

  /** Connections opened since the pool was made (for tests and the bench). */
  opened = 0;

  request(head: string, body: string, limit: number): Pending {
    let settled = false;
    let retried = false;
    let resolve!: (a: Answer) => void;
    let reject!: (e: NodeJS.ErrnoException) => void;
    const promise = new Promise<Answer>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    const exchange: Exchange = {
      head,
      body,
      limit,
      answered: false,
      settle: (err, answer) => {
        if (settled) return;
        // A kept-alive connection the server closed while we picked it: once more on a fresh one.
        if (err !== undefined && !exchange.answered && !retried && (exchange.carrier?.uses ?? 0) > 1) {
          retried = true;
          delete exchange.carrier;
          this.enqueue(exchange, true);
          return;
        }
        settled = true;
        if (err !== undefined) reject(err);
        else resolve(answer as Answer);
      },
    };
    this.enqueue(exchange, false);
    return {
      promise,
      abort: () => {
        if (settled) return;
        settled = true;
        const at = this.waiting.indexOf(exchange);
        if (at >= 0) this.waiting.splice(at, 1);
        exchange.carrier?.close();
      },
    };
  }

  private enqueue(exchange: Exchange, fresh: boolean): void {
    const c = fresh ? undefined : this.pick();
    if (c !== undefined) {
      c.start(exchange);
      return;
    }
    this.waiting.push(exchange);
    if (this.open.size + this.connecting < this.maxSockets || fresh) this.connect();
  }

  /** Requests `c` may take now. */
  private room(c: Connection): number {
    if (c.closed) return 0;
    return (c.persistent && this.pipelining ? PIPELINE_DEPTH : 1) - c.pending;
  }

  /**
   * A connection with room: one already written to in this turn (its writes go out together), else
   * the least busy (an idle one first); undefined when all are full.
   */
  private pick(): Connection | undefined {
    let best: Connection | undefined;
    for (const c of this.open) {
      if (this.room(c) <= 0) continue;
      if (c.corked) return c;
      if (best === undefined || c.pending < best.pending) best = c;
    }
    return best;
  }

  private connect(): void {
    this.connecting++;
    this.opened++;
    const { https, host, port, lookup, checkPeer } = this.origin;
    const options = { host, port, ...(lookup === undefined ? {} : { lookup }) };
    const socket = https
      ? tlsConnect({
          ...options,
          ALPNProtocols: ["http/1.1"],
          ...(/^[\d.]+$|:/.test(host) ? {} : { servername: host }),
        })
      : netConnect(options);
    socket.setNoDelay(true);
    let done = false;
    const fail = (err: NodeJS.ErrnoException) => {
      if (done) return;
      done = true;
      this.connecting--;
      socket.destroy();
      // The first waiting request fails with the connection's error; the others get connections of their own.
      this.waiting.shift()?.settle(err);
      this.fill();
    };
    socket.once("error", fail);
    // The peer is checked as soon as the TCP connection is up, before a byte of the request is written.
    socket.once("connect", () => {
      try {
        checkPeer?.(socket);
      } catch (err) {
        fail(err as NodeJS.ErrnoException);
      }
    });
    socket.once(https ? "secureConnect" : "connect", () => {
      if (done) return;
      done = true;
      this.connecting--;
      socket.off("error", fail);
      const c = new Connection(socket, this);
      this.open.add(c);
      this.onFree(c);
    });
  }

  /** A connection has room: it takes the next waiting requests, or waits idle. */
  onFree(c: Connection): void {
    while (this.room(c) > 0) {
      const next = this.waiting.shift();
      if (next === undefined) break;
      c.start(next);
    }
    if (c.pending === 0 && !c.closed) c.rest();
  }

  onClose(c: Connection, unanswered: number): void {
    this.open.delete(c);
    if (unanswered > 1) this.pipelining = false;
    this.fill();
  }

  /** Opens connections for waiting requests while there is room. */
  private fill(): void {
    while (this.waiting.length > this.connecting && this.open.size + this.connecting < this.maxSockets) {
      this.connect();
    }
  }

  /** Closes every connection; waiting requests fail. */
  destroy(): void {
    for (const exchange of this.waiting.splice(0)) exchange.settle(resetError());
    for (const c of [...this.open]) c.close();
  }

  /** Whether nothing is open, connecting or waiting (the pool can be dropped). */
  get empty(): boolean {
    return this.open.size === 0 && this.connecting === 0 && this.waiting.length === 0;
  }
}

/** Kept-alive connection pools, one per origin. */
export class Http1Client {
  private readonly pools = new Map<string, OriginPool>();

  constructor(private readonly maxSockets: number) {}

  /** POSTs `body` to `path` at `origin` with `headers` (names and values checked by the caller). */
  post(
    origin: Origin,
    path: string,
    hostHeader: string,
    headers: string,
    body: string,
    limit: number,
  ): Pending {
    const key = `${origin.https ? "https" : "http"}://${hostHeader}`;
    let pool = this.pools.get(key);
    if (pool === undefined) {
      if (this.pools.size >= 256) this.sweep();
      pool = new OriginPool(origin, this.maxSockets);
      this.pools.set(key, pool);
    }
    const head = `POST ${path} HTTP/1.1\r\nhost: ${hostHeader}\r\n${headers}content-length: ${Buffer.byteLength(body)}\r\n\r\n`;
    return pool.request(head, body, limit);
  }

  /** Connections opened so far to the origin of `url`'s scheme and host (tests, the bench). */
  opened(https: boolean, hostHeader: string): number {
    return this.pools.get(`${https ? "https" : "http"}://${hostHeader}`)?.opened ?? 0;
  }

  /** Drops pools with nothing open (a sweep after deliveries, so pools of gone endpoints do not pile up). */
  sweep(): void {
    for (const [key, pool] of this.pools) if (pool.empty) this.pools.delete(key);
  }

  destroy(): void {
    for (const pool of this.pools.values()) pool.destroy();
    this.pools.clear();
  }
}
