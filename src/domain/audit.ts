import { createCipheriv, createDecipheriv, createHmac, randomBytes } from "node:crypto";
import { invalidRequest, Violations } from "../errors.js";
import { isRfc3339 } from "../proto-scalars.js";
import {
  AUDIT_PAGE_MAX,
  type AuditEvent,
  type AuditPage,
  type AuditQuery,
  type Store,
} from "../store/types.js";
import type { DomainDeps } from "./deps.js";

/**
 * The audit log as its readers see it (SECURITY.md, "The audit log"): an issuer tenant reads its own events,
 * the operator all of them, both in the order they were written and paged so that polling never skips
 * an event (`AuditStore.page`). Every key change is written with the key ids before and after.
 */

/** Default and largest number of audit events per page. */
export const AUDIT_PAGE = { default: 100, max: AUDIT_PAGE_MAX } as const;

/** The longest page token accepted; longer is not one of ours. */
const MAX_PAGE_TOKEN_LENGTH = 200;

/**
 * Writes the event of a change that has been made. The change stands whatever happens here: when the
 * write fails, the event (never secret) goes to the error log so it is not lost, and the failure
 * reaches the caller (503), who learns that the record may be missing.
 */
export async function recordChange(
  deps: Pick<DomainDeps, "store" | "logger">,
  event: AuditEvent,
): Promise<void> {
  try {
    await deps.store.audit.append(event);
  } catch (err) {
    deps.logger.error({ err, auditEvent: event }, "a change was made but its audit event was not written");
    throw err;
  }
}

/** A page request after transport decoding: `after` RFC 3339, `pageSize` 0 for the default. */
export interface AuditPageInput {
  after: string;
  pageSize: number;
  pageToken: string;
}

/**
 * The checked form of an {@link AuditPageInput}: its time and page size; `invalid_request` names each
 * bad field (`sizeField` is the page size's name: `limit` on the operator API).
 */
function checkPageInput(input: AuditPageInput, sizeField = "pageSize"): { after?: Date; limit: number } {
  const v = new Violations();
  let after: Date | undefined;
  if (input.after !== "") {
    // A real instant only: Date would read 2026-02-30 as 2 March.
    if (isRfc3339(input.after)) after = new Date(input.after);
    else v.add("after", "must be an RFC 3339 time, e.g. 2026-11-25T10:00:00Z");
  }
  if (!Number.isInteger(input.pageSize) || input.pageSize < 0 || input.pageSize > AUDIT_PAGE.max) {
    v.add(sizeField, `must be a whole number from 1 to ${AUDIT_PAGE.max}`);
  }
  if (input.pageToken.length > MAX_PAGE_TOKEN_LENGTH)
    v.add("pageToken", "is not a page token returned by this service");
  v.throwIfAny();
  return { ...(after === undefined ? {} : { after }), limit: input.pageSize || AUDIT_PAGE.default };
}

/** An audit event as an issuer reads it: what another party's call left is not that party's to show. */
export interface TenantAuditEvent {
  at: Date;
  action: string;
  /** `self` (the tenant's own call), `operator`, or `other_tenant`. */
  actor: "self" | "operator" | "other_tenant";
  /** Only for the tenant's own calls. */
  requestId: string;
  sourceIp: string;
  userId: string;
  keyId: string;
  previousKeyId: string;
  subject: string;
}

/**
 * One page of the calling issuer tenant's audit log, oldest first. The page token is the
 * store's cursor sealed for this tenant (AES-256-GCM under a key derived from the pepper, the tenant
 * id as additional data): it says nothing about other tenants' traffic, and another tenant's token,
 * or one changed by a byte, is `invalid_request`.
 */
export async function readTenantAudit(
  deps: DomainDeps,
  tenantId: string,
  input: AuditPageInput,
): Promise<{ events: TenantAuditEvent[]; nextPageToken: string }> {
  const { after, limit } = checkPageInput(input);
  const key = tokenKey(deps.pepper);
  const cursor = input.pageToken === "" ? undefined : openToken(key, tenantId, input.pageToken);
  const page = await deps.store.audit.page(
    { tenantId, ...(after === undefined ? {} : { after }) },
    limit,
    cursor,
  );
  return {
    events: page.events.map((event) => tenantViewOf(event, tenantId)),
    nextPageToken: sealToken(key, tenantId, page.cursor),
  };
}

/** How an issuer sees one of its events. */
function tenantViewOf(event: AuditEvent, tenantId: string): TenantAuditEvent {
  const actor = event.byOperator
    ? "operator"
    : event.actorTenantId !== undefined && event.actorTenantId !== tenantId
      ? "other_tenant"
      : "self";
  return {
    at: event.at,
    action: event.action,
    actor,
    requestId: actor === "self" ? event.requestId : "",
    sourceIp: actor === "self" ? event.sourceIp : "",
    userId: event.userId ?? "",
    keyId: event.keyId ?? "",
    previousKeyId: event.previousKeyId ?? "",
    subject: event.subject ?? "",
  };
}

/** An audit event as the operator reads it: everything, times as RFC 3339. */
export type OperatorAuditEvent = Omit<AuditEvent, "at"> & { at: string };

/**
 * One page of the whole audit log (or one tenant's), oldest first, for the operator: the query strings
 * of `GET /admin/v1/audit` (`tenant`, `after`, `limit`, `pageToken`). The operator sees every event,
 * so its page token is the store's cursor as it is.
 */
export async function readOperatorAudit(
  store: Store,
  query: {
    tenant?: string | undefined;
    after?: string | undefined;
    limit?: string | undefined;
    pageToken?: string | undefined;
  },
  checkTenant: (v: Violations, tenant: string) => void,
): Promise<{ events: OperatorAuditEvent[]; nextPageToken: string }> {
  const v = new Violations();
  if (query.tenant !== undefined) checkTenant(v, query.tenant);
  v.throwIfAny();
  // "" and "0" are not the default here: `limit` is either absent or a size.
  const size = query.limit === undefined ? 0 : /^[1-9]\d{0,3}$/.test(query.limit) ? Number(query.limit) : -1;
  const { after, limit } = checkPageInput(
    { after: query.after ?? "", pageSize: size, pageToken: query.pageToken ?? "" },
    "limit",
  );
  const storeQuery: AuditQuery = {
    ...(query.tenant === undefined ? {} : { tenantId: query.tenant }),
    ...(after === undefined ? {} : { after }),
  };
  const page: AuditPage = await store.audit.page(storeQuery, limit, query.pageToken || undefined);
  return {
    events: page.events.map(({ at, ...rest }) => ({ ...rest, at: at.toISOString() })),
    nextPageToken: page.cursor,
  };
}

/** The key that seals issuers' audit page tokens. */
function tokenKey(pepper: string): Buffer {
  return createHmac("sha256", pepper).update("audit-page-tokens").digest();
}

function sealToken(key: Buffer, tenantId: string, cursor: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", key, iv);
  cipher.setAAD(Buffer.from(tenantId, "utf8"));
  const body = Buffer.concat([cipher.update(cursor, "utf8"), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]).toString("base64url");
}

function openToken(key: Buffer, tenantId: string, token: string): string {
  const bytes = /^[A-Za-z0-9_-]+$/.test(token) ? Buffer.from(token, "base64url") : Buffer.alloc(0);
  // Only the spelling this service gave: base64 decoding drops a lone last character and unused bits.
  // secret-compare: a page cursor against its own re-encoding, not against a stored secret.
  if (bytes.length > 28 && bytes.toString("base64url") === token) {
    try {
      const decipher = createDecipheriv("aes-256-gcm", key, bytes.subarray(0, 12));
      decipher.setAAD(Buffer.from(tenantId, "utf8"));
      decipher.setAuthTag(bytes.subarray(12, 28));
      return Buffer.concat([decipher.update(bytes.subarray(28)), decipher.final()]).toString("utf8");
    } catch {
      // A token not sealed for this tenant by this service: answered below.
    }
  }
  throw invalidRequest([{ field: "pageToken", description: "is not a page token returned by this service" }]);
}
