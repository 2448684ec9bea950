import { decodeCursor, encodeCursor } from "../cursor.js";
import type { EventRecord } from "../event-types.js";
import {
  type CreatePaymentOutcome,
  type HoldRefundOutcome,
  MAX_REFUNDS_PER_PAYMENT,
  type PaymentPage,
  type PaymentRecord,
  type PaymentRef,
  type PaymentStore,
  type ReceiptRecord,
  type RefundRecord,
} from "../types.js";
import type { MemoryEvents } from "./events.js";
import { PairMap } from "./indexes.js";
import { ListingIndex } from "./listing.js";
import type { MemoryReceipts } from "./receipts.js";

/** A refund as the memory store keeps it: its time in milliseconds. */
type KeptRefund = Omit<RefundRecord, "createdAt"> & { createdAtMs: number };

/**
 * A payment as the memory store keeps it: its time in milliseconds instead of a `Date` (see
 * `KeptReceipt`), and its id also as `id`, the name the listing index orders by.
 */
type KeptPayment = Omit<
  PaymentRecord,
  "createdAt" | "refunds" | "clientSecretHash" | "declineCode" | "refundedAmount"
> & {
  id: string;
  createdAtMs: number;
  clientSecretHash: string | undefined;
  declineCode: string | undefined;
  refundedAmount: number | undefined;
  refunds: KeptRefund[] | undefined;
};

/**
 * Payments held in memory; a payment and its receipt, or a refund and its receipt, are checked and
 * stored in one synchronous step, which makes each atomic. As for receipts (`MemoryReceipts`), the
 * payment's own id, 96 random bits, is not checked for repeats (MongoDB's unique index on it would
 * refuse one).
 */
export class MemoryPayments implements PaymentStore {
  private readonly byId = new Map<string, KeptPayment>();
  /** By `(merchantId, transactionId)`, the pair that has at most one payment. */
  private readonly byTransaction = new PairMap<KeptPayment>();
  /** Each merchant tenant's payments in listing order. */
  private readonly byTenant = new ListingIndex<KeptPayment>();

  constructor(
    private readonly receipts: MemoryReceipts,
    private readonly events: MemoryEvents,
  ) {}

  async createWithReceipt(
    payment: PaymentRecord,
    receipt: ReceiptRecord,
    events?: readonly EventRecord[],
  ): Promise<CreatePaymentOutcome> {
    const earlier = this.byTransaction.get(payment.merchantId, payment.transactionId);
    if (earlier !== undefined && earlier.status !== "declined") return { kind: "duplicate_transaction" };
    if (!this.receipts.canInsert(receipt)) return { kind: "duplicate_receipt" };
    if (earlier !== undefined) this.forget(earlier);
    this.keep(payment);
    this.receipts.put(receipt);
    this.events.write(events);
    return { kind: "created" };
  }

  async recordDecline(
    payment: PaymentRecord,
    events?: readonly EventRecord[],
  ): Promise<"recorded" | "duplicate_transaction"> {
    const earlier = this.byTransaction.get(payment.merchantId, payment.transactionId);
    if (earlier !== undefined && earlier.status !== "declined") return "duplicate_transaction";
    if (earlier !== undefined) this.forget(earlier);
    this.keep(payment);
    this.events.write(events);
    return "recorded";
  }

  async deleteByPreviousOwner(
    merchantId: string,
    transactionId: string,
    ownerTenantId: string,
  ): Promise<boolean> {
    const kept = this.byTransaction.get(merchantId, transactionId);
    if (kept === undefined || kept.merchantTenantId === ownerTenantId) return false;
    this.forget(kept);
    this.receipts.deleteOfPayment(kept.paymentId);
    return true;
  }

  async findById(paymentId: string): Promise<PaymentRecord | undefined> {
    return recordOf(this.byId.get(paymentId));
  }

  async findByTransaction(merchantId: string, transactionId: string): Promise<PaymentRecord | undefined> {
    return recordOf(this.byTransaction.get(merchantId, transactionId));
  }

  async listByTenant(
    merchantTenantId: string,
    limit: number,
    cursor?: string,
    merchantIds?: readonly string[],
  ): Promise<PaymentPage> {
    if (!Number.isInteger(limit) || limit < 1)
      throw new RangeError("The page size must be a positive integer.");
    const after = cursor === undefined ? undefined : decodeCursor(cursor);
    const newestFirst = this.byTenant.newestFirst(
      merchantTenantId,
      limit + 1,
      after && { createdAtMs: after.createdAt.getTime(), id: after.id },
      merchantIds === undefined ? undefined : (kept) => merchantIds.includes(kept.merchantId),
    );
    const payments = newestFirst.slice(0, limit).map((kept) => recordOf(kept) as PaymentRecord);
    const last = payments.at(-1);
    if (newestFirst.length <= limit || last === undefined) return { payments };
    return { payments, nextCursor: encodeCursor({ createdAt: last.createdAt, id: last.paymentId }) };
  }

  async holdRefund(
    ref: PaymentRef,
    refund: RefundRecord,
    receipt: ReceiptRecord,
  ): Promise<HoldRefundOutcome> {
    const kept = this.find(ref);
    if (kept === undefined) return { kind: "not_found" };
    if (kept.status !== "succeeded") return { kind: "not_refundable" };
    const held = kept.refundedAmount ?? 0;
    if (held + refund.amount > kept.amount) return { kind: "over_amount", refundable: kept.amount - held };
    if ((kept.refunds?.length ?? 0) >= MAX_REFUNDS_PER_PAYMENT) return { kind: "too_many" };
    if (!this.receipts.canInsert(receipt)) return { kind: "duplicate_receipt" };
    kept.refundedAmount = held + refund.amount;
    kept.refunds = [...(kept.refunds ?? []), keepRefund(refund)];
    this.receipts.put(receipt);
    return { kind: "held", payment: recordOf(kept) as PaymentRecord };
  }

  async completeRefund(
    ref: PaymentRef,
    refundId: string,
    gatewayRefundId: string,
    events?: readonly EventRecord[],
  ): Promise<PaymentRecord | undefined> {
    const kept = this.find(ref);
    const refund = kept?.refunds?.find((r) => r.refundId === refundId && r.status === "pending");
    if (refund !== undefined) {
      refund.status = "succeeded";
      refund.gatewayRefundId = gatewayRefundId;
      this.events.write(events);
    }
    return recordOf(kept);
  }

  async releaseRefund(ref: PaymentRef, refundId: string, receipt: ReceiptRecord): Promise<void> {
    const kept = this.find(ref);
    const refund = kept?.refunds?.find((r) => r.refundId === refundId && r.status === "pending");
    if (kept === undefined || refund === undefined) return;
    const left = kept.refunds?.filter((r) => r !== refund) ?? [];
    // The payment's only refund: back to a payment that was never refunded, as it was before the hold.
    kept.refunds = left.length === 0 ? undefined : left;
    kept.refundedAmount = left.length === 0 ? undefined : (kept.refundedAmount ?? 0) - refund.amount;
    this.receipts.dropByMerchantReceipt(receipt.merchantId, receipt.receiptId);
  }

  /** The kept payment `ref` names: its id, under its `(merchantId, transactionId)`. */
  private find(ref: PaymentRef): KeptPayment | undefined {
    const kept = this.byTransaction.get(ref.merchantId, ref.transactionId);
    return kept?.paymentId === ref.paymentId ? kept : undefined;
  }

  private keep(payment: PaymentRecord): void {
    // Every field set, in one order, so that all kept payments share one shape (see `KeptReceipt`):
    // a spread copy here took about 880 bytes of heap per payment, this about 440.
    const kept: KeptPayment = {
      paymentId: payment.paymentId,
      id: payment.paymentId,
      merchantTenantId: payment.merchantTenantId,
      merchantId: payment.merchantId,
      transactionId: payment.transactionId,
      receiptId: payment.receiptId,
      gateway: payment.gateway,
      status: payment.status,
      amount: payment.amount,
      currency: payment.currency,
      orderId: payment.orderId,
      clientSecretHash: payment.clientSecretHash,
      createdAtMs: payment.createdAt.getTime(),
      declineCode: payment.declineCode,
      refundedAmount: payment.refundedAmount,
      refunds: payment.refunds?.map(keepRefund),
    };
    this.byId.set(kept.paymentId, kept);
    this.byTransaction.set(kept.merchantId, kept.transactionId, kept);
    this.byTenant.add(kept.merchantTenantId, kept);
  }

  private forget(kept: KeptPayment): void {
    this.byId.delete(kept.paymentId);
    this.byTransaction.delete(kept.merchantId, kept.transactionId);
    this.byTenant.delete(kept.merchantTenantId, kept);
  }
}

function keepRefund(refund: RefundRecord): KeptRefund {
  const { createdAt, ...fields } = refund;
  return { ...fields, createdAtMs: createdAt.getTime() };
}

/** A kept payment as the store's callers see it: a copy, with its `Date`s, without `id`. */
function recordOf(kept: KeptPayment | undefined): PaymentRecord | undefined {
  if (kept === undefined) return undefined;
  const { createdAtMs, id: _id, refunds, clientSecretHash, declineCode, refundedAmount, ...fields } = kept;
  const record: PaymentRecord = { ...fields, createdAt: new Date(createdAtMs) };
  if (clientSecretHash !== undefined) record.clientSecretHash = clientSecretHash;
  if (declineCode !== undefined) record.declineCode = declineCode;
  if (refundedAmount !== undefined) record.refundedAmount = refundedAmount;
  if (refunds !== undefined) {
    record.refunds = refunds.map(({ createdAtMs: ms, ...refund }) => ({
      ...refund,
      createdAt: new Date(ms),
    }));
  }
  return record;
}
