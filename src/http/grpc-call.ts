/* Over 400 lines on purpose: a call's reading, running and answering share one state and one
 * stream, and each step mirrors a step of connect-es that the fast path must answer exactly like. */
import { constants, type IncomingHttpHeaders, type ServerHttp2Stream } from "node:http2";
import { type DescMethodUnary, fromBinary, type MessageShape, toBinary } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ContextValues,
  createContextKey,
  type UnaryResponse,
} from "@connectrpc/connect";
import { AppError } from "../errors.js";
import { kRequestId } from "../rpc/context.js";
import { isOversizeMessage, refusedRequest, toConnectError } from "../rpc/error-mapping.js";
import { CallHeaders } from "./call-headers.js";
import { assignRequestId } from "./envelope.js";
import { COMPRESSED_FLAG, type Envelope, EnvelopeReader, encodeEnvelope } from "./grpc-envelope.js";
import {
  assertValidHeaders,
  baseHeaders,
  clientAddress,
  headersObject,
  isPseudoHeader,
} from "./grpc-headers.js";
import { setGrpcStatus } from "./grpc-status.js";
import type { GrpcRefusal, GrpcUnaryOptions } from "./grpc-unary.js";
import type { UnaryInvoker } from "./invoke.js";

/**
 * One unary gRPC call the fast path (grpc-unary.ts) has taken on, from the first bytes of its body to
 * its trailers: the one length-prefixed message read and decoded as connect-es reads it, the call run
 * through the interceptors and the implementation, and the one answer written on the HTTP/2 stream
 * (the message and `grpc-status` trailers, or the error's trailers).
 */

/**
 * True in the context values of a call served by this fast path; lets tests (and a curious
 * interceptor) tell it from a call that went through the Connect plugin. Nothing reaches the client.
 */
export const kGrpcFastPath = createContextKey(false, { description: "served by the gRPC unary fast path" });

/** The longest timer Node can arm; a longer `grpc-timeout` is as good as none. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * One call the fast path has taken on, and where it stands: the state its stream's listeners share,
 * passed to the functions below that read the request, run the call and answer it.
 */
interface Call {
  readonly stream: ServerHttp2Stream;
  readonly headers: IncomingHttpHeaders;
  /** The request path, `/receipts.v1.KeysService/GrantAccess`. */
  readonly path: string;
  readonly method: DescMethodUnary;
  readonly url: string;
  readonly invoke: UnaryInvoker;
  readonly options: GrpcUnaryOptions;
  /** When the request arrived (`performance.now()`), for {@link GrpcRefusal.elapsedMs}. */
  readonly started: number;
  readonly requestId: string;
  /** The client's address, as {@link clientAddress} makes it. */
  readonly address: string;
  readonly values: ContextValues;
  readonly reader: EnvelopeReader;
  /** The stream's "data" listener, removed once the call is answered. */
  readonly onData: (chunk: Buffer) => void;
  /** The request message, once its envelope has arrived. */
  message: MessageShape<DescMethodUnary["input"]> | undefined;
  /** Reading the request body, waiting for the implementation, or answered (or abandoned). */
  phase: "reading" | "calling" | "done";
  /** The client has sent the whole request (END_STREAM). */
  requestEnded: boolean;
  /** The call's abort controller, made only if something asks for the signal ({@link callSignal}). */
  controller: AbortController | undefined;
  /** The client went away or the deadline passed; the signal is (or will be made) aborted. */
  abandoned: boolean;
  abandonReason: unknown;
  /** The deadline's timer, when the call has one. */
  timer: NodeJS.Timeout | undefined;
}

/**
 * Reads the request message, runs the call and answers it. The call's abort signal is made only if
 * something asks for it; it is aborted when the client goes away or the deadline passes. The call's
 * state is one {@link Call}: the listeners made here hand it to the module functions below, so that
 * a call costs no closures beyond these and the few an answer needs.
 */
export function serveCall(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  path: string,
  method: DescMethodUnary,
  url: string,
  timeoutMs: number | undefined,
  invoke: UnaryInvoker,
  options: GrpcUnaryOptions,
): void {
  const started = performance.now();
  const requestId = assignRequestId({ headers });
  const address = clientAddress(stream, headers, options);
  const values = options.contextValues(address);
  values.set(kGrpcFastPath, true);
  // The chain's first step takes the id from here rather than testing the header's copy again.
  values.set(kRequestId, requestId);
  const call: Call = {
    stream,
    headers,
    path,
    method,
    url,
    invoke,
    options,
    started,
    requestId,
    address,
    values,
    reader: new EnvelopeReader(options.bodyLimitBytes),
    onData: (chunk) => readChunk(call, chunk),
    message: undefined,
    phase: "reading",
    requestEnded: false,
    controller: undefined,
    abandoned: false,
    abandonReason: undefined,
    timer: undefined,
  };
  const signal = (): AbortSignal => callSignal(call);
  const onResponse = (response: UnaryResponse): void => succeed(call, response);
  const onFailure = (err: unknown): void => fail(call, err);
  const onEnd = (): void => {
    const message = endRequest(call);
    if (message !== undefined) invokeCall(call, message, signal).then(onResponse, onFailure);
  };

  stream.on("data", call.onData);
  stream.once("end", onEnd);
  stream.once("close", () => closeCall(call));
  // A reset with an error code (ours below, or a client's) is emitted as "error" before "close";
  // without a listener it would be thrown. "close" abandons the call.
  stream.on("error", ignore);
  if (timeoutMs !== undefined && timeoutMs <= MAX_TIMER_MS) {
    call.timer = setTimeout(() => deadlinePassed(call), timeoutMs);
  }
}

/**
 * Feeds a chunk of the request body to the call's reader and keeps the message it completes;
 * refuses a body that does not frame or decode, or that holds a second message.
 */
function readChunk(call: Call, chunk: Buffer): void {
  if (call.phase !== "reading") return;
  call.reader.push(chunk);
  try {
    // connect-es splits a chunk into its envelopes, checking each header's length against the limit,
    // before it decodes any of them: a later header over the limit wins over an undecodable message.
    const first = call.reader.next();
    if (first === undefined) return;
    let rest: Envelope[] | undefined;
    for (let envelope = call.reader.next(); envelope !== undefined; envelope = call.reader.next()) {
      if (rest === undefined) rest = [envelope];
      else rest.push(envelope);
    }
    readEnvelope(call, first);
    if (rest !== undefined) for (const envelope of rest) readEnvelope(call, envelope);
  } catch (err) {
    refuse(call, refusal(err, call.requestId));
  }
}

/** Decodes one envelope of the body into the call's message; throws on one it cannot or a second. */
function readEnvelope(call: Call, envelope: Envelope): void {
  // connect-es decodes a second message before it refuses it as one too many.
  const decoded = decode(call.method, envelope.flags, envelope.data, call.requestId);
  if (call.message !== undefined) {
    throw new ConnectError(
      "protocol error: received extra input message for unary method",
      Code.Unimplemented,
    );
  }
  call.message = decoded;
}

/**
 * What a refused request body is answered with: a message over the body limit is the service's
 * `payload_too_large` (as `undecodable.ts` makes of connect-es's), the rest as connect-es answers it.
 */
function refusal(err: unknown, requestId: string): ConnectError {
  if (
    err instanceof ConnectError &&
    err.code === Code.ResourceExhausted &&
    isOversizeMessage(err.rawMessage)
  ) {
    return toConnectError(refusedRequest(err.rawMessage), requestId);
  }
  return asConnectError(err);
}

/**
 * Notes the end of the request body. While the call is still reading, refuses a body that ends
 * inside an envelope or before any message, or else moves the call on and returns its message to run.
 */
function endRequest(call: Call): MessageShape<DescMethodUnary["input"]> | undefined {
  call.requestEnded = true;
  if (call.phase !== "reading") return undefined;
  if (call.reader.pendingBytes > 0) {
    refuse(call, new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument));
  } else if (call.message === undefined) {
    refuse(
      call,
      new ConnectError("protocol error: missing input message for unary method", Code.Unimplemented),
    );
  } else {
    call.phase = "calling";
    return call.message;
  }
  return undefined;
}

/** Runs the call's message through the interceptors and the implementation. */
function invokeCall(
  call: Call,
  message: MessageShape<DescMethodUnary["input"]>,
  signal: () => AbortSignal,
): Promise<UnaryResponse> {
  const { method, values: contextValues, url } = call;
  const header = CallHeaders.fromNode(call.headers, isPseudoHeader);
  return call.invoke({ method, message, header, contextValues, signal, url, protocolName: "grpc" });
}

/** The stream has closed: a call not answered by then is abandoned. */
function closeCall(call: Call): void {
  clearTimeout(call.timer);
  if (call.phase === "done") return;
  call.phase = "done";
  abandon(call);
}

/**
 * The call's `grpc-timeout` has passed: its signal is aborted and it is answered DEADLINE_EXCEEDED
 * at once, refused if its body is still being read.
 */
function deadlinePassed(call: Call): void {
  const metadata = { "x-request-id": call.requestId };
  const error = new ConnectError("the operation timed out", Code.DeadlineExceeded, metadata);
  abandon(call, error);
  if (call.phase === "reading") refuse(call, error);
  else if (call.phase === "calling") answerError(call, error);
}

/** Aborts the call's signal (or the one it will make) with `reason`, once. */
function abandon(call: Call, reason?: unknown): void {
  if (call.abandoned) return;
  call.abandoned = true;
  call.abandonReason = reason;
  call.controller?.abort(reason);
}

/** The call's abort signal, made on first use; already aborted if the call was abandoned before. */
function callSignal(call: Call): AbortSignal {
  if (call.controller === undefined) {
    call.controller = new AbortController();
    if (call.abandoned) call.controller.abort(call.abandonReason);
  }
  return call.controller.signal;
}

/**
 * Answers a call the implementation has answered: the message, with the headers and trailers the
 * interceptors and the implementation set. A message that does not encode fails the call instead.
 */
function succeed(call: Call, response: UnaryResponse): void {
  if (call.phase !== "calling") return;
  let body: Uint8Array;
  try {
    body = toBinary(call.method.output, response.message as MessageShape<DescMethodUnary["output"]>);
  } catch (err) {
    fail(call, new ConnectError(`serialize binary: ${messageOf(err)}`, Code.Internal));
    return;
  }
  finish(call);
  const headers = baseHeaders(call.requestId);
  response.header.forEach((value, name) => {
    headers[name] = value;
  });
  const trailers: Record<string, string> = { "grpc-status": "0" };
  response.trailer.forEach((value, name) => {
    trailers[name] = value;
  });
  write(call, headers, trailers, encodeEnvelope(body));
}

/** Answers a call the interceptors or the implementation failed, unless it was answered already. */
function fail(call: Call, err: unknown): void {
  if (call.phase === "calling") answerError(call, asConnectError(err));
}

/** Answers the call with `error` in its trailers, as `setGrpcStatus` puts it. */
function answerError(call: Call, error: ConnectError): void {
  finish(call);
  write(call, baseHeaders(call.requestId), headersObject(setGrpcStatus(new CallHeaders(), error)));
}

/**
 * Answers a call refused before it reached the interceptors with `error`, once the caller has been
 * counted against its rate limit (whose metadata the answer carries), and reports it to `onRefused`.
 */
function refuse(call: Call, error: ConnectError): void {
  finish(call);
  const { options } = call;
  const answer = (limits: Record<string, string>): void => {
    for (const name in limits) error.metadata.set(name, limits[name] as string);
    answerError(call, error);
    options.onRefused?.({
      path: call.path,
      routed: true,
      requestId: call.requestId,
      status: error.code,
      elapsedMs: performance.now() - call.started,
    });
  };
  const apiKey = call.headers["x-api-key"];
  const meter = options.meter;
  if (meter === undefined) answer({});
  else meter(typeof apiKey === "string" ? apiKey : undefined, call.address).then(answer, () => answer({}));
}

/** Marks the call answered: no deadline, and no more reading of its body. */
function finish(call: Call): void {
  call.phase = "done";
  clearTimeout(call.timer);
  call.stream.off("data", call.onData);
}

/**
 * Sends the one answer: headers, the message if any, trailers. A complete answer to a request still
 * being sent is followed by RST_STREAM NO_ERROR (RFC 9113, section 8.1), so a client stuck in flow
 * control, or sending a body over the limit, stops rather than holding the stream open; a reset in
 * the turn that sends the trailers would drop them, so it waits one turn.
 */
function write(
  call: Call,
  headers: Record<string, string>,
  trailers: Record<string, string>,
  body?: Buffer,
): void {
  const { stream } = call;
  if (stream.destroyed || stream.closed) return;
  try {
    // Checked as Node's compatibility API checks them: the core stream API sends what it is given.
    assertValidHeaders(headers);
    assertValidHeaders(trailers);
    stream.respond({ ...headers, ":status": 200 }, { waitForTrailers: true });
  } catch {
    // A header value an interceptor set that HTTP/2 refuses: the stream is reset rather than left open.
    stream.close(constants.NGHTTP2_INTERNAL_ERROR);
    return;
  }
  stream.once("wantTrailers", () => {
    stream.sendTrailers(trailers);
    if (!call.requestEnded) setImmediate(stopRequest, call);
  });
  if (body === undefined) stream.end();
  else stream.end(body);
}

/** Resets the stream of a call answered before its request ended (see {@link write}). */
function stopRequest(call: Call): void {
  if (!call.requestEnded && !call.stream.closed) call.stream.close(constants.NGHTTP2_NO_ERROR);
}

/**
 * Decodes one request message as connect-es would: a compressed one is refused (no `grpc-encoding`
 * was negotiated), and bytes that do not decode are `invalid_request` as in `undecodable.ts`.
 */
function decode(
  method: DescMethodUnary,
  flags: number,
  data: Buffer,
  requestId: string,
): MessageShape<DescMethodUnary["input"]> {
  if ((flags & COMPRESSED_FLAG) === COMPRESSED_FLAG) {
    throw new ConnectError("received compressed envelope, but do not know how to decompress", Code.Internal);
  }
  try {
    return fromBinary(method.input, data);
  } catch (err) {
    throw toConnectError(
      new AppError("invalid_request", "The request message cannot be decoded.", {
        violations: [{ field: "body", description: messageOf(err) }],
      }),
      requestId,
    );
  }
}

/** A listener that does nothing, for events that must have one. */
export function ignore(): void {}

/** What connect-es makes of anything thrown that is not a `ConnectError`. */
function asConnectError(err: unknown): ConnectError {
  return err instanceof ConnectError
    ? err
    : new ConnectError("internal error", Code.Internal, undefined, undefined, err);
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
