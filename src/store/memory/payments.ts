import type { CreatePaymentOutcome, PaymentRecord, PaymentStore, ReceiptRecord } from "../types.js";
import { copy } from "./copy.js";
import type { MemoryReceipts } from "./receipts.js";

/** Payments held in memory; a payment and its receipt are checked and stored in one synchronous step. */
export class MemoryPayments implements PaymentStore {
  private readonly byId = new Map<string, PaymentRecord>();
  private readonly idByTransaction = new Map<string, string>();

  constructor(private readonly receipts: MemoryReceipts) {}

  async createWithReceipt(payment: PaymentRecord, receipt: ReceiptRecord): Promise<CreatePaymentOutcome> {
    const transaction = `${payment.merchantId}\u0000${payment.transactionId}`;
    if (this.byId.has(payment.paymentId) || this.idByTransaction.has(transaction)) {
      return { kind: "duplicate_transaction" };
    }
    if (!this.receipts.canInsert(receipt)) return { kind: "duplicate_receipt" };
    this.byId.set(payment.paymentId, copy(payment));
    this.idByTransaction.set(transaction, payment.paymentId);
    this.receipts.put(receipt);
    return { kind: "created" };
  }

  async findById(paymentId: string): Promise<PaymentRecord | undefined> {
    return copy(this.byId.get(paymentId));
  }
}
