import { cors as connectCors } from "@connectrpc/connect";
import fastifyCors from "@fastify/cors";
import type { FastifyInstance } from "fastify";

/**
 * Response headers a browser page may read: the request id, the rate-limit headers,
 * the mark of a replayed idempotent response, and the gRPC status headers gRPC-Web and Connect clients need to see errors (connect-es's list).
 */
export const CORS_EXPOSED_HEADERS: readonly string[] = [
  "X-Request-Id",
  "X-RateLimit-Limit",
  "X-RateLimit-Remaining",
  "X-RateLimit-Reset",
  "Retry-After",
  "Idempotent-Replayed",
  ...connectCors.exposedHeaders,
];

/**
 * Request headers a page may send: connect-es's list for the Connect and gRPC-Web protocols, and the
 * service's own (API key, idempotency key, request id, merchant signature).
 */
export const CORS_ALLOWED_HEADERS: readonly string[] = [
  ...connectCors.allowedHeaders,
  "X-API-Key",
  "Idempotency-Key",
  "X-Request-Id",
  "X-Receipt-Signature",
];

/** Methods of the REST surface and of the Connect protocol (GET for idempotent Connect calls). */
export const CORS_ALLOWED_METHODS: readonly string[] = [
  ...new Set([...connectCors.allowedMethods, "GET", "POST", "PUT", "PATCH", "DELETE"]),
];

/** How long a browser may cache a preflight answer, in seconds (Chromium caps it at 2 hours). */
const PREFLIGHT_MAX_AGE_SECONDS = 7_200;

/**
 * Registers CORS for the given origins (`CORS_ORIGINS`): preflights (`OPTIONS`) on every path, REST,
 * Connect and gRPC-Web alike, are answered before any API-key check, and responses to allowed origins
 * carry `Access-Control-Allow-Origin` and the exposed headers. No credentials: browsers send the API
 * key as a header, never a cookie. Registered before the routes, so its hook runs for all of them.
 */
export async function registerCors(app: FastifyInstance, origins: readonly string[]): Promise<void> {
  await app.register(fastifyCors, {
    origin: [...origins],
    methods: [...CORS_ALLOWED_METHODS],
    allowedHeaders: [...CORS_ALLOWED_HEADERS],
    exposedHeaders: [...CORS_EXPOSED_HEADERS],
    credentials: false,
    maxAge: PREFLIGHT_MAX_AGE_SECONDS,
    strictPreflight: true,
  });
}
