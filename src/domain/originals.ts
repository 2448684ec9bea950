import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import type { ApiKeyRecord } from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import * as limits from "./limits.js";
import type { OriginalLookup } from "./transaction-fields.js";

/**
 * Whether the original receipt a refund or void names exists, looked up before the
 * receipt is validated so that a missing original is named with every other problem.
 *
 * "Exists" means: the service stores a receipt `(merchantId, originalReceiptId)` that the caller's
 * merchant tenant made, sealed by the service (encrypt, create) or by the merchant on its side
 * (`/receipts/sealed`, a payment's `sealedReceipt`). For a receipt the merchant sealed, the service
 * knows its ids (they travel in the clear, in the AAD) but not its content, so it cannot tell a sale
 * from a refund there: it checks that the id names a receipt, not what kind. A receipt that is gone
 * (its cardholder erased, its escrow expired) no longer exists; a refund of a payment whose receipt
 * is gone goes through the payment's refund, which knows the original from the payment record.
 * Nothing is looked up for a sale, or for ids the receipt rules refuse anyway.
 */
export async function originalReceiptOf(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: Pick<Receipt, "receiptType" | "originalReceiptId" | "merchantId">,
): Promise<OriginalLookup> {
  const type = input.receiptType;
  const original = input.originalReceiptId;
  if ((type !== "refund" && type !== "void") || original === undefined) return undefined;
  if (!isId(original) || !isId(input.merchantId)) return undefined;
  const found = await deps.store.receipts.findByMerchantReceipt(input.merchantId, original);
  return found !== undefined && found.merchantTenantId === principal.tenantId ? "found" : "missing";
}

function isId(value: string): boolean {
  return value.length > 0 && value.length <= limits.MAX_ID_LENGTH && limits.ID_PATTERN.test(value);
}
