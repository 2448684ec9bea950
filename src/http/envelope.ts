import type { JsonValue } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import type { FastifyError, FastifyReply, FastifyRequest } from "fastify";
import { AppError } from "../errors.js";
import { toRestError } from "../rpc/error-mapping.js";
import { requestIdFrom } from "../rpc/request-id.js";
import { codeForStatus } from "./call-setup.js";

/**
 * The REST envelope on the wire (README, "Responses and errors"): `{"success":true,"data":...}` and
 * `{"success":false,"error":{...}}`, and the request id every HTTP response carries.
 */

/**
 * The request id of an HTTP request, by the one rule (`requestIdFrom`). Used as Fastify's `genReqId`;
 * it also writes the id back into the request headers so the RPC interceptors see (and echo) the
 * same id.
 */
export function assignRequestId(raw: { headers: Record<string, string | string[] | undefined> }): string {
  const id = requestIdFrom(raw.headers["x-request-id"]);
  raw.headers["x-request-id"] = id;
  return id;
}

/** Sends a 200 success envelope around `data`. */
export function sendSuccess(reply: FastifyReply, data: JsonValue): FastifyReply {
  return reply.code(200).type("application/json; charset=utf-8").send({ success: true, data });
}

/**
 * Sends a 200 success envelope around `data`, which is JSON text already (a compiled writer's): sent
 * as it is with the JSON content type, not serialised a second time.
 */
export function sendSuccessText(reply: FastifyReply, data: string): FastifyReply {
  return reply.code(200).type("application/json; charset=utf-8").send(`{"success":true,"data":${data}}`);
}

/**
 * Sends the error envelope for anything thrown on the REST surface, through the one error mapping
 * (`toRestError`). A 5xx that did not come out of an RPC (whose interceptor already logged it) is
 * logged here with its cause; the client only ever sees the generic message.
 */
export function sendError(request: FastifyRequest, reply: FastifyReply, err: unknown): FastifyReply {
  const rest = toRestError(err, request.id);
  if (rest.status >= 500 && !(err instanceof ConnectError)) {
    request.log.error({ err, code: rest.body.error.code }, "request failed");
  }
  return reply
    .code(rest.status)
    .headers(rest.headers)
    .type("application/json; charset=utf-8")
    .send(rest.body);
}

/**
 * Fastify's own failures (body parsing, limits) as domain errors for the envelope: 413 for a body
 * over `bodyLimitBytes`, 415 for a Content-Type no parser takes, 400 for a bad Content-Length, the
 * code of the status for any other 4xx. Every route scope uses this, so none answers them with 500.
 */
export function fromFastifyError(error: FastifyError, bodyLimitBytes: number | undefined): unknown {
  if (error instanceof AppError) return error;
  switch (error.code) {
    case "FST_ERR_CTP_BODY_TOO_LARGE":
      return new AppError(
        "payload_too_large",
        bodyLimitBytes === undefined
          ? "The body is too large."
          : `The body is larger than ${bodyLimitBytes} bytes.`,
      );
    case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
      return new AppError("unsupported_media_type", "The Content-Type must be application/json.");
    case "FST_ERR_CTP_INVALID_CONTENT_LENGTH":
      return new AppError("invalid_request", "The Content-Length does not match the body.");
  }
  const status = error.statusCode ?? 500;
  if (status >= 500) return error;
  const code = codeForStatus(status);
  return new AppError(code === "ok" ? "invalid_request" : code, "The request is invalid.");
}

/** How long a refused body's rest is read before the 413 goes out anyway. */
const DRAIN_MS = 2_000;

/**
 * Answers a Fastify error in the envelope. A body over the limit is refused from its Content-Length
 * before a byte of it is read, and the connection is then closed: a client still writing would get a
 * reset (EPIPE) instead of the 413. So up to one more body limit of it is read and discarded first
 * (at most {@link DRAIN_MS}), the lingering close web servers do; a larger body still gets the reset.
 * Fastify asks for that close with a `Connection: close` header, which HTTP/2 has no place for: Node
 * drops it there and writes a warning to the process's stderr, outside the JSON log, so it is taken
 * off an HTTP/2 answer first (the HTTP/2 guard ends the stream instead).
 */
export async function answerFastifyError(
  request: FastifyRequest,
  reply: FastifyReply,
  error: FastifyError,
  bodyLimitBytes: number | undefined,
): Promise<FastifyReply> {
  if (request.raw.httpVersionMajor === 2) reply.removeHeader("connection");
  return sendError(request, reply, await fastifyErrorOf(request, error, bodyLimitBytes));
}

/**
 * A Fastify error as the domain error to answer with ({@link fromFastifyError}), once the rest of a
 * body over the limit is read (see {@link answerFastifyError}).
 */
export async function fastifyErrorOf(
  request: FastifyRequest,
  error: FastifyError,
  bodyLimitBytes: number | undefined,
): Promise<unknown> {
  if (error.code === "FST_ERR_CTP_BODY_TOO_LARGE") await drainBody(request.raw, bodyLimitBytes ?? 0);
  return fromFastifyError(error, bodyLimitBytes);
}

function drainBody(raw: FastifyRequest["raw"], limit: number): Promise<void> {
  if (raw.complete || raw.readableEnded || raw.destroyed) return Promise.resolve();
  return new Promise((resolve) => {
    let seen = 0;
    const finish = () => {
      clearTimeout(timer);
      raw.off("data", onData);
      raw.off("end", finish);
      raw.off("error", finish);
      raw.pause();
      resolve();
    };
    const onData = (chunk: Buffer) => {
      seen += chunk.length;
      if (seen > limit) finish();
    };
    const timer = setTimeout(finish, DRAIN_MS);
    raw.on("data", onData);
    raw.on("end", finish);
    raw.on("error", finish);
    raw.resume();
  });
}
