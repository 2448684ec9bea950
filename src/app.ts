import { setTimeout as sleep } from "node:timers/promises";
import type { DescService } from "@bufbuild/protobuf";
import type { ConnectRouter, Interceptor, ServiceImpl } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import type { Logger } from "pino";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import { EventsService } from "../gen/receipts/v1/events_pb.js";
import { KeysService } from "../gen/receipts/v1/keys_pb.js";
import { OnboardingService } from "../gen/receipts/v1/onboarding_pb.js";
import { PaymentsService } from "../gen/receipts/v1/payments_pb.js";
import { ReceiptsService } from "../gen/receipts/v1/receipts_pb.js";
import { WebhooksService } from "../gen/receipts/v1/webhooks_pb.js";
import { type Clock, systemClock } from "./clock.js";
import type { Config } from "./config.js";
import { CryptoPool } from "./crypto/crypto-pool.js";
import { generateRsaKeyPair } from "./crypto/keys.js";
import { BackgroundTasks } from "./domain/background.js";
import type { DomainDeps } from "./domain/deps.js";
import type { PaymentGateway, RandomBytes } from "./domain/gateways/gateway.js";
import { ktLogSigner } from "./domain/kt/note-keys.js";
import type { KtReads } from "./domain/kt/reads.js";
import { createKtRuntime, type KtRuntime, type KtRuntimeOptions } from "./domain/kt/runtime.js";
import { createEvents, type Events } from "./events/index.js";
import type { ResolveAll } from "./events/ssrf.js";
import { useFastPaths } from "./fast-paths.js";
import { registerAdminRoutes } from "./http/admin.js";
import { registerApiReference } from "./http/docs.js";
import { registerErrorDocs } from "./http/error-docs.js";
import { registerKtRoutes } from "./http/kt.js";
import type { ListenerOptions } from "./http/listener.js";
import { createHttpServer, type HttpServer } from "./http/server.js";
import { serviceOpenApi } from "./openapi/openapi.js";
import { type ChainDeps, callChain } from "./rpc/chain.js";
import { healthService } from "./rpc/health.js";
import { idempotentMethods } from "./rpc/idempotent.js";
import { requestMeter } from "./rpc/interceptors.js";
import { createMetrics, type Metrics } from "./rpc/metrics.js";
import { API_SERVICES } from "./rpc/policy.js";
import { registerReflection } from "./rpc/reflection.js";
import { eventsService } from "./rpc/services/events.js";
import { keysService } from "./rpc/services/keys.js";
import { onboardingService } from "./rpc/services/onboarding.js";
import { paymentsService } from "./rpc/services/payments.js";
import { receiptsService } from "./rpc/services/receipts.js";
import { webhooksService } from "./rpc/services/webhooks.js";
import { isMemoryStore } from "./store/memory/index.js";
import { withTimeLimit } from "./store/time-limit.js";
import type { Store } from "./store/types.js";

/** What `buildApp` needs: configuration, a store, a logger, and optionally a clock (tests). */
export interface AppDeps {
  config: Config;
  store: Store;
  logger: Logger;
  clock?: Clock;
  /** Worker threads of the crypto pool; default `config.cryptoThreads`. */
  workers?: number;
  /** Connection timeouts and HTTP/2 limits of the listener; each given here overrides `config`'s. */
  listener?: ListenerOptions;
  /** How long `close()` lets in-flight calls finish, in ms; default 10 000. */
  shutdownGraceMs?: number;
  /** Resolves webhook receivers' host names; the system resolver by default (tests inject one). */
  webhookResolver?: ResolveAll;
  /** Randomness of non-secret choices (the webhook retry jitter); the CSPRNG by default (tests pin it). */
  random?: RandomBytes;
  /**
   * The key log's seams: the tenants' signing keys (the signing-key store), the directory source, the
   * HTTP client for witnesses, the sequencer's holder name.
   */
  kt?: Partial<Pick<KtRuntimeOptions, "signingKeys" | "directory" | "fetch" | "holder">>;
  /** The payment gateways; the offline sandboxes by default (tests pass their own). */
  gateways?: readonly PaymentGateway[];
  /** The chain's own hook (`ChainDeps.onStep`): sees every call enter each step of the chain. */
  onChainStep?: ChainDeps["onStep"];
}

/** A built service: the HTTP server (not listening yet) and what it was built from. */
export interface App {
  server: HttpServer;
  /** The service implementations, registered once for every protocol (and the gRPC health service). */
  routes: (router: ConnectRouter) => void;
  /** The one ordered chain every call passes ({@link callChain}). */
  interceptors: readonly Interceptor[];
  domain: DomainDeps;
  /** Events and webhooks: their dependencies and this instance's worker. */
  events: Events;
  /** The key log of this instance: its service (`domain.kt`), reads and sequencer. */
  kt: KtRuntime;
  /** Stops accepting, finishes in-flight calls, stops workers, closes the store. */
  close(): Promise<void>;
}

/**
 * Builds the service from its dependencies: domain, interceptors, and one HTTP server serving REST,
 * gRPC, gRPC-Web and Connect. `main` only reads config, builds and listens; tests build on port 0.
 */
export async function buildApp(deps: AppDeps): Promise<App> {
  const { config, logger, clock = systemClock, random } = deps;
  useFastPaths(config.fastPaths);
  // Every store call the service makes is bounded: a stalled store answers 503. The memory store's
  // calls settle when they are made, before any timer could fire, so a bound could never answer for
  // them; it is left out there (it cost about 0.6 us and 800 bytes of garbage per call).
  const store = isMemoryStore(deps.store) ? deps.store : withTimeLimit(deps.store, config.storeTimeoutMs);
  const pool = new CryptoPool({
    escrowPrivateKeys: await escrowPrivateKeys(config, logger),
    size: deps.workers ?? config.cryptoThreads,
  });
  const events = createEvents({ store, clock, logger, config, random, resolve: deps.webhookResolver });
  const kt = ktRuntimeOf(deps, store, clock, pool);
  const domain: DomainDeps = {
    store,
    clock,
    logger,
    pepper: config.hashedPanPepper,
    grantTtlSeconds: config.grantTtlSeconds,
    escrowRetentionDays: config.escrowRetentionDays,
    escrow: config.escrow,
    background: new BackgroundTasks(logger),
    pool,
    escrowKeys: pool.escrowKeys,
    kt: kt.log,
    ...(deps.gateways === undefined ? {} : { gateways: deps.gateways }),
  };
  const metrics = createMetrics();
  const ready = () => reachable(store);
  const routes = serviceRoutes(domain, events, ready, config.grpcReflection);
  const interceptors = chainOf(deps, metrics, domain);
  const server = await createHttpServer({
    routes,
    services: [...API_SERVICES],
    interceptors,
    logger,
    bodyLimitBytes: config.bodyLimitBytes,
    metrics,
    ready,
    meter: requestMeter({ store, config, clock }),
    corsOrigins: config.corsOrigins,
    trustedProxies: config.trustedProxies,
    listener: { ...listenerOptions(config), ...deps.listener },
    ...(deps.shutdownGraceMs === undefined ? {} : { shutdownGraceMs: deps.shutdownGraceMs }),
    addRoutes: (app) => addPlainRoutes(app, { config, store, clock, ktReads: kt.reads, chain: interceptors }),
  });
  events.start();
  kt.start();
  return {
    server,
    routes,
    interceptors,
    domain,
    events,
    kt,
    async close() {
      // Streams end first (they would hold the drain for its whole grace), then the worker hands its
      // lease over, then calls in flight finish.
      await events.stop();
      await server.close();
      await kt.stop();
      // Background releases get the shutdown's grace too; what they leave stays escrowed for the next
      // registration of its card.
      await Promise.race([
        domain.background.idle(),
        sleep(deps.shutdownGraceMs ?? 10_000, undefined, { ref: false }),
      ]);
      await pool.close();
      await store.close();
    },
  };
}

/** The one chain of every call ({@link callChain}), with the operator token and the key log's read limit. */
function chainOf(deps: AppDeps, metrics: Metrics, domain: DomainDeps): Interceptor[] {
  const { config, logger } = deps;
  return callChain({
    logger,
    metrics,
    config,
    clock: domain.clock,
    domain,
    operator: config.adminToken === undefined ? undefined : { token: config.adminToken },
    keyLogReadsPerMinute: config.kt.readsPerMinute,
    onStep: deps.onChainStep,
  });
}

/** Whether the store answers a ping: the readiness of `/readyz` and of the gRPC health service. */
async function reachable(store: Store): Promise<boolean> {
  try {
    await store.ping();
    return true;
  } catch {
    return false;
  }
}

/**
 * The key log of this instance (docs/key-transparency.md), over the bounded store; its sequencer not started
 * yet.
 */
function ktRuntimeOf(deps: AppDeps, store: Store, clock: Clock, pool: CryptoPool): KtRuntime {
  const { config, logger } = deps;
  return createKtRuntime({
    store,
    clock,
    logger,
    pepper: config.hashedPanPepper,
    config: config.kt,
    signer: ktLogSigner(config.kt.logPrivateKey, logger),
    leases: store.leases,
    ...(pool.escrowKeys[0] === undefined ? {} : { serviceEscrowKey: pool.escrowKeys[0] }),
    ...deps.kt,
  });
}

/** The escrow private keys of `config`, or one made for this process (development only). */
async function escrowPrivateKeys(config: Config, logger: Logger): Promise<string[]> {
  if (config.escrowPrivateKeys.length > 0) return config.escrowPrivateKeys;
  logger.warn(
    "ESCROW_PRIVATE_KEY not set: using an escrow key generated for this process (development only)",
  );
  return [(await generateRsaKeyPair()).privateKey];
}

/** The Connect routes: the API services, gRPC health and, unless switched off, reflection. */
function serviceRoutes(
  domain: DomainDeps,
  events: Events,
  ready: () => Promise<boolean>,
  reflection: boolean,
): (router: ConnectRouter) => void {
  return (router) => {
    // Every API service is registered here once, with the idempotency step its policy asks for.
    const serve = <S extends DescService>(service: S, impl: ServiceImpl<S>) =>
      router.service(service, idempotentMethods(domain, service, impl));
    serve(OnboardingService, onboardingService(domain));
    serve(KeysService, keysService(domain));
    serve(ReceiptsService, receiptsService(domain));
    serve(PaymentsService, paymentsService(domain));
    serve(WebhooksService, webhooksService(events.deps));
    serve(EventsService, eventsService(events.deps));
    router.service(Health, healthService(ready));
    if (reflection) registerReflection(router, [...API_SERVICES, Health]);
  };
}

/** The listener's timeouts and HTTP/2 limits from `config`. */
function listenerOptions(config: Config): ListenerOptions {
  return {
    requestTimeoutMs: config.requestTimeoutMs,
    http2MaxConcurrentStreams: config.http2.maxConcurrentStreams,
    http2IdleTimeoutMs: config.http2.idleTimeoutMs,
    http2ResetBurst: config.http2.resetBurst,
    http2ResetRatePerSecond: config.http2.resetRatePerSecond,
    http2MaxConnectionsPerAddress: config.http2.maxConnectionsPerAddress,
    http2CapExempt: (address) => config.trustedProxies.has(address),
  };
}

/** What the routes beside the RPCs need. */
interface PlainRoutesDeps {
  config: Config;
  store: Store;
  clock: Clock;
  ktReads: KtReads;
  /** The chain, the instances every protocol uses. */
  chain: readonly Interceptor[];
}

/**
 * The routes beside the RPCs: the OpenAPI document, its reference page, the error page, the key log's
 * reads, and the operator API when enabled; the last two through the chain.
 */
async function addPlainRoutes(
  app: FastifyInstance,
  { config, store, clock, ktReads, chain }: PlainRoutesDeps,
): Promise<void> {
  const openApiDocument = serviceOpenApi({ admin: config.adminToken !== undefined });
  const openApi = JSON.stringify(openApiDocument);
  app.get("/openapi.json", async (_request, reply) => reply.type("application/json").send(openApi));
  if (config.adminToken !== undefined) {
    await registerAdminRoutes(app, {
      token: config.adminToken,
      store,
      env: config.env,
      clock,
      trustedProxies: config.trustedProxies,
      chain,
    });
  }
  registerKtRoutes(app, {
    reads: ktReads,
    store,
    env: config.env,
    clock,
    trustedProxies: config.trustedProxies,
    chain,
  });
  registerApiReference(app, openApiDocument);
  registerErrorDocs(app);
}
