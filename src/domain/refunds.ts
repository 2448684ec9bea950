import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import { AppError, invalidRequest, Violations } from "../errors.js";
import { randomId } from "../ids.js";
import {
  type ApiKeyRecord,
  type HoldRefundOutcome,
  holdsCard,
  type PaymentPage,
  type PaymentRecord,
  type ReceiptRecord,
  type RefundRecord,
} from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import type { EventRecord } from "./event-types.js";
import { receiptEvents, refundedEvent } from "./events.js";
import { gatewayIdempotencyKey, refundTooLarge } from "./gateways/gateway.js";
import { gatewayByName } from "./gateways/index.js";
import type { CallerInfo } from "./grants.js";
import { MAX_ID_LENGTH } from "./limits.js";
import { assertMerchantIdUsable, claimMerchantId } from "./merchants.js";
import { withMockItems } from "./mock-items.js";
import { assertPlaintextAccepted } from "./plaintext-intake.js";
import { validateReceipt } from "./receipt-rules.js";
import { auditBindingConflict, type CardRef, cardKeyOfRef } from "./routing.js";
import { prepareSealed } from "./sealed.js";
import { type PreparedReceipt, sealForRecipient, settleStoredReceipt } from "./sealing.js";
import { applyMerchantSignature } from "./signatures.js";
import { checkRefundReceipt, type RefundOf } from "./transaction-fields.js";

/**
 * Payments a merchant reads and refunds: one payment, its tenant's payments page by
 * page, and refunds with a refund receipt. A merchant reads only its own tenant's payments (and, with
 * an API key limited to some merchantIds, only theirs); another tenant's payment is `not_found`, as
 * if it did not exist. None of it is receipt content: amounts, ids, statuses.
 *
 * A refund runs in three steps, so that refunds of one payment never add up to more than it charged
 * however many run at once, and a refund the gateway refuses leaves nothing behind: the store holds
 * the amount and stores the refund (`pending`) with its receipt, atomically (`holdRefund`); the
 * gateway refunds; the refund is marked `succeeded` (`completeRefund`), or, when the gateway refused,
 * removed with its receipt (`releaseRefund`). A process that stops between the first step and the
 * gateway's answer, or a gateway that fails without refusing (a timeout: it may have refunded), leaves
 * the refund `pending`, its amount held, for an operator to settle with the gateway's records.
 */

/** Default and maximum page sizes of payment listings. */
export const PAYMENT_PAGE_SIZE = { default: 50, max: 200 } as const;

/** One of the caller's payments; `not_found` for another tenant's, or another merchantId's for a limited key. */
export async function getPayment(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  paymentId: string,
): Promise<PaymentRecord> {
  if (paymentId === "") {
    const v = new Violations();
    v.add("paymentId", "is required");
    v.throwIfAny();
  }
  // Payment ids are `pay_` and 24 characters: anything far longer names no payment, and is not looked up.
  const payment =
    paymentId.length > MAX_ID_LENGTH ? undefined : await deps.store.payments.findById(paymentId);
  if (payment === undefined || !mayRead(principal, payment)) {
    throw new AppError("not_found", "Payment not found.");
  }
  return payment;
}

/** The caller's tenant's payments, newest first, `pageSize` (default 50, at most 200) at a time. */
export async function listPayments(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { pageSize: number; pageToken: string },
): Promise<PaymentPage> {
  const v = new Violations();
  if (input.pageSize < 0 || input.pageSize > PAYMENT_PAGE_SIZE.max) {
    v.add("pageSize", `must be from 1 to ${PAYMENT_PAGE_SIZE.max}`);
  }
  if (input.pageToken.length > 512) v.add("pageToken", "is not a valid page token");
  v.throwIfAny();
  // The store refuses a page token it did not make with invalid_request on pageToken.
  return deps.store.payments.listByTenant(
    principal.tenantId,
    input.pageSize || PAYMENT_PAGE_SIZE.default,
    input.pageToken || undefined,
    principal.merchantIds.length === 0 ? undefined : principal.merchantIds,
  );
}

/** A refund request after transport decoding. */
export interface RefundPaymentInput {
  paymentId: string;
  /** The refund receipt and `amount`, the amount to refund. */
  receipt: Receipt;
  /**
   * The `X-Receipt-Signature` header (README, "Merchant signatures"); unused for a receipt the merchant
   * sealed.
   */
  signature?: string | null;
  /** The caller's Idempotency-Key, passed on to the gateway (see `gatewayIdempotencyKey`). */
  idempotencyKey?: string | undefined;
}

/** A refund as answered to the merchant: the refund, the payment after it, and its receipt. */
export interface RefundedPayment {
  refund: RefundRecord;
  payment: PaymentRecord;
  receipt: ReceiptRecord;
}

/**
 * Refunds `amount` of one of the caller's payments through its gateway, with a refund receipt in the
 * clear (sealed here to the card, as create seals) or sealed by the merchant (`sealedReceipt`). Every
 * problem of the request is named at once (`invalid_request`), and nothing is written then.
 */
export async function refundPayment(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: RefundPaymentInput,
  caller: CallerInfo,
): Promise<RefundedPayment> {
  const payment = await getPayment(deps, principal, input.paymentId);
  if (payment.status !== "succeeded") throw nothingToRefund();
  const refundOf = refundOfPayment(payment);
  const { prepared, amount } =
    input.receipt.sealedReceipt === undefined
      ? await sealRefundReceipt(deps, principal, refundOf, input)
      : await takeSealedRefundReceipt(deps, principal, refundOf, input.receipt);
  const { record } = prepared;
  const refund: RefundRecord = {
    refundId: randomId("ref", 12),
    amount,
    status: "pending",
    receiptId: record.receiptId,
    createdAt: deps.clock.now(),
  };
  const held = heldPayment(await deps.store.payments.holdRefund(payment, refund, record), payment);
  const gateway = gatewayByName(payment.gateway, deps.gateways);
  const idempotencyKey = gatewayIdempotencyKey("refund", principal.id, input.idempotencyKey);
  let gatewayRefundId: string;
  try {
    ({ gatewayRefundId } = await gateway.refund({
      paymentId: payment.paymentId,
      orderId: payment.orderId,
      refundId: refund.refundId,
      amount,
      currency: payment.currency,
      payment: { status: held.status, amount: held.amount, refunded: (held.refundedAmount ?? 0) - amount },
      ...(idempotencyKey === undefined ? {} : { idempotencyKey }),
    }));
  } catch (err) {
    // Only a refusal frees the amount: after any other failure (a timeout) the gateway may have
    // refunded, and the refund stays pending, its amount held, until it is settled.
    if (err instanceof AppError && err.code === "invalid_request") {
      await deps.store.payments.releaseRefund(payment, refund.refundId, record);
    }
    throw err;
  }
  // The refund's events (docs/events.md) are written with its completion: a refused refund has none.
  const events = [refundedEvent(payment, refund.refundId, deps.clock.now()), ...receiptEvents(deps, record)];
  const after = await settleRefund(deps, payment, { refund, gatewayRefundId, events }, held);
  // Once the refund receipt is stored for good (a refused refund removes it): as create does.
  await auditBindingConflict(deps, principal, prepared.conflict, caller);
  await settleStoredReceipt(deps, record, prepared.card);
  await auditRefund(deps, principal, caller, payment);
  return { refund: { ...refund, status: "succeeded", gatewayRefundId }, payment: after, receipt: record };
}

/**
 * Marks the refund `succeeded`, and answers the payment after it. The gateway has refunded by then, so
 * that is the answer even when the store cannot be told (it is logged, and the refund stays pending).
 */
async function settleRefund(
  deps: DomainDeps,
  payment: PaymentRecord,
  done: { refund: RefundRecord; gatewayRefundId: string; events: EventRecord[] },
  held: PaymentRecord,
): Promise<PaymentRecord> {
  const { refund, gatewayRefundId, events } = done;
  try {
    return (
      (await deps.store.payments.completeRefund(payment, refund.refundId, gatewayRefundId, events)) ?? held
    );
  } catch (err) {
    deps.logger.warn(
      { err, refundId: refund.refundId },
      "a refund the gateway made could not be marked succeeded",
    );
    const refunds = (held.refunds ?? []).map((r) =>
      r.refundId === refund.refundId ? { ...r, status: "succeeded" as const, gatewayRefundId } : r,
    );
    return { ...held, refunds };
  }
}

/** Whether a merchant key may read a payment: its tenant's, and one of its merchantIds if it has a list. */
function mayRead(principal: ApiKeyRecord, payment: PaymentRecord): boolean {
  return (
    payment.merchantTenantId === principal.tenantId &&
    (principal.merchantIds.length === 0 || principal.merchantIds.includes(payment.merchantId))
  );
}

function refundOfPayment(payment: PaymentRecord): RefundOf {
  const refunded = payment.refundedAmount ?? 0;
  return {
    receiptId: payment.receiptId,
    merchantId: payment.merchantId,
    currency: payment.currency,
    charged: payment.amount,
    refunded,
    refundable: payment.amount - refunded,
  };
}

/** The refund receipt in the clear: the receipt rules and the refund's, signed if required, sealed here. */
async function sealRefundReceipt(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  refundOf: RefundOf,
  input: RefundPaymentInput,
): Promise<{ prepared: PreparedReceipt; amount: number }> {
  const receipt = withMockItems(
    validateReceipt(input.receipt, { mode: "payment", now: deps.clock.now(), refundOf }),
  );
  // The card's HMAC, taken once for the two checks and routing.
  const cardKey = cardKeyOfRef(deps, receipt);
  await assertPaymentsCard(deps, principal, refundOf, { card: receipt, cardKey });
  await assertMerchantIdUsable(deps, principal, receipt.merchantId);
  await assertPlaintextAccepted(deps, receipt, cardKey);
  await applyMerchantSignature(deps, input.receipt, receipt, input.signature ?? null);
  await claimMerchantId(deps, principal, receipt.merchantId);
  const prepared = await sealForRecipient(deps, principal, receipt, { cardKey });
  return { prepared, amount: receipt.amount ?? 0 };
}

/** The fields that may stand beside a refund's `sealedReceipt`: those of a payment's, without a nonce. */
const SEALED_REFUND_FIELDS: ReadonlySet<string> = new Set([
  "merchantId",
  "transactionId",
  "recipientHashedPan",
  "recipientPar",
  "currency",
  "amount",
  "cardBin",
  "sealedReceipt",
]);

/**
 * A refund receipt the merchant sealed: the refund's rules checked on the fields beside it, the sealed
 * parts by `prepareSealed`. The service cannot see that it says `receiptType: refund` and names the
 * payment's receipt: the merchant's client library seals that, and the cardholder's app reads it.
 */
async function takeSealedRefundReceipt(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  refundOf: RefundOf,
  receipt: Receipt,
): Promise<{ prepared: PreparedReceipt; amount: number }> {
  const v = new Violations();
  for (const [field, value] of Object.entries(receipt)) {
    if (field === "$typeName" || field === "$unknown" || SEALED_REFUND_FIELDS.has(field)) continue;
    const empty = value === undefined || value === "" || (Array.isArray(value) && value.length === 0);
    if (!empty) v.add(field, "cannot stand beside sealedReceipt: it belongs inside the sealed receipt");
  }
  const amount = receipt.amount === undefined ? undefined : Number(receipt.amount);
  checkRefundReceipt(v, receipt, amount, refundOf);
  v.throwIfAny();
  const sealed = receipt.sealedReceipt;
  const prepared = await prepareSealed(
    deps,
    principal,
    {
      recipientHashedPan: (receipt.recipientHashedPan ?? "").toLowerCase(),
      recipientPar: receipt.recipientPar,
      cardBin: receipt.cardBin,
      version: sealed?.version ?? "",
      receiptId: sealed?.receiptId ?? "",
      merchantId: receipt.merchantId,
      transactionId: receipt.transactionId,
      keyBundle: sealed?.keyBundle,
      ciphertext: sealed?.ciphertext ?? new Uint8Array(),
      iv: sealed?.iv ?? new Uint8Array(),
      authTag: sealed?.authTag ?? new Uint8Array(),
    },
    "sealedReceipt.",
  );
  await assertPaymentsCard(deps, principal, refundOf, {
    card: { recipientHashedPan: receipt.recipientHashedPan ?? "", recipientPar: receipt.recipientPar },
    cardKey: prepared.record.panHash,
  });
  return { prepared, amount: amount ?? 0 };
}

/**
 * Refuses (`invalid_request`) a refund receipt for another card than the payment's: the refund goes
 * back to the card that paid, and its receipt with it; a receipt in the clear for another card would
 * also take the refund of a card whose issuer refuses plaintext receipts in the clear. The payment's
 * card is its receipt's (gone once the cardholder erased it: then there is nothing to compare); a card
 * registered by both references is named by either. The error names the field, never the card.
 */
async function assertPaymentsCard(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  refundOf: RefundOf,
  { card, cardKey }: { card: CardRef; cardKey: string },
): Promise<void> {
  const original = await deps.store.receipts.findByMerchantReceipt(refundOf.merchantId, refundOf.receiptId);
  if (original === undefined || original.merchantTenantId !== principal.tenantId) return;
  if (cardKey === original.panHash) return;
  const user = await deps.store.users.findByPanHash(cardKey);
  if (user !== undefined && holdsCard(user, original.panHash)) return;
  const field = (card.recipientPar ?? "") === "" ? "recipientHashedPan" : "recipientPar";
  throw invalidRequest([{ field, description: "must name the card the payment was made with" }]);
}

/** The payment with the refund held, or the error of a hold the store refused. */
function heldPayment(outcome: HoldRefundOutcome, payment: PaymentRecord): PaymentRecord {
  switch (outcome.kind) {
    case "held":
      return outcome.payment;
    case "not_found":
      throw new AppError("not_found", "Payment not found.");
    case "not_refundable":
      throw nothingToRefund();
    case "over_amount": {
      const of = { amount: payment.amount, refunded: payment.amount - outcome.refundable };
      throw new AppError("invalid_request", "The refund is more than is left to refund.", {
        violations: [{ field: "amount", description: refundTooLarge(outcome.refundable, of) }],
      });
    }
    case "too_many":
      throw new AppError("invalid_request", "This payment has as many refunds as it can take.", {
        violations: [{ field: "paymentId", description: "has as many refunds as a payment can take" }],
      });
    case "duplicate_receipt":
      throw new AppError("conflict", "A receipt with this receiptId already exists for this merchantId.");
  }
}

/** The refusal of a refund of a payment that was declined. */
function nothingToRefund(): AppError {
  return new AppError("invalid_request", "A declined payment has nothing to refund.", {
    violations: [
      { field: "paymentId", description: "was declined: a declined payment has nothing to refund" },
    ],
  });
}

/**
 * Writes the refund to the audit log as `payment.refunded`, under the merchant's tenant. This is where
 * a refund is done and known: the `payment.refunded` event goes out from here.
 */
async function auditRefund(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  caller: CallerInfo,
  payment: PaymentRecord,
): Promise<void> {
  const event = {
    at: deps.clock.now(),
    action: "payment.refunded",
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    subject: payment.paymentId,
  };
  // The refund is done: a failure to write it down is logged, not answered (a retry would refund again).
  await deps.store.audit.append(event).catch((err: unknown) => {
    deps.logger.warn({ err, paymentId: payment.paymentId }, "could not audit a refund");
  });
}
