/* Over 400 lines on purpose: the MongoDB ReceiptStore, one class, with the receipt-and-claim write
 * helpers at the top that the payment store's transactions use too, so both write receipts one way. */
import type { ClientSession, Filter } from "mongodb";
import { decodeCursor, encodeCursor } from "../cursor.js";
import type { EventRecord } from "../event-types.js";
import { withSealedTexts } from "../sealed-texts.js";
import {
  deleteLimitOf,
  type EscrowCopy,
  type EscrowCopyPage,
  type EscrowCount,
  type EscrowQuery,
  ownerCards,
  pageLimitOf,
  type ReceiptOwner,
  type ReceiptPage,
  type ReceiptRecord,
  type ReceiptStore,
  type StoredKeyBundle,
} from "../types.js";
import { declareCollection, TTL_INDEX } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey } from "./errors.js";
import { announceEvents, insertEventsIn } from "./events.js";
import {
  type EscrowCopyDoc,
  escrowCopyRecord,
  keyBundleDoc,
  type ReceiptDoc,
  receiptDoc,
  receiptRecord,
  sealedTextsOfDoc,
} from "./receipt-docs.js";
import { scatterGather } from "./sharding.js";

/**
 * The claim of a receipt's `(merchantId, receiptId)` in `receiptClaims`: its `_id` is the pair, so the
 * pair is unique on a cluster too (the receipts themselves are placed by card). It says where its
 * receipt lives, and lives as long as it: while the receipt is escrowed it carries its `expiresAt`.
 */
export interface ClaimDoc {
  _id: { merchantId: string; receiptId: string };
  panHash: string;
  id: string;
  /** The receipt's, for the retention's TTL (`RECEIPT_RETENTION_DAYS`). */
  createdAt: Date;
  expiresAt?: Date;
}

/** Sealed receipts, unique by card and `id`. */
export const RECEIPTS = declareCollection({
  name: "receipts",
  indexes: [
    // `id` is unique per card, which a cluster can check (the shard key); `(merchantId, receiptId)` is
    // unique through receiptClaims. (An earlier version's uniq_id and uniq_merchantId_receiptId are
    // left in place by init: docs/scaling.md says when to drop them.)
    { key: { panHash: 1, id: 1 }, name: "uniq_panHash_id", unique: true },
    // A user's receipts on its card, newest first: the listing's pages, erasure's pages and counts, and
    // decrypt by receiptId (among a user's few receipts). Led by the card, as every such query is.
    // (It replaces an earlier version's listByUser and findByReceiptId: docs/scaling.md.)
    { key: { panHash: 1, userId: 1, createdAt: -1, id: -1 }, name: "byCardUser_newest" },
    { key: { merchantTenantId: 1, transactionId: 1 }, name: "findByTransaction" },
    {
      key: { paymentId: 1 },
      name: "findByPaymentId",
      partialFilterExpression: { paymentId: { $exists: true } },
    },
    // The card, then the sort: a page of a card's escrow reads only that page. Partial: delivered
    // receipts, nearly all of them, have no entry. (The key of an existing name cannot change, and
    // `createIndexes` refuses the old name with another key, hence a new name each time.)
    {
      key: { panHash: 1, createdAt: 1, id: 1 },
      name: "escrow_byCardTime",
      partialFilterExpression: { isEscrowed: true },
    },
    // Unreleased escrow is deleted after its retention; only escrowed receipts have `expiresAt`.
    {
      key: { expiresAt: 1 },
      name: "ttl_escrow",
      expireAfterSeconds: 0,
      partialFilterExpression: { isEscrowed: true },
    },
  ],
  // Delivered receipts are deleted `RECEIPT_RETENTION_DAYS` after they were made; escrowed ones keep their
  // own expiry (the retention is at least the escrow's, so a claim never goes before its escrowed receipt).
  retention: { key: { createdAt: 1 }, partialFilterExpression: { isEscrowed: false } },
  shardKey: {
    key: { panHash: 1, id: 1 },
    unique: true,
    why:
      "Every read of a cardholder's receipts names the card: listing, decrypt, escrow release, erasure. " +
      "`id` after it lets one card's receipts split over chunks, and the unique key keeps `id` unique per " +
      "card (cursors and release). `(merchantId, receiptId)` moves to receiptClaims.",
  },
});

/**
 * One document per receipt, `_id` its `{merchantId, receiptId}`: the rule that pair is unique, which
 * the receipts' shard key (the card) cannot carry on a cluster (docs/scaling.md). Written in the same
 * transaction as the receipt; it also says where the receipt lives (`panHash`, `id`).
 */
export const RECEIPT_CLAIMS = declareCollection({
  name: "receiptClaims",
  indexes: [
    // A claim lives as long as its receipt: while the receipt is escrowed it carries its `expiresAt`.
    {
      key: { expiresAt: 1 },
      name: "ttl_escrow",
      expireAfterSeconds: 0,
      partialFilterExpression: { expiresAt: { $exists: true } },
    },
  ],
  // Every claim goes `RECEIPT_RETENTION_DAYS` after it was made.
  retention: { key: { createdAt: 1 } },
  shardKey: {
    key: { _id: 1 },
    why:
      "`_id` is `{merchantId, receiptId}`: the shard key is the unique rule itself. Written in the " +
      "receipt's transaction.",
  },
});

/**
 * One document per receipt an issuer released from its own escrow: the escrow-wrapped key the release
 * replaced, kept until the escrow would have expired (TTL), for the issuer to release it again.
 */
export const ESCROW_COPIES = declareCollection({
  name: "escrowCopies",
  indexes: [
    // A receipt has one copy at most: by its card and id, the receipts' own unique key.
    { key: { panHash: 1, id: 1 }, name: "uniq_panHash_id", unique: true },
    // An issuer's copies of one card, oldest first (ListPendingEscrow with released).
    { key: { panHash: 1, ownerTenantId: 1, createdAt: 1, id: 1 }, name: "byCardOwner" },
    // The copy goes when the escrow would have expired; the receipt stays (it is in another collection).
    TTL_INDEX,
  ],
  shardKey: {
    key: { panHash: 1, id: 1 },
    unique: true,
    why:
      "Placed as its receipt is (the card, then the receipt's id): an issuer lists one card's copies and " +
      "releases one receipt again by card and id, and erasure deletes them by card; a TTL index deletes " +
      "each when its escrow would have expired. As many documents as issuer releases in the escrow retention.",
  },
});

/** The `_id` of the claim of `(merchantId, receiptId)`; always built here, so its fields keep their order. */
function claimId(merchantId: string, receiptId: string): ClaimDoc["_id"] {
  return { merchantId, receiptId };
}

/** The claim document of a receipt (exported for bench/doc-sizes.ts, which sizes what is stored). */
export function claimOf(receipt: ReceiptRecord): ClaimDoc {
  const claim: ClaimDoc = {
    _id: claimId(receipt.merchantId, receipt.receiptId),
    panHash: receipt.panHash,
    id: receipt.id,
    createdAt: receipt.createdAt,
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
  await ctx.collection<ClaimDoc>(RECEIPT_CLAIMS.name).insertOne(claimOf(receipt), ctx.writeIn(session));
  await ctx.collection<ReceiptDoc>(RECEIPTS.name).insertOne(receiptDoc(receipt), ctx.writeIn(session));
}

/** Where a receipt is: its card and its id (the shard key of receipts and of escrow copies). */
export type ReceiptPlace = Pick<ReceiptDoc, "panHash" | "id">;

/**
 * Deletes, in the transaction of `session`, the receipt the claim `id` points to and the claim, if a
 * tenant other than `ownerTenantId` made the receipt; returns where the deleted receipt was, if it
 * deleted one (its escrow copy goes after the commit: {@link dropEscrowCopyOf}).
 */
export async function deleteReceiptIn(
  ctx: MongoContext,
  session: ClientSession,
  id: ClaimDoc["_id"],
  ownerTenantId: string,
): Promise<ReceiptPlace | undefined> {
  const claims = ctx.collection<ClaimDoc>(RECEIPT_CLAIMS.name);
  const receipts = ctx.collection<ReceiptDoc>(RECEIPTS.name);
  const claim = await claims.findOne({ _id: id }, ctx.readIn(session));
  if (claim === null) return undefined;
  const filter = { panHash: claim.panHash, id: claim.id, merchantTenantId: { $ne: ownerTenantId } };
  if ((await receipts.deleteOne(filter, ctx.writeIn(session))).deletedCount !== 1) return undefined;
  await claims.deleteOne({ _id: id }, ctx.writeIn(session));
  return { panHash: claim.panHash, id: claim.id };
}

/**
 * Deletes the escrow copy of a receipt just deleted (an issuer release's copy, if it kept one), after
 * the transaction that deleted the receipt: in it, the copy would be one more shard. A failure between
 * the two leaves a copy without its receipt, which opens nothing, lists nowhere and goes at its expiry.
 */
export async function dropEscrowCopyOf(ctx: MongoContext, place: ReceiptPlace | undefined): Promise<void> {
  if (place === undefined) return;
  await ctx
    .collection<EscrowCopyDoc>(ESCROW_COPIES.name)
    .deleteOne({ panHash: place.panHash, id: place.id }, ctx.limit);
}

/**
 * Deletes a receipt and its claim in the transaction of `session`, by their keys (the card and `id`,
 * the pair): a refund's receipt when the gateway refused the refund (`payments.releaseRefund`).
 */
export async function dropReceiptIn(
  ctx: MongoContext,
  session: ClientSession,
  receipt: ReceiptRecord,
): Promise<void> {
  const claim = claimId(receipt.merchantId, receipt.receiptId);
  await ctx.collection<ClaimDoc>(RECEIPT_CLAIMS.name).deleteOne({ _id: claim }, ctx.writeIn(session));
  await ctx
    .collection<ReceiptDoc>(RECEIPTS.name)
    .deleteOne({ panHash: receipt.panHash, id: receipt.id }, ctx.writeIn(session));
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
      createdAt: 1,
      expiresAt: { $cond: [{ $eq: ["$isEscrowed", true] }, "$expiresAt", "$$REMOVE"] },
    },
  },
  {
    $merge: {
      into: RECEIPT_CLAIMS.name,
      on: "_id",
      whenMatched: "keepExisting",
      whenNotMatched: "insert",
    },
  },
];

/** Sealed receipts in `receipts` (unique by card and `id`) and their claims in `receiptClaims`. */
export class MongoReceipts implements ReceiptStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [RECEIPTS, RECEIPT_CLAIMS, ESCROW_COPIES] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<ReceiptDoc>(RECEIPTS.name);
  }

  private get claims() {
    return this.ctx.collection<ClaimDoc>(RECEIPT_CLAIMS.name);
  }

  private get copies() {
    return this.ctx.collection<EscrowCopyDoc>(ESCROW_COPIES.name);
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

  findByReceiptId(receiptId: string, owner: ReceiptOwner): Promise<ReceiptRecord[]> {
    return this.findAll({ ...ownerFilter(owner), receiptId });
  }

  findByTransaction(merchantTenantId: string, transactionId: string): Promise<ReceiptRecord[]> {
    return this.findAll({ merchantTenantId, transactionId }, scatterGather("receipts.findByTransaction"));
  }

  findByPaymentId(paymentId: string, owner: ReceiptOwner): Promise<ReceiptRecord | undefined> {
    return this.ctx.run(async () => {
      const found = await this.collection.findOne<ReceiptDoc>(
        { panHash: ownerFilter(owner).panHash, paymentId },
        this.ctx.read,
      );
      return found === null ? undefined : receiptRecord(found);
    });
  }

  /** Keyset pagination on the `listByUser` index: one more than `limit` is read to know if more follow. */
  async listByUser(owner: ReceiptOwner, limit: number, cursor?: string): Promise<ReceiptPage> {
    if (!Number.isInteger(limit) || limit < 1)
      throw new RangeError("The page size must be a positive integer.");
    const after = cursor === undefined ? undefined : decodeCursor(cursor);
    const mine = ownerFilter(owner);
    const filter: Filter<ReceiptDoc> =
      after === undefined
        ? mine
        : {
            ...mine,
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
      const docs = found.slice(0, limit);
      const receipts = docs.map(receiptRecord);
      const last = receipts.at(-1);
      const page: ReceiptPage =
        found.length <= limit || last === undefined
          ? { receipts }
          : { receipts, nextCursor: encodeCursor(last) };
      return withSealedTexts(
        page,
        docs.map((doc, i) => sealedTextsOfDoc(doc, receipts[i] as ReceiptRecord)),
      );
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
   * when given), gets its new key bundle, its claim loses the escrow's expiry, its escrow copy is
   * written (`keepEscrowCopy`) and its events are written. Two releases of one receipt conflict; the
   * retried one finds it released.
   */
  release(
    receipt: Pick<ReceiptRecord, "panHash" | "id">,
    to: { userId: string; issuerTenantId: string; keyBundle: StoredKeyBundle },
    expectedEscrowKeyId?: string,
    events?: readonly EventRecord[],
    keepEscrowCopy?: boolean,
  ): Promise<boolean> {
    const { panHash, id } = receipt;
    return this.ctx.run(async () => {
      const released = await this.ctx.transaction("receipts.release", async (session) => {
        const filter: Filter<ReceiptDoc> =
          expectedEscrowKeyId === undefined
            ? { panHash, id, isEscrowed: true }
            : { panHash, id, isEscrowed: true, escrowKeyId: expectedEscrowKeyId };
        const found = await this.collection.findOne<ReceiptDoc>(filter, this.ctx.readIn(session));
        if (found === null) return false;
        await this.collection.updateOne(
          { panHash, id },
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
        const copy = keepEscrowCopy === true ? copyDocOf(found) : undefined;
        if (copy !== undefined) {
          await this.copies.replaceOne({ panHash, id }, copy, { ...this.ctx.writeIn(session), upsert: true });
        }
        await insertEventsIn(this.ctx, session, events);
        return true;
      });
      if (released) announceEvents(this.ctx, events);
      return released;
    });
  }

  escrowCopyOf(receipt: Pick<ReceiptRecord, "panHash" | "id">, now: Date): Promise<EscrowCopy | undefined> {
    return this.ctx.run(async () => {
      const found = await this.copies.findOne<EscrowCopyDoc>(
        { panHash: receipt.panHash, id: receipt.id, expiresAt: { $gt: now } },
        this.ctx.read,
      );
      return found === null ? undefined : escrowCopyRecord(found);
    });
  }

  /**
   * The card's copies on the `byCardOwner` index, oldest first, one more than `limit` to know if more
   * follow; then their receipts by card and id. A copy whose receipt is gone (it cannot outlive it: the
   * receipts' retention is at least the escrow's) would be left out of its page.
   */
  async findEscrowCopies(
    query: { panHash: string; ownerTenantId: string },
    now: Date,
    requested: number,
    cursor?: string,
  ): Promise<EscrowCopyPage> {
    const limit = pageLimitOf(requested);
    const after = cursor === undefined ? undefined : decodeCursor(cursor);
    const filter: Filter<EscrowCopyDoc> = {
      panHash: query.panHash,
      ownerTenantId: query.ownerTenantId,
      expiresAt: { $gt: now },
      ...(after === undefined
        ? {}
        : {
            $or: [
              { createdAt: { $gt: after.createdAt } },
              { createdAt: after.createdAt, id: { $gt: after.id } },
            ],
          }),
    };
    return this.ctx.run(async () => {
      const found = await this.copies
        .find<EscrowCopyDoc>(filter, this.ctx.read)
        .sort({ createdAt: 1, id: 1 })
        .limit(limit + 1)
        .toArray();
      const page = found.slice(0, limit);
      const receipts = await this.collection
        .find<ReceiptDoc>({ panHash: query.panHash, id: { $in: page.map((c) => c.id) } }, this.ctx.read)
        .toArray();
      const byId = new Map(receipts.map((r) => [r.id, receiptRecord(r)]));
      const released = page.flatMap((c) => {
        const receipt = byId.get(c.id);
        return receipt === undefined ? [] : [{ receipt, copy: escrowCopyRecord(c) }];
      });
      const last = page.at(-1);
      if (found.length <= limit || last === undefined) return { released };
      return { released, nextCursor: encodeCursor(last) };
    });
  }

  /**
   * In one transaction (`receipts.releaseAgain`): the receipt's live copy of `ownerTenantId` is read, and
   * the receipt, if released to `to.userId`, gets the new key bundle; then its events.
   */
  releaseAgain(
    receipt: Pick<ReceiptRecord, "panHash" | "id">,
    to: { userId: string; keyBundle: StoredKeyBundle },
    ownerTenantId: string,
    now: Date,
    events?: readonly EventRecord[],
  ): Promise<boolean> {
    const { panHash, id } = receipt;
    return this.ctx.run(async () => {
      const released = await this.ctx.transaction("receipts.releaseAgain", async (session) => {
        const copy = await this.copies.findOne<EscrowCopyDoc>(
          { panHash, id, ownerTenantId, expiresAt: { $gt: now } },
          this.ctx.readIn(session),
        );
        if (copy === null) return false;
        const updated = await this.collection.updateOne(
          { panHash, id, isEscrowed: false, userId: to.userId },
          { $set: { keyBundle: keyBundleDoc(to.keyBundle) } },
          this.ctx.writeIn(session),
        );
        if (updated.matchedCount !== 1) return false;
        await insertEventsIn(this.ctx, session, events);
        return true;
      });
      if (released) announceEvents(this.ctx, events);
      return released;
    });
  }

  /** At most `limit` of the user's receipts, and their claims (see {@link deleteWithClaims}). */
  async deleteByUser(owner: ReceiptOwner, limit: number): Promise<number> {
    const cap = deleteLimitOf(limit);
    let deleted = 0;
    // One card at a time (the filter names one card, the deletes go to its shard): card, then alias.
    for (const panHash of ownerCards(owner)) {
      if (deleted >= cap) break;
      deleted += await this.deleteWithClaims({ panHash, userId: owner.userId }, cap - deleted);
    }
    return deleted;
  }

  countByUser(owner: ReceiptOwner): Promise<number> {
    return this.ctx.run(() => this.collection.countDocuments(ownerFilter(owner), this.ctx.limit));
  }

  /** In one transaction: the receipt the pair's claim points to, if another tenant made it, and the claim. */
  deleteByPreviousOwner(merchantId: string, receiptId: string, ownerTenantId: string): Promise<boolean> {
    return this.ctx.run(async () => {
      const deleted = await this.ctx.transaction("receipts.deleteByPreviousOwner", (session) =>
        deleteReceiptIn(this.ctx, session, claimId(merchantId, receiptId), ownerTenantId),
      );
      await dropEscrowCopyOf(this.ctx, deleted);
      return deleted !== undefined;
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
  deleteEscrowedFor(panHash: string, ownerTenantId: string, limit: number): Promise<number> {
    return this.deleteWithClaims({ panHash, isEscrowed: true, escrowOwnerTenantId: ownerTenantId }, limit);
  }

  countEscrowedFor(panHash: string, ownerTenantId: string): Promise<number> {
    return this.ctx.run(() =>
      this.collection.countDocuments(
        { panHash, isEscrowed: true, escrowOwnerTenantId: ownerTenantId },
        this.ctx.limit,
      ),
    );
  }

  async deleteIfSealedTo(
    panHash: string,
    merchantId: string,
    receiptId: string,
    keyId: string,
  ): Promise<boolean> {
    const sealedTo = { panHash, merchantId, receiptId, "keyBundle.keyId": keyId };
    return (await this.deleteWithClaims(sealedTo, 1)) > 0;
  }

  /**
   * Deletes at most `limit` receipts of one card that match `filter`, and their claims: the claims
   * first, so that a failure between the two leaves receipts that a retry deletes. Only the receipts
   * read are deleted (by card and id): one that matches meanwhile stays, with its claim, for the next
   * page.
   */
  private deleteWithClaims(filter: Filter<ReceiptDoc> & { panHash: string }, limit: number): Promise<number> {
    return this.ctx.run(async () => {
      const found = await this.collection
        .find<Pick<ReceiptDoc, "id" | "merchantId" | "receiptId">>(filter, {
          ...this.ctx.limit,
          projection: { _id: 0, id: 1, merchantId: 1, receiptId: 1 },
        })
        .limit(deleteLimitOf(limit))
        .toArray();
      if (found.length === 0) return 0;
      const claims = found.map((r) => claimId(r.merchantId, r.receiptId));
      await this.claims.deleteMany({ _id: { $in: claims } }, this.ctx.limit);
      const ids = found.map((r) => r.id);
      // The escrow copies before their receipts too: a retry finds the receipts, never a lone copy.
      await this.copies.deleteMany({ panHash: filter.panHash, id: { $in: ids } }, this.ctx.limit);
      return (await this.collection.deleteMany({ panHash: filter.panHash, id: { $in: ids } }, this.ctx.limit))
        .deletedCount;
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

/** The escrow copy document of an escrowed receipt as stored, when it was escrowed for an owner. */
function copyDocOf(found: ReceiptDoc): EscrowCopyDoc | undefined {
  const { escrowOwnerTenantId, escrowKeyId, expiresAt } = found;
  if (escrowOwnerTenantId === undefined || escrowKeyId === undefined || expiresAt === undefined)
    return undefined;
  return {
    panHash: found.panHash,
    id: found.id,
    createdAt: found.createdAt,
    ownerTenantId: escrowOwnerTenantId,
    escrowKeyId,
    keyBundle: found.keyBundle,
    expiresAt,
  };
}

/**
 * The filter of a user's receipts: its card, or its card and alias (`$in`: the query still names the
 * shard key, and reaches at most two shards), and the user.
 */
function ownerFilter(owner: ReceiptOwner): { panHash: string | { $in: string[] }; userId: string } {
  const cards = ownerCards(owner);
  return { panHash: cards.length === 1 ? owner.panHash : { $in: cards }, userId: owner.userId };
}
