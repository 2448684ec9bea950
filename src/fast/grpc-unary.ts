import { validateHeaderName, validateHeaderValue } from "node:http";
import { constants, type IncomingHttpHeaders, type ServerHttp2Stream } from "node:http2";
import {
  type DescMessage,
  type DescMethod,
  type DescMethodUnary,
  fromBinary,
  type MessageShape,
  toBinary,
} from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type ContextValues,
  createConnectRouter,
  createContextKey,
  type Interceptor,
  type UnaryResponse,
} from "@connectrpc/connect";
import { parseTimeout } from "@connectrpc/connect/protocol-grpc";
import { AppError } from "../errors.js";
import { CallHeaders } from "../http/call-headers.js";
import { assignRequestId } from "../http/envelope.js";
import { setGrpcStatus } from "../http/grpc-status.js";
import { createUnaryInvoker, type UnaryCall } from "../http/invoke.js";
import type { Http2Claim } from "../http/listener.js";
import { toConnectError } from "../rpc/error-mapping.js";
import { messageFromBinary } from "./binary-input.js";
import { messageToBinary } from "./binary-output.js";
import { COMPRESSED_FLAG, EnvelopeReader, encodeEnvelope } from "./grpc-envelope.js";
import { isOn } from "./switch.js";

/**
 * Unary gRPC calls served straight from the HTTP/2 stream, before Fastify and without Connect's
 * transport. A gRPC call through the Connect plugin cost about three times the CPU of the same call
 * over REST: Fastify routing, connect-es's async-iterable pipeline, three abort controllers and their
 * DOMExceptions, Web `Headers`, per call. This path does what the REST transcoder does (the
 * implementations called in process through the same interceptor instances, `createUnaryInvoker`) and
 * the gRPC wire format by hand: read the one length-prefixed message, decode it, answer with one
 * message and `grpc-status` trailers.
 *
 * The answers are the Connect path's, field for field: the same response headers (`x-request-id`,
 * the interceptors' rate-limit headers), the same trailers for every error (`setGrpcStatus`, with
 * the error's metadata), the same refusals of malformed bodies with connect-es's messages, undecodable
 * messages as `invalid_request` as `undecodable.ts` does it, the same context values, so the same
 * rate limits, logs and metrics. Three differences: responses are never compressed (identity is
 * always acceptable to a gRPC client, and the service's messages are mostly ciphertext); a call that
 * outlives its `grpc-timeout` is answered DEADLINE_EXCEEDED when the deadline passes, where connect-es
 * only aborts its signal and answers once the handler is done (by then the client has long gone); and
 * an answer sent before the request body has all arrived (a message over the limit) is followed by
 * RST_STREAM NO_ERROR rather than leaving the stream half-open until the client gives up.
 *
 * Everything else is left to the Connect plugin: gRPC-Web, Connect, `application/grpc+json`, a
 * `grpc-encoding` other than identity, a `grpc-timeout` connect-es would refuse, streaming methods,
 * methods other than POST, and HTTP/1.1 (the hook only sees HTTP/2). A gRPC call to a path no
 * service has is answered here too: UNIMPLEMENTED, where Fastify would answer the REST 404.
 */

/** What {@link createGrpcUnaryHandler} needs: the routes and interceptors the Connect plugin gets. */
export interface GrpcUnaryOptions {
  routes: (router: ConnectRouter) => void;
  /** The one interceptor list, the same instances the Connect plugin and the transcoder use. */
  interceptors: readonly Interceptor[];
  /** The largest request message in bytes (Connect's `readMaxBytes`); larger is RESOURCE_EXHAUSTED. */
  bodyLimitBytes: number;
  /**
   * The client's address of a call from `peer` (the socket's, as Node reports it) with these
   * headers: the peer's, or the one a trusted proxy forwarded. Default: the peer's.
   */
  clientAddress?: (peer: string, headers: IncomingHttpHeaders) => string;
  /** The request-scoped values of a call from `address` (the client's), as the Connect plugin gets them. */
  contextValues: (address: string) => ContextValues;
  /**
   * Called for a call answered before it reached the interceptors (a body that does not frame or
   * decode, a message over the limit, a deadline that passed while the body was read), so the HTTP
   * server can count and log it as it does such requests on the Connect path.
   */
  onRefused?: (refusal: GrpcRefusal) => void;
  /**
   * Counts a call refused before the interceptors against its caller's rate limit (by API key, or by
   * address without one) and returns the rate-limit metadata for its answer: the interceptors do both
   * for every other call, and the spec wants the metadata on every answer.
   */
  meter?: (apiKey: string | undefined, remoteAddress: string) => Promise<Record<string, string>>;
}

/** A call answered before the interceptors ran. */
export interface GrpcRefusal {
  /** The request path, `/receipts.v1.KeysService/GrantAccess`. */
  path: string;
  requestId: string;
  /** The gRPC status the call was answered with. */
  status: Code;
  /** From the request's arrival to its answer. */
  elapsedMs: number;
}

/**
 * True in the context values of a call served by this fast path; lets tests (and a curious
 * interceptor) tell it from a call that went through the Connect plugin. Nothing reaches the client.
 */
export const kGrpcFastPath = createContextKey(false, { description: "served by the gRPC unary fast path" });

/** The Content-Type of every gRPC answer: what connect-es sends for binary gRPC. */
const CONTENT_TYPE = "application/grpc+proto";

/** Every gRPC content type (any codec), not gRPC-Web's. */
const ANY_GRPC = /^application\/grpc(?:[+;]|$)/i;

/** The gRPC content types with the binary codec, as connect-es matches them. */
const BINARY_GRPC = /^application\/grpc(?:\+proto)?$/i;

/** The longest timer Node can arm; a longer `grpc-timeout` is as good as none. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A claim for the one-port listener that serves the unary binary gRPC calls of `options.routes` and
 * leaves every other request to Fastify.
 */
export function createGrpcUnaryHandler(options: GrpcUnaryOptions): Http2Claim {
  const { unary: methods, routed } = routedMethods(options.routes);
  const invoke = createUnaryInvoker(options.routes, options.interceptors);
  return (stream, headers) => {
    const path = headers[":path"];
    const type = headers["content-type"];
    if (path !== undefined && type !== undefined && ANY_GRPC.test(type) && !routed.has(path)) {
      answerUnimplemented(stream, headers, path, options);
      return true;
    }
    if (headers[":method"] !== "POST") return false;
    const method = path === undefined ? undefined : methods.get(path);
    if (path === undefined || method === undefined) return false;
    if (type === undefined || !BINARY_GRPC.test(type)) return false;
    const encoding = headers["grpc-encoding"];
    if (encoding !== undefined && encoding !== "identity") return false;
    const authority = headers[":authority"] ?? headers.host;
    if (typeof authority !== "string") return false;
    let timeoutMs: number | undefined;
    const timeout = headers["grpc-timeout"];
    if (timeout !== undefined) {
      const parsed = parseTimeout(
        typeof timeout === "string" ? timeout : String(timeout),
        Number.MAX_SAFE_INTEGER,
      );
      if (parsed.error !== undefined) return false;
      timeoutMs = parsed.timeoutMs;
    }
    serveCall({
      stream,
      headers,
      path,
      method,
      url: `http://${authority}${path}`,
      timeoutMs,
      invoke,
      options,
    });
    return true;
  };
}

/** One call the fast path has taken on. */
interface CallSetup {
  stream: ServerHttp2Stream;
  headers: IncomingHttpHeaders;
  /** The request path, `/receipts.v1.KeysService/GrantAccess`. */
  path: string;
  method: DescMethodUnary;
  url: string;
  timeoutMs: number | undefined;
  invoke: (call: UnaryCall) => Promise<UnaryResponse>;
  options: GrpcUnaryOptions;
}

/**
 * Reads the request message, runs the call and answers it. The call's abort signal is made only if
 * something asks for it; it is aborted when the client goes away or the deadline passes.
 */
function serveCall({ stream, headers, path, method, url, timeoutMs, invoke, options }: CallSetup): void {
  const started = performance.now();
  const requestId = assignRequestId({ headers });
  const address = clientAddress(stream, headers, options);
  const values = options.contextValues(address);
  values.set(kGrpcFastPath, true);
  const reader = new EnvelopeReader(options.bodyLimitBytes);
  let message: MessageShape<DescMethodUnary["input"]> | undefined;
  let phase: "reading" | "calling" | "done" = "reading";
  let requestEnded = false;
  let controller: AbortController | undefined;
  let abandoned = false;
  let abandonReason: unknown;
  let timer: NodeJS.Timeout | undefined;

  const abandon = (reason?: unknown): void => {
    if (abandoned) return;
    abandoned = true;
    abandonReason = reason;
    controller?.abort(reason);
  };
  const signal = (): AbortSignal => {
    if (controller === undefined) {
      controller = new AbortController();
      if (abandoned) controller.abort(abandonReason);
    }
    return controller.signal;
  };

  const onData = (chunk: Buffer): void => {
    if (phase !== "reading") return;
    reader.push(chunk);
    try {
      for (let envelope = reader.next(); envelope !== undefined; envelope = reader.next()) {
        // connect-es decodes a second message before it refuses it as one too many.
        const decoded = decode(method, envelope.flags, envelope.data, requestId);
        if (message !== undefined) {
          throw new ConnectError(
            "protocol error: received extra input message for unary method",
            Code.Unimplemented,
          );
        }
        message = decoded;
      }
    } catch (err) {
      refuse(asConnectError(err));
    }
  };
  const onEnd = (): void => {
    requestEnded = true;
    if (phase !== "reading") return;
    if (reader.pendingBytes > 0) {
      refuse(new ConnectError("protocol error: incomplete envelope", Code.InvalidArgument));
    } else if (message === undefined) {
      refuse(new ConnectError("protocol error: missing input message for unary method", Code.Unimplemented));
    } else {
      phase = "calling";
      const header = CallHeaders.fromNode(headers, isPseudoHeader);
      invoke({ method, message, header, contextValues: values, signal, url, protocolName: "grpc" }).then(
        succeed,
        fail,
      );
    }
  };
  const onClose = (): void => {
    clearTimeout(timer);
    if (phase === "done") return;
    phase = "done";
    abandon();
  };
  const onDeadline = (): void => {
    const metadata = { "x-request-id": requestId };
    const error = new ConnectError("the operation timed out", Code.DeadlineExceeded, metadata);
    abandon(error);
    if (phase === "reading") refuse(error);
    else if (phase === "calling") answerError(error);
  };

  function succeed(response: UnaryResponse): void {
    if (phase !== "calling") return;
    let body: Uint8Array;
    try {
      body = responseToBinary(method.output, response.message as MessageShape<DescMethodUnary["output"]>);
    } catch (err) {
      fail(new ConnectError(`serialize binary: ${messageOf(err)}`, Code.Internal));
      return;
    }
    finish();
    const headers = baseHeaders(requestId);
    response.header.forEach((value, name) => {
      headers[name] = value;
    });
    const trailers: Record<string, string> = { "grpc-status": "0" };
    response.trailer.forEach((value, name) => {
      trailers[name] = value;
    });
    write(headers, trailers, encodeEnvelope(body));
  }
  function fail(err: unknown): void {
    if (phase === "calling") answerError(asConnectError(err));
  }
  function answerError(error: ConnectError): void {
    finish();
    write(baseHeaders(requestId), headersObject(setGrpcStatus(new CallHeaders(), error)));
  }
  function refuse(error: ConnectError): void {
    finish();
    const answer = (limits: Record<string, string>): void => {
      for (const name in limits) error.metadata.set(name, limits[name] as string);
      answerError(error);
      options.onRefused?.({ path, requestId, status: error.code, elapsedMs: performance.now() - started });
    };
    const apiKey = headers["x-api-key"];
    const meter = options.meter;
    if (meter === undefined) answer({});
    else meter(typeof apiKey === "string" ? apiKey : undefined, address).then(answer, () => answer({}));
  }
  function finish(): void {
    phase = "done";
    clearTimeout(timer);
    stream.off("data", onData);
  }
  /**
   * Sends the one answer: headers, the message if any, trailers. A complete answer to a request still
   * being sent is followed by RST_STREAM NO_ERROR (RFC 9113, section 8.1), so a client stuck in flow
   * control, or sending a body over the limit, stops rather than holding the stream open; a reset in
   * the turn that sends the trailers would drop them, so it waits one turn.
   */
  function write(headers: Record<string, string>, trailers: Record<string, string>, body?: Buffer): void {
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
      if (!requestEnded) setImmediate(stopRequest);
    });
    if (body === undefined) stream.end();
    else stream.end(body);
  }

  function stopRequest(): void {
    if (!requestEnded && !stream.closed) stream.close(constants.NGHTTP2_NO_ERROR);
  }

  stream.on("data", onData);
  stream.once("end", onEnd);
  stream.once("close", onClose);
  // A reset with an error code (ours above, or a client's) is emitted as "error" before "close";
  // without a listener it would be thrown. "close" abandons the call.
  stream.on("error", ignore);
  if (timeoutMs !== undefined && timeoutMs <= MAX_TIMER_MS) timer = setTimeout(onDeadline, timeoutMs);
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
    return requestFromBinary(method.input, data);
  } catch (err) {
    throw toConnectError(
      new AppError("invalid_request", "The request message cannot be decoded.", {
        violations: [{ field: "body", description: messageOf(err) }],
      }),
      requestId,
    );
  }
}

/**
 * The request paths (`/package.Service/Method`) `routes` registers: all of them, and the unary
 * methods by path.
 */
function routedMethods(routes: (router: ConnectRouter) => void): {
  unary: Map<string, DescMethodUnary>;
  routed: Set<string>;
} {
  const router = createConnectRouter();
  routes(router);
  const unary = new Map<string, DescMethodUnary>();
  const routed = new Set<string>();
  for (const { method, requestPath } of router.handlers) {
    routed.add(requestPath);
    if (isUnary(method)) unary.set(requestPath, method);
  }
  return { unary, routed };
}

/**
 * Answers a gRPC call to a method the server does not have (unknown service or method) as the gRPC
 * spec wants it: HTTP 200, trailers-only, `grpc-status` 12 UNIMPLEMENTED, with the request id and
 * the caller's rate-limit metadata (the call is counted like any call refused before its RPC). The
 * request body is not read: the stream is reset with NO_ERROR once the answer is out.
 */
function answerUnimplemented(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  path: string,
  options: GrpcUnaryOptions,
): void {
  const started = performance.now();
  const requestId = assignRequestId({ headers });
  stream.on("error", ignore);
  const shown = path.length > 200 ? `${path.slice(0, 200)}...` : path;
  const error = new ConnectError(`unknown method ${shown}`, Code.Unimplemented);
  const answer = (limits: Record<string, string>): void => {
    if (stream.destroyed || stream.closed) return;
    const status = headersObject(setGrpcStatus(new CallHeaders(), error));
    try {
      const all = { ...limits, ...baseHeaders(requestId), ...status };
      assertValidHeaders(all);
      stream.respond({ ...all, ":status": 200 }, { endStream: true });
    } catch {
      stream.close(constants.NGHTTP2_INTERNAL_ERROR);
      return;
    }
    if (!stream.readableEnded) setImmediate(() => stream.close(constants.NGHTTP2_NO_ERROR));
    options.onRefused?.({ path, requestId, status: error.code, elapsedMs: performance.now() - started });
  };
  const apiKey = headers["x-api-key"];
  const meter = options.meter;
  if (meter === undefined) answer({});
  else
    meter(typeof apiKey === "string" ? apiKey : undefined, clientAddress(stream, headers, options)).then(
      answer,
      () => answer({}),
    );
}

function isUnary(method: DescMethod): method is DescMethodUnary {
  return method.methodKind === "unary";
}

/** The headers of every answer, before those the interceptors set. */
function baseHeaders(requestId: string): Record<string, string> {
  return { "x-request-id": requestId, "content-type": CONTENT_TYPE };
}

function headersObject(headers: Headers): Record<string, string> {
  const result: Record<string, string> = {};
  headers.forEach((value, name) => {
    result[name] = value;
  });
  return result;
}

/** Throws for a header name that is not a token or a value with a character HTTP forbids (CR, LF, NUL, ...). */
function assertValidHeaders(headers: Record<string, string>): void {
  for (const [name, value] of Object.entries(headers)) {
    validateHeaderName(name);
    validateHeaderValue(name, value);
  }
}

function isPseudoHeader(name: string): boolean {
  return name.startsWith(":");
}

/** The client's address of a call on `stream`: the peer's, or what `options.clientAddress` makes of it. */
function clientAddress(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  options: GrpcUnaryOptions,
): string {
  const peer = stream.session?.socket.remoteAddress ?? "";
  return options.clientAddress === undefined ? peer : options.clientAddress(peer, headers);
}

function ignore(): void {}

/** What connect-es makes of anything thrown that is not a `ConnectError`. */
function asConnectError(err: unknown): ConnectError {
  return err instanceof ConnectError
    ? err
    : new ConnectError("internal error", Code.Internal, undefined, undefined, err);
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A request message: by the compiled reader when `binary-codec` is on, else by `fromBinary`. */
function requestFromBinary<Desc extends DescMessage>(schema: Desc, bytes: Buffer): MessageShape<Desc> {
  return isOn("binary-codec") ? messageFromBinary(schema, bytes) : fromBinary(schema, bytes);
}

/** A response message's bytes: by the compiled writer when `binary-codec` is on, else by `toBinary`. */
function responseToBinary<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): Uint8Array {
  return isOn("binary-codec") ? messageToBinary(schema, message) : toBinary(schema, message);
}
