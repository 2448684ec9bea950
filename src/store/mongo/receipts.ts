import type { Filter } from "mongodb";
import { decodeCursor, encodeCursor } from "../cursor.js";
import {
  type EscrowPage,
  escrowLimitOf,
  type ReceiptPage,
  type ReceiptRecord,
  type ReceiptStore,
  type StoredKeyBundle,
} from "../types.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey } from "./errors.js";
import { COLLECTIONS } from "./indexes.js";

/** Sealed receipts in the `receipts` collection; unique `id` and `(merchantId, receiptId)`. */
export class MongoReceipts implements ReceiptStore {
  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<ReceiptRecord>(COLLECTIONS.receipts);
  }

  insert(receipt: ReceiptRecord): Promise<boolean> {
    return this.ctx.run(async () => {
      try {
        await this.collection.insertOne({ ...receipt }, this.ctx.limit);
        return true;
      } catch (err) {
        if (isDuplicateKey(err)) return false;
        throw err;
      }
    });
  }

  findByReceiptId(receiptId: string, userId: string): Promise<ReceiptRecord[]> {
    return this.findAll({ userId, receiptId });
  }

  findByTransaction(merchantTenantId: string, transactionId: string): Promise<ReceiptRecord[]> {
    return this.findAll({ merchantTenantId, transactionId });
  }

  findByPaymentId(paymentId: string): Promise<ReceiptRecord | undefined> {
    return this.ctx.run(
      async () => (await this.collection.findOne<ReceiptRecord>({ paymentId }, this.ctx.read)) ?? undefined,
    );
  }

  /** Keyset pagination on the `listByUser` index: one more than `limit` is read to know if more follow. */
  async listByUser(userId: string, limit: number, cursor?: string): Promise<ReceiptPage> {
    if (!Number.isInteger(limit) || limit < 1)
      throw new RangeError("The page size must be a positive integer.");
    const after = cursor === undefined ? undefined : decodeCursor(cursor);
    const filter: Filter<ReceiptRecord> =
      after === undefined
        ? { userId }
        : {
            userId,
            $or: [
              { createdAt: { $lt: after.createdAt } },
              { createdAt: after.createdAt, id: { $lt: after.id } },
            ],
          };
    return this.ctx.run(async () => {
      const found = await this.collection
        .find<ReceiptRecord>(filter, this.ctx.read)
        .sort({ createdAt: -1, id: -1 })
        .limit(limit + 1)
        .toArray();
      const receipts = found.slice(0, limit);
      const last = receipts.at(-1);
      if (found.length <= limit || last === undefined) return { receipts };
      return { receipts, nextCursor: encodeCursor(last) };
    });
  }

  /** A page on the `listEscrowed_byTime` index (keyset pagination, oldest first). */
  async listEscrowed(panHash: string, now: Date, page?: EscrowPage): Promise<ReceiptRecord[]> {
    const limit = escrowLimitOf(page);
    const after = page?.after;
    const filter: Filter<ReceiptRecord> = { panHash, isEscrowed: true, expiresAt: { $gt: now } };
    if (after !== undefined) {
      filter.$or = [
        { createdAt: { $gt: after.createdAt } },
        { createdAt: after.createdAt, id: { $gt: after.id } },
      ];
    }
    return this.ctx.run(() =>
      this.collection
        .find<ReceiptRecord>(filter, this.ctx.read)
        .sort({ createdAt: 1, id: 1 })
        .limit(limit)
        .toArray(),
    );
  }

  release(
    id: string,
    to: { userId: string; issuerTenantId: string; keyBundle: StoredKeyBundle },
  ): Promise<boolean> {
    return this.ctx.run(async () => {
      // The `isEscrowed: true` condition makes the release happen once, even when two run at once.
      const result = await this.collection.updateOne(
        { id, isEscrowed: true },
        {
          $set: {
            isEscrowed: false,
            userId: to.userId,
            issuerTenantId: to.issuerTenantId,
            keyBundle: { keyId: to.keyBundle.keyId, encryptedAesKey: to.keyBundle.encryptedAesKey },
          },
          $unset: { escrowKeyId: "", expiresAt: "" },
        },
        this.ctx.limit,
      );
      return result.matchedCount === 1;
    });
  }

  /** Every receipt matching `filter`, oldest first (then by id). */
  private findAll(filter: Filter<ReceiptRecord>): Promise<ReceiptRecord[]> {
    return this.ctx.run(() =>
      this.collection.find<ReceiptRecord>(filter, this.ctx.read).sort({ createdAt: 1, id: 1 }).toArray(),
    );
  }
}
