import type { EventRecord } from "../event-types.js";
import type { CreatePaymentOutcome, PaymentRecord, PaymentStore, ReceiptRecord } from "../types.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey } from "./errors.js";
import { announceEvents, insertEventsIn } from "./events.js";
import { COLLECTIONS } from "./indexes.js";
import { deleteReceiptIn, insertReceiptIn } from "./receipts.js";
import { scatterGather } from "./sharding.js";

/** Payments in the `payments` collection; unique `paymentId` and `(merchantId, transactionId)`. */
export class MongoPayments implements PaymentStore {
  constructor(private readonly ctx: MongoContext) {}

  private get payments() {
    return this.ctx.collection<PaymentRecord>(COLLECTIONS.payments);
  }

  /**
   * Inserts the payment, then its receipt with its claim, then its events (the outbox), in one
   * transaction: if an insert fails, nothing is kept. Which insert hit a unique index tells the outcome, checked in the same order as
   * the memory store (the transaction first).
   */
  createWithReceipt(
    payment: PaymentRecord,
    receipt: ReceiptRecord,
    events?: readonly EventRecord[],
  ): Promise<CreatePaymentOutcome> {
    return this.ctx.run(async () => {
      let inserting: "payment" | "receipt" = "payment";
      try {
        await this.ctx.transaction("payments.createWithReceipt", async (session) => {
          inserting = "payment";
          await this.payments.insertOne({ ...payment }, this.ctx.writeIn(session));
          inserting = "receipt";
          await insertReceiptIn(this.ctx, session, receipt);
          await insertEventsIn(this.ctx, session, events);
        });
        announceEvents(this.ctx, events);
        return { kind: "created" };
      } catch (err) {
        if (!isDuplicateKey(err)) throw err;
        return { kind: inserting === "payment" ? "duplicate_transaction" : "duplicate_receipt" };
      }
    });
  }

  /** The payment, its receipt and the receipt's claim go together, in one transaction. */
  deleteByPreviousOwner(merchantId: string, transactionId: string, ownerTenantId: string): Promise<boolean> {
    return this.ctx.run(() =>
      this.ctx.transaction("payments.deleteByPreviousOwner", async (session) => {
        const filter = { merchantId, transactionId, merchantTenantId: { $ne: ownerTenantId } };
        const payment = await this.payments.findOne<PaymentRecord>(filter, this.ctx.readIn(session));
        if (payment === null) return false;
        await this.payments.deleteOne({ merchantId, transactionId }, this.ctx.writeIn(session));
        await deleteReceiptIn(this.ctx, session, { merchantId, receiptId: payment.receiptId }, ownerTenantId);
        return true;
      }),
    );
  }

  findById(paymentId: string): Promise<PaymentRecord | undefined> {
    return this.ctx.run(
      async () =>
        (await this.payments.findOne<PaymentRecord>(
          { paymentId },
          { ...this.ctx.read, ...scatterGather("payments.findById") },
        )) ?? undefined,
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
