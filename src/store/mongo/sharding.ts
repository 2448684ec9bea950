import type { CollectionName } from "./index.js";

/**
 * How the store's queries and transactions use a sharded cluster (docs/scaling.md), declared in one
 * place; each collection's shard key is declared beside its repository (`collection.ts`).
 *
 * An operation names its declaration in the driver's `comment` option, which the server also writes
 * to its slow-query log, its profiler and `currentOp`, so an operator sees why a query went to every
 * shard. The cluster mode of the test fake (test/store/fake-mongo/) reads these tables: it fails any
 * query on a sharded collection that names neither the shard key nor a declaration of that
 * collection, any transaction that names no declaration, and any transaction that reaches more shards
 * than declared (counted as distinct shard key values, plus one for the unsharded collections).
 */

/** A query that goes to every shard of its collection, and why that is acceptable. */
export interface ScatterGatherDeclaration {
  collection: CollectionName;
  reason: string;
}

/** Queries on sharded collections that name no shard key, by id. */
export const SCATTER_GATHER = {
  "receipts.findByTransaction": {
    collection: "receipts",
    reason:
      "A merchant reads its own receipt by transactionId, without naming the card the receipt is placed " +
      "by; rare (a merchant re-reading one receipt), one probe of the findByTransaction index per shard.",
  },
  "receipts.countEscrowed": {
    collection: "receipts",
    reason:
      "An operator counts the escrow of every card (GET /admin/v1/escrow), on the partial escrow index.",
  },
  "payments.findById": {
    collection: "payments",
    reason:
      "A merchant reads or refunds one payment by its paymentId (GET /payments/{paymentId}, refund), " +
      "which does not name the transaction the payment is placed by: one probe of the paymentId index " +
      "per shard, for a read a merchant makes now and then, not on every sale.",
  },
  "payments.listByTenant": {
    collection: "payments",
    reason:
      "A merchant tenant lists its payments (GET /payments), across all of its merchantIds and so " +
      "across shards; each shard reads one page of the listByTenant index and mongos merges the pages.",
  },
  "deliveries.due": {
    collection: "deliveries",
    reason:
      "The delivery worker looks for due deliveries of every endpoint, on the partial index of pending " +
      "ones: one query per tick of one instance (the lease holder), small answers.",
  },
  "deliveries.prune": {
    collection: "deliveries",
    reason: "Retention: the worker deletes old, finished deliveries of every endpoint, about once an hour.",
  },
  "audit.list": {
    collection: "audit",
    reason:
      "Audit reads (an operator, an issuer's own events, their pages and the check for holes in the " +
      "numbering) are rare, and audit is spread by a hashed _id so that its writes, on every grant, " +
      "decrypt and key change, reach every shard evenly.",
  },
} as const satisfies Record<string, ScatterGatherDeclaration>;

/** A transaction and the most shards it may reach on a cluster. */
export interface TransactionDeclaration {
  maxShards: number;
  /** What it writes, and so why that many. */
  touches: string;
}

/** The store's transactions, by id. */
export const TRANSACTIONS = {
  "receipts.insert": {
    maxShards: 3,
    touches:
      "the receipt (by card), its claim (by merchantId and receiptId) and its events (unsharded: the primary shard)",
  },
  "payments.createWithReceipt": {
    maxShards: 4,
    touches:
      "the payment (by merchantId and transactionId), its receipt (by card), the receipt's claim, and " +
      "the events of both (unsharded: the primary shard)",
  },
  "payments.recordDecline": {
    maxShards: 2,
    touches: "the declined payment (by merchantId and transactionId) and its event (the primary shard)",
  },
  "payments.holdRefund": {
    maxShards: 3,
    touches:
      "the payment (by merchantId and transactionId), the refund receipt (by card) and its claim; " +
      "the refund's events wait for payments.completeRefund",
  },
  "payments.completeRefund": {
    maxShards: 2,
    touches: "the payment (by merchantId and transactionId) and the refund's events (the primary shard)",
  },
  "payments.releaseRefund": {
    maxShards: 3,
    touches: "the payment, the refund receipt (by card) and its claim: what holdRefund wrote",
  },
  "receipts.release": {
    maxShards: 4,
    touches:
      "the escrowed receipt (by card), its claim, whose escrow expiry it clears, its escrow copy (by card, " +
      "an issuer's release only) and its event (the primary shard)",
  },
  "receipts.releaseAgain": {
    maxShards: 3,
    touches:
      "the released receipt's escrow copy (by card), the receipt (by card) and its event (the primary shard)",
  },
  "receipts.deleteByPreviousOwner": {
    maxShards: 2,
    touches:
      "a previous owner's receipt (by card) and its claim, when the merchantId's owner reuses the id (its " +
      "escrow copy is deleted after the commit)",
  },
  "payments.deleteByPreviousOwner": {
    maxShards: 3,
    touches:
      "a previous owner's payment, its receipt (by card) and the receipt's claim (the receipt's escrow copy " +
      "is deleted after the commit)",
  },
  "users.register": {
    maxShards: 1,
    touches:
      "users, keys, the card references' locks, the key log's pending statement and sequence, and the " +
      "registration's events, all unsharded: the primary shard only",
  },
  "users.transfer": {
    maxShards: 1,
    touches:
      "the card's two users (the one superseded, the one reserved), the references' locks and the events, " +
      "all unsharded: the primary shard only",
  },
  "users.erase": {
    maxShards: 1,
    touches:
      "the user, its event and, with revocations, its keys and the key log's pending statements and " +
      "sequences, all unsharded: the primary shard only",
  },
  "events.sequence": {
    maxShards: 1,
    touches: "events and eventState, both unsharded: the primary shard only",
  },
  "bins.set": {
    maxShards: 1,
    touches: "bins, binLocks and the key log's pending records, all unsharded: the primary shard only",
  },
  "issuerEscrowKeys.insert": {
    maxShards: 1,
    touches: "an issuer escrow key and the key log's pending records, all unsharded: the primary shard only",
  },
  "ktIssuers.put": {
    maxShards: 1,
    touches:
      "an issuer's signing keys and the key log's pending records, all unsharded: the primary shard only",
  },
  "kt.enqueue": {
    maxShards: 1,
    touches: "the key log's pending statements and sequences, both unsharded: the primary shard only",
  },
  "kt.append": {
    maxShards: 1,
    touches:
      "the key log's head, tiles, leaves, directories, pending statements and sequences, all unsharded: " +
      "the primary shard only",
  },
} as const satisfies Record<string, TransactionDeclaration>;

export type ScatterGatherId = keyof typeof SCATTER_GATHER;
export type TransactionId = keyof typeof TRANSACTIONS;

/** The `comment` option of a declared scatter-gather query. */
export function scatterGather(id: ScatterGatherId): { comment: { scatterGather: ScatterGatherId } } {
  return { comment: { scatterGather: id } };
}

/** The `comment` option of every operation of a declared transaction. */
export function inTransaction(id: TransactionId): { comment: { transaction: TransactionId } } {
  return { comment: { transaction: id } };
}
