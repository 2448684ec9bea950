import { constants, type Http2Session, type ServerHttp2Stream } from "node:http2";

/**
 * Bounds on what one HTTP/2 client can hold or cost, beyond the concurrent-stream limit the server
 * advertises in SETTINGS (`listener.ts`):
 *
 * - a stream whose request has not fully arrived (no END_STREAM from the client) within the request
 *   timeout is reset (RST_STREAM CANCEL), as HTTP/1.1's `requestTimeout` ends a request whose body
 *   trickles in; a stream whose request has arrived is left to its handler;
 * - a session idle for the idle timeout, or one the client sent GOAWAY on, gets GOAWAY; streams still
 *   open after the grace period are reset with the session;
 * - a stream whose request has arrived but whose answer has had bytes waiting to go out, none of them
 *   sent, for the request timeout (a client that grants no flow-control window, or stops reading, while
 *   it keeps the connection alive with pings) is reset (RST_STREAM CANCEL): each such answer is held in
 *   memory, and nothing else would ever let it go;
 * - a complete answer to a request still arriving (one refused before its body was read whole: over
 *   the body limit, say) is followed by RST_STREAM NO_ERROR (RFC 9113, section 8.1), so a client that
 *   sends its whole body before reading stops rather than waiting in flow control for good (Node does
 *   this itself only for an answer without trailers to a request it never read from, and the
 *   compatibility layer always asks for trailers);
 * - a client that resets streams before the server answered them faster than a token bucket allows
 *   (CVE-2023-44487, "rapid reset": each such stream costs the server a request and a handler, the
 *   client nothing) gets GOAWAY ENHANCE_YOUR_CALM and the session is destroyed.
 *
 * The request timeout is checked by one sweep every `checkIntervalMs` over the streams open, rather
 * than a timer per stream: a timer per call showed in the fast path's profile.
 */

/** The bounds, all times in milliseconds. */
export interface Http2GuardOptions {
  requestTimeoutMs: number;
  checkIntervalMs: number;
  idleTimeoutMs: number;
  closeGraceMs: number;
  resetBurst: number;
  resetRatePerSecond: number;
}

/** What the listener wires in: a "stream" listener, a "session" hook, a count and a stop. */
export interface Http2Guard {
  onStream(stream: ServerHttp2Stream): void;
  onSession(session: Http2Session): void;
  /** Streams open right now, on every session. */
  openStreams(): number;
  /** Stops the sweep (on shutdown). */
  stop(): void;
}

/**
 * Resets a stream whose answer is complete while its request is not (see the list above), once the
 * answer's end is on its way: a reset queued before it would overtake it (an answer without trailers
 * ends with an empty DATA frame, which waits behind a reset). Looked at again on each turn until then,
 * up to {@link STOP_TRIES} turns; an answer still not out after that is left to the request timeout.
 */
function stopUnfinishedRequest(stream: ServerHttp2Stream, tries = 0): void {
  if (stream.destroyed || stream.closed) return;
  const { remoteClose, localClose } = stream.state;
  if (remoteClose) return;
  if (localClose) stream.close(constants.NGHTTP2_NO_ERROR);
  else if (tries < STOP_TRIES) setImmediate(stopUnfinishedRequest, stream, tries + 1);
}

/** Turns {@link stopUnfinishedRequest} waits for an answer's end to go out. */
const STOP_TRIES = 20;

/** An answer being written, as the sweep last saw it: bytes waiting to go out, and since when. */
interface Answering {
  pending: number;
  since: number;
}

/**
 * Resets each stream of `open` older than `timeoutMs` whose request has not fully arrived, and moves
 * those whose request has to `answering`.
 */
function sweepRequests(
  open: Map<ServerHttp2Stream, number>,
  answering: Map<ServerHttp2Stream, Answering>,
  now: number,
  timeoutMs: number,
): void {
  const deadline = now - timeoutMs;
  for (const [stream, started] of open) {
    if (started > deadline) break;
    open.delete(stream);
    if (stream.destroyed) continue;
    // The client has sent END_STREAM: the request is complete, its handler is at work; from now on
    // its answer is watched.
    if (stream.state?.remoteClose) answering.set(stream, { pending: stream.bufferSize, since: now });
    else stream.close(constants.NGHTTP2_CANCEL);
  }
}

/**
 * Resets each stream of `answering` whose answer has had bytes waiting, and none sent (the count never
 * fell), for `timeoutMs`; forgets the streams closed meanwhile.
 */
function sweepAnswers(answering: Map<ServerHttp2Stream, Answering>, now: number, timeoutMs: number): void {
  for (const [stream, seen] of answering) {
    if (stream.destroyed || stream.closed) {
      answering.delete(stream);
      continue;
    }
    const pending = stream.bufferSize;
    if (pending === 0 || pending < seen.pending) seen.since = now;
    seen.pending = pending;
    if (now - seen.since >= timeoutMs) {
      answering.delete(stream);
      stream.close(constants.NGHTTP2_CANCEL);
    }
  }
}

/** Per-session state of the rapid-reset bucket. */
interface ResetBucket {
  tokens: number;
  at: number;
}

/** Creates the guard for one HTTP/2 server. */
export function createHttp2Guard(options: Http2GuardOptions): Http2Guard {
  /** Open streams and when each started; a Map keeps insertion (so arrival) order. */
  const open = new Map<ServerHttp2Stream, number>();
  /** Streams whose request arrived, still open after the request timeout: their answers are watched. */
  const answering = new Map<ServerHttp2Stream, Answering>();
  const buckets = new WeakMap<Http2Session, ResetBucket>();
  let sweeper: NodeJS.Timeout | undefined;

  const sweep = (): void => {
    const now = performance.now();
    sweepRequests(open, answering, now, options.requestTimeoutMs);
    sweepAnswers(answering, now, options.requestTimeoutMs);
    if (open.size === 0 && answering.size === 0) stopSweeping();
  };
  const stopSweeping = (): void => {
    clearInterval(sweeper);
    sweeper = undefined;
  };

  /** Counts a stream the client reset before it was answered; true once the client is over the limit. */
  const overResetLimit = (session: Http2Session): boolean => {
    const now = performance.now();
    let bucket = buckets.get(session);
    if (bucket === undefined) {
      bucket = { tokens: options.resetBurst, at: now };
      buckets.set(session, bucket);
    }
    bucket.tokens = Math.min(
      options.resetBurst,
      bucket.tokens + ((now - bucket.at) / 1000) * options.resetRatePerSecond,
    );
    bucket.at = now;
    bucket.tokens -= 1;
    return bucket.tokens < 0;
  };

  /** GOAWAY now; whatever is still open after the grace period is reset with the session. */
  const closeSession = (session: Http2Session): void => {
    if (session.closed || session.destroyed) return;
    session.close();
    const timer = setTimeout(() => session.destroy(), options.closeGraceMs);
    timer.unref();
    session.once("close", () => clearTimeout(timer));
  };

  return {
    onStream(stream) {
      open.set(stream, performance.now());
      sweeper ??= setInterval(sweep, options.checkIntervalMs).unref();
      // Emitted once the answer's last DATA frame is queued; whoever answers sends the trailers then.
      stream.once("wantTrailers", () => setImmediate(stopUnfinishedRequest, stream));
      // Taken now: a closed stream no longer knows its session.
      const session = stream.session;
      if (session === undefined) return;
      stream.once("close", () => {
        open.delete(stream);
        answering.delete(stream);
        // A stream reset before any answer: by the client (rapid reset), or by the sweep above.
        if (stream.headersSent || stream.rstCode === constants.NGHTTP2_NO_ERROR) return;
        if (overResetLimit(session) && !session.closed && !session.destroyed) {
          // GOAWAY first, in its own write: destroying in the same turn would drop the frame.
          session.goaway(constants.NGHTTP2_ENHANCE_YOUR_CALM);
          setImmediate(() => session.destroy());
        }
      });
    },
    onSession(session) {
      session.setTimeout(options.idleTimeoutMs, () => closeSession(session));
      session.on("goaway", () => closeSession(session));
    },
    openStreams: () => open.size,
    stop: stopSweeping,
  };
}
