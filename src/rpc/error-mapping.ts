import {
  Code,
  ConnectError,
  type Interceptor,
  type StreamRequest,
  type StreamResponse,
  type UnaryRequest,
} from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import {
  AppError,
  ERRORS,
  type ErrorCode,
  errorDocUrl,
  type FieldViolation,
  isErrorCode,
} from "../errors.js";
import { kLogger, kRequestId } from "./context.js";
import { requestIdFrom } from "./request-id.js";

/**
 * The one place that turns errors into what each surface sends: gRPC, gRPC-Web and Connect get a
 * `ConnectError` (status from the registry, `google.rpc.ErrorInfo` + `google.rpc.BadRequest` details,
 * `x-request-id` and `retry-after` metadata); REST gets the `{success:false, error}` envelope derived
 * from that same `ConnectError`, so the two can never disagree.
 */

/** The `domain` of every `google.rpc.ErrorInfo` the service sends. */
export const ERROR_DOMAIN = "receipts.v1";

/** The message sent for every error that is not a domain error; the cause is only logged. */
const INTERNAL_MESSAGE = "Internal server error.";

/** The message prefix connect-es gives a request it cannot decode from protobuf binary. */
export const UNDECODABLE_PREFIX = "parse binary: ";

/**
 * Whether `message` is connect-es's INVALID_ARGUMENT for a request it cannot decode from JSON (Connect,
 * gRPC-JSON, gRPC-Web-JSON): text that is not JSON, or a value of the wrong type for its field.
 */
export function isUndecodableJson(message: string): boolean {
  return message.startsWith("cannot decode message ") || message.startsWith("cannot decode field ");
}

/**
 * connect-es's RESOURCE_EXHAUSTED message for a request message over `readMaxBytes` (the body limit);
 * the size is named only when it was known before reading (a Content-Length or a gRPC length prefix).
 */
const OVERSIZE = /^message size (?:\d+ )?is larger than configured readMaxBytes (\d+)$/;

/** Whether `message` is connect-es's RESOURCE_EXHAUSTED for a request message over the body limit. */
export function isOversizeMessage(message: string): boolean {
  return OVERSIZE.test(message);
}

/**
 * The caller's error for a request connect-es refused before the RPC (`message` is connect-es's): a
 * message over the body limit is `payload_too_large`, as on REST; one it could not decode,
 * {@link undecodableRequest}.
 */
export function refusedRequest(message: string): AppError {
  const limit = OVERSIZE.exec(message)?.[1];
  if (limit !== undefined)
    return new AppError("payload_too_large", `The body is larger than ${limit} bytes.`);
  return undecodableRequest(message);
}

/**
 * The caller's error for a request message connect-es could not decode (`message` is connect-es's:
 * binary, after {@link UNDECODABLE_PREFIX}, or JSON, whole).
 */
export function undecodableRequest(message: string): AppError {
  const description = message.startsWith(UNDECODABLE_PREFIX)
    ? message.slice(UNDECODABLE_PREFIX.length)
    : message;
  return new AppError("invalid_request", "The request message cannot be decoded.", {
    violations: [{ field: "body", description }],
  });
}

/**
 * connect-es's INTERNAL for a request it cannot decode, as the caller's `invalid_request`, or `err`
 * itself. A streaming call decodes its request inside the interceptors (a unary one before them:
 * src/http/undecodable.ts relabels those), so the error interceptor relabels it here.
 */
function relabelUndecodable(err: unknown): unknown {
  if (err instanceof ConnectError && err.code === Code.Internal && ourReason(err) === undefined) {
    if (err.rawMessage.startsWith(UNDECODABLE_PREFIX)) return undecodableRequest(err.rawMessage);
  }
  return err;
}

/** Response headers that belong to a wire protocol and must not be copied to another surface. */
const PROTOCOL_HEADERS = new Set([
  "connection",
  "content-encoding",
  "content-length",
  "content-type",
  "keep-alive",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "accept-encoding",
]);

/** Whether a header belongs to the transport (`content-type`, `grpc-*`, `connect-*`, ...), not the call. */
export function isProtocolHeader(name: string): boolean {
  const lower = name.toLowerCase();
  return (
    PROTOCOL_HEADERS.has(lower) ||
    lower.startsWith(":") ||
    lower.startsWith("grpc-") ||
    lower.startsWith("connect-")
  );
}

/** The `google.rpc.ErrorInfo` of an error this service produced, if it carries one. */
function ourInfo(err: ConnectError): { reason: ErrorCode; metadata: Record<string, string> } | undefined {
  for (const info of err.findDetails(ErrorInfoSchema)) {
    if (info.domain === ERROR_DOMAIN && isErrorCode(info.reason)) {
      return { reason: info.reason, metadata: info.metadata };
    }
  }
  return undefined;
}

/** The `google.rpc.ErrorInfo` reason of an error this service produced, if it carries one. */
function ourReason(err: ConnectError): ErrorCode | undefined {
  return ourInfo(err)?.reason;
}

/** The string error code of any thrown value: its own for domain errors, `internal_server_error` otherwise. */
export function errorCodeOf(err: unknown): ErrorCode {
  if (err instanceof AppError) return err.code;
  if (err instanceof ConnectError) return ourReason(err) ?? "internal_server_error";
  return "internal_server_error";
}

/**
 * Maps anything thrown by a handler or interceptor to the `ConnectError` every RPC protocol sends.
 * An `AppError` keeps its code and message; a `ConnectError` that already carries our ErrorInfo is
 * kept (with `x-request-id` added); anything else becomes `internal_server_error` with a generic
 * message, so no stack, driver message or secret reaches a client. The original is kept as `cause`
 * for logging only.
 */
export function toConnectError(err: unknown, requestId: string): ConnectError {
  if (err instanceof ConnectError && ourReason(err) !== undefined) {
    if (!err.metadata.has("x-request-id")) err.metadata.set("x-request-id", requestId);
    return err;
  }
  const app = err instanceof AppError ? err : undefined;
  const code: ErrorCode = app?.code ?? "internal_server_error";
  const headers = new Headers(app?.headers);
  headers.set("x-request-id", requestId);
  if (app?.retryAfterSeconds !== undefined) {
    headers.set("retry-after", String(Math.max(0, Math.ceil(app.retryAfterSeconds))));
  }
  // doc_url last: a domain error's own metadata never replaces the link.
  const metadata = { ...app?.metadata, doc_url: errorDocUrl(code) };
  const details: ConstructorParameters<typeof ConnectError>[3] = [
    { desc: ErrorInfoSchema, value: { reason: code, domain: ERROR_DOMAIN, metadata } },
  ];
  if (app !== undefined && app.violations.length > 0) {
    details.push({
      desc: BadRequestSchema,
      value: { fieldViolations: app.violations.map((v) => ({ field: v.field, description: v.description })) },
    });
  }
  return new ConnectError(app?.message ?? INTERNAL_MESSAGE, ERRORS[code].grpc, headers, details, err);
}

/** The members of the REST envelope's `error` that README, "Responses and errors", documents. */
const ENVELOPE_MEMBERS = new Set(["code", "message", "details", "timestamp", "request_id"]);

/**
 * The `error` of the REST envelope: the members, `doc_url`, and the error's other
 * ErrorInfo metadata (`decline_code`, `payment_id`, ...), all strings.
 */
export interface RestErrorBody {
  code: ErrorCode;
  message: string;
  details: string;
  timestamp: string;
  request_id: string;
  doc_url: string;
  [metadata: string]: string;
}

/** The REST error envelope (README, "Responses and errors"), with the HTTP status and headers to send. */
export interface RestError {
  status: number;
  body: { success: false; error: RestErrorBody };
  /** Headers to send with the error (rate limits, `retry-after`, `x-request-id`, ...). */
  headers: Record<string, string>;
}

/**
 * Maps anything thrown on the REST surface to its envelope. It goes through {@link toConnectError}
 * first and reads the code back from the ErrorInfo reason, so REST and RPC answers always agree.
 * `details` lists the field violations as `field: problem; field2: problem`, or else the ErrorInfo
 * metadata other than `doc_url` the same way (`decline_code: insufficient_funds`), "" when neither.
 * `requestId` is used when the error does not carry an `x-request-id` already.
 */
export function toRestError(
  err: unknown,
  requestId: string = requestIdFrom(undefined),
  now: Date = new Date(),
): RestError {
  const connectError = toConnectError(err, requestId);
  const info = ourInfo(connectError);
  const code = info?.reason ?? "internal_server_error";
  const facts = Object.entries(info?.metadata ?? {}).filter(
    ([name]) => name !== "doc_url" && !ENVELOPE_MEMBERS.has(name),
  );
  const violations: FieldViolation[] = connectError
    .findDetails(BadRequestSchema)
    .flatMap((b) => b.fieldViolations.map((v) => ({ field: v.field, description: v.description })));
  const headers: Record<string, string> = {};
  connectError.metadata.forEach((value, name) => {
    if (!isProtocolHeader(name)) headers[name] = value;
  });
  const id = connectError.metadata.get("x-request-id") ?? requestId;
  headers["x-request-id"] = id;
  return {
    status: ERRORS[code].http,
    body: {
      success: false,
      error: {
        code,
        message: connectError.rawMessage,
        details: (violations.length > 0 ? violations.map((v) => [v.field, v.description]) : facts)
          .map(([name, value]) => `${name}: ${value}`)
          .join("; "),
        timestamp: now.toISOString(),
        request_id: id,
        ...Object.fromEntries(facts),
        doc_url: errorDocUrl(code),
      },
    },
    headers,
  };
}

/**
 * A Connect interceptor that maps every error of the calls under it with {@link toConnectError}, and
 * logs the cause of every 5xx through the request logger (`kLogger`). Put it inside the interceptor
 * that sets `kRequestId` and `kLogger`, so the error carries the request's id.
 */
export const errorInterceptor: Interceptor = (next) => async (req) => {
  try {
    const res = await next(req);
    return res.stream ? mapStreamErrors(res, (thrown) => mappedError(req, thrown)) : res;
  } catch (err) {
    throw mappedError(req, err);
  }
};

/**
 * What {@link errorInterceptor} throws for `thrown` in the call `req`: the service's error, the cause
 * of a 5xx logged. A function of its own, not a closure made for every call (most calls never fail).
 */
function mappedError(req: UnaryRequest | StreamRequest, thrown: unknown): ConnectError {
  const requestId = req.contextValues.get(kRequestId) || requestIdFrom(undefined);
  const err = relabelUndecodable(thrown);
  const mapped = toConnectError(err, requestId);
  const code = errorCodeOf(mapped);
  if (ERRORS[code].http >= 500) {
    const cause = err instanceof ConnectError && err === mapped ? err.cause : err;
    req.contextValues
      .get(kLogger)()
      .error({ err: cause, code, procedure: `${req.service.typeName}/${req.method.name}` }, "request failed");
  }
  return mapped;
}

/** Wraps a streaming response so an error raised while streaming is mapped too. */
function mapStreamErrors(res: StreamResponse, map: (err: unknown) => ConnectError): StreamResponse {
  const source = res.message;
  async function* mapped() {
    try {
      yield* source;
    } catch (err) {
      throw map(err);
    }
  }
  return { ...res, message: mapped() };
}
