import type { Http2ServerRequest } from "node:http2";
import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyReply, FastifyRequest } from "fastify";
import { setGrpcStatus } from "./grpc-status.js";
import { protocolOf } from "./protocol.js";

/**
 * Answers to RPCs of a procedure the server does not have, in the caller's protocol rather than in
 * the REST envelope a client of that protocol cannot read: gRPC and gRPC-Web get HTTP 200 with
 * `grpc-status` 12 UNIMPLEMENTED in the headers (trailers-only), Connect gets 404 with a Connect
 * error body `{"code":"unimplemented"}` (the Connect protocol's answer for an unknown procedure).
 * (On HTTP/2 the gRPC fast path answers unknown gRPC methods before Fastify; this is the rest.)
 */

/** `/package.Service/Method`: a service name with at least one dot (a package), then a method. */
const RPC_PATH = /^\/[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\/[A-Za-z_][A-Za-z0-9_]*(?:\?|$)/;

/** Whether `url` names an RPC (`/receipts.v1.KeysService/GrantAccess`), known or not. */
export function isRpcPath(url: string): boolean {
  return RPC_PATH.test(url);
}

/** Content types a Connect unary or streaming request carries. */
const CONNECT_TYPE = /^application\/(?:proto|json|connect\+[a-z]+)(?:;|$)/i;

/**
 * Answers `request` as an unknown procedure of its protocol if it is an RPC (a gRPC or gRPC-Web
 * content type, or a Connect request to an RPC path); returns false, sending nothing, otherwise.
 */
export function answerUnknownProcedure(
  request: FastifyRequest,
  reply: FastifyReply,
  path: string,
  rateLimitHeaders: () => Promise<Record<string, string>> = async () => ({}),
): boolean {
  const type = request.headers["content-type"] ?? "";
  const lower = type.toLowerCase();
  const isGrpc = lower.startsWith("application/grpc");
  const isConnect =
    !isGrpc &&
    isRpcPath(request.url) &&
    (CONNECT_TYPE.test(type) || request.headers["connect-protocol-version"] !== undefined);
  if (!isGrpc && !isConnect) return false;
  const error = new ConnectError(`unknown method ${path}`, Code.Unimplemented);
  if (isConnect) {
    void reply
      .code(404)
      .type("application/json")
      .send(JSON.stringify({ code: "unimplemented", message: error.rawMessage }));
    return true;
  }
  const grpcWeb = protocolOf(type) === "grpc-web";
  const status = setGrpcStatus(new Headers(), error);
  const stream = (request.raw as unknown as Partial<Http2ServerRequest>).stream;
  if (!grpcWeb && stream !== undefined) {
    // gRPC on HTTP/2 (when the raw gRPC path is off): trailers-only is a HEADERS frame that ends the
    // stream, which a Fastify reply never sends; answer on the stream itself.
    void reply.hijack();
    const headers: Record<string, string | number> = {
      ":status": 200,
      "content-type": "application/grpc+proto",
      "x-request-id": request.id,
    };
    status.forEach((value, name) => {
      headers[name] = value;
    });
    void rateLimitHeaders()
      .catch(() => ({}))
      .then((limits) => {
        if (!stream.destroyed && !stream.headersSent)
          stream.respond({ ...headers, ...limits }, { endStream: true });
      });
    return true;
  }
  status.forEach((value, name) => {
    void reply.header(name, value);
  });
  void reply
    .code(200)
    .header("content-type", grpcWeb ? "application/grpc-web+proto" : "application/grpc+proto")
    .send();
  return true;
}
