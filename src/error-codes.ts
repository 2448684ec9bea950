/**
 * The service's error codes, as the client library knows them: the keys of the service's error
 * registry (`src/errors.ts`, which is typed against this list, so the two cannot differ). The
 * library ships this list rather than the registry, which is server code.
 */
export const SERVICE_ERROR_CODES = [
  "invalid_request",
  "invalid_signature",
  "unauthorized",
  "forbidden",
  "not_found",
  "unsupported_media_type",
  "request_timeout",
  "headers_too_large",
  "conflict",
  "payload_too_large",
  "payment_declined",
  "integrity_failure",

  "rate_limit_exceeded",
  "internal_server_error",
  "service_unavailable",
] as const;

/** A string error code of the service, e.g. `invalid_request`. */
export type ServiceErrorCode = (typeof SERVICE_ERROR_CODES)[number];

const KNOWN: ReadonlySet<string> = new Set(SERVICE_ERROR_CODES);

/** Whether a string is one of the service's error codes. */
export function isServiceErrorCode(value: string): value is ServiceErrorCode {
  return KNOWN.has(value);
}
