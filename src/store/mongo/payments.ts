import type { CreatePaymentOutcome, PaymentRecord, PaymentStore, ReceiptRecord } from "../types.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey } from "./errors.js";
import { COLLECTIONS } from "./indexes.js";

/** Payments in the `payments` collection; unique `paymentId` and `(merchantId, transactionId)`. */
export class MongoPayments implements PaymentStore {
  constructor(private readonly ctx: MongoContext) {}

  private get payments() {
    return this.ctx.collection<PaymentRecord>(COLLECTIONS.payments);
  }

  /**
   * Inserts the payment, then its receipt, in one transaction: if either insert fails, neither is
   * kept. Which insert hit a unique index tells the outcome, checked in the same order as the memory
   * store (the transaction first).
   */
  createWithReceipt(payment: PaymentRecord, receipt: ReceiptRecord): Promise<CreatePaymentOutcome> {
    const receipts = this.ctx.collection<ReceiptRecord>(COLLECTIONS.receipts);
    return this.ctx.run(async () => {
      let inserting: "payment" | "receipt" = "payment";
      try {
        await this.ctx.transaction(async (session) => {
          inserting = "payment";
          await this.payments.insertOne({ ...payment }, this.ctx.writeIn(session));
          inserting = "receipt";
          await receipts.insertOne({ ...receipt }, this.ctx.writeIn(session));
        });
        return { kind: "created" };
      } catch (err) {
        if (!isDuplicateKey(err)) throw err;
        return { kind: inserting === "payment" ? "duplicate_transaction" : "duplicate_receipt" };
      }
    });
  }

  /** The payment and its receipt go together, in one transaction. */
  deleteByPreviousOwner(merchantId: string, transactionId: string, ownerTenantId: string): Promise<boolean> {
    const receipts = this.ctx.collection<ReceiptRecord>(COLLECTIONS.receipts);
    return this.ctx.run(() =>
      this.ctx.transaction(async (session) => {
        const filter = { merchantId, transactionId, merchantTenantId: { $ne: ownerTenantId } };
        const payment = await this.payments.findOne<PaymentRecord>(filter, this.ctx.readIn(session));
        if (payment === null) return false;
        await this.payments.deleteOne({ paymentId: payment.paymentId }, this.ctx.writeIn(session));
        await receipts.deleteOne({ paymentId: payment.paymentId }, this.ctx.writeIn(session));
        return true;
      }),
    );
  }

  findById(paymentId: string): Promise<PaymentRecord | undefined> {
    return this.ctx.run(
      async () => (await this.payments.findOne<PaymentRecord>({ paymentId }, this.ctx.read)) ?? undefined,
    );
  }

  findByTransaction(merchantId: string, transactionId: string): Promise<PaymentRecord | undefined> {
    return this.ctx.run(
      async () =>
        (await this.payments.findOne<PaymentRecord>({ merchantId, transactionId }, this.ctx.read)) ??
        undefined,
    );
  }
}
