import { sha256Hex } from "../crypto/digest.js";
import { AppError, Violations } from "../errors.js";
import { randomId } from "../ids.js";
import type { ApiKeyRecord, GrantRecord } from "../store/types.js";
import type { DomainDeps } from "./deps.js";

/** At most this many unexpired grants per user. */
export const MAX_ACTIVE_GRANTS = 5;

/** SHA-256 of a token: the only form in which grants are stored and looked up. */
export function hashToken(tokenId: string): string {
  return sha256Hex(tokenId);
}

/** A grant as returned to the issuer: the stored record's public fields plus `tokenId`, shown once. */
export type Grant = Omit<GrantRecord, "tokenHash" | "tenantId"> & { tokenId: string };

/** Who asked, for the audit log. */
export interface CallerInfo {
  requestId: string;
  sourceIp: string;
}

/**
 * The caller of a domain call made from inside the service (tests, the command line): the RPC adapters
 * always pass the real one (`callerOf`).
 */
export const INTERNAL_CALLER: CallerInfo = { requestId: "internal", sourceIp: "" };

/**
 * Issues a short-lived decrypt grant for one of the user's keys (after the user consented on the
 * device). The token carries 192 random bits; only its hash is stored. A sixth unexpired grant for the
 * same user is refused with `rate_limit_exceeded` and `Retry-After` = seconds until the oldest expires.
 */
export async function grantAccess(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { userId: string; keyId: string },
  caller: CallerInfo,
): Promise<Grant> {
  const violations = new Violations();
  if (input.userId === "") violations.add("userId", "is required");
  if (input.keyId === "") violations.add("keyId", "is required");
  violations.throwIfAny();

  const user = await deps.store.users.findById(input.userId);
  if (!user || user.tenantId !== principal.tenantId) throw new AppError("not_found", "User not found.");
  const key = await deps.store.users.findKey(input.keyId.toLowerCase());
  if (!key || key.userId !== user.userId) throw new AppError("not_found", "Key not found for this user.");

  const tokenId = randomId("tok", 24);
  const grantedAt = deps.clock.now();
  const grant: GrantRecord = {
    tokenHash: hashToken(tokenId),
    tenantId: principal.tenantId,
    userId: user.userId,
    keyId: key.keyId,
    purpose: "decrypt",
    grantedAt,
    expiresAt: new Date(grantedAt.getTime() + deps.grantTtlSeconds * 1000),
    sourceIp: caller.sourceIp,
  };
  const outcome = await deps.store.grants.create(grant, MAX_ACTIVE_GRANTS, grantedAt);
  if (outcome.kind === "cap_reached") {
    const retryAfterSeconds = Math.max(
      1,
      Math.ceil((outcome.oldestExpiresAt.getTime() - grantedAt.getTime()) / 1000),
    );
    throw new AppError(
      "rate_limit_exceeded",
      `This user already has ${MAX_ACTIVE_GRANTS} active access tokens; try again when one expires.`,
      { retryAfterSeconds },
    );
  }
  await deps.store.audit.append({
    at: grantedAt,
    action: "grant.created",
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    userId: user.userId,
    keyId: key.keyId,
    subject: grant.tokenHash.slice(0, 8),
  });
  const { tokenHash: _hash, tenantId: _tenant, ...shown } = grant;
  return { tokenId, ...shown };
}

/**
 * Resolves a token for a decrypt call: it must exist, belong to the caller's tenant, be unexpired (the
 * store's TTL deletes late, so `expiresAt` is checked here against the clock).
 */
export async function validGrant(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  tokenId: string,
): Promise<GrantRecord> {
  const grant = await deps.store.grants.findByHash(hashToken(tokenId));
  if (!grant || grant.tenantId !== principal.tenantId)
    throw new AppError("not_found", "Access token not found.");
  if (grant.expiresAt.getTime() <= deps.clock.now().getTime()) {
    throw new AppError("forbidden", "The access token has expired; ask for a new grant.");
  }
  return grant;
}
