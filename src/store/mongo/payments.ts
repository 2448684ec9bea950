import type { ClientSession, Filter } from "mongodb";
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
import { declareCollection } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey } from "./errors.js";
import { announceEvents, insertEventsIn } from "./events.js";
import { deleteReceiptIn, dropEscrowCopyOf, dropReceiptIn, insertReceiptIn } from "./receipts.js";
import { scatterGather } from "./sharding.js";

/** Payments, each with its refunds, unique by `(merchantId, transactionId)`. */
export const PAYMENTS = declareCollection({
  name: "payments",
  indexes: [
    // paymentId is random (96 bits): the index finds, the shard key's unique index is what refuses.
    { key: { paymentId: 1 }, name: "byPaymentId" },
    { key: { merchantId: 1, transactionId: 1 }, name: "uniq_merchantId_transactionId", unique: true },
    { key: { merchantTenantId: 1, createdAt: -1, paymentId: -1 }, name: "listByTenant" },
  ],
  shardKey: {
    key: { merchantId: 1, transactionId: 1 },
    unique: true,
    why:
      "Carries the rule `(merchantId, transactionId)` is unique; a merchant's payments spread over " +
      "chunks by transaction. A payment with its receipt and claim touches three shards at most.",
  },
});

/** Thrown inside a transaction to abort it with an outcome for the caller. */
class Refused {
  constructor(readonly outcome: HoldRefundOutcome) {}
}

/**
 * Payments in the `payments` collection; unique `paymentId` and `(merchantId, transactionId)`. A
 * payment's refunds live inside it (a few at most), so that holding a refund's amount is one
 * conditional update of one document.
 */
export class MongoPayments implements PaymentStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [PAYMENTS] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get payments() {
    return this.ctx.collection<PaymentRecord>(PAYMENTS.name);
  }

  /**
   * Replaces a declined payment of the transaction or inserts the payment, then inserts its receipt
   * with its claim, then its events (the outbox), in one transaction: if a write fails, nothing is kept.
   * Which write hit a unique index tells the outcome, checked in the same order as the memory store
   * (the transaction first).
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
          const options = this.ctx.writeIn(session);
          inserting = "payment";
          const { merchantId, transactionId } = payment;
          const replaced = await this.payments.replaceOne(
            { merchantId, transactionId, status: "declined" },
            { ...payment },
            options,
          );
          if (replaced.matchedCount === 0) await this.payments.insertOne({ ...payment }, options);
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

  /** An upsert that matches only a declined payment: over a charged one it inserts, and the unique index refuses. */
  /** The declined payment and its events, in one transaction (`payments.recordDecline`). */
  recordDecline(
    payment: PaymentRecord,
    events?: readonly EventRecord[],
  ): Promise<"recorded" | "duplicate_transaction"> {
    return this.ctx.run(async () => {
      const { merchantId, transactionId } = payment;
      try {
        await this.ctx.transaction("payments.recordDecline", async (session) => {
          await this.payments.replaceOne(
            { merchantId, transactionId, status: "declined" },
            { ...payment },
            { ...this.ctx.writeIn(session), upsert: true },
          );
          await insertEventsIn(this.ctx, session, events);
        });
      } catch (err) {
        if (isDuplicateKey(err)) return "duplicate_transaction";
        throw err;
      }
      announceEvents(this.ctx, events);
      return "recorded";
    });
  }

  /** The payment, its receipt and the receipt's claim go together, in one transaction. */
  deleteByPreviousOwner(merchantId: string, transactionId: string, ownerTenantId: string): Promise<boolean> {
    return this.ctx.run(async () => {
      const deleted = await this.ctx.transaction("payments.deleteByPreviousOwner", async (session) => {
        const filter = { merchantId, transactionId, merchantTenantId: { $ne: ownerTenantId } };
        const payment = await this.payments.findOne<PaymentRecord>(filter, this.ctx.readIn(session));
        if (payment === null) return undefined;
        await this.payments.deleteOne({ merchantId, transactionId }, this.ctx.writeIn(session));
        const receipt = { merchantId, receiptId: payment.receiptId };
        return { receipt: await deleteReceiptIn(this.ctx, session, receipt, ownerTenantId) };
      });
      await dropEscrowCopyOf(this.ctx, deleted?.receipt);
      return deleted !== undefined;
    });
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

  /** Keyset pagination on the `listByTenant` index: one more than `limit` is read to know if more follow. */
  listByTenant(
    merchantTenantId: string,
    limit: number,
    cursor?: string,
    merchantIds?: readonly string[],
  ): Promise<PaymentPage> {
    if (!Number.isInteger(limit) || limit < 1)
      throw new RangeError("The page size must be a positive integer.");
    const after = cursor === undefined ? undefined : decodeCursor(cursor);
    const filter: Filter<PaymentRecord> = { merchantTenantId };
    if (merchantIds !== undefined) filter.merchantId = { $in: [...merchantIds] };
    if (after !== undefined) {
      filter.$or = [
        { createdAt: { $lt: after.createdAt } },
        { createdAt: after.createdAt, paymentId: { $lt: after.id } },
      ];
    }
    return this.ctx.run(async () => {
      const found = await this.payments
        .find<PaymentRecord>(filter, { ...this.ctx.read, ...scatterGather("payments.listByTenant") })
        .sort({ createdAt: -1, paymentId: -1 })
        .limit(limit + 1)
        .toArray();
      const payments = found.slice(0, limit);
      const last = payments.at(-1);
      if (found.length <= limit || last === undefined) return { payments };
      return { payments, nextCursor: encodeCursor({ createdAt: last.createdAt, id: last.paymentId }) };
    });
  }

  /**
   * One conditional update holds the amount (it matches only while the held and refunded amounts
   * stay within the payment's amount, so concurrent refunds cannot overdraw it), then the refund
   * receipt is inserted in the same transaction.
   */
  holdRefund(ref: PaymentRef, refund: RefundRecord, receipt: ReceiptRecord): Promise<HoldRefundOutcome> {
    return this.ctx.run(async () => {
      try {
        return await this.ctx.transaction("payments.holdRefund", async (session) => {
          const options = this.ctx.writeIn(session);
          const held = await this.payments.updateOne(
            {
              ...refOf(ref),
              status: "succeeded",
              [`refunds.${MAX_REFUNDS_PER_PAYMENT - 1}`]: { $exists: false },
              $expr: { $lte: [{ $add: [{ $ifNull: ["$refundedAmount", 0] }, refund.amount] }, "$amount"] },
            },
            { $inc: { refundedAmount: refund.amount }, $push: { refunds: { ...refund } } },
            options,
          );
          if (held.matchedCount === 0) throw new Refused(await this.whyNotHeld(ref, refund, session));
          try {
            await insertReceiptIn(this.ctx, session, receipt);
          } catch (err) {
            if (isDuplicateKey(err)) throw new Refused({ kind: "duplicate_receipt" });
            throw err;
          }
          const payment = await this.payments.findOne<PaymentRecord>(refOf(ref), this.ctx.readIn(session));
          if (payment === null) throw new Error("A payment vanished inside its own transaction.");
          return { kind: "held", payment } as const;
        });
      } catch (err) {
        if (err instanceof Refused) return err.outcome;
        throw err;
      }
    });
  }

  /** Why {@link holdRefund}'s update matched nothing, read in its transaction. */
  private async whyNotHeld(ref: PaymentRef, refund: RefundRecord, session: ClientSession) {
    const payment = await this.payments.findOne<PaymentRecord>(refOf(ref), this.ctx.readIn(session));
    if (payment === null) return { kind: "not_found" } as const;
    if (payment.status !== "succeeded") return { kind: "not_refundable" } as const;
    const refundable = payment.amount - (payment.refundedAmount ?? 0);
    if (refund.amount > refundable) return { kind: "over_amount", refundable } as const;
    return { kind: "too_many" } as const;
  }

  /**
   * Marks the refund succeeded and writes its events, in one transaction (`payments.completeRefund`),
   * only while the refund is still pending: a second call changes nothing and writes no event.
   */
  completeRefund(
    ref: PaymentRef,
    refundId: string,
    gatewayRefundId: string,
    events?: readonly EventRecord[],
  ): Promise<PaymentRecord | undefined> {
    return this.ctx.run(async () => {
      const before = await this.payments.findOne<PaymentRecord>(refOf(ref), this.ctx.read);
      const refund = before?.refunds?.find((r) => r.refundId === refundId && r.status === "pending");
      if (refund === undefined) return before ?? undefined;
      const completed = await this.ctx.transaction("payments.completeRefund", async (session) => {
        // The element replaced whole (one path), and only while it is still pending.
        const result = await this.payments.updateOne(
          { ...refOf(ref), refunds: { $elemMatch: { refundId, status: "pending" } } },
          { $set: { "refunds.$[r]": { ...refund, status: "succeeded", gatewayRefundId } } },
          { ...this.ctx.writeIn(session), arrayFilters: [{ "r.refundId": refundId, "r.status": "pending" }] },
        );
        if (result.modifiedCount === 0) return false;
        await insertEventsIn(this.ctx, session, events);
        return true;
      });
      if (completed) announceEvents(this.ctx, events);
      return (await this.payments.findOne<PaymentRecord>(refOf(ref), this.ctx.read)) ?? undefined;
    });
  }

  /** The receipt and its claim are deleted by their keys, as the receipt given to `holdRefund` has them. */
  releaseRefund(ref: PaymentRef, refundId: string, receipt: ReceiptRecord): Promise<void> {
    return this.ctx.run(() =>
      this.ctx.transaction("payments.releaseRefund", async (session) => {
        const options = this.ctx.writeIn(session);
        const payment = await this.payments.findOne<PaymentRecord>(refOf(ref), this.ctx.readIn(session));
        const refund = payment?.refunds?.find((r) => r.refundId === refundId && r.status === "pending");
        if (payment === null || refund === undefined) return;
        // The payment's only refund: back to a payment that was never refunded, as it was before the hold.
        const only = payment.refunds?.length === 1;
        await this.payments.updateOne(
          { ...refOf(ref), refunds: { $elemMatch: { refundId, status: "pending" } } },
          only
            ? { $unset: { refunds: "", refundedAmount: "" } }
            : { $pull: { refunds: { refundId } }, $inc: { refundedAmount: -refund.amount } },
          options,
        );
        await dropReceiptIn(this.ctx, session, receipt);
      }),
    );
  }
}

/** The filter of the payment `ref` names: its shard key and its id. */
function refOf(ref: PaymentRef): Filter<PaymentRecord> {
  return { merchantId: ref.merchantId, transactionId: ref.transactionId, paymentId: ref.paymentId };
}
