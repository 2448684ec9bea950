import { validateHeaderName, validateHeaderValue } from "node:http";
import type { IncomingHttpHeaders, ServerHttp2Stream } from "node:http2";
import type { GrpcUnaryOptions } from "./grpc-unary.js";

/**
 * The headers of the gRPC fast path's answers (grpc-unary.ts, grpc-call.ts) and what it reads from a
 * request's: the headers every answer starts with, trailers as plain objects, the check Node's
 * compatibility API makes before it sends them, the pseudo-headers a call's headers leave out, and
 * the client's address.
 */

/** The Content-Type of every gRPC answer: what connect-es sends for binary gRPC. */
const CONTENT_TYPE = "application/grpc+proto";

/** The headers of every answer, before those the interceptors set. */
export function baseHeaders(requestId: string): Record<string, string> {
  return { "x-request-id": requestId, "content-type": CONTENT_TYPE };
}

/** `headers` (a call's trailers, as `setGrpcStatus` sets them) as the plain object HTTP/2 sends. */
export function headersObject(headers: Headers): Record<string, string> {
  const result: Record<string, string> = {};
  headers.forEach((value, name) => {
    result[name] = value;
  });
  return result;
}

/** Throws for a header name that is not a token or a value with a character HTTP forbids (CR, LF, NUL, ...). */
export function assertValidHeaders(headers: Record<string, string>): void {
  for (const name in headers) {
    validateHeaderName(name);
    validateHeaderValue(name, headers[name] as string);
  }
}

/** An HTTP/2 pseudo-header (`:path`, `:authority`, ...): a call's headers, as handlers see them, leave these out. */
export function isPseudoHeader(name: string): boolean {
  return name.startsWith(":");
}

/** The client's address of a call on `stream`: the peer's, or what `options.clientAddress` makes of it. */
export function clientAddress(
  stream: ServerHttp2Stream,
  headers: IncomingHttpHeaders,
  options: GrpcUnaryOptions,
): string {
  const peer = stream.session?.socket.remoteAddress ?? "";
  return options.clientAddress === undefined ? peer : options.clientAddress(peer, headers);
}
