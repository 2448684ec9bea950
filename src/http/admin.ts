import type { DescMethodUnary } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";
import type { FastifyError, FastifyInstance, FastifyRequest } from "fastify";
import { type Logger, pino } from "pino";
import type { Clock } from "../clock.js";
import { DEFAULT_TIERS } from "../config.js";
import {
  assignMerchant,
  createKey,
  escrowCounts,
  getBins,
  listKeys,
  type OperatorContext,
  readAudit,
  revokeKey,
  setBins,
} from "../domain/admin.js";
import { transferCard } from "../domain/card-transfer.js";
import { createAuditor, listAuditors, revokeAuditor } from "../domain/kt/auditors.js";
import { confirmRoot, setPlaintextIntake, setRequireBindings } from "../domain/kt/issuer-admin.js";
import { AppError } from "../errors.js";
import { callChain } from "../rpc/chain.js";
import { assertNoDuplicateMembers } from "../rpc/json-duplicates.js";
import { createMetrics } from "../rpc/metrics.js";
import { OPERATOR } from "../rpc/route-services.js";
import type { Environment, Store } from "../store/types.js";
import { type ChainedRoute, registerChainedRoutes } from "./chained-routes.js";
import { clientAddressOf, NO_TRUSTED_PROXIES, type TrustedProxies } from "./client-address.js";
import { answerFastifyError, sendSuccess } from "./envelope.js";

/**
 * The operator API under `/admin/v1`, registered only when `ADMIN_TOKEN` is set (without
 * it every admin path is the ordinary 404). Each request is one call through the chain
 * (src/rpc/chain.ts) as a method of the operator API's service (src/rpc/route-services.ts), whose
 * access step asks for `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant time, after
 * counting the call against a rate limit of its own per client address, so that guessing costs the
 * same as calling (src/rpc/operator-access.ts); the REST envelope. The operations are those of
 * `domain/admin.ts`, which the command line runs against the store too.
 */

/** Options of {@link registerAdminRoutes}. */
export interface AdminRoutesOptions {
  token: string;
  store: Store;
  env: Environment;
  clock: Clock;
  /**
   * Calls per client address per minute, when the chain is made here; default
   * `ADMIN_REQUESTS_PER_MINUTE` (src/rpc/operator-access.ts).
   */
  requestsPerMinute?: number;
  /** Proxies whose `X-Forwarded-For` names the client (`TRUSTED_PROXIES`). */
  trustedProxies?: TrustedProxies;
  /**
   * The chain (src/rpc/chain.ts), the instances every other way in uses, made with this token. Without
   * it (tests of the operator API alone) a chain is made for these routes from the options.
   */
  chain?: readonly Interceptor[];
}

/** Registers the operator routes in a scope of their own, with a JSON body parser of their own. */
export async function registerAdminRoutes(app: FastifyInstance, options: AdminRoutesOptions): Promise<void> {
  const proxies = options.trustedProxies ?? NO_TRUSTED_PROXIES;
  const clientOf: ClientOf = (request) =>
    clientAddressOf(request.socket.remoteAddress ?? "", request.headers["x-forwarded-for"], proxies);
  const interceptors = options.chain ?? operatorChain(app, options);
  await app.register(async (scope) => {
    acceptJsonOnly(scope);
    scope.setErrorHandler((error: FastifyError, request, reply) =>
      answerFastifyError(request, reply, error, request.routeOptions.bodyLimit),
    );
    registerChainedRoutes(scope, chainedOperations(options, clientOf), {
      interceptors,
      clientAddress: clientOf,
    });
  });
}

/** A chain for the operator API alone, from its options, logging to the app's logger. */
function operatorChain(app: FastifyInstance, options: AdminRoutesOptions): Interceptor[] {
  const log = app.log as unknown as Partial<Logger>;
  return callChain({
    logger: typeof log.isLevelEnabled === "function" ? (log as Logger) : pino({ level: "silent" }),
    metrics: createMetrics({ defaultMetrics: false }),
    config: { env: options.env, tiers: DEFAULT_TIERS },
    clock: options.clock,
    domain: { store: options.store },
    operator: { token: options.token, requestsPerMinute: options.requestsPerMinute },
  });
}

/** The address of the client that sent a request, through the trusted-proxy rule. */
export type ClientOf = (request: FastifyRequest) => string;

/**
 * Makes `application/json` the scope's only body type (any other is 415); an empty body reads as
 * `{}`. A member named twice in one object is refused as on /api/v1 (RFC 7493): `JSON.parse` would
 * silently keep the last.
 */
function acceptJsonOnly(scope: FastifyInstance): void {
  scope.removeAllContentTypeParsers();
  scope.addContentTypeParser("application/json", { parseAs: "string" }, (_request, body, done) => {
    if (body === "") return done(null, {});
    let parsed: unknown;
    try {
      parsed = JSON.parse(body as string);
    } catch {
      return done(new AppError("invalid_request", "The body is not valid JSON."), undefined);
    }
    try {
      assertNoDuplicateMembers(body as string, parsed);
    } catch (error) {
      return done(error as Error, undefined);
    }
    done(null, parsed);
  });
}

/** What an operator route's handler gets: the request's parts, the operator context and the options. */
interface AdminCall {
  params: Record<string, string>;
  query: Record<string, string | undefined>;
  body: unknown;
  ctx: OperatorContext;
  options: AdminRoutesOptions;
}

/** One route of the operator API: its verb, its Fastify path, its method for the chain, and the operation it runs. */
export interface AdminRoute {
  method: "GET" | "POST" | "PUT" | "DELETE";
  url: string;
  rpc: DescMethodUnary;
  run: (call: AdminCall) => Promise<unknown>;
}

/**
 * The operator API's routes, each an operation of `domain/admin.ts`. Each is documented in
 * `src/openapi/admin.ts` (a test keeps the two lists equal).
 */
export const ADMIN_ROUTES: readonly AdminRoute[] = [
  {
    method: "POST",
    url: "/admin/v1/api-keys",
    rpc: OPERATOR.CreateApiKey,
    run: ({ ctx, body }) => createKey(ctx, body),
  },
  {
    method: "GET",
    url: "/admin/v1/api-keys",
    rpc: OPERATOR.ListApiKeys,
    run: async ({ options, query }) => ({ apiKeys: await listKeys(options.store, query.tenant) }),
  },
  {
    method: "DELETE",
    url: "/admin/v1/api-keys/:apiKeyId",
    rpc: OPERATOR.RevokeApiKey,
    run: ({ ctx, params }) => revokeKey(ctx, params.apiKeyId ?? ""),
  },
  {
    method: "PUT",
    url: "/admin/v1/issuers/:tenant/bins",
    rpc: OPERATOR.SetBins,
    run: ({ ctx, params, body }) => setBins(ctx, params.tenant ?? "", body),
  },
  {
    method: "GET",
    url: "/admin/v1/issuers/:tenant/bins",
    rpc: OPERATOR.GetBins,
    run: ({ options, params }) => getBins(options.store, params.tenant ?? ""),
  },
  {
    method: "PUT",
    url: "/admin/v1/merchants/:merchantId",
    rpc: OPERATOR.AssignMerchant,
    run: ({ ctx, params, body }) => assignMerchant(ctx, params.merchantId ?? "", body),
  },
  {
    method: "POST",
    url: "/admin/v1/cards/transfer",
    rpc: OPERATOR.TransferCard,
    run: ({ ctx, body }) => transferCard(ctx, body),
  },
  {
    method: "GET",
    url: "/admin/v1/audit",
    rpc: OPERATOR.ReadAudit,
    run: ({ options, query }) => readAudit(options.store, query),
  },
  {
    method: "GET",
    url: "/admin/v1/escrow",
    rpc: OPERATOR.CountEscrow,
    run: ({ options }) => escrowCounts(options.store, options.clock.now()),
  },
  {
    method: "POST",
    url: "/admin/v1/kt/auditors",
    rpc: OPERATOR.CreateAuditor,
    run: ({ ctx, body }) => createAuditor(ctx, body),
  },
  {
    method: "GET",
    url: "/admin/v1/kt/auditors",
    rpc: OPERATOR.ListAuditors,
    run: ({ ctx }) => listAuditors(ctx),
  },
  {
    method: "DELETE",
    url: "/admin/v1/kt/auditors/:auditorId",
    rpc: OPERATOR.RevokeAuditor,
    run: ({ ctx, params }) => revokeAuditor(ctx, params.auditorId ?? ""),
  },
  {
    method: "POST",
    url: "/admin/v1/issuers/:tenant/signing-keys/:signingKeyId/confirm",
    rpc: OPERATOR.ConfirmRoot,
    run: ({ ctx, params }) => confirmRoot(ctx, params.tenant ?? "", params.signingKeyId ?? ""),
  },
  {
    method: "PUT",
    url: "/admin/v1/issuers/:tenant/require-bindings",
    rpc: OPERATOR.SetRequireBindings,
    run: ({ ctx, params, body }) => setRequireBindings(ctx, params.tenant ?? "", body),
  },
  {
    method: "PUT",
    url: "/admin/v1/issuers/:tenant/plaintext-intake",
    rpc: OPERATOR.SetPlaintextIntake,
    run: ({ ctx, params, body }) => setPlaintextIntake(ctx, params.tenant ?? "", body),
  },
];

/** The routes of {@link ADMIN_ROUTES} as routes of the chain, answering in the REST envelope. */
function chainedOperations(options: AdminRoutesOptions, clientOf: ClientOf): ChainedRoute[] {
  type Parts = { Params: Record<string, string>; Querystring: Record<string, string | undefined> };
  return ADMIN_ROUTES.map((route) => ({
    method: route.method,
    url: route.url,
    rpc: route.rpc,
    run: async (request) => {
      const { params, query, body } = request as FastifyRequest<Parts>;
      const ctx: OperatorContext = {
        store: options.store,
        env: options.env,
        now: options.clock.now(),
        requestId: request.id,
        sourceIp: clientOf(request),
      };
      const data = await route.run({ params, query, body, ctx, options });
      return (reply) => sendSuccess(reply, data as never);
    },
  }));
}
