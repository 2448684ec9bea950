/* Over 400 lines on purpose: the whole repository contract in one read; both stores and the contract
 * suite implement it together. */
/**
 * The repository interfaces: everything the service keeps, one interface per concern. There are two
 * implementations, `memory/` (the embedded default) and `mongo/`, and one contract test suite
 * (`test/store/contract.ts`) that both must pass.
 *
 * Rules every implementation follows:
 * - Expected outcomes (a duplicate, a cap reached) are return values, never exceptions.
 * - An unreachable or timed-out backend throws `AppError("service_unavailable")`, never a driver error.
 * - Records are returned as copies: mutating a returned object never changes what is stored.
 * - Nothing secret is stored in the clear: API keys and grant tokens as SHA-256 hashes, hashed PANs as
 *   an HMAC under the pepper (the domain computes these; the store only sees the results).
 * - Time-based expiry (`expiresAt`) is enforced by readers against the injected clock; TTL deletion by
 *   the backend is only housekeeping and may happen late.
 */

import type { KeyAlgorithm } from "../crypto/suites.js";
import { invalidRequest } from "../errors.js";
import type { DeliveryStore, EventRecord, EventStore, WebhookEndpointStore } from "./event-types.js";
import type { KtIssuerStore } from "./kt-issuers.js";
import type { KtIntakeRefusal, KtLogStore, KtPendingInput } from "./kt-types.js";
import type { LeaseStore } from "./lease-types.js";
import type { TransferInput, TransferOutcome } from "./register.js";

/** Environments of API keys and of the server (`RECEIPTS_ENV`). */
export type Environment = "live" | "test" | "dev";
/** Who an API key belongs to. */
export type Role = "issuer" | "merchant";
/** Rate-limit tier of an API key. */
export type Tier = "sandbox" | "standard" | "enterprise";

/** An API key as stored: only the SHA-256 hash of the key itself. */
export interface ApiKeyRecord {
  /** Public identifier, `key_<random>`; safe to log and show. */
  id: string;
  /** Lower-case hex SHA-256 of the full key string. */
  keyHash: string;
  /** The first characters of the key (`rk_dev_ab12`), to recognise it in listings. */
  prefix: string;
  env: Environment;
  tenantId: string;
  role: Role;
  tier: Tier;
  /** MerchantIds a merchant key may use; empty allows any. */
  merchantIds: string[];
  /** Free-text label set by the operator. */
  name: string;
  createdAt: Date;
  revokedAt?: Date;
}

export interface ApiKeyStore {
  /** Returns false when a key with the same id or hash exists. */
  insert(record: ApiKeyRecord): Promise<boolean>;
  findByHash(keyHash: string): Promise<ApiKeyRecord | undefined>;
  /** Every key (or every key of `tenantId`), oldest first, then by id. */
  list(tenantId?: string): Promise<ApiKeyRecord[]>;
  /** Marks the key revoked; false when no key has that id. Revoking twice keeps the first time. */
  revoke(id: string, at: Date): Promise<boolean>;
}

/** Fixed-window counters shared by every instance. */
export interface RateLimitStore {
  /**
   * Adds one to the counter `key` for the window that started at `windowStart` and returns the new
   * count. The counter may be deleted any time after `expiresAt`.
   */
  increment(key: string, windowStart: Date, expiresAt: Date): Promise<number>;
}

/** A registered cardholder. */
export interface UserRecord {
  /** `usr_<random>`. */
  userId: string;
  /** The issuer tenant that registered the card. */
  tenantId: string;
  /** HMAC-SHA256 of the hashed PAN under the pepper, lower-case hex. Unique. */
  panHash: string;
  activeKeyId: string;
  /**
   * How many keys the user has had, the active one included: 1 at the first registration, one more
   * per rotation (`key.changed` carries it). Unset on users stored before it existed, read as 1.
   */
  keyVersion?: number;
  createdAt: Date;
  updatedAt: Date;
  /**
   * Set when the owner of the card's BIN registered the card inside its BIN: the user
   * keeps its keys, grants and receipts, but no longer holds the card; its `panHash` is then
   * {@link SUPERSEDED_PAN_PREFIX} + its userId, so that no card routes to it.
   */
  supersededAt?: Date;
  /** Set with `supersededAt`: the card's panHash, by which the user's receipts are still placed. */
  formerPanHash?: string;
  /**
   * The card's second reference, keyed like `panHash`, when the issuer registered the card by both its
   * hashed PAN and its PAR: the keyed PAR beside a hashed PAN's `panHash`, or the keyed hashed PAN
   * beside a PAR's. Unique across every user's `panHash` and `aliasPanHash`: a receipt routed by either
   * reference reaches this user, and escrowed receipts of either are released to it.
   */
  aliasPanHash?: string;
  /** Set with `supersededAt` when the user held an alias: receipts released by it stay placed by it. */
  formerAliasPanHash?: string;
}

/** Whether `user` holds the card reference `panHash` (its own or its alias). */
export function holdsCard(user: Pick<UserRecord, "panHash" | "aliasPanHash">, panHash: string): boolean {
  return user.panHash === panHash || (user.aliasPanHash !== undefined && user.aliasPanHash === panHash);
}

/** The `panHash` of a user whose card was taken by the BIN's owner: this prefix, then its userId. */
export const SUPERSEDED_PAN_PREFIX = "superseded:";

export type KeyStatus = "pending" | "active" | "rotated";

/** The two key suites; every user key and key bundle names one. */
export type { KeyAlgorithm };

/** A cardholder public key. `pending` keys were made by generate-keys and not registered yet. */
export interface KeyRecord {
  /** UUID v4. */
  keyId: string;
  tenantId: string;
  /** Set once registered. */
  userId?: string;
  /** Base64 DER SubjectPublicKeyInfo. */
  publicKey: string;
  /** The key's suite, read from the key when it was registered. */
  algorithm: KeyAlgorithm;
  status: KeyStatus;
  createdAt: Date;
  registeredAt?: Date;
  rotatedAt?: Date;
}

export type RegisterOutcome =
  | { kind: "created"; user: UserRecord; key: KeyRecord }
  /** `aliasAdded`: the call also gave the user its card's second reference (hashed PAN or PAR). */
  | { kind: "rotated"; user: UserRecord; key: KeyRecord; previousKeyId: string; aliasAdded?: true }
  /** Same panHash, same tenant, same key: no key changed (`aliasAdded`: the user gained its alias). */
  | { kind: "unchanged"; user: UserRecord; key: KeyRecord; aliasAdded?: true }
  /**
   * The card was registered by another tenant, and the caller owns the card's BIN: a new user of the
   * caller holds the card now; `previous` is the other tenant's user as stored after (superseded).
   */
  | { kind: "superseded"; user: UserRecord; key: KeyRecord; previous: UserRecord }
  /** The panHash is registered by another tenant. */
  | { kind: "pan_taken" }
  /**
   * The call names the card by two references that two users hold, or that would give one user a third
   * reference (a hashed PAN already linked to another PAR, or the reverse); or a BIN owner's call
   * that would take one reference of a card from another tenant's user while it holds the other.
   */
  | { kind: "card_split" }
  /** The keyId belongs to another user (or to a pending key of another tenant). */
  | { kind: "key_taken" }
  /** The keyId exists (pending, active or rotated) with another public key: nothing changed. */
  | { kind: "key_mismatch" }
  /** The keyId is one the card rotated away from: a rotated key is never active again; nothing changed. */
  | { kind: "key_rotated" }
  /** A statement of `kt` does not follow its sequence (docs/key-transparency.md): nothing was written. */
  | KtIntakeRefusal;

export interface UserStore {
  findById(userId: string): Promise<UserRecord | undefined>;
  findByPanHash(panHash: string): Promise<UserRecord | undefined>;
  /** Stores a key made by generate-keys (status `pending`). False if the keyId exists. */
  insertPendingKey(key: KeyRecord): Promise<boolean>;
  findKey(keyId: string): Promise<KeyRecord | undefined>;
  /**
   * Registers `key` (status `active`) for the card `panHash` of `tenantId`, atomically:
   * - no user for panHash: creates `newUserId` with this key;
   * - a user of the same tenant with another active key: makes this key active and the old one `rotated`;
   * - the same key already active for that user: `unchanged`;
   * - a user of another tenant: `pan_taken`, unless `ownsBin` (the caller owns the card's BIN): then
   *   that user is superseded (see {@link UserRecord.supersededAt}) and a new user of the caller
   *   created, in the same atomic step;
   * - the keyId used by someone else: `key_taken`;
   * - the keyId stored with another public key: `key_mismatch`;
   * - the keyId of a key the card rotated away from: `key_rotated` (never active again);
   * - with `aliasPanHash`: the user holding either reference is the card's user, and gains the one it
   *   lacks; two users holding them, or a user with a third reference, is `card_split`.
   * A refusal writes nothing. A pending key with the same keyId and tenant is promoted. Concurrent calls for one panHash make
   * exactly one user.
   */
  register(input: {
    panHash: string;
    /** The card's second reference: see {@link UserRecord.aliasPanHash}. */
    aliasPanHash?: string | undefined;
    tenantId: string;
    newUserId: string;
    key: KeyRecord;
    now: Date;
    kt?: readonly KtPendingInput[];
    ownsBin?: boolean;
    /** The events of the outcome (docs/events.md), written in the same atomic step as the registration. */
    events?: (outcome: RegisterOutcome) => EventRecord[];
  }): Promise<RegisterOutcome>;
  /**
   * Moves the card `userId` holds to issuer tenant `toTenantId`, atomically (the operator's transfer):
   * see `planTransfer` (`register.ts`). `not_found` or `same_tenant` write nothing.
   */
  transfer(input: TransferInput): Promise<TransferOutcome>;
  /** Every key of a user (active and rotated), first registered first (then by creation, then keyId). */
  listKeys(userId: string): Promise<KeyRecord[]>;
  /**
   * Erases a user and its keys: `undefined` when no such user exists. The domain records
   * the erasure first ({@link ErasureStore}) and deletes grants and receipts after, so that a retry
   * after a failure at any step finds what is left and finishes. `kt`: the card's revocations,
   * checked against their sequences and written in the same atomic step as the user's deletion; when
   * one does not follow, `log_refused` and nothing is written (the keys included).
   */
  erase(
    userId: string,
    events?: readonly EventRecord[],
    kt?: readonly KtPendingInput[],
  ): Promise<{ user: UserRecord; deletedKeys: number } | KtIntakeRefusal | undefined>;
}

/** An erasure that began and has not finished: what a retry needs to finish it. */
export interface ErasureRecord {
  userId: string;
  /** The issuer tenant that owns the user, the only one that may finish the erasure. */
  tenantId: string;
  /** The erased card's HMAC (as stored on the user), for the tenant's own escrow of that card. */
  panHash: string;
  /** The card's second reference, when the user held one: its receipts and escrow go too. */
  aliasPanHash?: string;
  /**
   * The keyed card references whose key-log statements the erasure deletes (none for a user
   * superseded by its BIN's owner); absent in records begun before erasures wrote revocations.
   */
  ktCards?: string[];
  startedAt: Date;
}

/** Erasures in progress: written before a user is erased, removed once nothing of it is left. */
export interface ErasureStore {
  /** Records that erasing `record.userId` began; a record already there is kept, and returned. */
  begin(record: ErasureRecord): Promise<ErasureRecord>;
  find(userId: string): Promise<ErasureRecord | undefined>;
  /** Forgets the erasure of `userId` (done); forgetting one that is not there is harmless. */
  finish(userId: string): Promise<void>;
}

/** The AES key of a receipt wrapped to one public key. Bytes are base64 strings at rest. */
export interface StoredKeyBundle {
  keyId: string;
  algorithm: KeyAlgorithm;
  /** Base64 of the wrapped AES key (RSA-OAEP-256) or of the HPKE ciphertext of it. */
  encryptedAesKey: string;
  /** HPKE only: base64 of the 65-byte encapsulated key. */
  encapsulatedKey?: string;
  /**
   * RSA only, set only when true: the wrap's OAEP label is the receipt's AAD (README, "The sealed
   * receipt"). Absent on every RSA bundle stored before it existed. HPKE bundles are always bound.
   */
  aadBound?: true;
}

/** A sealed receipt as stored. No plaintext field of the receipt is kept except its identity. */
export interface ReceiptRecord {
  /** Internal unique id, `rcp_<random>`; used for cursors. */
  id: string;
  receiptId: string;
  merchantId: string;
  transactionId: string;
  version: string;
  /** The merchant tenant that created it. */
  merchantTenantId: string;
  /** HMAC of the recipient's hashed PAN. */
  panHash: string;
  /** The recipient; unset while escrowed. */
  userId?: string;
  /** The issuer tenant of the recipient; unset while escrowed. */
  issuerTenantId?: string;
  keyBundle: StoredKeyBundle;
  ciphertext: string;
  iv: string;
  authTag: string;
  createdAt: Date;
  isEscrowed: boolean;
  /** Set while escrowed: a service escrow key (`esc_...`) or an issuer escrow key (`iek_...`). */
  escrowKeyId?: string;
  /**
   * Set while escrowed for an issuer tenant (the owner of the card's BIN): only that
   * tenant's registration or release may take it. Unset: released to the card's first registration.
   */
  escrowOwnerTenantId?: string;
  /** Set while escrowed: deletion time of unreleased escrow. */
  expiresAt?: Date;
  /**
   * Set while escrowed for an owner: the card BIN that routed it there (6 or 8 digits, not secret), for
   * the owner's `escrow.pending` event.
   */
  escrowCardBin?: string;
  /**
   * Set on an escrowed receipt whose key failed to unwrap or to prove itself its receipt's own with
   * the service escrow key it names: it never will release, and release no longer looks at it.
   */
  escrowHeld?: true;
  /** Set for receipts created with a payment. */
  paymentId?: string;
}

/** Which escrowed receipts a query wants. */
export interface EscrowQuery {
  panHash: string;
  /**
   * Receipts escrowed for this owner tenant, plus (when `includeUnowned`) those escrowed without an
   * owner. Receipts escrowed for another tenant are never returned.
   */
  ownerTenantId: string;
  includeUnowned: boolean;
  /** Only receipts sealed to one of these escrow keys; all when absent. */
  escrowKeyIds?: readonly string[];
  /** Only receipts whose escrow key is not one of these. */
  excludeEscrowKeyIds?: readonly string[];
  /** Leaves out receipts marked `escrowHeld` ({@link ReceiptStore.markHeld}). */
  excludeHeld?: boolean;
}

/**
 * What an issuer's release replaced ({@link ReceiptStore.release} with `keepEscrowCopy`): the receipt's
 * escrow-wrapped key, kept beside the key it was released with until its escrow would have expired
 * (the escrow's `expiresAt`), so that the issuer can release it again
 * ({@link ReceiptStore.releaseAgain}). It opens nothing without the issuer's escrow private key, which
 * the service never holds. Erasing the receipt erases it; MongoDB keeps it in `escrowCopies`, whose TTL
 * index deletes it (not the receipt).
 */
export interface EscrowCopy {
  /** The issuer tenant the receipt was escrowed for, which released it. */
  ownerTenantId: string;
  /** The issuer escrow key the copy is wrapped to. */
  escrowKeyId: string;
  keyBundle: StoredKeyBundle;
  /** The escrow's own expiry (createdAt + `ESCROW_RETENTION_DAYS`): the copy goes then. */
  expiresAt: Date;
}

/** A released receipt (as stored, with the key it was released with) and its escrow copy. */
export interface ReleasedWithCopy {
  receipt: ReceiptRecord;
  copy: EscrowCopy;
}

/** A page of {@link ReceiptStore.findEscrowCopies}. */
export interface EscrowCopyPage {
  released: ReleasedWithCopy[];
  /** Opaque; undefined on the last page. */
  nextCursor?: string;
}

/** Escrowed receipts counted by owner and key, for operators. */
export interface EscrowCount {
  /** Unset for receipts escrowed without an owner. */
  ownerTenantId?: string;
  escrowKeyId: string;
  count: number;
}

export interface ReceiptPage {
  receipts: ReceiptRecord[];
  /** Opaque; undefined on the last page. */
  nextCursor?: string;
}

/** Most escrowed receipts one `findEscrowed` call returns: a larger `limit` is capped. */
export const ESCROW_PAGE_MAX = 1_000;

/** A page of deletion ({@link ReceiptStore.deleteByUser}): capped; `RangeError` unless a positive integer. */
export function deleteLimitOf(limit: number): number {
  if (!Number.isInteger(limit) || limit < 1)
    throw new RangeError("The page size must be a positive integer.");
  return Math.min(limit, DELETE_PAGE_MAX);
}

/** A page size for {@link ReceiptStore.findEscrowed}: capped; `RangeError` unless a positive integer. */
export function pageLimitOf(limit: number): number {
  if (!Number.isInteger(limit) || limit < 1)
    throw new RangeError("The page size must be a positive integer.");
  return Math.min(limit, ESCROW_PAGE_MAX);
}

/**
 * A user, with the card its receipts are placed by (their `panHash`): on a sharded MongoDB cluster the
 * card is the receipts' shard key, so every read of a user's receipts names it (docs/scaling.md).
 */
export interface ReceiptOwner {
  userId: string;
  panHash: string;
  /**
   * The card's second reference, when the user holds one: receipts escrowed by it and released to the
   * user stay placed by it, so every read of a user's receipts names both (two shards at most).
   */
  aliasPanHash?: string;
}

/** The owner of a user's receipts: the user and its card (the one it held, for a superseded user). */
export function receiptOwnerOf(
  user: Pick<
    UserRecord,
    "userId" | "panHash" | "formerPanHash" | "aliasPanHash" | "formerAliasPanHash" | "supersededAt"
  >,
): ReceiptOwner {
  const owner: ReceiptOwner = { userId: user.userId, panHash: user.formerPanHash ?? user.panHash };
  const alias = user.supersededAt === undefined ? user.aliasPanHash : user.formerAliasPanHash;
  if (alias !== undefined) owner.aliasPanHash = alias;
  return owner;
}

/** The card references an owner's receipts are placed by: its card, and its alias if any. */
export function ownerCards(owner: ReceiptOwner): string[] {
  return owner.aliasPanHash === undefined ? [owner.panHash] : [owner.panHash, owner.aliasPanHash];
}

/** Most receipts one {@link ReceiptStore.deleteByUser} or `deleteEscrowedFor` call deletes. */
export const DELETE_PAGE_MAX = 1_000;

export interface ReceiptStore {
  /**
   * False when `(merchantId, receiptId)` exists. `events` (docs/events.md) are written in the same atomic
   * step as the receipt, only when it is stored.
   */
  insert(receipt: ReceiptRecord, events?: readonly EventRecord[]): Promise<boolean>;
  /** A user's receipts with this receiptId (one per merchant that used it). */
  findByReceiptId(receiptId: string, owner: ReceiptOwner): Promise<ReceiptRecord[]>;
  /** A merchant tenant's receipts for a transactionId. */
  findByTransaction(merchantTenantId: string, transactionId: string): Promise<ReceiptRecord[]>;
  /** The receipt of a payment, if it is one of the owner's card's (of any user of that card). */
  findByPaymentId(paymentId: string, owner: ReceiptOwner): Promise<ReceiptRecord | undefined>;
  /** A user's receipts, newest first (createdAt desc, then id desc), `limit` per page. */
  listByUser(owner: ReceiptOwner, limit: number, cursor?: string): Promise<ReceiptPage>;
  /**
   * Escrowed receipts matching `query` whose `expiresAt` is after `now`, oldest first (createdAt,
   * then id), at most `limit` (capped at {@link ESCROW_PAGE_MAX}) per page; `cursor` is the
   * `nextCursor` of the previous page. A card can collect any number of receipts before it registers:
   * a caller that wants them all pages until there is no `nextCursor`.
   */
  findEscrowed(query: EscrowQuery, now: Date, limit: number, cursor?: string): Promise<ReceiptPage>;
  /** The receipt of `(merchantId, receiptId)`, escrowed or not. */
  findByMerchantReceipt(merchantId: string, receiptId: string): Promise<ReceiptRecord | undefined>;
  /**
   * Releases one escrowed receipt to a user: sets the new key bundle, userId and issuerTenantId,
   * clears isEscrowed/escrowKeyId/escrowOwnerTenantId/escrowCardBin/expiresAt. Only if it is still
   * escrowed (and, when `expectedEscrowKeyId` is given, still sealed to that key); returns whether it
   * was. `events` are written in the same atomic step, only when it was released. With
   * `keepEscrowCopy` (an issuer's release), a receipt escrowed for an owner tenant keeps its escrowed key
   * bundle, escrow key and expiry as its {@link EscrowCopy}, in the same step; it reads as any released
   * receipt.
   */
  release(
    receipt: Pick<ReceiptRecord, "panHash" | "id">,
    to: { userId: string; issuerTenantId: string; keyBundle: StoredKeyBundle },
    expectedEscrowKeyId?: string,
    events?: readonly EventRecord[],
    keepEscrowCopy?: boolean,
  ): Promise<boolean>;
  /** The receipt's escrow copy, while `now` is before its `expiresAt`. */
  escrowCopyOf(receipt: Pick<ReceiptRecord, "panHash" | "id">, now: Date): Promise<EscrowCopy | undefined>;
  /**
   * The card's receipts released with an escrow copy of `ownerTenantId` that `now` is before the expiry
   * of, oldest first (createdAt, then id), at most `limit` (capped at {@link ESCROW_PAGE_MAX}) per page.
   */
  findEscrowCopies(
    query: { panHash: string; ownerTenantId: string },
    now: Date,
    limit: number,
    cursor?: string,
  ): Promise<EscrowCopyPage>;
  /**
   * Releases a released receipt again: sets its key bundle to `to.keyBundle`, only if it is released to
   * `to.userId` and still has an escrow copy of `ownerTenantId` that `now` is before the expiry of (the
   * copy stays, for another release until then). Returns whether it did; `events` are written in the
   * same atomic step, only then.
   */
  releaseAgain(
    receipt: Pick<ReceiptRecord, "panHash" | "id">,
    to: { userId: string; keyBundle: StoredKeyBundle },
    ownerTenantId: string,
    now: Date,
    events?: readonly EventRecord[],
  ): Promise<boolean>;
  /**
   * Marks the escrowed receipt `id` of card `panHash` `escrowHeld`; a receipt no longer escrowed is
   * left as it is. (The card is named so that the write goes to one shard on a cluster.)
   */
  markHeld(panHash: string, id: string): Promise<void>;
  /**
   * Deletes the receipt `(merchantId, receiptId)` if a tenant other than `ownerTenantId` made it (a
   * previous owner of the merchantId), so that the owner can use the receiptId; returns
   * whether it did. A payment that carried it keeps its record without a receipt, as after erasure.
   */
  deleteByPreviousOwner(merchantId: string, receiptId: string, ownerTenantId: string): Promise<boolean>;
  /**
   * Deletes at most `limit` (capped at {@link DELETE_PAGE_MAX}) receipts of a user (erasure, in bounded
   * pages: a caller deletes them all by calling until fewer than `limit` go); returns how many.
   */
  deleteByUser(owner: ReceiptOwner, limit: number): Promise<number>;
  /** How many receipts a user has (what an erasure has left). */
  countByUser(owner: ReceiptOwner): Promise<number>;
  /**
   * Deletes at most `limit` (capped at {@link DELETE_PAGE_MAX}) of a card's escrowed receipts held for
   * issuer tenant `ownerTenantId` (erasure: the tenant's own escrow of the erased card, whatever key it
   * is sealed to); returns how many.
   */
  deleteEscrowedFor(panHash: string, ownerTenantId: string, limit: number): Promise<number>;
  /** How many of a card's escrowed receipts are held for `ownerTenantId`, expired or not. */
  countEscrowedFor(panHash: string, ownerTenantId: string): Promise<number>;
  /**
   * Deletes the receipt `(merchantId, receiptId)` of card `panHash` if its key bundle names `keyId`: a
   * receipt stored or released to a key that was erased meanwhile. Returns whether it did.
   */
  deleteIfSealedTo(panHash: string, merchantId: string, receiptId: string, keyId: string): Promise<boolean>;
  /** Unexpired escrowed receipts counted by owner tenant and escrow key id. */
  countEscrowed(now: Date): Promise<EscrowCount[]>;
}

/** What became of a payment: charged (`succeeded`), or refused by the card's issuer (`declined`). */
export type PaymentStatus = "succeeded" | "declined";

/** A payment as stored. The client secret is kept only as a hash. */
export interface PaymentRecord {
  /** `pay_<random>`. */
  paymentId: string;
  merchantTenantId: string;
  merchantId: string;
  transactionId: string;
  /** The receipt of the payment; a declined payment's receipt was never stored. */
  receiptId: string;
  gateway: string;
  status: PaymentStatus;
  amount: number;
  currency: string;
  orderId: string;
  /** SHA-256 of the client secret (gateway_a), never the secret. */
  clientSecretHash?: string;
  createdAt: Date;
  /** Declined payments: why (a decline code such as `insufficient_funds`). */
  declineCode?: string;
  /**
   * The amount of the refunds, pending ones included: what is held against `amount`. Unset on a
   * payment never refunded (and on those stored before refunds existed).
   */
  refundedAmount?: number;
  /** The refunds, oldest first; unset on a payment never refunded. */
  refunds?: RefundRecord[];
}

/**
 * A refund of a payment, stored inside the payment (a payment has a few at most; the store caps them
 * at {@link MAX_REFUNDS_PER_PAYMENT}). `pending` from the moment its amount is held until the gateway
 * answers; then `succeeded`, or it is removed with its receipt.
 */
export interface RefundRecord {
  /** `ref_<random>`. */
  refundId: string;
  amount: number;
  status: "pending" | "succeeded";
  /** The refund receipt (`receiptType: refund`), stored with the refund. */
  receiptId: string;
  /** The gateway's id of the refund, once it answered. */
  gatewayRefundId?: string;
  createdAt: Date;
}

/** The most refunds one payment takes: more partial refunds of one sale than this are a mistake. */
export const MAX_REFUNDS_PER_PAYMENT = 50;

export type CreatePaymentOutcome =
  | { kind: "created" }
  /** `(merchantId, transactionId)` already has a payment. */
  | { kind: "duplicate_transaction" }
  /** `(merchantId, receiptId)` already has a receipt. */
  | { kind: "duplicate_receipt" };

/** The `(merchantId, transactionId)` and id of a payment: what the store finds it by. */
export type PaymentRef = Pick<PaymentRecord, "merchantId" | "transactionId" | "paymentId">;

/** What {@link PaymentStore.holdRefund} did. */
export type HoldRefundOutcome =
  /** The amount is held and the refund stored as `pending`, with its receipt. */
  | { kind: "held"; payment: PaymentRecord }
  /** No such payment. */
  | { kind: "not_found" }
  /** The payment was not charged (declined): there is nothing to refund. */
  | { kind: "not_refundable" }
  /** The refund is more than is left: `refundable` is what is. */
  | { kind: "over_amount"; refundable: number }
  /** The payment has {@link MAX_REFUNDS_PER_PAYMENT} refunds already. */
  | { kind: "too_many" }
  /** `(merchantId, receiptId)` of the refund receipt already has a receipt. */
  | { kind: "duplicate_receipt" };

/** One page of a merchant tenant's payments, newest first. */
export interface PaymentPage {
  payments: PaymentRecord[];
  /** Opaque; undefined on the last page. */
  nextCursor?: string;
}

export interface PaymentStore {
  /**
   * Stores the payment, its receipt and their `events` together: all or nothing. A declined payment
   * of the same `(merchantId, transactionId)` (an earlier attempt with another card) is replaced by
   * this one.
   */
  createWithReceipt(
    payment: PaymentRecord,
    receipt: ReceiptRecord,
    events?: readonly EventRecord[],
  ): Promise<CreatePaymentOutcome>;
  /**
   * Stores a declined payment (`status: "declined"`), without a receipt, with its `events`, replacing
   * an earlier declined one of the same `(merchantId, transactionId)`; never a payment that was
   * charged (`duplicate_transaction`, nothing written).
   */
  recordDecline(
    payment: PaymentRecord,
    events?: readonly EventRecord[],
  ): Promise<"recorded" | "duplicate_transaction">;
  findById(paymentId: string): Promise<PaymentRecord | undefined>;
  /**
   * Deletes the payment `(merchantId, transactionId)` and its receipt if a tenant other than
   * `ownerTenantId` made it (a previous owner of the merchantId), so that the owner can
   * use the transactionId; returns whether it did.
   */
  deleteByPreviousOwner(merchantId: string, transactionId: string, ownerTenantId: string): Promise<boolean>;
  /** The payment of `(merchantId, transactionId)`, of whichever tenant; the caller checks the tenant. */
  findByTransaction(merchantId: string, transactionId: string): Promise<PaymentRecord | undefined>;
  /**
   * A merchant tenant's payments, newest first (createdAt desc, then paymentId desc), `limit` per
   * page, only those of `merchantIds` when given; `cursor` is the previous page's `nextCursor`. Keyset
   * pages: a payment made while paging comes before the cursor, so none after it is skipped or repeated.
   */
  listByTenant(
    merchantTenantId: string,
    limit: number,
    cursor?: string,
    merchantIds?: readonly string[],
  ): Promise<PaymentPage>;
  /**
   * Holds `refund.amount` of a succeeded payment and stores the refund (`pending`) and its receipt,
   * atomically: the held and refunded amounts never exceed the payment's `amount`, however many
   * refunds run at once. Refused (nothing written) as the {@link HoldRefundOutcome} says.
   */
  holdRefund(payment: PaymentRef, refund: RefundRecord, receipt: ReceiptRecord): Promise<HoldRefundOutcome>;
  /**
   * Marks a held refund `succeeded` with the gateway's id, writing its `events` in the same step (only
   * when it was pending); the payment as stored after, if found.
   */
  completeRefund(
    payment: PaymentRef,
    refundId: string,
    gatewayRefundId: string,
    events?: readonly EventRecord[],
  ): Promise<PaymentRecord | undefined>;
  /**
   * Undoes {@link holdRefund} when the gateway refused the refund: removes the pending refund, frees
   * its amount and deletes its receipt (the one given to `holdRefund`), together, so that the payment
   * reads back exactly as before the hold (a payment's only refund leaves no `refunds` and no
   * `refundedAmount`). Nothing happens to a refund that is not pending.
   */
  releaseRefund(payment: PaymentRef, refundId: string, receipt: ReceiptRecord): Promise<void>;
}

/** A decrypt grant. The token itself is a secret: only its SHA-256 is stored. */
export interface GrantRecord {
  tokenHash: string;
  tenantId: string;
  userId: string;
  keyId: string;
  purpose: "decrypt";
  grantedAt: Date;
  expiresAt: Date;
  sourceIp: string;
}

export type GrantOutcome =
  | { kind: "created" }
  /** The user has `cap` unexpired grants; the oldest expires at `oldestExpiresAt`. */
  | { kind: "cap_reached"; oldestExpiresAt: Date };

export interface GrantStore {
  /**
   * Stores the grant unless the user already has `cap` grants unexpired at `now`. Atomic: concurrent
   * calls never leave more than `cap` unexpired grants for a user.
   */
  create(grant: GrantRecord, cap: number, now: Date): Promise<GrantOutcome>;
  /** The grant, whether or not expired (the caller checks `expiresAt`). */
  findByHash(tokenHash: string): Promise<GrantRecord | undefined>;
  /** Deletes every grant of a user (erasure); returns how many. */
  deleteByUser(userId: string): Promise<number>;
}

/** A cached response for an `Idempotency-Key`. */
export type IdempotencyBegin =
  /** First use of the key, or a takeover of a stale one: the caller must `complete` or `abandon` it. */
  | { kind: "started" }
  /** Another call with this key is still running (its lease has not run out). */
  | { kind: "in_progress"; requestHash: string }
  | { kind: "completed"; requestHash: string; response: string };

export interface IdempotencyStore {
  /**
   * Claims `key` for a call with `requestHash`, atomically; records expire at `expiresAt`. A claim
   * is leased until `leaseUntil`: a started key that is still not completed at a later `now` is taken
   * to belong to a call that died with its process, and the next `begin` with the same
   * `requestHash` takes it over (`started`, with a new lease). Exactly one of several concurrent
   * callers takes it over; a different `requestHash` never does (it sees `in_progress`), and a
   * completed key is never taken over. The lease must outlast any call that is still alive.
   */
  begin(
    key: string,
    requestHash: string,
    expiresAt: Date,
    now: Date,
    leaseUntil: Date,
  ): Promise<IdempotencyBegin>;
  /** Stores the response (serialized) of a started key. */
  complete(key: string, response: string): Promise<void>;
  /**
   * Forgets a started key after its call failed, so a retry can run it again: only while that call
   * still holds it, which `leaseUntil` (the lease it began with) proves. A key taken over since holds
   * a later lease, and its new holder keeps it.
   */
  abandon(key: string, leaseUntil: Date): Promise<void>;
}

/**
 * An audit event: grants issued, decrypt uses, every key change, ownership changes and failed operator
 * logins. Never a secret.
 */
export interface AuditEvent {
  at: Date;
  /** e.g. `grant.created`, `receipt.decrypted`, `key.rotated`, `admin.login_failed`. */
  action: string;
  /** The tenant the event concerns ("" for none: a failed operator login). */
  tenantId: string;
  requestId: string;
  sourceIp: string;
  userId?: string;
  /** The key the event is about, or for a key change the key current after it. */
  keyId?: string;
  /** For a key change: the key current before it. */
  previousKeyId?: string;
  /** Non-secret reference: receiptId, paymentId, merchantId, the first 8 hex of a token hash. */
  subject?: string;
  /** Set when another tenant's call caused the event (its tenant id), not `tenantId`'s own. */
  actorTenantId?: string;
  /** Set when the operator caused the event. */
  byOperator?: boolean;
}

/** Which audit events an operator reads. */
export interface AuditQuery {
  /** Only events of this tenant. */
  tenantId?: string;
  /** Only events strictly after this time. */
  after?: Date;
}

/** A page of the audit log in the order it was written. */
export interface AuditPage {
  events: AuditEvent[];
  /**
   * Where the next page starts: always set, also when the log holds nothing more yet (polling passes
   * it again later). Opaque.
   */
  cursor: string;
}

export interface AuditStore {
  append(event: AuditEvent): Promise<void>;
  /** Newest first, for quick looks and tests; polling uses {@link AuditStore.page}. */
  list(limit: number, query?: AuditQuery): Promise<AuditEvent[]>;
  /**
   * Events in the order they were written (`tenantId` only, when given), at most `limit` (1 to
   * {@link AUDIT_PAGE_MAX}), after `cursor` (the `cursor` of a previous page), or without a cursor
   * from the first event written after `query.after` (from the start when absent). Never skips an
   * event: an event is returned only once every event written before it can be returned too, so a
   * page that ends short is everything there is for now. A cursor this store did not make is
   * `invalid_request` on `pageToken`.
   */
  page(query: AuditQuery, limit: number, cursor?: string): Promise<AuditPage>;
}

/** The most audit events one {@link AuditStore.page} call returns. */
export const AUDIT_PAGE_MAX = 1_000;

/** Encodes an audit position (the number of the last event read) as a cursor. */
export function auditCursorOf(seq: number): string {
  return `a${seq}`;
}

/** Decodes a cursor of {@link auditCursorOf}; `invalid_request` on `pageToken` for anything else. */
export function auditSeqOf(cursor: string): number {
  const seq = /^a(\d{1,15})$/.exec(cursor)?.[1];
  if (seq === undefined) {
    throw invalidRequest([
      { field: "pageToken", description: "is not a page token returned by this service" },
    ]);
  }
  return Number(seq);
}

/** An issuer tenant's escrow public key; the service never holds its private half. */
export interface IssuerEscrowKeyRecord {
  /** `iek_<random>`. */
  escrowKeyId: string;
  tenantId: string;
  algorithm: KeyAlgorithm;
  /** Base64 DER SubjectPublicKeyInfo. */
  publicKey: string;
  createdAt: Date;
  /** Set once the tenant revoked it: nothing new is sealed to it; what it sealed stays releasable. */
  revokedAt?: Date;
}

export interface IssuerEscrowKeyStore {
  /**
   * Stores the key; `kt` (docs/key-transparency.md: its `escrow-key` statement, or a directory change) is
   * written in the same atomic step after its sequence is checked: `log_refused`, with nothing written, when
   * a statement does not follow; `id_taken`, with nothing written, when a key of any tenant has its
   * `escrowKeyId` (an issuer's statement names it); else undefined.
   */
  insert(
    key: IssuerEscrowKeyRecord,
    kt?: readonly KtPendingInput[],
  ): Promise<KtIntakeRefusal | { kind: "id_taken" } | undefined>;
  /** The tenant's newest key that is not revoked (the current one), if any. */
  current(tenantId: string): Promise<IssuerEscrowKeyRecord | undefined>;
  /** Every key of the tenant, revoked ones too, newest first. */
  list(tenantId: string): Promise<IssuerEscrowKeyRecord[]>;
  /**
   * Revokes the tenant's key `escrowKeyId` and returns it; revoking twice keeps the first time.
   * `undefined` (nothing changed) when the tenant has no key with that id.
   */
  revoke(tenantId: string, escrowKeyId: string, at: Date): Promise<IssuerEscrowKeyRecord | undefined>;
}

export type SetBinsOutcome =
  | { kind: "set" }
  /** `bin` (or a prefix overlapping it) belongs to another tenant: nothing changed. */
  | { kind: "conflict"; bin: string };

/**
 * What a prefix is the first digits of: a card number (`bin`), or a wallet's network token
 * (`token-bin`). Both come from one numbering space
 * (token ranges are BIN ranges a scheme set aside for tokens), so a prefix has one owner and one kind
 * (docs/key-transparency.md).
 */
export type BinKind = "bin" | "token-bin";

/** One tenant's whole list of prefixes of one kind, as {@link BinStore.setLists} replaces it. */
export interface BinList {
  tenantId: string;
  kind: BinKind;
  bins: readonly string[];
}

/** BIN and token-BIN prefixes (6 or 8 digits) owned by issuer tenants; a prefix has one owner. */
export interface BinStore {
  /**
   * Makes `bins` the tenant's whole list of kind `bin`, atomically: refused (nothing changed) when one of them, or
   * a 6-digit prefix of an 8-digit one, or an 8-digit one under a 6-digit one, belongs to another tenant.
   * `kt` (docs/key-transparency.md: a directory change, or BIN claim statements) is written in the same step.
   */
  set(
    tenantId: string,
    bins: readonly string[],
    now: Date,
    kt?: readonly KtPendingInput[],
  ): Promise<SetBinsOutcome | KtIntakeRefusal>;
  /**
   * Replaces every list of `lists` (each a tenant's whole list of one kind) in one atomic step, with
   * `kt` written in the same step: refused, with nothing changed, when a prefix (or one overlapping
   * it) would belong to two tenants afterwards, or when the key log's intake refuses `kt`. A prefix
   * moving from one tenant to another in one call is never left with nobody. `set` is one list.
   */
  setLists(
    lists: readonly BinList[],
    now: Date,
    kt?: readonly KtPendingInput[],
  ): Promise<SetBinsOutcome | KtIntakeRefusal>;
  /** The tenant's prefixes of `kind` (default `bin`), sorted. */
  list(tenantId: string, kind?: BinKind): Promise<string[]>;
  /** The owner of a card BIN: of its 8-digit prefix, else of its 6-digit one. */
  ownerOf(cardBin: string): Promise<string | undefined>;
  /**
   * Whether some 8-digit prefix under the 6-digit `bin` belongs to a tenant: a card given by those 6
   * digits alone may then be in one of them, so its owner is unknown.
   */
  hasOwnedPrefixUnder(bin: string): Promise<boolean>;
}

/** How a merchantId came to belong to its tenant. */
export type MerchantClaimSource = "first_use" | "operator";

/** A merchantId and the merchant tenant it belongs to. */
export interface MerchantOwnerRecord {
  merchantId: string;
  tenantId: string;
  source: MerchantClaimSource;
  at: Date;
}

export interface MerchantOwnerStore {
  /**
   * Claims `merchantId` for `tenantId` on first use, atomically: returns the owner afterwards (the
   * claimant, or whoever held it before; concurrent claims leave one owner).
   */
  claim(merchantId: string, tenantId: string, now: Date): Promise<MerchantOwnerRecord>;
  /**
   * Assigns (or reassigns) a merchantId to a tenant: the operator's word is final. Returns the new
   * record and, atomically, the tenant that held it before (if any).
   */
  assign(
    merchantId: string,
    tenantId: string,
    now: Date,
  ): Promise<{ record: MerchantOwnerRecord; previousTenantId?: string }>;
  find(merchantId: string): Promise<MerchantOwnerRecord | undefined>;
}

/** How many replaced keys a {@link MerchantKeyRecord} keeps in `previousKeys` (the oldest go first). */
export const MERCHANT_KEY_HISTORY = 20;

/** A signing key a merchantId used before a rotation; receipts sealed then name its id. */
export interface PreviousMerchantKey {
  merchantKeyId: string;
  publicKey: string;
  registeredAt: Date;
  /** When the key that replaced it was registered. */
  replacedAt: Date;
  /** As {@link MerchantKeyRecord.allReceiptsSigned}, while it was current. */
  allReceiptsSigned?: boolean;
  /** Set once the tenant revoked it. */
  revokedAt?: Date;
}

/**
 * The Ed25519 key that signs a merchantId's receipts (README, "Merchant signatures"): one current key per
 * merchantId.
 */
export interface MerchantKeyRecord {
  /** `mk_<random>`; sealed receipts name the key that verified their signature. */
  merchantKeyId: string;
  /** Unique: one merchant tenant owns a merchantId's signing key. */
  merchantId: string;
  /** The merchant tenant that registered it; only this tenant may replace it. */
  tenantId: string;
  algorithm: "Ed25519";
  /** Base64 DER SubjectPublicKeyInfo. */
  publicKey: string;
  registeredAt: Date;
  /**
   * The merchant declared, with this key, that every receipt of the merchantId is signed while this
   * key is current: a cardholder's app then treats an unsigned one as invalid (README, "Merchant
   * signatures").
   */
  allReceiptsSigned?: boolean;
  /** Set once the tenant revoked it: receipts are then refused until a new key is registered. */
  revokedAt?: Date;
  /** The keys this one replaced, oldest first, at most {@link MERCHANT_KEY_HISTORY}. */
  previousKeys: PreviousMerchantKey[];
}

export type MerchantKeyPutOutcome =
  | { kind: "created" }
  /** The tenant's previous key of the merchantId moved to `previousKeys`. */
  | { kind: "replaced"; previousKeyId: string }
  /** The merchantId's key belongs to another tenant: nothing changed. */
  | { kind: "taken" };

export interface MerchantKeyStore {
  /**
   * Makes `key` the current signing key of its merchantId, atomically: stores it when the merchantId
   * has none; when the same tenant has one, appends that one to `previousKeys` (with `replacedAt` =
   * `key.registeredAt`, keeping the newest {@link MERCHANT_KEY_HISTORY}) and puts `key` in its place;
   * when another tenant has one, changes nothing. Concurrent puts for one merchantId keep one record.
   */
  put(key: Omit<MerchantKeyRecord, "previousKeys">): Promise<MerchantKeyPutOutcome>;
  findByMerchantId(merchantId: string): Promise<MerchantKeyRecord | undefined>;
  /**
   * Revokes the key `merchantKeyId` of the merchantId (the current one or one in its history) if the
   * record belongs to `tenantId`, and returns the record after; revoking twice keeps the first time.
   * `undefined` (nothing changed) when the tenant has no such key for that merchantId.
   */
  revoke(
    tenantId: string,
    merchantId: string,
    merchantKeyId: string,
    at: Date,
  ): Promise<MerchantKeyRecord | undefined>;
  /**
   * Deletes the merchantId's signing key unless it belongs to `keepTenantId` (an operator gave the
   * merchantId to that tenant: the previous owner's key must not lock it out). Returns whether it did.
   */
  removeUnlessOwnedBy(merchantId: string, keepTenantId: string): Promise<boolean>;
}

/** Every repository, plus the backend's lifecycle. */
export interface Store {
  /** "memory" or "mongodb", for logs and /readyz. */
  readonly kind: string;
  readonly apiKeys: ApiKeyStore;
  readonly rateLimits: RateLimitStore;
  readonly users: UserStore;
  readonly receipts: ReceiptStore;
  readonly payments: PaymentStore;
  readonly grants: GrantStore;
  readonly idempotency: IdempotencyStore;
  readonly audit: AuditStore;
  readonly merchantKeys: MerchantKeyStore;
  readonly issuerEscrowKeys: IssuerEscrowKeyStore;
  readonly bins: BinStore;
  readonly merchants: MerchantOwnerStore;
  readonly erasures: ErasureStore;
  /** The event outbox and feed (docs/events.md). */
  readonly events: EventStore;
  readonly webhookEndpoints: WebhookEndpointStore;
  readonly deliveries: DeliveryStore;
  /** The key-transparency log (docs/key-transparency.md: `kt-types.ts`). */
  readonly ktLog: KtLogStore;
  /** Issuer tenants' signing keys and `requireBindings` (`kt-issuers.ts`). */
  readonly ktIssuers: KtIssuerStore;
  /** Leases of background jobs (the key log's sequencer, event delivery), one holder at a time. */
  readonly leases: LeaseStore;
  /** Creates indexes (idempotent). Called once at start-up. */
  init(): Promise<void>;
  /** Resolves when the backend answers; throws `service_unavailable` otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
