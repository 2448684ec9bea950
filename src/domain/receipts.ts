import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import { AppError, Violations } from "../errors.js";
import { type ApiKeyRecord, type ReceiptPage, type ReceiptRecord, receiptOwnerOf } from "../store/types.js";
import { type DecryptCredentials, openWithGrant } from "./decrypt.js";
import type { DomainDeps } from "./deps.js";
import { receiptEvents } from "./events.js";
import { type CallerInfo, INTERNAL_CALLER } from "./grants.js";
import { assertMerchantIdUsable, claimMerchantId, replacePreviousOwners } from "./merchants.js";
import { assertPlaintextAccepted } from "./plaintext-intake.js";
import { prepareReceipt } from "./prepare.js";
import type { ValidReceipt } from "./receipt-rules.js";
import { auditBindingConflict } from "./routing.js";
import { prepareSealed, type SealedInput } from "./sealed.js";
import { type PreparedReceipt, sealForRecipient, settleStoredReceipt } from "./sealing.js";
import { applyMerchantSignature } from "./signatures.js";

/** Default and maximum page sizes of receipt listings. */
export const PAGE_SIZE = { default: 50, max: 200 } as const;

/**
 * Encrypts a receipt without a payment and stores it, so the recipient's issuer can list
 * it. `(merchantId, receiptId)` is unique: a second encrypt of the same pair is `conflict`.
 * `signature` is the `X-Receipt-Signature` header, required once the merchantId has a signing key
 * (README, "Merchant signatures").
 */
export function encryptReceipt(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: Receipt,
  signature: string | null = null,
  caller: CallerInfo = INTERNAL_CALLER,
): Promise<ReceiptRecord> {
  // Steps, not one async function, so that neither the request nor the receipt is kept alive while
  // the worker seals (see sealForRecipient).
  return checkedReceipt(deps, principal, input, signature)
    .then(({ receipt, cardKey }) => sealForRecipient(deps, principal, receipt, { cardKey }))
    .then(async (prepared) => {
      // Sealed (and its card's BIN checked) before the merchantId is claimed: a refusal writes nothing.
      await claimMerchantId(deps, principal, prepared.record.merchantId);
      return storeReceipt(deps, principal, prepared, caller);
    });
}

/**
 * A receipt in the clear, validated and signed, once its merchantId and plaintext intake allow it;
 * with its card's keyed reference, for routing.
 */
async function checkedReceipt(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: Receipt,
  signature: string | null,
): Promise<{ receipt: ValidReceipt; cardKey: string }> {
  const receipt = await prepareReceipt(deps, principal, input);
  await assertMerchantIdUsable(deps, principal, receipt.merchantId);
  const cardKey = await assertPlaintextAccepted(deps, receipt);
  await applyMerchantSignature(deps, input, receipt, signature);
  return { receipt, cardKey };
}

/**
 * Stores a receipt the merchant sealed on its own side, as encrypt stores one it seals:
 * the service never sees the content.
 */
export async function storeSealedReceipt(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: SealedInput,
  caller: CallerInfo,
): Promise<ReceiptRecord> {
  const prepared = await prepareSealed(deps, principal, input, "");
  await claimMerchantId(deps, principal, input.merchantId);
  return storeReceipt(deps, principal, prepared, caller);
}

/**
/**
 * Stores a sealed receipt without a payment, with its events (`receipt.created` or `escrow.pending`)
 * in the same store operation: `(merchantId, receiptId)` must be unused, or used by a previous owner
 * of the merchantId ({@link replacePreviousOwners}). Then audits a binding conflict.
 */
async function storeReceipt(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  { record, conflict, card }: PreparedReceipt,
  caller: CallerInfo,
): Promise<ReceiptRecord> {
  const events = receiptEvents(deps, record);
  let stored = await deps.store.receipts.insert(record, events);
  const id = { receiptId: record.receiptId };
  if (!stored && (await replacePreviousOwners(deps, principal, id, record.merchantId, caller))) {
    stored = await deps.store.receipts.insert(record, events);
  }
  if (!stored) {
    throw new AppError("conflict", "A receipt with this receiptId already exists for this merchantId.");
  }
  // Most receipts have no conflict to audit: no turn spent on a call that would return at once.
  if (conflict !== undefined) await auditBindingConflict(deps, principal, conflict, caller);
  await settleStoredReceipt(deps, record, card);
  return record;
}

/** A decrypt-receipt request after transport decoding. */
export interface DecryptReceiptInput extends DecryptCredentials {
  receiptId: string;
  merchantId: string;
}

/** Decrypts a receipt made by encrypt, for the holder of a grant. */
export async function decryptReceipt(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: DecryptReceiptInput,
  caller: CallerInfo,
): Promise<Receipt> {
  if (input.receiptId === "") {
    const violations = new Violations();
    violations.add("receiptId", "is required");
    violations.throwIfAny();
  }
  return openWithGrant(
    deps,
    principal,
    input,
    async (owner) => {
      const found = await deps.store.receipts.findByReceiptId(input.receiptId, owner);
      const matching = input.merchantId ? found.filter((r) => r.merchantId === input.merchantId) : found;
      if (matching.length > 1) {
        throw new AppError("invalid_request", "Two merchants used this receiptId: send merchantId too.", {
          violations: [{ field: "merchantId", description: "is required: the receiptId is ambiguous" }],
        });
      }
      return matching[0];
    },
    { ...caller, action: "receipt.decrypted" },
  );
}

/** Lists a user's sealed receipts, newest first, for the issuer tenant that owns the user. */
export async function listReceipts(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { userId: string; pageSize: number; pageToken: string },
): Promise<ReceiptPage> {
  const violations = new Violations();
  if (input.userId === "") violations.add("userId", "is required");
  if (input.pageSize < 0 || input.pageSize > PAGE_SIZE.max) {
    violations.add("pageSize", `must be from 1 to ${PAGE_SIZE.max}`);
  }
  if (input.pageToken.length > 512) violations.add("pageToken", "is not a valid page token");
  violations.throwIfAny();
  const user = await deps.store.users.findById(input.userId);
  if (!user || user.tenantId !== principal.tenantId) throw new AppError("not_found", "User not found.");
  // The store rejects a page token it did not make with invalid_request on pageToken.
  return deps.store.receipts.listByUser(
    receiptOwnerOf(user),
    input.pageSize || PAGE_SIZE.default,
    input.pageToken || undefined,
  );
}

/** A merchant's own sealed receipt for one of its transactions. */
export async function getTransactionReceipt(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { transactionId: string; merchantId: string },
): Promise<ReceiptRecord> {
  if (input.transactionId === "") {
    const violations = new Violations();
    violations.add("transactionId", "is required");
    violations.throwIfAny();
  }
  const found = (await deps.store.receipts.findByTransaction(principal.tenantId, input.transactionId)).filter(
    (r) =>
      (input.merchantId === "" || r.merchantId === input.merchantId) &&
      (principal.merchantIds.length === 0 || principal.merchantIds.includes(r.merchantId)),
  );
  if (found.length > 1) {
    throw new AppError("invalid_request", "Two merchantIds used this transactionId: send merchantId too.", {
      violations: [{ field: "merchantId", description: "is required: the transactionId is ambiguous" }],
    });
  }
  const [record] = found;
  if (!record) throw new AppError("not_found", "Receipt not found.");
  return record;
}
