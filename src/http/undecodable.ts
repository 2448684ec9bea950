import type { ConnectError, ConnectRouter } from "@connectrpc/connect";
import {
  createAsyncIterable,
  encodeEnvelope,
  type UniversalHandler,
  type UniversalServerRequest,
  type UniversalServerResponse,
} from "@connectrpc/connect/protocol";
import { codeToHttpStatus, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { trailerFlag, trailerParse, trailerSerialize } from "@connectrpc/connect/protocol-grpc-web";
import { kRemoteAddress, kRequestId } from "../rpc/context.js";
import {
  isOversizeMessage,
  isUndecodableJson,
  refusedRequest,
  toConnectError,
  UNDECODABLE_PREFIX,
} from "../rpc/error-mapping.js";
import { assertNoDuplicateMembers } from "../rpc/json-duplicates.js";
import { requestIdFrom } from "../rpc/request-id.js";
import { reencodeGrpcMessage, setGrpcStatus } from "./grpc-status.js";

/**
 * Requests whose message cannot be decoded are the caller's fault, and are answered as such.
 *
 * connect-es decodes a request before any interceptor runs, and reports a body that is not valid
 * protobuf binary (truncated, a wrong wire type, invalid UTF-8 in a string field) as INTERNAL with
 * the message "parse binary: ..." (its decoder is shared with clients, where a bad message is the
 * server's fault). A client would then retry it as a server error, and metrics would count a bug.
 * {@link answerUndecodableAsInvalid} re-labels exactly that error as `invalid_request`
 * (INVALID_ARGUMENT, HTTP 400 on Connect) with the service's ErrorInfo, BadRequest and request id,
 * on gRPC, gRPC-Web and Connect alike. Everything else passes through untouched, but for the
 * percent-encoding of gRPC's `grpc-message`, made as the gRPC spec says (`grpc-status.ts`).
 */

const UNDECODABLE = UNDECODABLE_PREFIX;

const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Options for the JSON codec of Connect, gRPC-JSON and gRPC-Web-JSON: text that is not UTF-8 is
 * refused, not repaired, and so is an object that names a member twice (I-JSON): the codec's
 * `JSON.parse` would keep the last one. The refusal is the service's `invalid_request` (its request
 * id is added on the way out, as for every answer).
 */
export const STRICT_JSON_OPTIONS = {
  ignoreUnknownFields: true,
  textDecoder: {
    decode(bytes?: Uint8Array): string {
      const text = STRICT_UTF8.decode(bytes);
      try {
        assertNoDuplicateMembers(text);
      } catch (err) {
        const error = toConnectError(err, "");
        error.metadata.delete("x-request-id");
        throw error;
      }
      return text;
    },
  },
};

/**
 * Counts a call refused before the interceptors against its caller's limit and returns the
 * rate-limit headers for its answer (as `HttpServerOptions.meter`).
 */
export type Meter = (apiKey: string | undefined, remoteAddress: string) => Promise<Record<string, string>>;

/**
 * Wraps `routes` so that every handler it registers answers undecodable requests as invalid, and
 * gives every call refused before the interceptors ran (a body too large, undecodable or of a wrong
 * type) the request id and, with `meter`, the rate-limit headers the interceptors give the others.
 */
export function answerUndecodableAsInvalid(
  routes: (router: ConnectRouter) => void,
  meter?: Meter,
): (router: ConnectRouter) => void {
  return (router) => {
    routes(router);
    const handlers = router.handlers.map((handler) => wrapHandler(handler, meter));
    router.handlers.splice(0, router.handlers.length, ...handlers);
  };
}

/** The health service's calls are probes, not callers' calls: they are not counted. */
const UNMETERED_SERVICES = new Set(["grpc.health.v1.Health"]);

/**
 * Adds `x-request-id` and the rate-limit headers to the answer of a call the interceptors never saw
 * (the first of them sets `kRequestId` in the call's context values).
 */
async function withCallHeaders(
  request: UniversalServerRequest,
  response: UniversalServerResponse,
  service: string,
  meter: Meter | undefined,
): Promise<UniversalServerResponse> {
  if ((request.contextValues?.get(kRequestId) ?? "") !== "") return response;
  const header = response.header ?? new Headers();
  // assignRequestId (Fastify's genReqId) wrote the request's id into its headers.
  header.set("x-request-id", requestIdFrom(request.header.get("x-request-id")));
  if (meter !== undefined && !UNMETERED_SERVICES.has(service)) {
    const apiKey = request.header.get("x-api-key") ?? undefined;
    const address = request.contextValues?.get(kRemoteAddress) ?? "";
    const limits = await meter(apiKey, address).catch(() => ({}) as Record<string, string>);
    for (const name in limits) header.set(name, limits[name] as string);
  }
  return { ...response, header };
}

function wrapHandler(handler: UniversalHandler, meter: Meter | undefined): UniversalHandler {
  const service = handler.service.typeName;
  // A streaming call's interceptors may run after its handler has answered: only unary calls are
  // known to have been refused before them when the answer is ready.
  const unary = handler.method.methodKind === "unary";
  const wrapped = async (request: UniversalServerRequest): Promise<UniversalServerResponse> =>
    unary ? withCallHeaders(request, await relabel(request), service, meter) : relabel(request);
  const relabel = async (request: UniversalServerRequest): Promise<UniversalServerResponse> => {
    const response = await handler(request);
    const invalid = (message: string) =>
      toConnectError(refusedRequest(message), requestIdFrom(request.header.get("x-request-id")));
    const type = response.header?.get("content-type") ?? "";
    if (type.startsWith("application/grpc-web")) return grpcWeb(response, invalid);
    if (type.startsWith("application/grpc")) return grpc(response, invalid);
    if (response.status === 500 || response.status === 400 || response.status === 429) {
      return connectUnary(response, invalid);
    }
    return response;
  };
  return Object.assign(wrapped, {
    protocolNames: handler.protocolNames,
    service: handler.service,
    method: handler.method,
    requestPath: handler.requestPath,
    allowedMethods: handler.allowedMethods,
    supportedContentType: handler.supportedContentType,
  });
}

type Relabel = (message: string) => ConnectError;

/**
 * gRPC: the status is in the trailers, complete by the time the handler has answered. Every
 * `grpc-message` is re-encoded here as the gRPC spec encodes it (`grpc-status.ts`).
 */
function grpc(response: UniversalServerResponse, invalid: Relabel): UniversalServerResponse {
  const message = undecodableMessage(response.trailer);
  if (response.trailer === undefined) return response;
  if (message === undefined) {
    const encoded = response.trailer.get("grpc-message");
    if (encoded !== null) response.trailer.set("grpc-message", reencodeGrpcMessage(encoded));
    return response;
  }
  for (const name of ["grpc-status", "grpc-message", "grpc-status-details-bin"])
    response.trailer.delete(name);
  setGrpcStatus(response.trailer, invalid(message));
  return response;
}

/** gRPC-Web: the trailers are the first (and only) frame of the body of a call that never ran. */
async function grpcWeb(
  response: UniversalServerResponse,
  invalid: Relabel,
): Promise<UniversalServerResponse> {
  if (response.body === undefined) return response;
  const it = response.body[Symbol.asyncIterator]();
  const first = await it.next();
  if (first.done) return { ...response, body: createAsyncIterable([]) };
  const frame = first.value;
  const message = frame[0] === trailerFlag ? undecodableMessage(trailerParse(frame.subarray(5))) : undefined;
  if (message === undefined) return { ...response, body: prepend(frame, it) };
  await it.return?.();
  const trailer = setGrpcStatus(new Headers(), invalid(message));
  return { ...response, body: createAsyncIterable([encodeEnvelope(trailerFlag, trailerSerialize(trailer))]) };
}

/** Connect unary: an error is a JSON body with an HTTP status; only uncompressed 500s are read. */
async function connectUnary(
  response: UniversalServerResponse,
  invalid: Relabel,
): Promise<UniversalServerResponse> {
  if (response.body === undefined || response.header?.has("content-encoding")) return response;
  const chunks: Uint8Array[] = [];
  for await (const chunk of response.body) chunks.push(chunk);
  const bytes = Buffer.concat(chunks);
  let parsed: { code?: unknown; message?: unknown; details?: unknown } = {};
  try {
    parsed = JSON.parse(bytes.toString("utf8")) as typeof parsed;
  } catch {
    // Not a Connect error body: pass it on as it is.
  }
  const message = typeof parsed.message === "string" ? parsed.message : "";
  const ours = parsed.details !== undefined;
  const undecodable =
    parsed.code === "internal"
      ? message.startsWith(UNDECODABLE)
      : parsed.code === "invalid_argument"
        ? !ours && isUndecodableJson(message)
        : parsed.code === "resource_exhausted" && !ours && isOversizeMessage(message);
  if (!undecodable) return { ...response, body: createAsyncIterable([bytes]) };
  const error = invalid(message);
  const body = errorToJsonBytes(error, {});
  const header = new Headers(response.header);
  error.metadata.forEach((value, name) => {
    header.set(name, value);
  });
  header.set("content-length", String(body.byteLength));
  return { ...response, status: codeToHttpStatus(error.code), header, body: createAsyncIterable([body]) };
}

/**
 * connect-es's message, when `trailer` carries its INTERNAL for a request undecodable from binary, or
 * (without our details) its INVALID_ARGUMENT for one undecodable from JSON or its RESOURCE_EXHAUSTED
 * for one over the body limit.
 */
function undecodableMessage(trailer: Headers | undefined): string | undefined {
  const status = trailer?.get("grpc-status");
  if (status !== "13" && status !== "3" && status !== "8") return undefined;
  if (status !== "13" && trailer?.has("grpc-status-details-bin")) return undefined;
  let message: string;
  try {
    message = decodeURIComponent(trailer?.get("grpc-message") ?? "");
  } catch {
    return undefined;
  }
  const refused =
    status === "13"
      ? message.startsWith(UNDECODABLE)
      : status === "3"
        ? isUndecodableJson(message)
        : isOversizeMessage(message);
  return refused ? message : undefined;
}

/** `first`, then the rest of `it`. */
function prepend(first: Uint8Array, it: AsyncIterator<Uint8Array>): AsyncIterable<Uint8Array> {
  return {
    [Symbol.asyncIterator]() {
      let pending: Uint8Array | undefined = first;
      return {
        next: async () => {
          if (pending === undefined) return it.next();
          const value = pending;
          pending = undefined;
          return { done: false, value };
        },
        return: async (value?: unknown) => (await it.return?.(value)) ?? { done: true, value: undefined },
      };
    },
  };
}
