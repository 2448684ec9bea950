import { Code, type ConnectError } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import type { ServiceErrorCode } from "../error-codes.js";
import { HTTP_STATUS_METADATA } from "./transport.js";

/** The `google.rpc.ErrorInfo` domain of the service's errors; a reason from another domain is not ours. */
export const SERVICE_ERROR_DOMAIN = "receipts.v1";

/**
 * A code for a failure the service did not explain with an ErrorInfo (a proxy's answer, a network
 * error, a timeout, a cancelled call): the Connect code's name in snake case.
 */
export type TransportErrorCode =
  | "canceled"
  | "unknown"
  | "deadline_exceeded"
  | "failed_precondition"
  | "resource_exhausted"
  | "aborted"
  | "out_of_range"
  | "unimplemented"
  | "data_loss";

/**
 * The code of a {@link ReceiptsApiError}: one of the service's string codes (README, "Responses and errors"),
 * or a {@link TransportErrorCode}. Codes the service adds later arrive as they are, hence the open string.
 */
export type ReceiptsErrorCode = ServiceErrorCode | TransportErrorCode | (string & {});

/** One offending request field, from the error's `google.rpc.BadRequest` detail. */
export interface ApiFieldViolation {
  field: string;
  description: string;
}

/** What {@link ReceiptsApiError} is built from. */
export interface ReceiptsApiErrorInit {
  code: ReceiptsErrorCode;
  message: string;
  connectCode: Code;
  requestId: string | undefined;
  retryAfterSeconds: number | undefined;
  violations: ApiFieldViolation[];
  attempts: number;
  retryable: boolean;
  cause: unknown;
  /** The HTTP status of the last failed response, when one arrived. */
  httpStatus?: number | undefined;
  /** The facts the service attached to the error (its ErrorInfo metadata); empty when none. */
  facts?: Readonly<Record<string, string>>;
}

/**
 * A failed call of the receipts client, after its last attempt. `code` is the service's string code
 * (e.g. `invalid_request`, `rate_limit_exceeded`) taken from the ErrorInfo reason; when the failure
 * carries none, a code derived from the Connect status ({@link codeFromConnectCode}). `message` is
 * the server's message without Connect's `[code]` prefix.
 */
export class ReceiptsApiError extends Error {
  /** The service's string code, or a transport code when the service did not answer with one. */
  readonly code: ReceiptsErrorCode;
  /** The Connect / gRPC status code of the last attempt. */
  readonly connectCode: Code;
  /** The server's `x-request-id` of the last attempt, to quote to support; unset when no server answered. */
  readonly requestId: string | undefined;
  /** Seconds the server asked to wait before trying again (`retry-after`), when it said so. */
  readonly retryAfterSeconds: number | undefined;
  /** Every offending field, for validation errors; empty otherwise. */
  readonly violations: ApiFieldViolation[];
  /** How many attempts were made, 1 to 3. */
  readonly attempts: number;
  /** Whether the failure is transient by the retry rules; true after exhausting the attempts on one. */
  readonly retryable: boolean;
  /**
   * The HTTP status of the last failed response (e.g. 409 from a proxy), when a response arrived over
   * a transport built from `baseUrl`; unset for network errors, timeouts and in-memory transports.
   */
  readonly httpStatus: number | undefined;
  /**
   * The documentation of `code` (the envelope's `doc_url`): its entry on the service's error page,
   * absolute when the client knows the service's address. Unset when the service did not answer.
   */
  readonly docUrl: string | undefined;
  /** `payment_declined` only: why the gateway declined the card (the envelope's `decline_code`). */
  readonly declineCode: string | undefined;
  /**
   * The payment an error is about (the envelope's `payment_id`): on `payment_declined`, the declined
   * payment (kept, with its decline code); on `conflict` of a payment sent again without an
   * Idempotency-Key, the payment that already exists for the transaction.
   */
  readonly paymentId: string | undefined;
  /** Every fact the service attached to the error, by its envelope name (`doc_url`, `decline_code`, ...). */
  readonly facts: Readonly<Record<string, string>>;

  constructor(init: ReceiptsApiErrorInit) {
    super(init.message, { cause: init.cause });
    this.name = "ReceiptsApiError";
    this.code = init.code;
    this.connectCode = init.connectCode;
    this.requestId = init.requestId;
    this.retryAfterSeconds = init.retryAfterSeconds;
    this.violations = init.violations;
    this.attempts = init.attempts;
    this.retryable = init.retryable;
    this.httpStatus = init.httpStatus;
    this.facts = init.facts ?? {};
    this.docUrl = webLinkOf(this.facts.doc_url);
    this.declineCode = this.facts.decline_code;
    this.paymentId = this.facts.payment_id;
  }
}

/**
 * A link an app may show: an http(s) URL, or a path the app resolves itself. Anything else (a
 * `javascript:` URL from a hostile answer) is dropped, so rendering `docUrl` as a link is safe.
 */
function webLinkOf(link: string | undefined): string | undefined {
  if (link === undefined) return undefined;
  if (link.startsWith("/") && !link.startsWith("//")) return link;
  return /^https?:\/\//i.test(link) ? link : undefined;
}

/** The service's ErrorInfo of an error (reason and metadata, in our domain), if it carries one. */
function serviceInfoOf(err: ConnectError) {
  return err.findDetails(ErrorInfoSchema).find((info) => info.domain === SERVICE_ERROR_DOMAIN);
}

/** The service's string code of an error (its ErrorInfo reason in our domain), if it carries one. */
export function serviceReasonOf(err: ConnectError): string | undefined {
  return serviceInfoOf(err)?.reason;
}

/**
 * The facts of an error's ErrorInfo (`doc_url`, `decline_code`, `payment_id`, ...), with `doc_url`
 * made absolute against `baseUrl` when given (the service sends it relative to its own address).
 */
export function factsOf(err: ConnectError, baseUrl?: string): Record<string, string> {
  const facts = { ...serviceInfoOf(err)?.metadata };
  const docUrl = facts.doc_url;
  if (docUrl === undefined || baseUrl === undefined) return facts;
  try {
    facts.doc_url = new URL(docUrl, baseUrl).href;
  } catch {
    // A base address that is not a URL leaves the link as the service gave it.
  }
  return facts;
}

/**
 * Connect codes with one obvious service code; the others are ambiguous (ResourceExhausted is a rate
 * limit or an oversized body, FailedPrecondition need not be a declined card) and keep their own name.
 */
const SERVICE_CODE_OF: Partial<Record<Code, ServiceErrorCode>> = {
  [Code.InvalidArgument]: "invalid_request",
  [Code.Unauthenticated]: "unauthorized",
  [Code.PermissionDenied]: "forbidden",
  [Code.NotFound]: "not_found",
  [Code.AlreadyExists]: "conflict",
  [Code.Internal]: "internal_server_error",
  [Code.Unavailable]: "service_unavailable",
};

/**
 * The code for an error without a service reason: the service code the Connect code stands for
 * (`Unavailable` is `service_unavailable`), else the Connect code's name in snake case
 * (`DeadlineExceeded` is `deadline_exceeded`).
 */
export function codeFromConnectCode(code: Code): ReceiptsErrorCode {
  const name = Code[code] as string | undefined;
  if (name === undefined) return "unknown";
  return SERVICE_CODE_OF[code] ?? name.replace(/(?<=[a-z])(?=[A-Z])/g, "_").toLowerCase();
}

/**
 * The `retry-after` of an error, in seconds: a non-negative integer (delta-seconds, the form the
 * service sends). An HTTP-date or anything else is ignored, and the exponential delay applies.
 */
export function retryAfterSecondsOf(err: ConnectError): number | undefined {
  const value = firstValue(err.metadata, "retry-after");
  if (value === undefined || !/^\d{1,9}$/.test(value)) return undefined;
  return Number(value);
}

/**
 * The first value of a metadata entry. gRPC errors merge response headers and trailers, so a value the
 * server sends in both (`x-request-id`, `retry-after`) arrives joined: `"abc, abc"`.
 */
function firstValue(metadata: Headers, name: string): string | undefined {
  const value = metadata.get(name)?.split(",")[0]?.trim();
  return value === undefined || value === "" ? undefined : value;
}

/** The HTTP status of a failed response, recorded by the client's transport; undefined when none arrived. */
export function httpStatusOf(err: ConnectError): number | undefined {
  const value = firstValue(err.metadata, HTTP_STATUS_METADATA);
  return value !== undefined && /^[1-5]\d\d$/.test(value) ? Number(value) : undefined;
}

/** The field violations of an error's `google.rpc.BadRequest` details. */
export function violationsOf(err: ConnectError): ApiFieldViolation[] {
  return err
    .findDetails(BadRequestSchema)
    .flatMap((bad) => bad.fieldViolations.map((v) => ({ field: v.field, description: v.description })));
}

/**
 * Builds the {@link ReceiptsApiError} of a call's last failure; `note` is appended to the message,
 * and the error's `doc_url` is resolved against `baseUrl`.
 */
export function toApiError(
  err: ConnectError,
  attempts: number,
  retryable: boolean,
  note?: string,
  baseUrl?: string,
): ReceiptsApiError {
  return new ReceiptsApiError({
    facts: factsOf(err, baseUrl),
    code: serviceReasonOf(err) ?? codeFromConnectCode(err.code),
    message: note === undefined ? err.rawMessage : `${err.rawMessage} (${note})`,
    httpStatus: httpStatusOf(err),
    connectCode: err.code,
    requestId: firstValue(err.metadata, "x-request-id"),
    retryAfterSeconds: retryAfterSecondsOf(err),
    violations: violationsOf(err),
    attempts,
    retryable,
    cause: err,
  });
}
