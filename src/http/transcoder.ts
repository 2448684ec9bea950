import { randomUUID } from "node:crypto";
import type { DescService } from "@bufbuild/protobuf";
import {
  type ConnectRouter,
  type ContextValues,
  createRouterTransport,
  type Interceptor,
} from "@connectrpc/connect";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { invalidRequest } from "../errors.js";
import { isProtocolHeader } from "../rpc/error-mapping.js";
import { decodeHttpRequest, encodeHttpResponse, type HttpBinding, httpBindings } from "./bindings.js";
import { sendError, sendSuccess } from "./envelope.js";

/**
 * The REST transcoder: one Fastify route per `google.api.http` binding, each calling the same Connect
 * router in memory (`createRouterTransport`), so REST calls run the very interceptors and handlers
 * that gRPC, gRPC-Web and Connect calls run. No route is written by hand.
 */

/** What the transcoder needs; `interceptors` must be the instances the Connect plugin uses. */
export interface TranscoderOptions {
  routes: (router: ConnectRouter) => void;
  services: readonly DescService[];
  interceptors: Interceptor[];
  /** The request-scoped values of a call (client address, protocol), as for the Connect plugin. */
  contextValues: (request: FastifyRequest) => ContextValues;
  /** Largest accepted JSON body, in bytes; larger gets 413 `payload_too_large`. */
  bodyLimitBytes: number;
}

/** Request headers that describe the HTTP exchange rather than the call, never forwarded. */
const HOP_HEADERS = new Set(["host", "cookie", "expect", "proxy-authorization", "http2-settings"]);

/**
 * Carries a call's context values across the in-memory transport, which passes only headers to the
 * router: the transcoder parks the values under a random token in this header and {@link
 * contextBridge} (the router's outermost interceptor) swaps them in and removes the header. Only the
 * transcoder's own router has the bridge, so the header means nothing on any other surface.
 */
const CALL_TOKEN_HEADER = "x-receipts-transcoder-call";

/** Context values waiting for their in-memory call, by token. */
type PendingCalls = Map<string, ContextValues>;

function contextBridge(pending: PendingCalls): Interceptor {
  return (next) => (req) => {
    const token = req.header.get(CALL_TOKEN_HEADER);
    req.header.delete(CALL_TOKEN_HEADER);
    const values = token === null ? undefined : pending.get(token);
    return next(values === undefined ? req : { ...req, contextValues: values });
  };
}

/**
 * Registers the REST routes of every binding of `services` on `app`, in their own plugin scope with a
 * strict JSON body parser (other content types get 415). Returns the bindings served, e.g. for an
 * OpenAPI document.
 */
export async function registerTranscoder(
  app: FastifyInstance,
  options: TranscoderOptions,
): Promise<HttpBinding[]> {
  const bindings = httpBindings(options.services);
  const pending: PendingCalls = new Map();
  const transport = createRouterTransport(options.routes, {
    router: { interceptors: [contextBridge(pending), ...options.interceptors] },
  });
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser(
      "application/json",
      { parseAs: "string", bodyLimit: options.bodyLimitBytes },
      (_request, text, done) => {
        if (text === "") return done(null, undefined);
        try {
          done(null, JSON.parse(text as string));
        } catch {
          done(
            invalidRequest(
              [{ field: "body", description: "is not valid JSON" }],
              "The body is not valid JSON.",
            ),
          );
        }
      },
    );
    for (const binding of bindings) {
      scope.route({
        method: binding.verb,
        url: binding.routePath,
        config: { rpc: `${binding.method.parent.typeName}/${binding.method.name}` },
        handler: (request, reply) => handle(binding, request, reply),
      });
    }
  });
  return bindings;

  async function handle(
    binding: HttpBinding,
    request: FastifyRequest,
    reply: FastifyReply,
  ): Promise<FastifyReply> {
    const abort = new AbortController();
    const onClose = () => {
      if (!reply.raw.writableFinished) abort.abort();
    };
    reply.raw.once("close", onClose);
    const token = randomUUID();
    try {
      const message = decodeHttpRequest(binding, {
        params: request.params as Record<string, string>,
        query: request.query as Record<string, string | string[]>,
        body: request.body,
      });
      pending.set(token, options.contextValues(request));
      const headers = forwardedHeaders(request);
      headers.set(CALL_TOKEN_HEADER, token);
      const res = await transport.unary(binding.method, abort.signal, undefined, headers, message);
      copyHeaders(res.header, reply);
      copyHeaders(res.trailer, reply);
      return sendSuccess(reply, encodeHttpResponse(binding, res.message));
    } catch (err) {
      return sendError(request, reply, err);
    } finally {
      pending.delete(token);
      reply.raw.off("close", onClose);
    }
  }
}

/** The request's headers as call metadata: API key, request id, idempotency key, signature, ... */
function forwardedHeaders(request: FastifyRequest): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(request.headers)) {
    if (value === undefined || HOP_HEADERS.has(name) || isProtocolHeader(name)) continue;
    for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v);
  }
  return headers;
}

function copyHeaders(from: Headers, reply: FastifyReply): void {
  from.forEach((value, name) => {
    if (!isProtocolHeader(name)) reply.header(name, value);
  });
}
