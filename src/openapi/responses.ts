import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { ERRORS, type ErrorCode } from "../errors.js";
import type { JsonSchema, SchemaBuilder } from "./schema.js";

/**
 * The parts of the OpenAPI document that describe the REST envelope rather than a proto message
 * (README, "Responses and errors"): the success and error envelopes, the response headers, one error
 * response per HTTP status listing its registry codes, and the operational paths.
 */

/** The media type of every JSON request and response. */
export const JSON_MEDIA = "application/json";

/** Where header components live in the document. */
const HEADER_PREFIX = "#/components/headers/";

/** Response headers (README, "Responses and errors"), as `components.headers`. */
export const RESPONSE_HEADERS: Readonly<Record<string, JsonObject>> = {
  "X-Request-Id": {
    description: "The request id: the caller's X-Request-Id when it was a sane token, otherwise a new one.",
    required: true,
    schema: { type: "string" },
  },
  "X-RateLimit-Limit": {
    description: "Calls allowed per minute for this API key (and kind of call) at its tier.",
    required: true,
    schema: { type: "integer", minimum: 0 },
  },
  "X-RateLimit-Remaining": {
    description: "Calls left in the current one-minute window.",
    required: true,
    schema: { type: "integer", minimum: 0 },
  },
  "X-RateLimit-Reset": {
    description: "When the current window ends, in Unix epoch seconds.",
    required: true,
    schema: { type: "integer", minimum: 0 },
  },
  "Retry-After": {
    description: "Seconds to wait before trying again.",
    required: true,
    schema: { type: "integer", minimum: 0 },
  },
  "Idempotent-Replayed": {
    description:
      "`true` when this is the stored response of an earlier call with the same Idempotency-Key " +
      "(nothing was created this time); absent otherwise.",
    required: false,
    schema: { type: "string", const: "true" },
  },
};

const RATE_LIMIT_HEADERS = ["X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"];

/** Component names of the error schemas, reserved before any proto message is named. */
export interface ErrorSchemaRefs {
  envelope: string;
  code: string;
}

/**
 * Adds `ErrorCode`, `Error` and `ErrorEnvelope` (README, "Responses and errors") to the schemas; the code
 * enum is the registry.
 */
export function reserveErrorSchemas(schemas: SchemaBuilder): ErrorSchemaRefs {
  const codes = Object.keys(ERRORS) as ErrorCode[];
  const code = schemas.reserve("ErrorCode", {
    type: "string",
    description: "The error codes of the service; each has one fixed HTTP status.",
    enum: codes,
  });
  const error = schemas.reserve("Error", {
    type: "object",
    required: ["code", "message", "details", "timestamp", "request_id", "doc_url"],
    properties: {
      code: { $ref: code },
      message: { type: "string", description: "What went wrong, for people; never a secret or a stack." },
      details: {
        type: "string",
        description: 'Every offending field, "field: problem; field2: problem"; empty when none.',
      },
      timestamp: { type: "string", format: "date-time" },
      request_id: { type: "string", description: "Same as the X-Request-Id response header." },
      doc_url: {
        type: "string",
        format: "uri-reference",
        description: "The documentation of this code: an anchor on the service's own `/docs/errors` page.",
      },
      decline_code: {
        type: "string",
        description: "`payment_declined` only: why the gateway declined the card, e.g. `insufficient_funds`.",
      },
      payment_id: {
        type: "string",
        description:
          "`conflict` of a repeated payment: the payment that already exists for the transaction; " +
          "`payment_declined`: the declined payment, kept so that it can be read.",
      },
    },
    additionalProperties: false,
  });
  const envelope = schemas.reserve("ErrorEnvelope", {
    type: "object",
    required: ["success", "error"],
    properties: { success: { type: "boolean", const: false }, error: { $ref: error } },
    additionalProperties: false,
  });
  return { envelope, code };
}

/** The `{"success": true, "data": ...}` envelope around `data`. */
export function successEnvelope(data: JsonSchema): JsonSchema {
  return {
    type: "object",
    required: ["success", "data"],
    properties: { success: { type: "boolean", const: true }, data },
    additionalProperties: false,
  };
}

/**
 * `$ref`s to the headers a response carries: the request id, plus rate limits on `/api/v1`, plus
 * `Idempotent-Replayed` on the success of an operation that takes an Idempotency-Key.
 */
export function responseHeaders(status: number, rateLimited: boolean, idempotent = false): JsonObject {
  const names = ["X-Request-Id", ...(rateLimited ? RATE_LIMIT_HEADERS : [])];
  if (status === 429) names.push("Retry-After");
  if (status === 200 && idempotent) names.push("Idempotent-Replayed");
  return Object.fromEntries(names.map((name) => [name, { $ref: `${HEADER_PREFIX}${name}` }]));
}

/** Error codes grouped by HTTP status, statuses ascending, codes in registry order. */
export function codesByStatus(codes: readonly ErrorCode[]): Map<number, ErrorCode[]> {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of codes) {
    const status = ERRORS[code].http;
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  return new Map([...byStatus.entries()].sort(([a], [b]) => a - b));
}

/** The error response of one status: the registry's description of each code, and the envelope. */
export function errorResponse(
  refs: ErrorSchemaRefs,
  status: number,
  codes: readonly ErrorCode[],
  rateLimited: boolean,
): JsonObject {
  return {
    description: codes.map((code) => `\`${code}\`: ${ERRORS[code].description}`).join("\n"),
    headers: responseHeaders(status, rateLimited),
    content: { [JSON_MEDIA]: { schema: { $ref: refs.envelope } } },
    "x-error-codes": [...codes],
  };
}

function statusData(value: string): JsonSchema {
  return {
    type: "object",
    required: ["status"],
    properties: { status: { type: "string", const: value } },
    additionalProperties: false,
  };
}

function operational(
  operationId: string,
  summary: string,
  description: string,
  responses: JsonObject,
): JsonObject {
  return {
    get: {
      operationId,
      summary,
      description: `${description}\n\nNeeds no API key.`,
      tags: [OPERATIONS_TAG],
      security: [],
      responses,
    },
  };
}

/** The tag of the operational paths. */
export const OPERATIONS_TAG = "Operations";

/** The path this document is served at. */
export const OPENAPI_PATH = "/openapi.json";

/** `/healthz`, `/readyz`, `/metrics` and the document itself: no API key, no rate limit. */
export function operationalPaths(refs: ErrorSchemaRefs): Record<string, JsonObject> {
  const ok = (description: string, media: string, schema: JsonSchema, example: JsonValue): JsonObject => ({
    description,
    headers: responseHeaders(200, false),
    content: { [media]: { schema, example } },
  });
  return {
    "/healthz": operational(
      "Operations_Liveness",
      "Liveness",
      "Answers 200 while the process is up; says nothing about the store.",
      {
        "200": ok("The process is up.", JSON_MEDIA, successEnvelope(statusData("ok")), {
          success: true,
          data: { status: "ok" },
        }),
      },
    ),
    "/readyz": operational(
      "Operations_Readiness",
      "Readiness",
      "Answers 200 while the store is reachable, 503 `service_unavailable` otherwise.",
      {
        "200": ok("Ready to serve.", JSON_MEDIA, successEnvelope(statusData("ready")), {
          success: true,
          data: { status: "ready" },
        }),
        "503": errorResponse(refs, 503, ["service_unavailable"], false),
      },
    ),
    "/metrics": operational(
      "Operations_Metrics",
      "Prometheus metrics",
      "Request counts and latencies per protocol, method and code, in the Prometheus text format.",
      {
        "200": ok(
          "The metrics.",
          "text/plain",
          { type: "string" },
          [
            "# TYPE http_requests_total counter",
            'http_requests_total{protocol="rest",method="receipts.v1.ReceiptsService/EncryptReceipt",code="ok"} 42',
          ].join("\n"),
        ),
      },
    ),
    [OPENAPI_PATH]: operational(
      "Operations_OpenApi",
      "This document",
      "The OpenAPI document of the REST surface, generated from the proto descriptors.",
      {
        "200": ok(
          "The OpenAPI 3.1 document.",
          JSON_MEDIA,
          { type: "object" },
          {
            openapi: "3.1.0",
            info: { title: "Receipt Encryption Service", version: "v1" },
            paths: {},
          },
        ),
      },
    ),
  };
}
