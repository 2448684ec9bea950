import type { Interceptor } from "@connectrpc/connect";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { Clock } from "../clock.js";
import { authenticate } from "../domain/api-keys.js";
import {
  auditorTokenHash,
  type EntriesReader,
  entriesAudit,
  type KtReads,
  type TileAddress,
} from "../domain/kt/reads.js";
import { AppError, invalidRequest } from "../errors.js";
import { tilePath } from "../kt/tiles.js";
import { KEY_LOG } from "../rpc/route-services.js";
import type { Environment, Store } from "../store/types.js";
import { NO_TRUSTED_PROXIES, type TrustedProxies } from "../trusted-proxies.js";
import { type Answer, type ChainedRoute, registerChainedRoutes } from "./chained-routes.js";
import { clientAddressOf } from "./client-address.js";
import { sendSuccess } from "./envelope.js";

/**
 * The key log's public reads (docs/key-transparency.md) under `/kt/v1`, beside the API: each request is
 * one call through the chain (src/rpc/chain.ts) as a method of the key log reads' service
 * (src/rpc/route-services.ts): no API key, limited per client address by the service's own limiter
 * (`KT_READS_PER_MINUTE`, with the rate-limit headers), errors in the REST envelope. `GET /kt/v1/checkpoint` (text: the newest checkpoint note with every
 * cosignature), `GET /kt/v1/proof/consistency?from=&to=`, `GET /kt/v1/proof/inclusion?index=&size=`,
 * `GET /kt/v1/tile/<L>/<N>[.p/<W>]` (C2SP tlog-tiles, binary), `GET /kt/v1/directory/{sha256}` (the
 * snapshot's exact JSON); tiles and snapshots never change, so they are cacheable for good. Leaf data,
 * `GET /kt/v1/entries?start=&end=`, only with an issuer API key (`X-API-Key`) or a registered
 * auditor's token (`Authorization: Bearer`), each read recorded in the audit log.
 */

export interface KtRoutesOptions {
  reads: KtReads;
  store: Store;
  env: Environment;
  clock: Clock;
  trustedProxies?: TrustedProxies;
  /**
   * The chain (src/rpc/chain.ts), the instances every other way in uses: its access step counts each
   * read against the client address's limit (`KT_READS_PER_MINUTE`, given to the chain).
   */
  chain: readonly Interceptor[];
}

const IMMUTABLE = "public, max-age=31536000, immutable";
const NUMBER = /^(0|[1-9][0-9]{0,15})$/;

/** A query parameter as a non-negative integer, or a violation. */
function integerOf(
  query: Record<string, unknown>,
  name: string,
  problems: Array<{ field: string; description: string }>,
): number {
  const raw = query[name];
  if (typeof raw !== "string" || !NUMBER.test(raw) || !Number.isSafeInteger(Number(raw))) {
    problems.push({ field: name, description: "must be a non-negative integer" });
    return 0;
  }
  return Number(raw);
}

function integers<const K extends string>(request: FastifyRequest, names: readonly K[]): Record<K, number> {
  const query = request.query as Record<string, unknown>;
  const problems: Array<{ field: string; description: string }> = [];
  const out = {} as Record<K, number>;
  for (const name of names) out[name] = integerOf(query, name, problems);
  if (problems.length > 0) throw invalidRequest(problems);
  return out;
}

/** Parses `<L>/<N>[.p/<W>]` in its one canonical spelling; undefined otherwise. */
export function parseTilePath(path: string): TileAddress | undefined {
  const m = /^(\d{1,2})\/((?:x\d{3}\/)*\d{3})(?:\.p\/(\d{1,3}))?$/.exec(path);
  if (m === null) return undefined;
  const level = Number(m[1]);
  const index = Number((m[2] as string).replaceAll("x", "").replaceAll("/", ""));
  const width = m[3] === undefined ? 256 : Number(m[3]);
  if (level > 63 || !Number.isSafeInteger(index) || width < 1 || width > 256) return undefined;
  return `tile/${path}` === tilePath(level, index, width) ? { level, index, width } : undefined;
}

/** Registers the routes, each request one call through the chain. */
export function registerKtRoutes(app: FastifyInstance, options: KtRoutesOptions): void {
  const proxies = options.trustedProxies ?? NO_TRUSTED_PROXIES;
  const addressOf = (request: FastifyRequest) =>
    clientAddressOf(request.socket.remoteAddress ?? "", request.headers["x-forwarded-for"], proxies);
  const routes = ktReadRoutes(options, addressOf).map((route) => ({ method: "GET" as const, ...route }));
  registerChainedRoutes(app, routes, { interceptors: options.chain, clientAddress: addressOf });
}

/** The reads: each its path, its method for the chain, and its work. */
function ktReadRoutes(
  options: KtRoutesOptions,
  addressOf: (request: FastifyRequest) => string,
): Array<Omit<ChainedRoute, "method">> {
  const { reads } = options;
  return [
    {
      url: "/kt/v1/checkpoint",
      rpc: KEY_LOG.GetCheckpoint,
      run: async () => {
        const note = await reads.checkpointNote();
        return (reply) =>
          reply.type("text/plain; charset=utf-8").header("cache-control", "no-store").send(note);
      },
    },
    {
      url: "/kt/v1/proof/consistency",
      rpc: KEY_LOG.GetConsistencyProof,
      run: async (request) => {
        const { from, to } = integers(request, ["from", "to"]);
        const proof = await reads.consistency(from, to);
        return (reply) => sendSuccess(reply, proof);
      },
    },
    {
      url: "/kt/v1/proof/inclusion",
      rpc: KEY_LOG.GetInclusionProof,
      run: async (request) => {
        const { index, size } = integers(request, ["index", "size"]);
        const proof = await reads.inclusion(index, size);
        return (reply) => sendSuccess(reply, proof);
      },
    },
    { url: "/kt/v1/tile/*", rpc: KEY_LOG.GetTile, run: (request) => tileOf(reads, request) },
    {
      url: "/kt/v1/directory/:sha256",
      rpc: KEY_LOG.GetDirectory,
      run: (request) => directoryOf(reads, request),
    },
    {
      url: "/kt/v1/entries",
      rpc: KEY_LOG.ListEntries,
      run: async (request) => {
        const reader = await entriesReader(options, request);
        const { start, end } = integers(request, ["start", "end"]);
        const entries = await reads.entries(start, end);
        const call = { at: options.clock.now(), requestId: request.id, sourceIp: addressOf(request) };
        await options.store.audit.append(entriesAudit(reader, { start, end }, call));
        return (reply) => sendSuccess(reply, { entries: entries as never });
      },
    },
  ];
}

/** `GET /kt/v1/tile/<L>/<N>[.p/<W>]`: the tile's bytes, cacheable for good. */
async function tileOf(reads: KtReads, request: FastifyRequest): Promise<Answer> {
  const address = parseTilePath((request.params as { "*": string })["*"]);
  if (address === undefined)
    throw invalidRequest([{ field: "path", description: "is not a tile path <L>/<N>[.p/<W>]" }]);
  const bytes = await reads.tile(address);
  return (reply) =>
    reply.type("application/octet-stream").header("cache-control", IMMUTABLE).send(Buffer.from(bytes));
}

/** `GET /kt/v1/directory/{sha256}`: the snapshot's exact JSON, cacheable for good. */
async function directoryOf(reads: KtReads, request: FastifyRequest): Promise<Answer> {
  const { sha256 } = request.params as { sha256: string };
  if (!/^[0-9a-f]{64}$/.test(sha256)) {
    throw invalidRequest([{ field: "sha256", description: "must be 64 lower-case hexadecimal characters" }]);
  }
  const json = await reads.directory(sha256);
  return (reply) =>
    reply.type("application/json; charset=utf-8").header("cache-control", IMMUTABLE).send(json);
}

/**
 * Who may read leaf data: an issuer API key (a merchant's is `forbidden`), or an auditor's token that
 * the operator registered and did not revoke; `unauthorized` otherwise.
 */
async function entriesReader(options: KtRoutesOptions, request: FastifyRequest): Promise<EntriesReader> {
  const apiKey = request.headers["x-api-key"];
  if (typeof apiKey === "string" && apiKey !== "") {
    const principal = await authenticate(options.store, options.env, apiKey);
    if (principal.role !== "issuer")
      throw new AppError("forbidden", "Leaf data is for issuer keys and auditors.");
    return { kind: "issuer", tenantId: principal.tenantId };
  }
  const header = request.headers.authorization ?? "";
  const token = header.startsWith("Bearer ") ? header.slice("Bearer ".length) : "";
  const auditor =
    token === "" ? undefined : await options.store.ktLog.findAuditorByTokenHash(auditorTokenHash(token));
  if (auditor === undefined || auditor.revokedAt !== undefined) {
    throw new AppError(
      "unauthorized",
      "Leaf data needs an issuer API key (X-API-Key) or an auditor token (Authorization: Bearer).",
    );
  }
  return { kind: "auditor", auditor };
}
