import {
  type ApiKeyView,
  type AuditView,
  assignMerchant,
  type BinsView,
  createKey,
  escrowCounts,
  getBins,
  listKeys,
  type OperatorContext,
  readAudit,
  revokeKey,
  setBins,
} from "../domain/admin.js";
import { type CardTransfer, transferCard } from "../domain/card-transfer.js";
import type { Environment, EscrowCount, Store } from "../store/types.js";

/**
 * The operator's operations as the command line runs them: against a running server's operator API
 * (`--url`, with `ADMIN_TOKEN`), or against the configured store directly. Both give the same answers,
 * since the server runs the same domain functions (`domain/admin.ts`).
 */
export interface Operator {
  createKey(input: {
    tenant: string;
    role: string;
    tier?: string;
    merchantIds?: string[];
    name?: string;
  }): Promise<ApiKeyView>;
  listKeys(tenant?: string): Promise<ApiKeyView[]>;
  revokeKey(apiKeyId: string): Promise<void>;
  /** `extra`: the token BINs (absent: unchanged) and the roots' statements, as `PUT .../bins` takes them. */
  setBins(tenant: string, bins: string[], extra?: BinsExtra): Promise<BinsView>;
  getBins(tenant: string): Promise<BinsView>;
  assignMerchant(merchantId: string, tenant: string): Promise<void>;
  transferCard(userId: string, toTenant: string): Promise<CardTransfer>;
  readAudit(query: { tenant?: string; after?: string; limit?: string }): Promise<AuditView[]>;
  escrowCounts(): Promise<EscrowCount[]>;
}

/** What `bins set` may carry beside the BINs (`domain/admin.ts` `setBins`). */
export interface BinsExtra {
  tokenBins?: string[];
  statements?: unknown;
  releases?: unknown;
}

/**
 * The code of an {@link OperatorError} for a server whose operator API is off (every admin path is
 * 404): a configuration problem of the server, not a failed operation (exit code 78).
 */
export const OPERATOR_API_OFF = "operator_api_off";

/** An operator API call that failed, with the service's error code and message. */
export class OperatorError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "OperatorError";
  }
}

/** The operator against the store, with the audit naming the command line as the caller. */
export function storeOperator(store: Store, env: Environment): Operator {
  const ctx = (): OperatorContext => ({ store, env, now: new Date(), requestId: "cli", sourceIp: "cli" });
  return {
    createKey: (input) => createKey(ctx(), input),
    listKeys: (tenant) => listKeys(store, tenant),
    revokeKey: async (id) => {
      await revokeKey(ctx(), id);
    },
    setBins: (tenant, bins, extra) => setBins(ctx(), tenant, { bins, ...extra }),
    getBins: (tenant) => getBins(store, tenant),
    assignMerchant: async (merchantId, tenant) => {
      await assignMerchant(ctx(), merchantId, { tenant });
    },
    transferCard: (userId, toTenant) => transferCard(ctx(), { userId, toTenant }),
    readAudit: async (query) => (await readAudit(store, query)).events,
    escrowCounts: async () => (await escrowCounts(store, new Date())).escrow,
  };
}

/** The operator against a running server's operator API at `baseUrl`. */
export function httpOperator(baseUrl: string, token: string): Operator {
  const call = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
    const url = new URL(`/admin/v1${path}`, baseUrl);
    let response: Response;
    try {
      response = await fetch(url, {
        method,
        headers: {
          authorization: `Bearer ${token}`,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    } catch (e) {
      const cause = e instanceof Error && e.cause instanceof Error ? e.cause.message : String(e);
      throw new OperatorError("unreachable", `Cannot reach the server at ${url.origin} (${cause}).`);
    }
    const text = await response.text();
    let parsed: { success?: boolean; data?: T; error?: { code: string; message: string; details?: string } };
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new OperatorError(
        "bad_response",
        `The server answered HTTP ${response.status} without the JSON envelope.`,
      );
    }
    if (parsed.success === true) return parsed.data as T;
    const error = parsed.error ?? { code: `http_${response.status}`, message: "Request failed." };
    if (response.status === 404 && error.code === "not_found" && error.message.startsWith("No endpoint")) {
      throw new OperatorError(
        OPERATOR_API_OFF,
        "The operator API is off on this server: start it with ADMIN_TOKEN set.",
      );
    }
    throw new OperatorError(error.code, error.details ? `${error.message} ${error.details}` : error.message);
  };
  const q = (params: Record<string, string | undefined>) => {
    const entries = Object.entries(params).filter((e): e is [string, string] => e[1] !== undefined);
    return entries.length === 0 ? "" : `?${new URLSearchParams(entries).toString()}`;
  };
  const id = encodeURIComponent;
  return {
    createKey: (input) => call("POST", "/api-keys", input),
    listKeys: async (tenant) =>
      (await call<{ apiKeys: ApiKeyView[] }>("GET", `/api-keys${q({ tenant })}`)).apiKeys,
    revokeKey: async (apiKeyId) => {
      await call("DELETE", `/api-keys/${id(apiKeyId)}`);
    },
    setBins: async (tenant, bins, extra) =>
      binsView(await call<BinsView>("PUT", `/issuers/${id(tenant)}/bins`, { bins, ...extra })),
    getBins: async (tenant) => binsView(await call<BinsView>("GET", `/issuers/${id(tenant)}/bins`)),
    assignMerchant: async (merchantId, tenant) => {
      await call("PUT", `/merchants/${id(merchantId)}`, { tenant });
    },
    transferCard: (userId, toTenant) => call("POST", "/cards/transfer", { userId, toTenant }),
    readAudit: async (query) => (await call<{ events: AuditView[] }>("GET", `/audit${q(query)}`)).events,
    escrowCounts: async () => (await call<{ escrow: EscrowCount[] }>("GET", "/escrow")).escrow,
  };
}

/** A server's answer about BINs; one from before token BINs has none. */
function binsView(view: BinsView): BinsView {
  return { tenant: view.tenant, bins: view.bins, tokenBins: view.tokenBins ?? [] };
}
