import type { Filter } from "mongodb";
import { decodeCursor, encodeCursor } from "../cursor.js";
import {
  type EscrowCount,
  type EscrowQuery,
  pageLimitOf,
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
    return this.ctx.run(async () => {
      const found = await this.collection.findOne<ReceiptRecord>({ paymentId }, this.ctx.read);
      return found === null ? undefined : withAlgorithm(found);
    });
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
      const receipts = found.slice(0, limit).map(withAlgorithm);
      const last = receipts.at(-1);
      if (found.length <= limit || last === undefined) return { receipts };
      return { receipts, nextCursor: encodeCursor(last) };
    });
  }

  /** Oldest first on the `findEscrowed` index; one more than `limit` is read to know if more follow. */
  async findEscrowed(
    query: EscrowQuery,
    now: Date,
    requested: number,
    cursor?: string,
  ): Promise<ReceiptPage> {
    const limit = pageLimitOf(requested);
    const after = cursor === undefined ? undefined : decodeCursor(cursor);
    const owner: Filter<ReceiptRecord> = query.includeUnowned
      ? { $or: [{ escrowOwnerTenantId: query.ownerTenantId }, { escrowOwnerTenantId: { $exists: false } }] }
      : { escrowOwnerTenantId: query.ownerTenantId };
    const keys: Filter<ReceiptRecord>[] = [];
    if (query.escrowKeyIds !== undefined) keys.push({ escrowKeyId: { $in: [...query.escrowKeyIds] } });
    if (query.excludeEscrowKeyIds !== undefined) {
      keys.push({ escrowKeyId: { $nin: [...query.excludeEscrowKeyIds] } });
    }
    const position: Filter<ReceiptRecord>[] =
      after === undefined
        ? []
        : [
            {
              $or: [
                { createdAt: { $gt: after.createdAt } },
                { createdAt: after.createdAt, id: { $gt: after.id } },
              ],
            },
          ];
    const filter: Filter<ReceiptRecord> = {
      panHash: query.panHash,
      isEscrowed: true,
      expiresAt: { $gt: now },
      $and: [owner, ...keys, ...position],
    };
    return this.ctx.run(async () => {
      const found = await this.collection
        .find<ReceiptRecord>(filter, this.ctx.read)
        .sort({ createdAt: 1, id: 1 })
        .limit(limit + 1)
        .toArray();
      const receipts = found.slice(0, limit).map(withAlgorithm);
      const last = receipts.at(-1);
      if (found.length <= limit || last === undefined) return { receipts };
      return { receipts, nextCursor: encodeCursor(last) };
    });
  }

  findByMerchantReceipt(merchantId: string, receiptId: string): Promise<ReceiptRecord | undefined> {
    return this.ctx.run(async () => {
      const found = await this.collection.findOne<ReceiptRecord>({ merchantId, receiptId }, this.ctx.read);
      return found === null ? undefined : withAlgorithm(found);
    });
  }

  release(
    id: string,
    to: { userId: string; issuerTenantId: string; keyBundle: StoredKeyBundle },
    expectedEscrowKeyId?: string,
  ): Promise<boolean> {
    return this.ctx.run(async () => {
      // The `isEscrowed: true` condition makes the release happen once, even when two run at once.
      const filter: Filter<ReceiptRecord> =
        expectedEscrowKeyId === undefined
          ? { id, isEscrowed: true }
          : { id, isEscrowed: true, escrowKeyId: expectedEscrowKeyId };
      const result = await this.collection.updateOne(
        filter,
        {
          $set: {
            isEscrowed: false,
            userId: to.userId,
            issuerTenantId: to.issuerTenantId,
            keyBundle: { ...to.keyBundle },
          },
          $unset: { escrowKeyId: "", escrowOwnerTenantId: "", expiresAt: "" },
        },
        this.ctx.limit,
      );
      return result.matchedCount === 1;
    });
  }

  deleteByUser(userId: string): Promise<number> {
    return this.ctx.run(
      async () => (await this.collection.deleteMany({ userId }, this.ctx.limit)).deletedCount,
    );
  }

  deleteByPreviousOwner(merchantId: string, receiptId: string, ownerTenantId: string): Promise<boolean> {
    return this.ctx.run(async () => {
      const filter = { merchantId, receiptId, merchantTenantId: { $ne: ownerTenantId } };
      return (await this.collection.deleteOne(filter, this.ctx.limit)).deletedCount === 1;
    });
  }

  countEscrowed(now: Date): Promise<EscrowCount[]> {
    return this.ctx.run(async () => {
      const groups = await this.collection
        .aggregate<{ _id: { owner?: string; key: string }; count: number }>(
          [
            { $match: { isEscrowed: true, expiresAt: { $gt: now } } },
            { $group: { _id: { owner: "$escrowOwnerTenantId", key: "$escrowKeyId" }, count: { $sum: 1 } } },
            { $sort: { "_id.owner": 1, "_id.key": 1 } },
          ],
          this.ctx.limit,
        )
        .toArray();
      return groups.map((g) => {
        const count: EscrowCount = { escrowKeyId: g._id.key, count: g.count };
        if (typeof g._id.owner === "string") count.ownerTenantId = g._id.owner;
        return count;
      });
    });
  }

  /** Every receipt matching `filter`, oldest first (then by id). */
  private findAll(filter: Filter<ReceiptRecord>): Promise<ReceiptRecord[]> {
    return this.ctx.run(async () =>
      (
        await this.collection
          .find<ReceiptRecord>(filter, this.ctx.read)
          .sort({ createdAt: 1, id: 1 })
          .toArray()
      ).map(withAlgorithm),
    );
  }
}

/**
 * A stored receipt with its key bundle's suite: receipts stored before there were two suites have
 * none, and were all sealed with RSA-OAEP-256.
 */
function withAlgorithm(record: ReceiptRecord): ReceiptRecord {
  record.keyBundle.algorithm ??= "RSA-OAEP-256";
  return record;
}
