import type { IndexDescription } from "mongodb";

/** The store's collection names (section 11 of the spec), plus `grantSlots` for the grant cap. */
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
  /** Merchant signing keys (section 10), one document per merchantId. */
  merchantKeys: "merchantKeys",
  audit: "audit",
  /** Counters: `audit` numbers audit events, `auditStable` is how far readers may read (see `MongoAudit`). */
  counters: "counters",
  /** Issuer tenants' escrow public keys (section 17). */
  issuerEscrowKeys: "issuerEscrowKeys",
  /** BIN prefixes, `_id` the prefix, one owner each (section 17). */
  bins: "bins",
  /** One document per 6-digit BIN prefix in use, written by every change of a BIN under it (see `MongoBins`). */
  binLocks: "binLocks",
  /** MerchantIds, `_id` the merchantId, and the merchant tenant each belongs to (section 18). */
  merchants: "merchants",
} as const;

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
  ],
  [COLLECTIONS.keys]: [{ key: { keyId: 1 }, name: "uniq_keyId", unique: true }],
  [COLLECTIONS.receipts]: [
    { key: { id: 1 }, name: "uniq_id", unique: true },
    { key: { merchantId: 1, receiptId: 1 }, name: "uniq_merchantId_receiptId", unique: true },
    { key: { userId: 1, createdAt: -1, id: -1 }, name: "listByUser" },
    { key: { userId: 1, receiptId: 1 }, name: "findByReceiptId" },
    { key: { merchantTenantId: 1, transactionId: 1 }, name: "findByTransaction" },
    {
      key: { paymentId: 1 },
      name: "findByPaymentId",
      partialFilterExpression: { paymentId: { $exists: true } },
    },
    // Equality fields, then the sort: a page of a card's escrow reads only that page. (Named anew:
    // the key of an existing name cannot change, and `createIndexes` would refuse the old name.)
    { key: { panHash: 1, isEscrowed: 1, createdAt: 1, id: 1 }, name: "listEscrowed_byTime" },
    // Only escrowed receipts have `expiresAt`: unreleased escrow is deleted after its retention.
    ttl,
  ],
  [COLLECTIONS.payments]: [
    { key: { paymentId: 1 }, name: "uniq_paymentId", unique: true },
    { key: { merchantId: 1, transactionId: 1 }, name: "uniq_merchantId_transactionId", unique: true },
  ],
  [COLLECTIONS.grants]: [{ key: { tokenHash: 1 }, name: "uniq_tokenHash", unique: true }, ttl],
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
};
