import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Clock } from "../clock.js";
import { authenticate } from "../domain/api-keys.js";
import {
  auditorTokenHash,
  type EntriesReader,
  entriesAudit,
  type KtReads,
  type TileAddress,
} from "../domain/kt/reads.js";
import { countInWindow } from "../domain/rate-limit.js";
import { AppError, invalidRequest } from "../errors.js";
import { tilePath } from "../kt/tiles.js";
import type { Environment, Store } from "../store/types.js";
import { clientAddressOf, NO_TRUSTED_PROXIES, type TrustedProxies } from "./client-address.js";
import { sendError, sendSuccess } from "./envelope.js";

/**
 * The key log's public reads (docs/key-transparency.md) under `/kt/v1`, beside the API: no API key, limited
 * per client address by the service's own limiter (`KT_READS_PER_MINUTE`, with the rate-limit headers),
 * errors in the REST envelope. `GET /kt/v1/checkpoint` (text: the newest checkpoint note with every
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
  readsPerMinute: number;
  trustedProxies?: TrustedProxies;
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

/** Registers the routes. */
export function registerKtRoutes(app: FastifyInstance, options: KtRoutesOptions): void {
  const proxies = options.trustedProxies ?? NO_TRUSTED_PROXIES;
  const addressOf = (request: FastifyRequest) =>
    clientAddressOf(request.socket.remoteAddress ?? "", request.headers["x-forwarded-for"], proxies);
  const route = (
    path: string,
    handle: (request: FastifyRequest, reply: FastifyReply) => Promise<FastifyReply>,
  ): void => {
    app.get(path, async (request, reply) => {
      try {
        const headers = await countInWindow(options, {
          counter: `ip:${addressOf(request)}:kt`,
          limit: options.readsPerMinute,
        });
        reply.headers(headers);
        return await handle(request, reply);
      } catch (err) {
        if (err instanceof AppError) reply.headers(err.headers);
        return sendError(request, reply, err);
      }
    });
  };
  const { reads } = options;
  route("/kt/v1/checkpoint", async (_request, reply) =>
    reply
      .type("text/plain; charset=utf-8")
      .header("cache-control", "no-store")
      .send(await reads.checkpointNote()),
  );
  route("/kt/v1/proof/consistency", async (request, reply) => {
    const { from, to } = integers(request, ["from", "to"]);
    return sendSuccess(reply, await reads.consistency(from, to));
  });
  route("/kt/v1/proof/inclusion", async (request, reply) => {
    const { index, size } = integers(request, ["index", "size"]);
    return sendSuccess(reply, await reads.inclusion(index, size));
  });
  route("/kt/v1/tile/*", async (request, reply) => {
    const address = parseTilePath((request.params as { "*": string })["*"]);
    if (address === undefined)
      throw invalidRequest([{ field: "path", description: "is not a tile path <L>/<N>[.p/<W>]" }]);
    const bytes = await reads.tile(address);
    return reply.type("application/octet-stream").header("cache-control", IMMUTABLE).send(Buffer.from(bytes));
  });
  route("/kt/v1/directory/:sha256", async (request, reply) => {
    const { sha256 } = request.params as { sha256: string };
    if (!/^[0-9a-f]{64}$/.test(sha256)) {
      throw invalidRequest([
        { field: "sha256", description: "must be 64 lower-case hexadecimal characters" },
      ]);
    }
    const json = await reads.directory(sha256);
    return reply.type("application/json; charset=utf-8").header("cache-control", IMMUTABLE).send(json);
  });
  route("/kt/v1/entries", async (request, reply) => {
    const reader = await entriesReader(options, request);
    const { start, end } = integers(request, ["start", "end"]);
    const entries = await reads.entries(start, end);
    const call = { at: options.clock.now(), requestId: request.id, sourceIp: addressOf(request) };
    await options.store.audit.append(entriesAudit(reader, { start, end }, call));
    return sendSuccess(reply, { entries: entries as never });
  });
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
