import { AppError } from "../errors.js";
import type { ApiKeyRecord } from "../store/types.js";
import { assertMerchantAllowed } from "./api-keys.js";
import { recordChange } from "./audit.js";
import type { DomainDeps } from "./deps.js";
import type { CallerInfo } from "./grants.js";

/**
 * Makes sure the caller may act for `merchantId`: the API key's allow-list, then
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

/** A receiptId or a transactionId of a merchantId. */
export type MerchantRecordId = { receiptId: string } | { transactionId: string };

/**
 * Frees an id of `merchantId` that a record of another tenant holds. Only the owner of a
 * merchantId writes under it, so such a record was made by a previous owner: a squatter the operator
 * took the merchantId from, or the tenant it was moved from. The owner may use every receipt and
 * transaction id: the previous owner's receipt (or payment, with its receipt) that holds the id is
 * deleted, as erasure deletes, and audited under the owner's tenant. Call it only for the current
 * owner (after {@link claimMerchantId}); returns whether a record was deleted.
 */
export async function replacePreviousOwners(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  id: MerchantRecordId,
  merchantId: string,
  caller: CallerInfo,
): Promise<boolean> {
  const deleted =
    "receiptId" in id
      ? await deps.store.receipts.deleteByPreviousOwner(merchantId, id.receiptId, principal.tenantId)
      : await deps.store.payments.deleteByPreviousOwner(merchantId, id.transactionId, principal.tenantId);
  if (!deleted) return false;
  await recordChange(deps, {
    at: deps.clock.now(),
    action: "merchant.previous_owner_record_deleted",
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    subject:
      "receiptId" in id
        ? `${merchantId}: receipt ${id.receiptId}`
        : `${merchantId}: payment of transaction ${id.transactionId}`,
  });
  return true;
}
