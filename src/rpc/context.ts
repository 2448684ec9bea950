import { createContextKey } from "@connectrpc/connect";
import { type Logger, pino } from "pino";
import type { ApiKeyRecord } from "../store/types.js";

/**
 * Request-scoped values, set by the transports and interceptors and read by handlers. They travel in
 * Connect's `HandlerContext.values`, so every protocol (REST via the transcoder, gRPC, gRPC-Web,
 * Connect) fills them the same way.
 */

/** The caller's IP address as the server saw it (set by the transport). */
export const kRemoteAddress = createContextKey<string>("", { description: "client address" });

/** The request id: the caller's `x-request-id` if sane, otherwise a new one (set by the first interceptor). */
export const kRequestId = createContextKey<string>("", { description: "request id" });

/**
 * The request's logger: a pino child carrying the request id (set by the first interceptor). A
 * function, so the child is made only when something is logged: most calls log nothing but their
 * request line, and a redacting child logger per call was a measurable share of a call's CPU time.
 */
export const kLogger = createContextKey<() => Logger>(() => SILENT, { description: "request logger" });

const SILENT = pino({ level: "silent" });

/** The authenticated API key (set by the auth interceptor); undefined on key-exempt calls. */
export const kPrincipal = createContextKey<ApiKeyRecord | undefined>(undefined, {
  description: "authenticated API key",
});

/** The wire protocol a call arrived on; a label of metrics and logs. */
export type Protocol = "rest" | "grpc" | "grpc-web" | "connect";

/**
 * The protocol of the current call, set by the HTTP server for every call (the transcoder sets
 * `rest`). Undefined when a service is called in memory without the HTTP server (unit tests).
 */
export const kProtocol = createContextKey<Protocol | undefined>(undefined, { description: "wire protocol" });
