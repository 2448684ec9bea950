import { maxHeaderSize, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { DescService } from "@bufbuild/protobuf";
import {
  type ConnectRouter,
  type ContextValues,
  createRouterTransport,
  type Interceptor,
  type Transport,
} from "@connectrpc/connect";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  LogController,
} from "fastify";
import type { Logger } from "pino";
import { AppError } from "../errors.js";
import { isOn } from "../fast-paths.js";
import { kProtocol, kRequestId } from "../rpc/context.js";
import { toRestError } from "../rpc/error-mapping.js";
import { kObserved, type Metrics, registerMetricsRoute, UNMATCHED_METHOD } from "../rpc/metrics.js";
import { requestIdFrom } from "../rpc/request-id.js";
import type { TrustedProxies } from "../trusted-proxies.js";
import type { HttpBinding } from "./bindings.js";
import { type CallSetup, callSetup, codeForGrpcStatus } from "./call-setup.js";
import { registerCors } from "./cors.js";
import { answerFastifyError, assignRequestId, sendError, sendSuccess } from "./envelope.js";
import { createGrpcUnaryHandler } from "./grpc-unary.js";
import { lazyChildLogger } from "./lazy-logger.js";
import {
  type ClientErrorAnswer,
  createDualProtocolListener,
  type DualProtocolListener,
  type ListenerOptions,
} from "./listener.js";
import { protocolOf } from "./protocol.js";
import { registerTranscoder } from "./transcoder.js";
import { answerUndecodableAsInvalid, STRICT_JSON_OPTIONS } from "./undecodable.js";
import { answerUnknownProcedure, isRpcPath } from "./unknown-procedure.js";

declare module "fastify" {
  interface FastifyRequest {
    /** The context values of the call this request carries, once an RPC has asked for them. */
    callContext: ContextValues | null;
    /** The grpc-status connect-node answered a gRPC call on the Connect path with. */
    grpcStatus: number | null;
  }
}

/** What {@link createHttpServer} needs. */
export interface HttpServerOptions {
  /** Registers the Connect service implementations (also the gRPC health service). */
  routes: (router: ConnectRouter) => void;
  /** The services whose `google.api.http` bindings are served as REST. */
  services: readonly DescService[];
  /** The one interceptor list, used as the same instances by every protocol (shared rate limits). */
  interceptors: Interceptor[];
  logger: Logger;
  /** Largest request body in bytes, for REST JSON and RPC messages alike (1 MiB by default). */
  bodyLimitBytes: number;
  /** When given, `GET /metrics` is served and requests that never reach an RPC are counted too. */
  metrics?: Metrics;
  /** When given, `GET /readyz` answers 200 while it resolves true and 503 otherwise. */
  ready?: () => Promise<boolean>;
  /**
   * Counts a REST request that never reached an RPC (unknown path, unreadable body) against the
   * caller's rate limit and returns the rate-limit headers for its response.
   */
  meter?: (apiKey: string | undefined, remoteAddress: string) => Promise<Record<string, string>>;
  /** Browser origins allowed cross-origin (`CORS_ORIGINS`); empty or unset: no CORS headers at all. */
  corsOrigins?: readonly string[];
  /** Adds plain routes (e.g. the OpenAPI document) before the server starts. */
  addRoutes?: (app: FastifyInstance) => void | Promise<void>;
  /** How long `close()` lets in-flight calls finish before closing connections, in ms. Default 10 000. */
  shutdownGraceMs?: number;
  /** Connection timeouts of the one-port listener. */
  listener?: ListenerOptions;
  /**
   * Proxies whose `X-Forwarded-For` is believed (`TRUSTED_PROXIES`): the client address of a call
   * from one of them is read from that header (`client-address.ts`). Default none.
   */
  trustedProxies?: TrustedProxies;
}

/** The service's one HTTP server: REST, gRPC, gRPC-Web and Connect on one port. */
export interface HttpServer {
  readonly app: FastifyInstance;
  /** The REST endpoints served, read from the protos. */
  readonly bindings: HttpBinding[];
  /** Starts listening (port 0 picks a free port; host 127.0.0.1 by default) and returns the bound address. */
  listen(port: number, host?: string): Promise<AddressInfo>;
  /** Stops accepting, lets in-flight calls finish (bounded by `shutdownGraceMs`), then closes. */
  close(): Promise<void>;
  /** HTTP/2 streams open right now, over every connection. */
  openHttp2Streams(): number;
  /**
   * A Connect transport to the same routes through the same interceptor instances, in memory: no
   * socket, no HTTP, no serialization to the wire (Connect's router transport). Each call starts with
   * the context values of a call from `address` (default 127.0.0.1), as every way in does. For tests
   * of the services' logic; the socket is tested end to end.
   */
  inMemoryTransport(address?: string): Transport;
}

/**
 * Builds the HTTP server: one Fastify app on a one-port HTTP/1.1 + h2c listener, the Connect plugin
 * (gRPC, gRPC-Web, Connect) and the REST transcoder sharing one router definition and one interceptor
 * list, `/healthz`, `/readyz`, `/metrics`, and the REST error envelope for every failure that happens
 * before a handler (unknown path 404, body too large 413, wrong Content-Type 415, malformed JSON 400).
 * Every way in (those two and the raw gRPC server of grpc-unary.ts) sets its calls up from one
 * {@link CallSetup}.
 */
export async function createHttpServer(options: HttpServerOptions): Promise<HttpServer> {
  const graceMs = options.shutdownGraceMs ?? 10_000;
  const setup = callSetup(options);
  // Unary binary gRPC on the HTTP/2 stream, before Fastify, when the `grpc-server` fast path is on.
  const grpcUnary = isOn("grpc-server") ? grpcUnaryHandler(options, setup) : undefined;
  let listener: DualProtocolListener | undefined;
  const app = Fastify({
    // Fastify bounds every close hook by this timeout too, the drain below included: it must outlast
    // the grace period, or a connection held open until the end of it would make close() fail, and
    // the store would never be closed.
    pluginTimeout: graceMs + 5_000,
    // Typed as Fastify's base logger so the app keeps the default instance type plugins expect.
    loggerInstance: options.logger as FastifyBaseLogger,
    // Request lines come from the RPC interceptors and from the onResponse hook below.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: "requestId" }),
    bodyLimit: options.bodyLimitBytes,
    genReqId: assignRequestId,
    // Fastify makes a child logger for every request; ours makes it only when something is logged.
    // (The parent is the pino logger passed as `loggerInstance`.)
    childLoggerFactory: (parent, bindings) => lazyChildLogger(parent as Logger, bindings),
    // Requests arriving on open connections during a drain are served; the drain closes those connections.
    return503OnClosing: false,
    serverFactory: (handler) => {
      listener = createDualProtocolListener(handler, options.listener, grpcUnary, clientErrorAnswer(setup));
      return listener.server as unknown as Server;
    },
    frameworkErrors: (_error, request, reply) => {
      sendError(request, reply, new AppError("invalid_request", "The request URL is malformed."));
    },
  });
  registerRequestHandling(app, options, setup);
  const bindings = await registerEntryPaths(app, options, setup);
  await registerProbes(app, options);
  registerUnroutedAnswers(app, setup);
  app.addHook("preClose", async () => {
    await listener?.drain(graceMs);
  });
  await app.ready();
  return { ...httpServerOf(app, bindings, () => listener), inMemoryTransport: inMemory(options, setup) };
}

/**
 * The answer to an HTTP/1.1 request Node refused before Fastify saw it (header block over the
 * limit: 431) or whose body did not arrive in time (408): the error envelope, with the request id
 * and, on /api and RPC paths (and for a 431, whose path is unknown), the rate-limit headers.
 */
function clientErrorAnswer(setup: CallSetup): ClientErrorAnswer {
  return async (code, request, peer) => {
    const error =
      code === "HPE_HEADER_OVERFLOW"
        ? new AppError("headers_too_large", `The header block is over the limit of ${maxHeaderSize} bytes.`)
        : code === "ERR_HTTP_REQUEST_TIMEOUT"
          ? new AppError("request_timeout", "The request did not arrive whole in time.")
          : new AppError("invalid_request", "The request is not valid HTTP/1.1.");
    // assignRequestId wrote the request's id back into its headers when Fastify received it.
    const rest = toRestError(error, requestIdFrom(request?.headers["x-request-id"]));
    const url = request?.url ?? "";
    let limits: Record<string, string> = {};
    if (setup.metered && (request === undefined || url.startsWith("/api/") || isRpcPath(url))) {
      const address = setup.addressOf(peer, request?.headers ?? {});
      limits = await setup.limits(request?.headers["x-api-key"], address).catch(() => ({}));
    }
    return {
      status: rest.status,
      headers: { ...limits, ...rest.headers, "content-type": "application/json; charset=utf-8" },
      body: JSON.stringify(rest.body),
    };
  };
}

/**
 * What happens to every request before its route: the request id header, the gRPC status of a call
 * answered by connect-node, the error envelope for Fastify's own failures and for unknown paths
 * (UNIMPLEMENTED for an RPC path).
 */
function registerRequestHandling(app: FastifyInstance, options: HttpServerOptions, setup: CallSetup): void {
  // A call's context values and (Connect-path gRPC) status live on the request itself, declared up front
  // so every request keeps one shape. Not in WeakMaps keyed by the request: a young-generation collection
  // keeps a WeakMap's values alive while the map is old, and through the context's logger closure that
  // promoted each call's objects to the old generation, where only a full collection freed them.
  app.decorateRequest("callContext", null);
  app.decorateRequest("grpcStatus", null);
  // Hooks on every request take Fastify's callback form: an async hook costs a promise per request.
  app.addHook("onRequest", (request, reply, done) => {
    reply.header("x-request-id", request.id);
    if (protocolOf(request.headers["content-type"]) === "grpc") {
      // connect-node sends a gRPC call's status as trailers, which no Fastify hook sees.
      const raw = reply.raw;
      const addTrailers = raw.addTrailers.bind(raw);
      raw.addTrailers = (trailers) => {
        const status = Number((trailers as Record<string, unknown>)["grpc-status"]);
        if (Number.isInteger(status)) request.grpcStatus = status;
        addTrailers(trailers);
      };
    }
    done();
  });
  app.setErrorHandler((error: FastifyError, request, reply) =>
    answerFastifyError(request, reply, error, options.bodyLimitBytes),
  );
  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split("?")[0]?.slice(0, 200) ?? "";
    const limits = () => setup.limits(request.headers["x-api-key"], setup.clientAddress(request));
    if (answerUnknownProcedure(request, reply, path, limits)) return reply;
    return sendError(request, reply, new AppError("not_found", `No endpoint ${request.method} ${path}.`));
  });
  // Bodies of unknown paths are not read, so an odd Content-Type still gets 404 rather than 415.
  app.addContentTypeParser("*", (_request, _payload, done) => done(null, undefined));
}

/** CORS, then the two ways in through Fastify: the Connect plugin and the REST transcoder. */
async function registerEntryPaths(
  app: FastifyInstance,
  options: HttpServerOptions,
  setup: CallSetup,
): Promise<HttpBinding[]> {
  if (options.corsOrigins !== undefined && options.corsOrigins.length > 0) {
    await registerCors(app, options.corsOrigins);
  }
  await app.register(fastifyConnectPlugin, {
    routes: answerUndecodableAsInvalid(options.routes, options.meter),
    jsonOptions: STRICT_JSON_OPTIONS,
    interceptors: options.interceptors,
    grpc: true,
    grpcWeb: true,
    connect: true,
    readMaxBytes: options.bodyLimitBytes,
    contextValues: (request) => setup.contextFor(request, protocolOf(request.headers["content-type"])),
  });
  return registerTranscoder(app, {
    routes: options.routes,
    services: options.services,
    interceptors: options.interceptors,
    contextValues: (request) => setup.contextFor(request, "rest"),
    bodyLimitBytes: options.bodyLimitBytes,
  });
}

/** `/healthz`, `/readyz` and `/metrics` when asked for, and the caller's own routes. */
async function registerProbes(app: FastifyInstance, options: HttpServerOptions): Promise<void> {
  app.get("/healthz", async (_request, reply) => sendSuccess(reply, { status: "ok" }));
  const ready = options.ready;
  if (ready !== undefined) {
    app.get("/readyz", async (request, reply) => {
      const ok = await ready().catch(() => false);
      if (ok) return sendSuccess(reply, { status: "ready" });
      return sendError(request, reply, new AppError("service_unavailable", "The service is not ready."));
    });
  }
  if (options.metrics !== undefined) registerMetricsRoute(app, options.metrics);
  await options.addRoutes?.(app);
}

/**
 * The rate-limit headers on every /api and RPC response, also when the request never reached the RPC,
 * and one log line (and one metric) for each request that never reached an RPC.
 */
function registerUnroutedAnswers(app: FastifyInstance, setup: CallSetup): void {
  if (setup.metered) {
    app.addHook("onSend", (request, reply, payload, done) => {
      if (
        reply.hasHeader("x-ratelimit-limit") ||
        !(request.url.startsWith("/api/") || isRpcPath(request.url))
      ) {
        done(null, payload);
        return;
      }
      setup
        .limits(request.headers["x-api-key"], setup.clientAddress(request))
        .catch(() => ({}))
        .then((headers) => {
          reply.headers(headers);
          done(null, payload);
        });
    });
  }
  app.addHook("onResponse", (request, reply, done) => {
    done();
    const values = request.callContext;
    if (values !== null && (values.get(kObserved) || values.get(kRequestId) !== "")) return;
    const rpc = (request.routeOptions.config as { rpc?: string } | undefined)?.rpc;
    const protocol = values?.get(kProtocol) ?? (rpc ? "rest" : "http");
    const route = request.routeOptions.url;
    // A Connect route is `/<service>/<method>`; its label is the RPC's name, as the interceptors write it.
    const method =
      rpc ?? (protocol !== "http" && route !== undefined ? route.slice(1) : (route ?? UNMATCHED_METHOD));
    const grpcStatus = request.grpcStatus;
    const code = grpcStatus === null ? undefined : codeForGrpcStatus(grpcStatus);
    setup.observeUnrouted(request.log, { protocol, method }, reply.raw.statusCode, reply.elapsedTime, code);
  });
}

/** The {@link HttpServer.inMemoryTransport} of these routes and interceptors. */
function inMemory(options: HttpServerOptions, setup: CallSetup): (address?: string) => Transport {
  return (address = "127.0.0.1") => {
    const router = createRouterTransport(options.routes, { router: { interceptors: options.interceptors } });
    const values = (given: ContextValues | undefined) => given ?? setup.newContext(address, "connect");
    return {
      unary: (method, signal, timeoutMs, header, input, contextValues) =>
        router.unary(method, signal, timeoutMs, header, input, values(contextValues)),
      stream: (method, signal, timeoutMs, header, input, contextValues) =>
        router.stream(method, signal, timeoutMs, header, input, values(contextValues)),
    };
  };
}

/** The {@link HttpServer} of a ready app. */
function httpServerOf(
  app: FastifyInstance,
  bindings: HttpBinding[],
  listener: () => DualProtocolListener | undefined,
): Omit<HttpServer, "inMemoryTransport"> {
  let closing: Promise<void> | undefined;
  return {
    app,
    bindings,
    async listen(port, host = "127.0.0.1") {
      await app.listen({ port, host });
      return app.server.address() as AddressInfo;
    },
    close() {
      closing ??= app.close();
      return closing;
    },
    openHttp2Streams: () => listener()?.openHttp2Streams() ?? 0,
  };
}

/** The raw unary gRPC handler (the `grpc-server` fast path), set up like every other way in. */
function grpcUnaryHandler(options: HttpServerOptions, setup: CallSetup) {
  return createGrpcUnaryHandler({
    routes: options.routes,
    interceptors: options.interceptors,
    bodyLimitBytes: options.bodyLimitBytes,
    clientAddress: setup.addressOf,
    contextValues: (address) => setup.newContext(address, "grpc"),
    ...(options.meter === undefined ? {} : { meter: options.meter }),
    onRefused: ({ path, routed, requestId, status, elapsedMs }) =>
      setup.observeUnrouted(
        lazyChildLogger(options.logger, { requestId }),
        // An unknown method's path is the caller's text: one label for all of them.
        { protocol: "grpc", method: routed ? path.slice(1) : UNMATCHED_METHOD },
        200,
        elapsedMs,
        codeForGrpcStatus(status),
      ),
  });
}
