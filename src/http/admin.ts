import type { FastifyError, FastifyInstance, FastifyRequest } from "fastify";
import type { Clock } from "../clock.js";
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
import { assertNoDuplicateMembers } from "../rpc/json-duplicates.js";
import type { Environment, Store } from "../store/types.js";
import { digest, limitThenAuthenticate } from "./admin-access.js";
import { clientAddressOf, NO_TRUSTED_PROXIES, type TrustedProxies } from "./client-address.js";
import { answerFastifyError, sendSuccess } from "./envelope.js";

/**
 * The operator API under `/admin/v1`, registered only when `ADMIN_TOKEN` is set (without
 * it every admin path is the ordinary 404). `Authorization: Bearer <ADMIN_TOKEN>`, compared in constant
 * time; the REST envelope; a rate limit of its own per client address, counted before the token is
 * checked so that guessing costs the same as calling. The operations are those of `domain/admin.ts`,
 * which the command line runs against the store too.
 */

/** Options of {@link registerAdminRoutes}. */
export interface AdminRoutesOptions {
  token: string;
  store: Store;
  env: Environment;
  clock: Clock;
  /** Calls per client address per minute; default {@link ADMIN_REQUESTS_PER_MINUTE}. */
  requestsPerMinute?: number;
  /** Proxies whose `X-Forwarded-For` names the client (`TRUSTED_PROXIES`). */
  trustedProxies?: TrustedProxies;
}

/** The operator API's rate limit per client address and minute: far above an operator's, far below a guesser's. */
export const ADMIN_REQUESTS_PER_MINUTE = 120;

/** Registers the operator routes in a scope of their own, with a JSON body parser of their own. */
export async function registerAdminRoutes(app: FastifyInstance, options: AdminRoutesOptions): Promise<void> {
  const expected = digest(options.token);
  const limit = options.requestsPerMinute ?? ADMIN_REQUESTS_PER_MINUTE;
  const proxies = options.trustedProxies ?? NO_TRUSTED_PROXIES;
  const clientOf: ClientOf = (request) =>
    clientAddressOf(request.socket.remoteAddress ?? "", request.headers["x-forwarded-for"], proxies);

  await app.register(async (scope) => {
    acceptJsonOnly(scope);
    scope.setErrorHandler((error: FastifyError, request, reply) =>
      answerFastifyError(request, reply, error, request.routeOptions.bodyLimit),
    );
    scope.addHook("onRequest", limitThenAuthenticate(options, limit, expected, clientOf));
    registerOperations(scope, options, clientOf);
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

/** One route of the operator API: its verb, its Fastify path, and the operation it runs. */
export interface AdminRoute {
  method: "GET" | "POST" | "PUT" | "DELETE";
  url: string;
  run: (call: AdminCall) => Promise<unknown>;
}

/**
 * The operator API's routes, each an operation of `domain/admin.ts`. Each is documented in
 * `src/openapi/admin.ts` (a test keeps the two lists equal).
 */
export const ADMIN_ROUTES: readonly AdminRoute[] = [
  { method: "POST", url: "/admin/v1/api-keys", run: ({ ctx, body }) => createKey(ctx, body) },
  {
    method: "GET",
    url: "/admin/v1/api-keys",
    run: async ({ options, query }) => ({ apiKeys: await listKeys(options.store, query.tenant) }),
  },
  {
    method: "DELETE",
    url: "/admin/v1/api-keys/:apiKeyId",
    run: ({ ctx, params }) => revokeKey(ctx, params.apiKeyId ?? ""),
  },
  {
    method: "PUT",
    url: "/admin/v1/issuers/:tenant/bins",
    run: ({ ctx, params, body }) => setBins(ctx, params.tenant ?? "", body),
  },
  {
    method: "GET",
    url: "/admin/v1/issuers/:tenant/bins",
    run: ({ options, params }) => getBins(options.store, params.tenant ?? ""),
  },
  {
    method: "PUT",
    url: "/admin/v1/merchants/:merchantId",
    run: ({ ctx, params, body }) => assignMerchant(ctx, params.merchantId ?? "", body),
  },
  { method: "POST", url: "/admin/v1/cards/transfer", run: ({ ctx, body }) => transferCard(ctx, body) },
  { method: "GET", url: "/admin/v1/audit", run: ({ options, query }) => readAudit(options.store, query) },
  {
    method: "GET",
    url: "/admin/v1/escrow",
    run: ({ options }) => escrowCounts(options.store, options.clock.now()),
  },
  { method: "POST", url: "/admin/v1/kt/auditors", run: ({ ctx, body }) => createAuditor(ctx, body) },
  { method: "GET", url: "/admin/v1/kt/auditors", run: ({ ctx }) => listAuditors(ctx) },
  {
    method: "DELETE",
    url: "/admin/v1/kt/auditors/:auditorId",
    run: ({ ctx, params }) => revokeAuditor(ctx, params.auditorId ?? ""),
  },
  {
    method: "POST",
    url: "/admin/v1/issuers/:tenant/signing-keys/:signingKeyId/confirm",
    run: ({ ctx, params }) => confirmRoot(ctx, params.tenant ?? "", params.signingKeyId ?? ""),
  },
  {
    method: "PUT",
    url: "/admin/v1/issuers/:tenant/require-bindings",
    run: ({ ctx, params, body }) => setRequireBindings(ctx, params.tenant ?? "", body),
  },
  {
    method: "PUT",
    url: "/admin/v1/issuers/:tenant/plaintext-intake",
    run: ({ ctx, params, body }) => setPlaintextIntake(ctx, params.tenant ?? "", body),
  },
];

/** The routes of {@link ADMIN_ROUTES}, answering in the REST envelope. */
function registerOperations(scope: FastifyInstance, options: AdminRoutesOptions, clientOf: ClientOf): void {
  type Parts = { Params: Record<string, string>; Querystring: Record<string, string | undefined> };
  for (const route of ADMIN_ROUTES) {
    scope.route<Parts>({
      method: route.method,
      url: route.url,
      handler: async (request, reply) => {
        const ctx: OperatorContext = {
          store: options.store,
          env: options.env,
          now: options.clock.now(),
          requestId: request.id,
          sourceIp: clientOf(request),
        };
        const data = await route.run({
          params: request.params,
          query: request.query,
          body: request.body,
          ctx,
          options,
        });
        return sendSuccess(reply, data as never);
      },
    });
  }
}
