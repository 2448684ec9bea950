import { constants, type IncomingHttpHeaders, type ServerHttp2Stream } from "node:http2";
import type { DescMethod, DescMethodUnary } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  type ConnectRouter,
  type ContextValues,
  createConnectRouter,
  type Interceptor,
} from "@connectrpc/connect";
import { parseTimeout } from "@connectrpc/connect/protocol-grpc";
import { CallHeaders } from "./call-headers.js";
import { assignRequestId } from "./envelope.js";
import { ignore, serveCall } from "./grpc-call.js";
import { assertValidHeaders, baseHeaders, clientAddress, headersObject } from "./grpc-headers.js";
import { setGrpcStatus } from "./grpc-status.js";
import { createUnaryInvoker } from "./invoke.js";
import type { Http2Claim } from "./listener.js";

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
 *
 * This file decides which calls the fast path takes; grpc-call.ts serves each of them, from its body
 * to its trailers, and grpc-headers.ts holds the headers every answer starts with.
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
   * for every other call, and every answer carries the metadata.
   */
  meter?: (apiKey: string | undefined, remoteAddress: string) => Promise<Record<string, string>>;
}

/** A call answered before the interceptors ran. */
export interface GrpcRefusal {
  /** The request path, `/receipts.v1.KeysService/GrantAccess`. */
  path: string;
  /** Whether the path names a method of the server (false: unknown service or method). */
  routed: boolean;
  requestId: string;
  /** The gRPC status the call was answered with. */
  status: Code;
  /** From the request's arrival to its answer. */
  elapsedMs: number;
}

// True in the context values of a call served by this fast path (set where the call is served).
export { kGrpcFastPath } from "./grpc-call.js";

/** Every gRPC content type (any codec), not gRPC-Web's. */
const ANY_GRPC = /^application\/grpc(?:[+;]|$)/i;

/** The gRPC content types with the binary codec, as connect-es matches them. */
const BINARY_GRPC = /^application\/grpc(?:\+proto)?$/i;

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
    serveCall(stream, headers, path, method, `http://${authority}${path}`, timeoutMs, invoke, options);
    return true;
  };
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
    options.onRefused?.({
      path,
      routed: false,
      requestId,
      status: error.code,
      elapsedMs: performance.now() - started,
    });
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
