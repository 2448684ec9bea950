import { Code } from "@connectrpc/connect";
import type { ServiceErrorCode } from "./error-codes.js";

/**
 * The error registry: every error the service can return, with its HTTP status and gRPC code.
 * This is the one table that REST, gRPC, gRPC-Web and Connect responses are derived from
 * (`src/rpc/error-mapping.ts`), and the one the README's error table is checked against.
 */
export const ERRORS = {
  invalid_request: {
    http: 400,
    grpc: Code.InvalidArgument,
    description: "Validation failed; malformed key, base64 or JSON.",
  },
  invalid_signature: {
    http: 400,
    grpc: Code.InvalidArgument,
    description: "A merchant signature does not match the receipt content.",
  },
  unauthorized: {
    http: 401,
    grpc: Code.Unauthenticated,
    description: "API key missing, unknown, revoked, or of another environment.",
  },
  forbidden: {
    http: 403,
    grpc: Code.PermissionDenied,
    description:
      "Role may not call this; merchantId not allowed for the key; token not valid for this receipt; private key does not match.",
  },
  not_found: {
    http: 404,
    grpc: Code.NotFound,
    description: "User, key, payment, receipt or token does not exist (or belongs to another tenant).",
  },
  unsupported_media_type: {
    http: 415,
    grpc: Code.InvalidArgument,
    description: "The request's Content-Type is not application/json.",
  },
  request_timeout: {
    http: 408,
    grpc: Code.DeadlineExceeded,
    description: "The request did not arrive whole within the request timeout.",
  },
  headers_too_large: {
    http: 431,
    grpc: Code.InvalidArgument,
    description: "The request's header block is over the server's limit.",
  },
  conflict: {
    http: 409,
    grpc: Code.AlreadyExists,
    description: "Duplicate receiptId / transactionId; idempotency key reused with a different body.",
  },
  payload_too_large: {
    http: 413,
    grpc: Code.ResourceExhausted,
    description: "Body over the limit.",
  },
  payment_declined: {
    http: 402,
    grpc: Code.FailedPrecondition,
    description: "The gateway declined the card.",
  },
  integrity_failure: {
    http: 422,
    grpc: Code.FailedPrecondition,
    description:
      "The stored receipt does not open with the right key (sealed wrongly by its merchant, or tampered with), or does not hold a receipt; or, for an issuer with requireBindings, the key a receipt would be sealed to does not verify against the key log.",
  },
  rate_limit_exceeded: {
    http: 429,
    grpc: Code.ResourceExhausted,
    description: "Rate limit or active-token cap hit; Retry-After says when to try again.",
  },
  internal_server_error: {
    http: 500,
    grpc: Code.Internal,
    description: "A bug; the cause is logged, never returned.",
  },
  service_unavailable: {
    http: 503,
    grpc: Code.Unavailable,
    description: "The store is unreachable or the server is shutting down.",
  },
  // Keyed by the client library's list of codes: a code added here without adding it there (or the
  // other way round) does not compile.
} as const satisfies Record<ServiceErrorCode, { http: number; grpc: Code; description: string }>;

/** A string error code of the service, e.g. `invalid_request`. */
export type ErrorCode = keyof typeof ERRORS;

/** Where the service serves the documentation of its error codes, one anchor per code. */
export const ERROR_DOCS_PATH = "/docs/errors";

/**
 * The `doc_url` of an error: the anchor of its code on the service's own error page, as a reference
 * relative to the service's address (the same service answered, so the same origin serves the page;
 * the service cannot know the address its clients reach it at behind a proxy).
 */
export function errorDocUrl(code: ErrorCode): string {
  return `${ERROR_DOCS_PATH}#${code}`;
}

/** One offending field of a request, e.g. `{ field: "currency", description: "must be an ISO 4217 code" }`. */
export interface FieldViolation {
  field: string;
  description: string;
}

/** Options of an {@link AppError}. */
export interface AppErrorOptions {
  /** Every offending field, for validation errors. */
  violations?: FieldViolation[];
  /** Seconds until a retry may succeed; sent as `Retry-After`. */
  retryAfterSeconds?: number;
  /** Response headers / trailers to send with the error (e.g. rate-limit headers). */
  headers?: Record<string, string>;
  /**
   * Machine-readable facts for the client, e.g. `{ decline_code: "insufficient_funds" }` or the
   * `payment_id` a duplicate names: sent as `google.rpc.ErrorInfo` metadata and as members of the
   * REST envelope's `error`. Shown to the client, so never a secret.
   */
  metadata?: Record<string, string>;
  /** The underlying failure. Logged for 5xx, never returned to the client. */
  cause?: unknown;
}

/**
 * A domain error: what went wrong in the service's own vocabulary. Domain code throws these and
 * never builds HTTP or gRPC responses; the error mapping turns them into each surface's format.
 * `message` is shown to the client, so it must never contain a secret or an internal detail.
 */
export class AppError extends Error {
  readonly code: ErrorCode;
  readonly violations: FieldViolation[];
  readonly retryAfterSeconds: number | undefined;
  readonly headers: Record<string, string>;
  readonly metadata: Record<string, string>;

  constructor(code: ErrorCode, message: string, options: AppErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "AppError";
    this.code = code;
    this.violations = options.violations ?? [];
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.headers = options.headers ?? {};
    this.metadata = options.metadata ?? {};
  }

  /** The human-readable `details` string of the REST envelope: every violation, `field: problem; ...`. */
  get details(): string {
    return this.violations.map((v) => `${v.field}: ${v.description}`).join("; ");
  }
}

/** A validation failure naming every offending field. */
export function invalidRequest(violations: FieldViolation[], message = "The request is invalid."): AppError {
  return new AppError("invalid_request", message, { violations });
}

/** Where a check reports a problem with a field: a {@link Violations} list or an element's part of one. */
export interface ViolationSink {
  add(field: string, description: string): void;
}

/** Collects field violations so one error can name them all. */
export class Violations implements ViolationSink {
  readonly list: FieldViolation[] = [];

  add(field: string, description: string): void {
    this.list.push({ field, description });
  }

  /** Throws `invalid_request` naming every collected violation, if there are any. */
  throwIfAny(message?: string): void {
    if (this.list.length > 0) throw invalidRequest(this.list, message);
  }
}

/** Whether a string is a code in the registry. */
export function isErrorCode(value: string): value is ErrorCode {
  return Object.hasOwn(ERRORS, value);
}

/**
 * The violations of element `index` of list `list` (`items`, 3): its field `name` is reported as
 * `items[3].name`. The path is only made when there is a violation: checking a 50-item receipt
 * would otherwise build hundreds of path strings to report none.
 */
export class ElementViolations implements ViolationSink {
  constructor(
    private readonly sink: ViolationSink,
    private readonly list: string,
    private readonly index: number,
  ) {}

  add(field: string, description: string): void {
    this.sink.add(`${this.list}[${this.index}].${field}`, description);
  }
}
