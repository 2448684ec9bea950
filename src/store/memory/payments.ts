import type { EventRecord } from "../event-types.js";
import type { CreatePaymentOutcome, PaymentRecord, PaymentStore, ReceiptRecord } from "../types.js";
import type { MemoryEvents } from "./events.js";
import { PairMap } from "./indexes.js";
import type { MemoryReceipts } from "./receipts.js";

/** A payment as the memory store keeps it: its time in milliseconds instead of a `Date` (see `KeptReceipt`). */
type KeptPayment = Omit<PaymentRecord, "createdAt" | "clientSecretHash"> & {
  clientSecretHash: string | undefined;
  createdAtMs: number;
};

/**
 * Payments held in memory; a payment and its receipt are checked and stored in one synchronous step.
 * As for receipts (`MemoryReceipts`), the payment's own id, 96 random bits, is not checked for repeats
 * (MongoDB's unique index on it would refuse one).
 */
export class MemoryPayments implements PaymentStore {
  private readonly byId = new Map<string, KeptPayment>();
  /** By `(merchantId, transactionId)`, the pair that has at most one payment. */
  private readonly byTransaction = new PairMap<KeptPayment>();

  constructor(
    private readonly receipts: MemoryReceipts,
    private readonly events: MemoryEvents,
  ) {}

  async createWithReceipt(
    payment: PaymentRecord,
    receipt: ReceiptRecord,
    events?: readonly EventRecord[],
  ): Promise<CreatePaymentOutcome> {
    if (this.byTransaction.has(payment.merchantId, payment.transactionId)) {
      return { kind: "duplicate_transaction" };
    }
    if (!this.receipts.canInsert(receipt)) return { kind: "duplicate_receipt" };
    const kept: KeptPayment = {
      paymentId: payment.paymentId,
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
    };
    this.byId.set(kept.paymentId, kept);
    this.byTransaction.set(kept.merchantId, kept.transactionId, kept);
    this.receipts.put(receipt);
    this.events.write(events);
    return { kind: "created" };
  }

  async deleteByPreviousOwner(
    merchantId: string,
    transactionId: string,
    ownerTenantId: string,
  ): Promise<boolean> {
    const kept = this.byTransaction.get(merchantId, transactionId);
    if (kept === undefined || kept.merchantTenantId === ownerTenantId) return false;
    this.byId.delete(kept.paymentId);
    this.byTransaction.delete(merchantId, transactionId);
    this.receipts.deleteOfPayment(kept.paymentId);
    return true;
  }

  async findById(paymentId: string): Promise<PaymentRecord | undefined> {
    return recordOf(this.byId.get(paymentId));
  }

  async findByTransaction(merchantId: string, transactionId: string): Promise<PaymentRecord | undefined> {
    return recordOf(this.byTransaction.get(merchantId, transactionId));
  }
}

/** A kept payment as the store's callers see it: a copy, with its `Date`. */
function recordOf(kept: KeptPayment | undefined): PaymentRecord | undefined {
  if (kept === undefined) return undefined;
  const { createdAtMs, clientSecretHash, ...fields } = kept;
  return {
    ...fields,
    ...(clientSecretHash === undefined ? {} : { clientSecretHash }),
    createdAt: new Date(createdAtMs),
  };
}
