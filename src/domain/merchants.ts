import { AppError } from "../errors.js";
import type { ApiKeyRecord } from "../store/types.js";
import { assertMerchantAllowed } from "./api-keys.js";
import type { DomainDeps } from "./deps.js";

/**
 * Makes sure the caller may act for `merchantId` (section 18): the API key's allow-list, then
 * ownership: a merchantId belongs to the first merchant tenant that uses it, or to the one the
 * operator assigned it to; another tenant's use is `forbidden`. The first use claims it, so call this
 * once everything else about the request has been checked.
 */
export async function claimMerchantId(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  merchantId: string,
): Promise<void> {
  assertMerchantAllowed(principal, merchantId);
  // Almost every call names a merchantId that already has its owner: a read, not a write, then.
  const owner =
    (await deps.store.merchants.find(merchantId)) ??
    (await deps.store.merchants.claim(merchantId, principal.tenantId, deps.clock.now()));
  if (owner.tenantId !== principal.tenantId) throw merchantIdTaken();
}

/**
 * Refuses a merchantId the API key may not use or that belongs to another tenant, without claiming
 * it. Run before the checks that depend on the merchantId's owner (its signing key), so that another
 * tenant gets the documented `forbidden` rather than a signature error about someone else's key.
 */
export async function assertMerchantIdUsable(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  merchantId: string,
): Promise<void> {
  assertMerchantAllowed(principal, merchantId);
  const owner = await deps.store.merchants.find(merchantId);
  if (owner !== undefined && owner.tenantId !== principal.tenantId) throw merchantIdTaken();
}

/** The error of a merchantId used by a tenant it does not belong to. */
export function merchantIdTaken(): AppError {
  return new AppError("forbidden", "This merchantId belongs to another tenant.");
}
