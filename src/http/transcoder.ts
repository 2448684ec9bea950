import { isAscii, isUtf8 } from "node:buffer";
import type { DescService } from "@bufbuild/protobuf";
import type { ConnectRouter, ContextValues, Interceptor } from "@connectrpc/connect";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { invalidRequest } from "../errors.js";
import { isProtocolHeader } from "../rpc/error-mapping.js";
import {
  decodeHttpRequest,
  encodeHttpResponse,
  encodeHttpResponseText,
  type HttpBinding,
  httpBindings,
} from "./bindings.js";
import { CallHeaders } from "./call-headers.js";
import { sendError, sendSuccess, sendSuccessText } from "./envelope.js";
import { createUnaryInvoker, type UnaryInvoker } from "./invoke.js";

/**
 * The REST transcoder: one Fastify route per `google.api.http` binding, each calling the service
 * implementations in process through the same interceptor instances (`createUnaryInvoker`), so REST
 * calls run the very interceptors and handlers that gRPC, gRPC-Web and Connect calls run, once each.
 * No route is written by hand.
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

/**
 * The text of a request body, or undefined when its bytes are not UTF-8 (strictly: no byte replaced),
 * the same as `new TextDecoder("utf-8", { fatal: true }).decode(bytes)`, which also drops a leading
 * byte order mark. By Node's own validators: an ASCII body (the usual one) becomes a one-byte string
 * with no decoding at all, where the decoder cost a few microseconds on a 50-item receipt.
 */
export function strictUtf8Text(bytes: Buffer): string | undefined {
  if (isAscii(bytes)) return bytes.toString("latin1");
  if (!isUtf8(bytes)) return undefined;
  const bom = bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf;
  return bytes.toString("utf8", bom ? 3 : 0);
}

/** Request headers that describe the HTTP exchange rather than the call, never forwarded. */
const HOP_HEADERS = new Set(["host", "cookie", "expect", "proxy-authorization", "http2-settings"]);

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
  const invoke = createUnaryInvoker(options.routes, options.interceptors);
  await app.register(async (scope) => {
    scope.removeAllContentTypeParsers();
    scope.addContentTypeParser(
      "application/json",
      { parseAs: "buffer", bodyLimit: options.bodyLimitBytes },
      parseStrictJson,
    );
    for (const binding of bindings) {
      scope.route({
        method: binding.verb,
        url: binding.routePath,
        config: { rpc: `${binding.method.parent.typeName}/${binding.method.name}` },
        handler: (request, reply) => handle(binding, invoke, options.contextValues, request, reply),
      });
    }
  });
  return bindings;
}

/** A REST request body as parsed, with its text for the duplicate-member check. */
class JsonBody {
  constructor(
    readonly json: unknown,
    readonly text: string,
  ) {}
}

/**
 * The REST body parser: UTF-8 JSON (RFC 8259), invalid bytes refused rather than turned into U+FFFD.
 * An object with two members of one name (I-JSON) is refused by the decode (`decodeHttpRequest`)
 * before any other problem is named: `JSON.parse` keeps the last of them, and the one-pass read
 * counts what it reads so that the check need not walk the parsed body again.
 */
function parseStrictJson(
  _request: FastifyRequest,
  bytes: string | Buffer,
  done: (err: Error | null, body?: unknown) => void,
): void {
  if (bytes.length === 0) {
    done(null, undefined);
    return;
  }
  const text = strictUtf8Text(bytes as Buffer);
  let body: unknown;
  try {
    if (text === undefined) throw new Error("not UTF-8");
    body = JSON.parse(text);
  } catch {
    done(
      invalidRequest([{ field: "body", description: "is not valid JSON" }], "The body is not valid JSON."),
    );
    return;
  }
  done(null, new JsonBody(body, text));
}

/** One REST call: the request read into the RPC's message, the RPC invoked, its answer in the envelope. */
async function handle(
  binding: HttpBinding,
  invoke: UnaryInvoker,
  contextValues: TranscoderOptions["contextValues"],
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<FastifyReply> {
  // The call's abort signal, made (and tied to the connection) only if something asks for it.
  let controller: AbortController | undefined;
  const onClose = () => {
    if (!reply.raw.writableFinished) controller?.abort();
  };
  const signal = () => {
    if (controller === undefined) {
      controller = new AbortController();
      if (reply.raw.destroyed && !reply.raw.writableFinished) controller.abort();
      else reply.raw.once("close", onClose);
    }
    return controller.signal;
  };
  try {
    const body = request.body as JsonBody | undefined;
    const message = decodeHttpRequest(binding, {
      params: request.params as Record<string, string>,
      query: request.query as Record<string, string | string[]>,
      body: body?.json,
      bodyText: body?.text,
    });
    // Nothing reads the parsed body again: let it go before the call waits for its answer (a seal on
    // the worker pool), so that collections meanwhile do not copy or promote it: a 50-item receipt
    // parses to about 165 objects and arrays (its strings live on in the message).
    request.body = undefined;
    const res = await invoke({
      method: binding.method,
      message,
      header: forwardedHeaders(request),
      contextValues: contextValues(request),
      signal,
      url: request.url,
    });
    copyHeaders(res.header, reply);
    copyHeaders(res.trailer, reply);
    const text = encodeHttpResponseText(binding, res.message);
    return text === undefined
      ? sendSuccess(reply, encodeHttpResponse(binding, res.message))
      : sendSuccessText(reply, text);
  } catch (err) {
    return sendError(request, reply, err);
  } finally {
    if (controller !== undefined) reply.raw.off("close", onClose);
  }
}

/** The request's headers as call metadata: API key, request id, idempotency key, signature, ... */
function forwardedHeaders(request: FastifyRequest): Headers {
  return CallHeaders.fromNode(request.headers, notForwarded);
}

function notForwarded(name: string): boolean {
  return HOP_HEADERS.has(name) || isProtocolHeader(name);
}

function copyHeaders(from: Headers, reply: FastifyReply): void {
  from.forEach((value, name) => {
    if (!isProtocolHeader(name)) reply.header(name, value);
  });
}
