import { AppError, invalidRequest, Violations } from "../errors.js";
import type { BinKind, BinList, Environment, EscrowCount, Role, Store, Tier } from "../store/types.js";
import { createApiKey } from "./api-keys.js";
import { type OperatorAuditEvent, readOperatorAudit } from "./audit.js";
import { binChangeStatements, carriedStatements, type PrefixRef, refsMinus } from "./kt/bin-claims.js";
import { announceMoves, planMoves, releasedLists } from "./kt/bin-moves.js";
import { directoryChange } from "./kt/directory-change.js";
import { ID_PATTERN, MAX_ID_LENGTH } from "./limits.js";
import { BIN_PATTERN } from "./pan.js";

/**
 * The operator's operations: API keys, BIN prefixes of issuer tenants, merchantId
 * assignment, the audit log and escrow counts. The operator API (`src/http/admin.ts`) and the command
 * line (against the store) both call these, so the two cannot disagree. Inputs are plain JSON
 * values, checked here field by field.
 */

/** Who is calling an operator operation, and when: for the audit log of every change. */
export interface OperatorContext {
  store: Store;
  env: Environment;
  now: Date;
  /** The request id (operator API) or `cli` (command line against the store). */
  requestId: string;
  sourceIp: string;
}

/** Records an operator's change in the audit log under the tenant it concerns. */
export async function audit(
  ctx: OperatorContext,
  action: string,
  tenantId: string,
  subject: string,
  keys: { keyId?: string; previousKeyId?: string } = {},
): Promise<void> {
  await ctx.store.audit.append({
    at: ctx.now,
    action,
    tenantId,
    requestId: ctx.requestId,
    sourceIp: ctx.sourceIp,
    subject,
    byOperator: true,
    ...keys,
  });
}

/** The tenant id of audit events that concern no tenant (a failed operator login). */
export const NO_TENANT = "";

/**
 * Records a failed operator login: a missing or wrong bearer token, from `sourceIp`. Never the token
 * that was sent. Under {@link NO_TENANT}, so only the operator reads it.
 */
export async function recordFailedLogin(
  store: Store,
  attempt: {
    now: Date;
    requestId: string;
    sourceIp: string;
    method: string;
    path: string;
    tokenSent: boolean;
  },
): Promise<void> {
  await store.audit.append({
    at: attempt.now,
    action: "admin.login_failed",
    tenantId: NO_TENANT,
    requestId: attempt.requestId,
    sourceIp: attempt.sourceIp,
    subject: `${attempt.method} ${attempt.path.slice(0, 200)}: ${attempt.tokenSent ? "wrong token" : "no token"}`,
  });
}

/** An API key as an operator sees it: never its hash; the key itself only when it is created. */
export interface ApiKeyView {
  apiKeyId: string;
  /** Shown once, by {@link createKey}. */
  apiKey?: string;
  prefix: string;
  tenant: string;
  role: Role;
  tier: Tier;
  environment: Environment;
  merchantIds: string[];
  name: string;
  createdAt: string;
  revokedAt?: string;
}

const ROLES: readonly Role[] = ["issuer", "merchant"];
const TIERS: readonly Tier[] = ["sandbox", "standard", "enterprise"];
/** At most this many BIN prefixes per tenant, and merchantIds per key. */
export const MAX_LIST_ENTRIES = 1_000;

/** A plain object from a parsed JSON body, or `invalid_request`. */
export function objectOf(body: unknown): Record<string, unknown> {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new AppError("invalid_request", "The body must be a JSON object.");
  }
  return body as Record<string, unknown>;
}

/** Refuses members of `body` that are not in `allowed` (a typo must not silently drop data). */
export function onlyFields(v: Violations, body: Record<string, unknown>, allowed: readonly string[]): void {
  for (const field of Object.keys(body)) if (!allowed.includes(field)) v.add(field, "is not a known field");
}

/** Checks an id-like value (tenant, merchantId) with the rules of receipt ids. */
export function checkId(v: Violations, field: string, value: unknown): string {
  if (typeof value !== "string" || value === "") v.add(field, "is required");
  else if (value.length > MAX_ID_LENGTH || !ID_PATTERN.test(value)) {
    v.add(field, "must be 1-128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit");
  } else return value;
  return "";
}

function viewOf(record: Awaited<ReturnType<Store["apiKeys"]["list"]>>[number], apiKey?: string): ApiKeyView {
  const view: ApiKeyView = {
    apiKeyId: record.id,
    prefix: record.prefix,
    tenant: record.tenantId,
    role: record.role,
    tier: record.tier,
    environment: record.env,
    merchantIds: record.merchantIds,
    name: record.name,
    createdAt: record.createdAt.toISOString(),
  };
  if (apiKey !== undefined) view.apiKey = apiKey;
  if (record.revokedAt !== undefined) view.revokedAt = record.revokedAt.toISOString();
  return view;
}

/** Creates an API key from `{tenant, role, tier?, merchantIds?, name?}`; the key is in the answer once. */
export async function createKey(ctx: OperatorContext, body: unknown): Promise<ApiKeyView> {
  const input = objectOf(body);
  const v = new Violations();
  onlyFields(v, input, ["tenant", "role", "tier", "merchantIds", "name"]);
  const tenantId = checkId(v, "tenant", input.tenant);
  const role = input.role as Role;
  if (!ROLES.includes(role)) v.add("role", "must be issuer or merchant");
  const tier = (input.tier ?? "standard") as Tier;
  if (!TIERS.includes(tier)) v.add("tier", "must be sandbox, standard or enterprise");
  const merchantIds = input.merchantIds ?? [];
  if (!Array.isArray(merchantIds) || merchantIds.length > MAX_LIST_ENTRIES) {
    v.add("merchantIds", `must be a list of at most ${MAX_LIST_ENTRIES} merchantIds`);
  } else {
    for (const [i, id] of merchantIds.entries()) checkId(v, `merchantIds[${i}]`, id);
    if (merchantIds.length > 0 && role === "issuer") v.add("merchantIds", "is only for merchant keys");
  }
  const name = input.name ?? "";
  if (typeof name !== "string" || name.length > 200) v.add("name", "must be text of at most 200 characters");
  v.throwIfAny();
  const { key, record } = await createApiKey(
    ctx.store,
    ctx.env,
    { tenantId, role, tier, merchantIds: merchantIds as string[], name: name as string },
    ctx.now,
  );
  await audit(ctx, "admin.api_key.created", tenantId, record.id);
  return viewOf(record, key);
}

/** Every API key, or those of one tenant, oldest first. */
export async function listKeys(store: Store, tenant: string | undefined): Promise<ApiKeyView[]> {
  if (tenant !== undefined) {
    const v = new Violations();
    checkId(v, "tenant", tenant);
    v.throwIfAny();
  }
  return (await store.apiKeys.list(tenant)).map((record) => viewOf(record));
}

/** Revokes an API key; `not_found` when no key has that id. */
export async function revokeKey(ctx: OperatorContext, apiKeyId: string): Promise<{ apiKeyId: string }> {
  const record = (await ctx.store.apiKeys.list()).find((k) => k.id === apiKeyId);
  if (record === undefined || !(await ctx.store.apiKeys.revoke(apiKeyId, ctx.now))) {
    throw new AppError("not_found", "No API key has this id.");
  }
  await audit(ctx, "admin.api_key.revoked", record.tenantId, apiKeyId);
  return { apiKeyId };
}

/**
 * Refuses a tenant that has no API key of `role`: a typo, or a tenant of the other role, would own BIN
 * prefixes or merchantIds that no caller of that role can use.
 */
export async function assertTenantOf(
  store: Store,
  tenant: string,
  role: Role,
  field = "tenant",
): Promise<void> {
  if ((await store.apiKeys.list(tenant)).some((key) => key.role === role)) return;
  throw invalidRequest([
    { field, description: `has no ${role} API key: create one for tenant ${tenant} first` },
  ]);
}

/** An issuer tenant's prefixes: card BINs (`bins`) and wallet token BINs (`tokenBins`). */
export interface BinsView {
  tenant: string;
  bins: string[];
  tokenBins: string[];
}

/**
 * Sets an issuer tenant's BIN prefixes from `{bins: [...], tokenBins?: [...], statements?, releases?}`
 * (6 or 8 digits each), replacing its list of each kind given (`tokenBins` absent: its token BINs stay);
 * `conflict` naming the prefix when another tenant owns it or one overlapping it (BINs and token BINs
 * are one numbering space). Once the tenant has a confirmed root, `statements` carries its root's
 * claim of every prefix added and release of every prefix removed (`kt/bin-claims.ts`), else
 * `invalid_signature`. A prefix taken from a tenant with a confirmed root is taken in the same store
 * step as the owner's release in `releases`, or without one announced (`kt/bin-moves.ts`): the
 * answer's lists are those the tenant owns now, without it.
 */
export async function setBins(ctx: OperatorContext, tenant: string, body: unknown): Promise<BinsView> {
  const input = objectOf(body);
  const v = new Violations();
  onlyFields(v, input, ["bins", "tokenBins", "statements", "releases"]);
  checkId(v, "tenant", tenant);
  checkBinList(v, "bins", input.bins);
  if (input.tokenBins !== undefined) checkBinList(v, "tokenBins", input.tokenBins);
  v.throwIfAny();
  await assertTenantOf(ctx.store, tenant, "issuer");
  const asked = {
    bin: [...new Set(input.bins as string[])].sort(),
    token: input.tokenBins === undefined ? undefined : [...new Set(input.tokenBins as string[])].sort(),
  };
  const change = await planBinChange(ctx, tenant, asked, input);
  const outcome = await ctx.store.bins.setLists(change.lists, ctx.now, change.kt);
  if (outcome.kind === "log_refused") throw new AppError("conflict", outcome.reason);
  if (outcome.kind === "conflict") {
    throw new AppError(
      "conflict",
      `The BIN prefix ${outcome.bin} (or one overlapping it) belongs to another tenant.`,
    );
  }
  await announceMoves(ctx.store, tenant, change.moves, change.after, ctx.now);
  const announced = change.moves.announced.map((m) => `${m.kind} ${m.prefix} from ${m.from}`).join(",");
  const shown = (refs: readonly PrefixRef[]) =>
    refs.map((r) => (r.kind === "bin" ? r.prefix : `token ${r.prefix}`)).join(",") || "none";
  await audit(
    ctx,
    "admin.bins.set",
    tenant,
    `before: ${shown(change.before)}; after: ${shown(change.after)}` +
      (announced === "" ? "" : `; moving, in 7 days unless released: ${announced}`),
  );
  return await getBins(ctx.store, tenant);
}

function checkBinList(v: Violations, field: string, bins: unknown): void {
  if (!Array.isArray(bins) || bins.length > MAX_LIST_ENTRIES) {
    v.add(field, `must be a list of at most ${MAX_LIST_ENTRIES} BIN prefixes`);
    return;
  }
  bins.forEach((bin, i) => {
    if (typeof bin !== "string" || !BIN_PATTERN.test(bin)) v.add(`${field}[${i}]`, "must be 6 or 8 digits");
  });
}

const refsOf = (kind: BinKind, prefixes: readonly string[]): PrefixRef[] =>
  prefixes.map((prefix) => ({ prefix, kind }));

/**
 * What a BIN change of `tenant` to `asked` writes in its one store step: the lists it owns now
 * (without the prefixes still moving to it), the lists of the owners whose roots released a prefix
 * to it, and the statements or directory change that go with them; and the moves it announces.
 */
async function planBinChange(
  ctx: OperatorContext,
  tenant: string,
  asked: { bin: string[]; token: string[] | undefined },
  input: Record<string, unknown>,
) {
  const carried = carriedStatements(input.statements);
  const releases = carriedStatements(input.releases, "releases");
  const before = [
    ...refsOf("bin", await ctx.store.bins.list(tenant, "bin")),
    ...refsOf("token-bin", await ctx.store.bins.list(tenant, "token-bin")),
  ];
  const waiting = ((await ctx.store.ktIssuers.get(tenant))?.binMoves ?? []).map((m) => ({
    prefix: m.prefix,
    kind: m.kind,
  }));
  const known = [...before, ...refsMinus(waiting, before)];
  const after = [
    ...refsOf("bin", asked.bin),
    ...(asked.token === undefined
      ? known.filter((r) => r.kind === "token-bin")
      : refsOf("token-bin", asked.token)),
  ];
  // The directory changed: the key log snapshots it (docs/key-transparency.md), written with the
  // change: the root's statements once the tenant has a confirmed root, else a directory change.
  const signed = await binChangeStatements(ctx.store, tenant, { before: known, after }, carried, ctx.now);
  const moves = await planMoves(ctx.store, tenant, refsMinus(after, known), releases, ctx.now);
  const released = await releasedLists(ctx.store, moves);
  const later = [...moves.announced, ...waiting];
  const owned = refsMinus(after, later);
  const mine = (kind: BinKind): BinList => ({
    tenantId: tenant,
    kind,
    bins: owned.filter((r) => r.kind === kind).map((r) => r.prefix),
  });
  return {
    before,
    after,
    lists: [...released.lists, mine("bin"), mine("token-bin")],
    kt: [...released.kt, ...(signed ?? [directoryChange("bins.set", ctx.now, tenant)])],
    moves,
  };
}

/** An issuer tenant's BIN and token-BIN prefixes. */
export async function getBins(store: Store, tenant: string): Promise<BinsView> {
  const v = new Violations();
  checkId(v, "tenant", tenant);
  v.throwIfAny();
  const [bins, tokenBins] = await Promise.all([
    store.bins.list(tenant, "bin"),
    store.bins.list(tenant, "token-bin"),
  ]);
  return { tenant, bins, tokenBins };
}

/**
 * Assigns a merchantId to a merchant tenant from `{tenant}`: the operator's word is final, and a
 * signing key the previous owner registered for it is removed (it would lock the new owner out, and
 * it never spoke for the merchantId: receipts signed with it no longer verify on the cardholder's
 * app). The receipts and payments the previous owner made under the merchantId stay until the owner
 * reuses one of their ids (`replacePreviousOwners`). Audited under both tenants, with the signing key
 * before and after.
 */
export async function assignMerchant(
  ctx: OperatorContext,
  merchantId: string,
  body: unknown,
): Promise<{ merchantId: string; tenant: string; assignedAt: string; signingKeyRemoved: boolean }> {
  const input = objectOf(body);
  const v = new Violations();
  onlyFields(v, input, ["tenant"]);
  checkId(v, "merchantId", merchantId);
  const tenant = checkId(v, "tenant", input.tenant);
  v.throwIfAny();
  await assertTenantOf(ctx.store, tenant, "merchant");
  const keyBefore = await ctx.store.merchantKeys.findByMerchantId(merchantId);
  const { record, previousTenantId } = await ctx.store.merchants.assign(merchantId, tenant, ctx.now);
  const signingKeyRemoved = await ctx.store.merchantKeys.removeUnlessOwnedBy(merchantId, tenant);
  const keyAfter = signingKeyRemoved ? undefined : await ctx.store.merchantKeys.findByMerchantId(merchantId);
  const keys = {
    ...(keyAfter === undefined ? {} : { keyId: keyAfter.merchantKeyId }),
    ...(keyBefore === undefined ? {} : { previousKeyId: keyBefore.merchantKeyId }),
  };
  const from = previousTenantId === undefined ? "no owner" : `tenant ${previousTenantId}`;
  await audit(ctx, "admin.merchant.assigned", tenant, `${merchantId} from ${from}`, keys);
  if (previousTenantId !== undefined && previousTenantId !== tenant) {
    await audit(
      ctx,
      "admin.merchant.unassigned",
      previousTenantId,
      `${merchantId} to tenant ${tenant}`,
      keys,
    );
  }
  return { merchantId, tenant, assignedAt: record.at.toISOString(), signingKeyRemoved };
}

/** An audit event as the operator reads it. */
export type AuditView = OperatorAuditEvent;

/**
 * Reads the audit log in the order it was written (oldest first), paged without skipping an event:
 * `tenant`, `after` (RFC 3339: where the first page starts), `limit` and `pageToken` optional.
 */
export function readAudit(
  store: Store,
  query: {
    tenant?: string | undefined;
    after?: string | undefined;
    limit?: string | undefined;
    pageToken?: string | undefined;
  },
): Promise<{ events: OperatorAuditEvent[]; nextPageToken: string }> {
  return readOperatorAudit(store, query, (v, tenant) => checkId(v, "tenant", tenant));
}

/** Unexpired escrowed receipts counted by owner tenant (absent: no owner) and escrow key id. */
export async function escrowCounts(store: Store, now: Date): Promise<{ escrow: EscrowCount[] }> {
  return { escrow: await store.receipts.countEscrowed(now) };
}
