import type { ClientSession, Filter } from "mongodb";
import { decodeCursor, encodeCursor } from "../cursor.js";
import type { EventRecord } from "../event-types.js";
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
import { announceEvents, insertEventsIn } from "./events.js";
import { COLLECTIONS } from "./indexes.js";
import { keyBundleDoc, type ReceiptDoc, receiptDoc, receiptRecord } from "./receipt-docs.js";
import { scatterGather } from "./sharding.js";

/**
 * The claim of a receipt's `(merchantId, receiptId)` in `receiptClaims`: its `_id` is the pair, so the
 * pair is unique on a cluster too (the receipts themselves are placed by card). It says where its
 * receipt lives, and lives as long as it: while the receipt is escrowed it carries its `expiresAt`.
 */
interface ClaimDoc {
  _id: { merchantId: string; receiptId: string };
  panHash: string;
  id: string;
  expiresAt?: Date;
}

/** The `_id` of the claim of `(merchantId, receiptId)`; always built here, so its fields keep their order. */
function claimId(merchantId: string, receiptId: string): ClaimDoc["_id"] {
  return { merchantId, receiptId };
}

function claimOf(receipt: ReceiptRecord): ClaimDoc {
  const claim: ClaimDoc = {
    _id: claimId(receipt.merchantId, receipt.receiptId),
    panHash: receipt.panHash,
    id: receipt.id,
  };
  if (receipt.isEscrowed && receipt.expiresAt !== undefined) claim.expiresAt = receipt.expiresAt;
  return claim;
}

/**
 * Writes a receipt and its claim in the transaction of `session` (`receipts.insert`, or a payment's):
 * a duplicate-key error (11000) when the pair is claimed, and nothing is written.
 */
export async function insertReceiptIn(
  ctx: MongoContext,
  session: ClientSession,
  receipt: ReceiptRecord,
): Promise<void> {
  await ctx.collection<ClaimDoc>(COLLECTIONS.receiptClaims).insertOne(claimOf(receipt), ctx.writeIn(session));
  await ctx.collection<ReceiptDoc>(COLLECTIONS.receipts).insertOne(receiptDoc(receipt), ctx.writeIn(session));
}

/**
 * The claims of receipts stored before claims existed (by an earlier version), made by the server in
 * one aggregation of `receipts`; existing claims are kept, so it can run again. Run once before the
 * earlier unique indexes are dropped and receipts sharded: docs/scaling.md shows it for mongosh.
 */
export const CLAIMS_BACKFILL = [
  {
    $project: {
      _id: { merchantId: "$merchantId", receiptId: "$receiptId" },
      panHash: 1,
      id: 1,
      expiresAt: { $cond: [{ $eq: ["$isEscrowed", true] }, "$expiresAt", "$$REMOVE"] },
    },
  },
  {
    $merge: {
      into: COLLECTIONS.receiptClaims,
      on: "_id",
      whenMatched: "keepExisting",
      whenNotMatched: "insert",
    },
  },
];

/** Sealed receipts in `receipts` (unique by card and `id`) and their claims in `receiptClaims`. */
export class MongoReceipts implements ReceiptStore {
  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<ReceiptDoc>(COLLECTIONS.receipts);
  }

  private get claims() {
    return this.ctx.collection<ClaimDoc>(COLLECTIONS.receiptClaims);
  }

  /** The receipt, its claim and its events (the outbox) in one transaction. */
  insert(receipt: ReceiptRecord, events?: readonly EventRecord[]): Promise<boolean> {
    return this.ctx.run(async () => {
      try {
        await this.ctx.transaction("receipts.insert", async (session) => {
          await insertReceiptIn(this.ctx, session, receipt);
          await insertEventsIn(this.ctx, session, events);
        });
        announceEvents(this.ctx, events);
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
    return this.findAll({ merchantTenantId, transactionId }, scatterGather("receipts.findByTransaction"));
  }

  findByPaymentId(paymentId: string): Promise<ReceiptRecord | undefined> {
    return this.ctx.run(async () => {
      const found = await this.collection.findOne<ReceiptDoc>({ paymentId }, this.ctx.read);
      return found === null ? undefined : receiptRecord(found);
    });
  }

  /** Keyset pagination on the `listByUser` index: one more than `limit` is read to know if more follow. */
  async listByUser(userId: string, limit: number, cursor?: string): Promise<ReceiptPage> {
    if (!Number.isInteger(limit) || limit < 1)
      throw new RangeError("The page size must be a positive integer.");
    const after = cursor === undefined ? undefined : decodeCursor(cursor);
    const filter: Filter<ReceiptDoc> =
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
        .find<ReceiptDoc>(filter, this.ctx.read)
        .sort({ createdAt: -1, id: -1 })
        .limit(limit + 1)
        .toArray();
      const receipts = found.slice(0, limit).map(receiptRecord);
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
    const owner: Filter<ReceiptDoc> = query.includeUnowned
      ? { $or: [{ escrowOwnerTenantId: query.ownerTenantId }, { escrowOwnerTenantId: { $exists: false } }] }
      : { escrowOwnerTenantId: query.ownerTenantId };
    const keys: Filter<ReceiptDoc>[] = [];
    if (query.escrowKeyIds !== undefined) keys.push({ escrowKeyId: { $in: [...query.escrowKeyIds] } });
    if (query.excludeEscrowKeyIds !== undefined) {
      keys.push({ escrowKeyId: { $nin: [...query.excludeEscrowKeyIds] } });
    }
    if (query.excludeHeld === true) keys.push({ escrowHeld: { $exists: false } });
    const position: Filter<ReceiptDoc>[] =
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
    const filter: Filter<ReceiptDoc> = {
      panHash: query.panHash,
      isEscrowed: true,
      expiresAt: { $gt: now },
      $and: [owner, ...keys, ...position],
    };
    return this.ctx.run(async () => {
      const found = await this.collection
        .find<ReceiptDoc>(filter, this.ctx.read)
        .sort({ createdAt: 1, id: 1 })
        .limit(limit + 1)
        .toArray();
      const receipts = found.slice(0, limit).map(receiptRecord);
      const last = receipts.at(-1);
      if (found.length <= limit || last === undefined) return { receipts };
      return { receipts, nextCursor: encodeCursor(last) };
    });
  }

  /**
   * Through the pair's claim, which says where the receipt lives; on a database not migrated yet
   * (`claimsMayBeMissing`), a pair without a claim is looked up on its earlier unique index.
   */
  findByMerchantReceipt(merchantId: string, receiptId: string): Promise<ReceiptRecord | undefined> {
    return this.ctx.run(async () => {
      const claim = await this.claims.findOne({ _id: claimId(merchantId, receiptId) }, this.ctx.limit);
      const filter: Filter<ReceiptDoc> | undefined =
        claim !== null
          ? { panHash: claim.panHash, id: claim.id }
          : this.ctx.claimsMayBeMissing
            ? { merchantId, receiptId }
            : undefined;
      if (filter === undefined) return undefined;
      const found = await this.collection.findOne<ReceiptDoc>(filter, this.ctx.read);
      return found === null ? undefined : receiptRecord(found);
    });
  }

  /**
   * In one transaction (`receipts.release`): the receipt, if still escrowed (to `expectedEscrowKeyId`
   * when given), gets its new key bundle, its claim loses the escrow's expiry, and its events are
   * written. Two releases of one receipt conflict; the retried one finds it released.
   */
  release(
    id: string,
    to: { userId: string; issuerTenantId: string; keyBundle: StoredKeyBundle },
    expectedEscrowKeyId?: string,
    events?: readonly EventRecord[],
  ): Promise<boolean> {
    return this.ctx.run(async () => {
      const released = await this.ctx.transaction("receipts.release", async (session) => {
        const filter: Filter<ReceiptDoc> =
          expectedEscrowKeyId === undefined
            ? { id, isEscrowed: true }
            : { id, isEscrowed: true, escrowKeyId: expectedEscrowKeyId };
        const found = await this.collection.findOne<ReceiptDoc>(filter, this.ctx.readIn(session));
        if (found === null) return false;
        await this.collection.updateOne(
          { panHash: found.panHash, id },
          {
            $set: {
              isEscrowed: false,
              userId: to.userId,
              issuerTenantId: to.issuerTenantId,
              keyBundle: keyBundleDoc(to.keyBundle),
            },
            $unset: {
              escrowKeyId: "",
              escrowOwnerTenantId: "",
              escrowCardBin: "",
              expiresAt: "",
              escrowHeld: "",
            },
          },
          this.ctx.writeIn(session),
        );
        await this.claims.updateOne(
          { _id: claimId(found.merchantId, found.receiptId) },
          { $unset: { expiresAt: "" } },
          this.ctx.writeIn(session),
        );
        await insertEventsIn(this.ctx, session, events);
        return true;
      });
      if (released) announceEvents(this.ctx, events);
      return released;
    });
  }

  /** Deletes the user's receipts and their claims (which say where the receipts were). */
  deleteByUser(userId: string): Promise<number> {
    return this.ctx.run(async () => {
      const found = await this.collection
        .find<Pick<ReceiptDoc, "merchantId" | "receiptId">>(
          { userId },
          { ...this.ctx.limit, projection: { _id: 0, merchantId: 1, receiptId: 1 } },
        )
        .toArray();
      if (found.length > 0) {
        const ids = found.map((r) => claimId(r.merchantId, r.receiptId));
        await this.claims.deleteMany({ _id: { $in: ids } }, this.ctx.limit);
      }
      return (await this.collection.deleteMany({ userId }, this.ctx.limit)).deletedCount;
    });
  }

  markHeld(panHash: string, id: string): Promise<void> {
    return this.ctx.run(async () => {
      await this.collection.updateOne(
        { panHash, id, isEscrowed: true },
        { $set: { escrowHeld: true } },
        this.ctx.limit,
      );
    });
  }

  /** Deletes the card's escrow held for the tenant, and the claims of what it deletes. */
  deleteEscrowedFor(panHash: string, ownerTenantId: string): Promise<number> {
    return this.deleteWithClaims({ panHash, isEscrowed: true, escrowOwnerTenantId: ownerTenantId });
  }

  async deleteIfSealedTo(
    panHash: string,
    merchantId: string,
    receiptId: string,
    keyId: string,
  ): Promise<boolean> {
    return (await this.deleteWithClaims({ panHash, merchantId, receiptId, "keyBundle.keyId": keyId })) > 0;
  }

  /**
   * Deletes the receipts of one card that match `filter`, and their claims: the claims first, as
   * `deleteByUser` does, so that a failure between the two leaves receipts that a retry deletes.
   */
  private deleteWithClaims(filter: Filter<ReceiptDoc> & { panHash: string }): Promise<number> {
    return this.ctx.run(async () => {
      const found = await this.collection
        .find<Pick<ReceiptDoc, "merchantId" | "receiptId">>(filter, {
          ...this.ctx.limit,
          projection: { _id: 0, merchantId: 1, receiptId: 1 },
        })
        .toArray();
      if (found.length === 0) return 0;
      const ids = found.map((r) => claimId(r.merchantId, r.receiptId));
      await this.claims.deleteMany({ _id: { $in: ids } }, this.ctx.limit);
      return (await this.collection.deleteMany(filter, this.ctx.limit)).deletedCount;
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
          { ...this.ctx.limit, ...scatterGather("receipts.countEscrowed") },
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
  private findAll(filter: Filter<ReceiptDoc>, options: { comment?: unknown } = {}): Promise<ReceiptRecord[]> {
    return this.ctx.run(async () =>
      (
        await this.collection
          .find<ReceiptDoc>(filter, { ...this.ctx.read, ...options })
          .sort({ createdAt: 1, id: 1 })
          .toArray()
      ).map(receiptRecord),
    );
  }
}
