/* Over 400 lines on purpose: every collection, its indexes and its shard key in one read, so that a
 * new collection cannot be added without saying how it is indexed and sharded. */
import type { IndexDescription } from "mongodb";

/** The store's collection names, plus `grantSlots` for the grant cap. */
export const COLLECTIONS = {
  keys: "keys",
  users: "users",
  receipts: "receipts",
  payments: "payments",
  grants: "grants",
  /** One document per user holding the hashes and expiries of its live grants (see `grants.ts`). */
  grantSlots: "grantSlots",
  idempotency: "idempotency",
  rateLimits: "rateLimits",
  apiKeys: "apiKeys",
  /** Merchant signing keys (README, "Merchant signatures"), one document per merchantId. */
  merchantKeys: "merchantKeys",
  audit: "audit",
  /** Counters: `audit` numbers audit events, `auditStable` is how far readers may read (see `MongoAudit`). */
  counters: "counters",
  /** Issuer tenants' escrow public keys. */
  issuerEscrowKeys: "issuerEscrowKeys",
  /** BIN prefixes, `_id` the prefix, one owner each. */
  bins: "bins",
  /**
   * One short-lived document per card reference being registered (`_id` the keyed reference): the
   * write conflict that keeps a reference from going to two users, one as a panHash and one as an
   * alias (see `MongoUsers.register`). Expires a minute after.
   */
  cardRefLocks: "cardRefLocks",
  /** One document per 6-digit BIN prefix in use, written by every change of a BIN under it (see `MongoBins`). */
  binLocks: "binLocks",
  /** MerchantIds, `_id` the merchantId, and the merchant tenant each belongs to. */
  merchants: "merchants",
  /**
   * One document per receipt, `_id` its `{merchantId, receiptId}`: the rule that pair is unique, which
   * the receipts' shard key (the card) cannot carry on a cluster (docs/scaling.md). Written in the same
   * transaction as the receipt; it also says where the receipt lives (`panHash`, `id`).
   */
  receiptClaims: "receiptClaims",
  /**
   * One document per receipt an issuer released from its own escrow: the escrow-wrapped key the release
   * replaced, kept until the escrow would have expired (TTL), for the issuer to release it again.
   */
  escrowCopies: "escrowCopies",
  /** Erasures begun and not finished, one document per user: what a retry finishes. */
  erasures: "erasures",
  /**
   * Events (docs/events.md): the outbox, written in the transaction of the change that causes each, and
   * the feed it becomes once the sequencer gives it a position (`seq`).
   */
  events: "events",
  /** One document, the event sequencer's: the next position, the fan-out mark, the largest fencing token. */
  eventState: "eventState",
  webhookEndpoints: "webhookEndpoints",
  /** One document per event and endpoint: its status, next attempt and the log of its attempts. */
  deliveries: "deliveries",
  /** The key log (docs/key-transparency.md: `kt-log.ts`): statements waiting for the sequencer, by id. */
  ktPending: "ktPending",
  /** The key log's sequences (a card's, an issuer's): intake and logged states, `_id` the name. */
  ktSequences: "ktSequences",
  /** The key log's tree as C2SP tiles, `_id` `<level>/<index>`. */
  ktTiles: "ktTiles",
  /** The key log's head: one document. */
  ktHead: "ktHead",
  /** The key log's leaves, `_id` the leaf index. */
  ktLeaves: "ktLeaves",
  /** Checkpoints the log signed, `_id` the tree size, with their cosignatures. */
  ktCheckpoints: "ktCheckpoints",
  /** What each witness last cosigned, `_id` its key name. */
  ktWitnesses: "ktWitnesses",
  /** Directory snapshots' bodies, `_id` their SHA-256. */
  ktDirectories: "ktDirectories",
  /** Auditors allowed to read leaf data, `_id` their id. */
  ktAuditors: "ktAuditors",
  /** Issuer tenants' signing keys and settings (`kt-issuers.ts`), `_id` the tenant. */
  ktIssuers: "ktIssuers",
  /** Leases of background jobs (`_id` the job's name), with their fencing tokens. */
  leases: "leases",
} as const;

/** A collection's name. */
export type CollectionName = (typeof COLLECTIONS)[keyof typeof COLLECTIONS];

/** A TTL index: MongoDB deletes a document once its `expiresAt` has passed (checked about every 60 s). */
const ttl: IndexDescription = { key: { expiresAt: 1 }, name: "ttl_expiresAt", expireAfterSeconds: 0 };

/**
 * Every index, by collection. Unique indexes carry the contract's uniqueness rules (a duplicate write
 * fails with code 11000, which the repositories turn into their "already exists" results); the others
 * serve a repository query, named after it.
 */
export const INDEXES: Record<string, IndexDescription[]> = {
  [COLLECTIONS.users]: [
    { key: { userId: 1 }, name: "uniq_userId", unique: true },
    { key: { panHash: 1 }, name: "uniq_panHash", unique: true },
    // A card's second reference (hashed PAN beside PAR): unique, and found like a panHash.
    {
      key: { aliasPanHash: 1 },
      name: "uniq_aliasPanHash",
      unique: true,
      partialFilterExpression: { aliasPanHash: { $exists: true } },
    },
  ],
  [COLLECTIONS.cardRefLocks]: [ttl],
  [COLLECTIONS.keys]: [
    { key: { keyId: 1 }, name: "uniq_keyId", unique: true },
    // A user's keys: listKeys, and erasure's deleteMany({userId}).
    { key: { userId: 1 }, name: "byUser" },
  ],
  [COLLECTIONS.receipts]: [
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
  [COLLECTIONS.receiptClaims]: [
    // A claim lives as long as its receipt: while the receipt is escrowed it carries its `expiresAt`.
    {
      key: { expiresAt: 1 },
      name: "ttl_escrow",
      expireAfterSeconds: 0,
      partialFilterExpression: { expiresAt: { $exists: true } },
    },
  ],
  [COLLECTIONS.escrowCopies]: [
    // A receipt has one copy at most: by its card and id, the receipts' own unique key.
    { key: { panHash: 1, id: 1 }, name: "uniq_panHash_id", unique: true },
    // An issuer's copies of one card, oldest first (ListPendingEscrow with released).
    { key: { panHash: 1, ownerTenantId: 1, createdAt: 1, id: 1 }, name: "byCardOwner" },
    // The copy goes when the escrow would have expired; the receipt stays (it is in another collection).
    ttl,
  ],
  [COLLECTIONS.payments]: [
    // paymentId is random (96 bits): the index finds, the shard key's unique index is what refuses.
    { key: { paymentId: 1 }, name: "byPaymentId" },
    { key: { merchantId: 1, transactionId: 1 }, name: "uniq_merchantId_transactionId", unique: true },
    { key: { merchantTenantId: 1, createdAt: -1, paymentId: -1 }, name: "listByTenant" },
  ],
  [COLLECTIONS.grants]: [
    { key: { tokenHash: 1 }, name: "uniq_tokenHash", unique: true },
    // Erasure's deleteMany({userId}): live grants are the decrypts of the last three minutes, which at a
    // peak of hundreds a second is too many to read through for each erasure.
    { key: { userId: 1 }, name: "byUser" },
    ttl,
  ],
  [COLLECTIONS.grantSlots]: [ttl],
  [COLLECTIONS.idempotency]: [ttl],
  [COLLECTIONS.rateLimits]: [ttl],
  [COLLECTIONS.apiKeys]: [
    { key: { id: 1 }, name: "uniq_id", unique: true },
    { key: { keyHash: 1 }, name: "uniq_keyHash", unique: true },
    { key: { createdAt: 1, id: 1 }, name: "list" },
  ],
  [COLLECTIONS.merchantKeys]: [{ key: { merchantId: 1 }, name: "uniq_merchantId", unique: true }],
  // The key of `list` ({at: -1}) did not match its sort {at: -1, _id: -1}; a new name, as above.
  [COLLECTIONS.audit]: [
    { key: { at: -1, _id: -1 }, name: "list_at_id" },
    // A tenant's events in the order they were numbered (`_id`), for its audit pages.
    { key: { tenantId: 1, _id: 1 }, name: "page_tenant" },
  ],
  [COLLECTIONS.issuerEscrowKeys]: [
    { key: { escrowKeyId: 1 }, name: "uniq_escrowKeyId", unique: true },
    { key: { tenantId: 1, createdAt: -1 }, name: "byTenant" },
  ],
  [COLLECTIONS.bins]: [{ key: { tenantId: 1 }, name: "byTenant" }],
  [COLLECTIONS.erasures]: [{ key: { userId: 1 }, name: "uniq_userId", unique: true }],
  [COLLECTIONS.events]: [
    // No two events share a position; only sequenced events have one.
    {
      key: { seq: 1 },
      name: "uniq_seq",
      unique: true,
      partialFilterExpression: { seq: { $exists: true } },
    },
    { key: { tenantId: 1, seq: 1 }, name: "listForTenant" },
    // The sequencer's scan of the outbox, oldest first.
    {
      key: { pending: 1, createdAt: 1, _id: 1 },
      name: "outbox",
      partialFilterExpression: { pending: true },
    },
    { key: { createdAt: 1 }, name: "prune" },
  ],
  [COLLECTIONS.webhookEndpoints]: [
    { key: { endpointId: 1 }, name: "uniq_endpointId", unique: true },
    { key: { tenantId: 1, createdAt: 1 }, name: "listForTenant" },
  ],
  [COLLECTIONS.deliveries]: [
    // The shard key's index, and the rule that an event is delivered to an endpoint once.
    { key: { endpointId: 1, eventSeq: 1 }, name: "uniq_endpointId_eventSeq", unique: true },
    {
      key: { status: 1, nextAttemptAt: 1, eventSeq: 1 },
      name: "due",
      partialFilterExpression: { status: "pending" },
    },
    { key: { createdAt: 1 }, name: "prune" },
  ],
  // The sequencer's read: waiting records, oldest first.
  [COLLECTIONS.ktPending]: [
    { key: { state: 1, createdAt: 1, _id: 1 }, name: "waiting" },
    // An append that refuses a statement: the records waiting behind it in its sequence.
    {
      key: { "order.sequence": 1, state: 1 },
      name: "bySequence",
      partialFilterExpression: { "order.sequence": { $exists: true } },
    },
    // Erasure of a card: its refused records.
    {
      key: { "card.key": 1, state: 1 },
      name: "byCard",
      partialFilterExpression: { "card.key": { $exists: true } },
    },
  ],
  [COLLECTIONS.ktLeaves]: [
    // A pending record becomes one leaf; a sequence's version one leaf (a replayed statement is refused).
    {
      key: { pendingId: 1 },
      name: "uniq_pendingId",
      unique: true,
      partialFilterExpression: { pendingId: { $exists: true } },
    },
    {
      key: { sequence: 1, version: -1 },
      name: "uniq_sequence_version",
      unique: true,
      partialFilterExpression: { sequence: { $exists: true } },
    },
    // An issuer's feed, and erasure's update of a card's leaves.
    { key: { tenantId: 1, _id: 1 }, name: "byTenant", partialFilterExpression: { kind: "statement" } },
    { key: { cardKey: 1 }, name: "byCard", partialFilterExpression: { cardKey: { $exists: true } } },
    // Intake's refusal of a statement an erasure removed (sent again after the card's sequence restarted).
    {
      key: { erasedStatementSha256: 1 },
      name: "byErasedStatement",
      partialFilterExpression: { erasedStatementSha256: { $exists: true } },
    },
  ],
  [COLLECTIONS.ktDirectories]: [{ key: { index: -1 }, name: "byIndex" }],
  [COLLECTIONS.ktAuditors]: [{ key: { tokenHash: 1 }, name: "uniq_tokenHash", unique: true }],
  [COLLECTIONS.ktIssuers]: [
    { key: { "signingKeys.signingKeyId": 1 }, name: "bySigningKeyId" },
    // The sequencer's settle step, each round: the tenants with a BIN move old enough to be due.
    { key: { "binMoves.requestedAt": 1 }, name: "byBinMoveRequestedAt" },
  ],
};

/** The name of the TTL indexes of `RECEIPT_RETENTION_DAYS`, on receipts and on their claims. */
export const RETENTION_INDEX = "ttl_retention";

/**
 * The TTL indexes of a receipt retention of `days` (`RECEIPT_RETENTION_DAYS`): delivered receipts, and
 * every claim, are deleted `days` after they were made. Escrowed receipts keep their own expiry (the
 * retention is at least the escrow's, so a claim never goes before its escrowed receipt).
 */
export function retentionIndexes(days: number): Record<string, IndexDescription[]> {
  const expireAfterSeconds = days * 86_400;
  return {
    [COLLECTIONS.receipts]: [
      {
        key: { createdAt: 1 },
        name: RETENTION_INDEX,
        expireAfterSeconds,
        partialFilterExpression: { isEscrowed: false },
      },
    ],
    [COLLECTIONS.receiptClaims]: [{ key: { createdAt: 1 }, name: RETENTION_INDEX, expireAfterSeconds }],
  };
}

/** How one collection is placed on a sharded cluster (docs/scaling.md). */
export interface ShardKeyDeclaration {
  /**
   * The key as `sh.shardCollection` takes it (ranged fields, or one hashed field), or `"unsharded"`: the
   * collection stays whole on the database's primary shard.
   */
  key: Readonly<Record<string, 1 | "hashed">> | "unsharded";
  /** `sh.shardCollection`'s `unique`: the key itself carries one of the collection's unique rules. */
  unique?: true;
  /** Why this key: what the hot queries name, which unique rule it carries, or why the collection stays whole. */
  why: string;
}

/**
 * Every collection's place on a sharded cluster, beside its indexes. The rules (docs/scaling.md): a unique
 * rule holds on a cluster only when its index starts with a ranged shard key, or when `_id` is the
 * shard key, or when it lives in a claims collection keyed by the rule's own fields and written in the
 * same transaction; a hashed key backs no unique rule. Every query on a sharded collection names the
 * key or is a declared scatter-gather (`sharding.ts`). A new collection (an event outbox, a key log)
 * adds its entry here and its indexes above; the cluster-mode contract run (test/store/) then fails
 * any unique index its key cannot carry and any query or transaction it did not declare.
 */
export const SHARD_KEYS: Record<CollectionName, ShardKeyDeclaration> = {
  [COLLECTIONS.receipts]: {
    key: { panHash: 1, id: 1 },
    unique: true,
    why:
      "Every read of a cardholder's receipts names the card: listing, decrypt, escrow release, erasure. " +
      "`id` after it lets one card's receipts split over chunks, and the unique key keeps `id` unique per " +
      "card (cursors and release). `(merchantId, receiptId)` moves to receiptClaims.",
  },
  [COLLECTIONS.receiptClaims]: {
    key: { _id: 1 },
    why: "`_id` is `{merchantId, receiptId}`: the shard key is the unique rule itself.",
  },
  [COLLECTIONS.escrowCopies]: {
    key: { panHash: 1, id: 1 },
    unique: true,
    why:
      "Placed as its receipt is (the card, then the receipt's id): an issuer lists one card's copies and " +
      "releases one receipt again by card and id, and erasure deletes them by card. As many documents as " +
      "issuer releases in the escrow retention.",
  },
  [COLLECTIONS.payments]: {
    key: { merchantId: 1, transactionId: 1 },
    unique: true,
    why:
      "Carries the rule `(merchantId, transactionId)` is unique; a merchant's payments spread over " +
      "chunks by transaction. A payment with its receipt and claim touches three shards at most.",
  },
  [COLLECTIONS.idempotency]: {
    key: { _id: 1 },
    why:
      "The claim of a key is its `_id` (`<apiKeyId>:<Idempotency-Key>`), unique only with `_id` as a " +
      "ranged key; the API key id in front spreads tenants over chunks. Kept 24 h: its size follows " +
      "the rate of creates.",
  },
  [COLLECTIONS.rateLimits]: {
    key: { _id: 1 },
    why:
      "Every request upserts one counter by `_id` (`<subject>:<bucket>:<window>`), which must be unique; " +
      "the subject in front spreads API keys over chunks. Request counters live two minutes, escrow-intake " +
      "counters (per merchant tenant and card) one intake window.",
  },
  [COLLECTIONS.audit]: {
    key: { _id: "hashed" },
    why:
      "Appended on every grant, decrypt and key change, each event numbered by the `counters` document " +
      "(its `_id`, growing): a hashed `_id` spreads the inserts over every shard, and `_id` is unique " +
      "whatever the key. Reads (operators, an issuer's own audit) are rare and declared scatter-gather.",
  },
  [COLLECTIONS.counters]: {
    key: "unsharded",
    why:
      "Two small documents: the number of the last audit event (one `$inc` per event) and the number " +
      "below which readers have seen every event.",
  },
  [COLLECTIONS.users]: {
    key: "unsharded",
    why:
      "One document per cardholder (about 250 B: 50 million fit in tens of GB with indexes); registration " +
      "reads and writes users and keys in one transaction, on one shard while both stay whole.",
  },
  [COLLECTIONS.keys]: {
    key: "unsharded",
    why: "One document per key (under 700 B), written with users in registration's one-shard transaction.",
  },
  [COLLECTIONS.grants]: {
    key: "unsharded",
    why: "Grants live three minutes (TTL): a few thousand at any time, whatever the number of receipts.",
  },
  [COLLECTIONS.grantSlots]: {
    key: "unsharded",
    why: "One small document per user with live grants, as grants.",
  },
  [COLLECTIONS.apiKeys]: {
    key: "unsharded",
    why: "One document per API key: thousands, read through a cache.",
  },
  [COLLECTIONS.merchantKeys]: { key: "unsharded", why: "One document per merchantId with a signing key." },
  [COLLECTIONS.issuerEscrowKeys]: { key: "unsharded", why: "A few keys per issuer tenant." },
  [COLLECTIONS.bins]: {
    key: "unsharded",
    why: "BIN prefixes, thousands; set in one transaction with binLocks, on one shard while both stay whole.",
  },
  [COLLECTIONS.binLocks]: { key: "unsharded", why: "One document per 6-digit prefix in use, as bins." },
  [COLLECTIONS.cardRefLocks]: {
    key: "unsharded",
    why:
      "Written in registration's transaction beside users (the primary shard), and gone a minute later: " +
      "as many documents as registrations in the last minute.",
  },
  [COLLECTIONS.merchants]: { key: "unsharded", why: "One document per merchantId." },
  [COLLECTIONS.erasures]: {
    key: "unsharded",
    why: "One document per erasure in progress, removed when it finishes: a handful at any time.",
  },
  [COLLECTIONS.events]: {
    key: "unsharded",
    why:
      "The outbox and the feed. Written in the change's transaction (on the primary shard: one shard more, " +
      "four for a payment), sequenced by one sequencer in one-shard transactions, so positions follow commit " +
      "order without a cluster-wide snapshot. Its size follows the event rate times the retention " +
      "(EVENTS_RETENTION_DAYS), not the receipts kept: about 80 million events (25 GB) a week at 2 billion " +
      "receipts a year with payments.",
  },
  [COLLECTIONS.eventState]: { key: "unsharded", why: "One document, read and written with events." },
  [COLLECTIONS.webhookEndpoints]: { key: "unsharded", why: "A few endpoints per tenant." },
  [COLLECTIONS.deliveries]: {
    key: { endpointId: 1, eventSeq: 1 },
    unique: true,
    why:
      "One document per event and endpoint: it grows with events times endpoints. Every write names the " +
      "endpoint and the event's position, and carries the rule that an event reaches an endpoint once; " +
      "an endpoint's log reads its own chunks.",
  },
  [COLLECTIONS.ktPending]: {
    key: "unsharded",
    why:
      "Statements waiting for the sequencer (seconds each), written in the transaction of the change they " +
      "record, beside users and keys on the primary shard: registration stays a one-shard transaction.",
  },
  [COLLECTIONS.ktSequences]: {
    key: "unsharded",
    why: "One small document per card with a statement and per issuer, written with pending statements.",
  },
  [COLLECTIONS.ktTiles]: {
    key: "unsharded",
    why:
      "The tree: about 32 bytes a leaf in one document per 256 leaves (3.2 GB at 10^8 leaves); read by " +
      "proofs, written by the one sequencer in its append transaction.",
  },
  [COLLECTIONS.ktHead]: { key: "unsharded", why: "One document, written by every append." },
  [COLLECTIONS.ktLeaves]: {
    key: "unsharded",
    why:
      "One document per leaf (about 600 B with its statement), appended in order by the one sequencer in " +
      "the same transaction as the tiles and the head; read by card, by tenant and by index. A log read in " +
      "order by one sequencer stays whole while its size allows (tens of GB at 10^8 leaves).",
  },
  [COLLECTIONS.ktCheckpoints]: {
    key: "unsharded",
    why: "One small document per checkpoint (at most one every round).",
  },
  [COLLECTIONS.ktWitnesses]: { key: "unsharded", why: "One document per witness." },
  [COLLECTIONS.ktDirectories]: {
    key: "unsharded",
    why: "One document per directory snapshot (about one a day).",
  },
  [COLLECTIONS.ktAuditors]: { key: "unsharded", why: "The auditors an operator registered: a handful." },
  [COLLECTIONS.ktIssuers]: {
    key: "unsharded",
    why: "One small document per issuer tenant with a signing key.",
  },
  [COLLECTIONS.leases]: { key: "unsharded", why: "One document per background job." },
};
