/* Over 400 lines on purpose: the embedded store's ReceiptStore, one class mirroring the MongoDB one
 * method for method, so the two are read side by side. */
import { decodeCursor, encodeCursor } from "../cursor.js";
import type { EventRecord } from "../event-types.js";
import {
  type CheckedTexts,
  checkSealedTexts,
  isSameTexts,
  type SealedTexts,
  withSealedTexts,
} from "../sealed-texts.js";
import {
  deleteLimitOf,
  type EscrowCopy,
  type EscrowCopyPage,
  type EscrowCount,
  type EscrowQuery,
  type KeyAlgorithm,
  ownerCards,
  pageLimitOf,
  type ReceiptOwner,
  type ReceiptPage,
  type ReceiptRecord,
  type ReceiptStore,
  type StoredKeyBundle,
} from "../types.js";
import type { MemoryEvents } from "./events.js";
import { type Members, MultiIndex, memberList, PairMap, withMember, withoutMember } from "./indexes.js";
import { compare, ListingIndex } from "./listing.js";
import { sweepExpired } from "./sweep.js";

/**
 * A receipt as the memory store keeps it: one flat object of a fixed shape, times as milliseconds, the
 * key bundle inline. The store holds every receipt it is given for the life of the process, so heap per
 * receipt is its memory footprint. A copy of the `ReceiptRecord` with the indexes around it held about
 * 1,970 bytes per receipt, this about 1,550 (the receipt of test/store/memory.test.ts, whose sealed parts
 * alone are 1,056 base64 characters): a `Date` is about 100 bytes, and the key bundle's own object,
 * properties overflowing into a second array, a `Set` per transaction and joined index keys made up
 * the rest.
 */
interface KeptReceipt {
  readonly id: string;
  readonly receiptId: string;
  readonly merchantId: string;
  readonly transactionId: string;
  readonly version: string;
  readonly merchantTenantId: string;
  readonly panHash: string;
  userId: string | undefined;
  issuerTenantId: string | undefined;
  keyId: string;
  algorithm: KeyAlgorithm;
  encryptedAesKey: string;
  encapsulatedKey: string | undefined;
  aadBound: true | undefined;
  readonly ciphertext: string;
  readonly iv: string;
  readonly authTag: string;
  readonly createdAtMs: number;
  isEscrowed: boolean;
  escrowKeyId: string | undefined;
  escrowOwnerTenantId: string | undefined;
  escrowCardBin: string | undefined;
  expiresAtMs: number | undefined;
  escrowHeld: true | undefined;
  readonly paymentId: string | undefined;
}

/** What the store keeps of `r` (every field set, in one order, so that all kept receipts share a shape). */
function keep(r: ReceiptRecord): KeptReceipt {
  return {
    id: r.id,
    receiptId: r.receiptId,
    merchantId: r.merchantId,
    transactionId: r.transactionId,
    version: r.version,
    merchantTenantId: r.merchantTenantId,
    panHash: r.panHash,
    userId: r.userId,
    issuerTenantId: r.issuerTenantId,
    keyId: r.keyBundle.keyId,
    algorithm: r.keyBundle.algorithm,
    encryptedAesKey: r.keyBundle.encryptedAesKey,
    encapsulatedKey: r.keyBundle.encapsulatedKey,
    aadBound: r.keyBundle.aadBound,
    ciphertext: r.ciphertext,
    iv: r.iv,
    authTag: r.authTag,
    createdAtMs: r.createdAt.getTime(),
    isEscrowed: r.isEscrowed,
    escrowKeyId: r.escrowKeyId,
    escrowOwnerTenantId: r.escrowOwnerTenantId,
    escrowCardBin: r.escrowCardBin,
    expiresAtMs: r.expiresAt?.getTime(),
    escrowHeld: r.escrowHeld,
    paymentId: r.paymentId,
  };
}

/** An issuer release's escrow copy (`EscrowCopy`), beside its receipt. */
interface KeptCopy {
  readonly receipt: KeptReceipt;
  readonly ownerTenantId: string;
  readonly escrowKeyId: string;
  readonly keyBundle: StoredKeyBundle;
  readonly expiresAtMs: number;
}

/** The escrowed key bundle of a kept receipt (a new object). */
function bundleOf(k: KeptReceipt): StoredKeyBundle {
  const bundle: StoredKeyBundle = {
    keyId: k.keyId,
    algorithm: k.algorithm,
    encryptedAesKey: k.encryptedAesKey,
  };
  if (k.encapsulatedKey !== undefined) bundle.encapsulatedKey = k.encapsulatedKey;
  if (k.aadBound !== undefined) bundle.aadBound = k.aadBound;
  return bundle;
}

/** A new `EscrowCopy` of a kept copy. */
function copyOf(c: KeptCopy): EscrowCopy {
  return {
    ownerTenantId: c.ownerTenantId,
    escrowKeyId: c.escrowKeyId,
    keyBundle: { ...c.keyBundle },
    expiresAt: new Date(c.expiresAtMs),
  };
}

/** The kept receipts' sealed texts as last checked (the texts they held then). */
const checkedTexts = new WeakMap<KeptReceipt, CheckedTexts>();

/**
 * `k`'s sealed texts when they are canonical: checked on a receipt's first listing (and again after its
 * key bundle is replaced), so that a page's REST text need not decode them on every read.
 */
function sealedTextsOfKept(k: KeptReceipt): SealedTexts | undefined {
  let checked = checkedTexts.get(k);
  if (checked === undefined || !isSameTexts(checked, k)) {
    checked = checkSealedTexts(k);
    checkedTexts.set(k, checked);
  }
  return checked.canonical ? checked : undefined;
}

/** A new `ReceiptRecord` of a kept receipt (the contract's "records are returned as copies"). */
function recordOf(k: KeptReceipt): ReceiptRecord {
  const record: ReceiptRecord = {
    id: k.id,
    receiptId: k.receiptId,
    merchantId: k.merchantId,
    transactionId: k.transactionId,
    version: k.version,
    merchantTenantId: k.merchantTenantId,
    panHash: k.panHash,
    keyBundle: bundleOf(k),
    ciphertext: k.ciphertext,
    iv: k.iv,
    authTag: k.authTag,
    createdAt: new Date(k.createdAtMs),
    isEscrowed: k.isEscrowed,
  };
  if (k.userId !== undefined) record.userId = k.userId;
  if (k.issuerTenantId !== undefined) record.issuerTenantId = k.issuerTenantId;
  if (k.escrowKeyId !== undefined) record.escrowKeyId = k.escrowKeyId;
  if (k.escrowOwnerTenantId !== undefined) record.escrowOwnerTenantId = k.escrowOwnerTenantId;
  if (k.escrowCardBin !== undefined) record.escrowCardBin = k.escrowCardBin;
  if (k.expiresAtMs !== undefined) record.expiresAt = new Date(k.expiresAtMs);
  if (k.escrowHeld !== undefined) record.escrowHeld = k.escrowHeld;
  if (k.paymentId !== undefined) record.paymentId = k.paymentId;
  return record;
}

/**
 * Sealed receipts held in memory, with the indexes the queries need. Every receipt is in
 * `byMerchantReceipt`, the pair that must be unique; no map is keyed by the receipt's own id, which
 * only escrow release looks a receipt up by (`escrowed`). The id is drawn from 96 random bits
 * (`randomId`), so this store does not check it for repeats (MongoDB's unique index on it would refuse
 * one): a map from id to receipt, written for every receipt, cost about a third of an insert.
 */
export class MemoryReceipts implements ReceiptStore {
  /** By `(merchantId, receiptId)`, the pair that must be unique. */
  private readonly byMerchantReceipt = new PairMap<KeptReceipt>();
  /** Each user's receipts in listing order. */
  private readonly byUser = new ListingIndex<KeptReceipt>();
  /** By `(merchantTenantId, transactionId)`. */
  private readonly byTransaction = new PairMap<Members<KeptReceipt>>();
  private readonly escrowedByPan = new MultiIndex<KeptReceipt>();
  private readonly byPayment = new Map<string, KeptReceipt>();
  /** The escrowed receipts by id, for {@link release} and {@link dropExpiredEscrow}. */
  private readonly escrowed = new Map<string, KeptReceipt>();
  private lastSweepMs = Number.NEGATIVE_INFINITY;
  /** Issuer releases' escrow copies by receipt id, and by card; dropped at their expiry as escrow is. */
  private readonly copies = new Map<string, KeptCopy>();
  private readonly copiesByPan = new MultiIndex<KeptCopy>();
  private lastCopySweepMs = Number.NEGATIVE_INFINITY;

  /** `events`: the outbox, written in the same synchronous step as the change that causes an event. */
  constructor(private readonly events: MemoryEvents) {}

  /**
   * Whether `receipt` can be stored: its `(merchantId, receiptId)` is unused. Expired escrow is deleted
   * first, as MongoDB's TTL index deletes it (so its receiptId is free again).
   */
  canInsert(receipt: ReceiptRecord): boolean {
    this.dropExpiredEscrow(receipt.createdAt.getTime());
    this.dropExpiredCopies(receipt.createdAt.getTime());
    return !this.byMerchantReceipt.has(receipt.merchantId, receipt.receiptId);
  }

  /** Stores a receipt that {@link canInsert} accepted, in the same synchronous step. */
  put(receipt: ReceiptRecord): void {
    const kept = keep(receipt);
    this.byMerchantReceipt.set(kept.merchantId, kept.receiptId, kept);
    this.byTransaction.update(kept.merchantTenantId, kept.transactionId, (members) =>
      withMember(members, kept),
    );
    if (kept.userId !== undefined) this.byUser.add(kept.userId, kept);
    if (kept.isEscrowed) {
      this.escrowedByPan.add(kept.panHash, kept);
      this.escrowed.set(kept.id, kept);
    }
    if (kept.paymentId !== undefined) this.byPayment.set(kept.paymentId, kept);
  }

  async insert(receipt: ReceiptRecord, events?: readonly EventRecord[]): Promise<boolean> {
    if (!this.canInsert(receipt)) return false;
    this.put(receipt);
    this.events.write(events);
    return true;
  }

  /** Oldest first (then by id), the order of the user's listing index. */
  async findByReceiptId(receiptId: string, owner: ReceiptOwner): Promise<ReceiptRecord[]> {
    return this.byUser
      .oldestFirst(owner.userId)
      .filter((k) => k.receiptId === receiptId && ownerCards(owner).includes(k.panHash))
      .map(recordOf);
  }

  async findByTransaction(merchantTenantId: string, transactionId: string): Promise<ReceiptRecord[]> {
    return this.records(memberList(this.byTransaction.get(merchantTenantId, transactionId)));
  }

  async findByPaymentId(paymentId: string, owner: ReceiptOwner): Promise<ReceiptRecord | undefined> {
    const kept = this.byPayment.get(paymentId);
    return kept === undefined || !ownerCards(owner).includes(kept.panHash) ? undefined : recordOf(kept);
  }

  /** The user's receipts on the owner's card (a user's receipts are all on its card). */
  async listByUser(owner: ReceiptOwner, limit: number, cursor?: string): Promise<ReceiptPage> {
    const userId = owner.userId;
    if (!Number.isInteger(limit) || limit < 1)
      throw new RangeError("The page size must be a positive integer.");
    const after = cursor === undefined ? undefined : decodeCursor(cursor);
    // One more than the page, to know whether another page follows.
    const newestFirst = this.byUser.newestFirst(
      userId,
      limit + 1,
      after && { createdAtMs: after.createdAt.getTime(), id: after.id },
    );
    const kept = newestFirst.slice(0, limit);
    const receipts = kept.map(recordOf);
    const last = receipts.at(-1);
    const page: ReceiptPage =
      newestFirst.length <= limit || last === undefined
        ? { receipts }
        : { receipts, nextCursor: encodeCursor(last) };
    return withSealedTexts(page, kept.map(sealedTextsOfKept));
  }

  async findEscrowed(query: EscrowQuery, now: Date, limit: number, cursor?: string): Promise<ReceiptPage> {
    const capped = pageLimitOf(limit);
    const after = cursor === undefined ? undefined : decodeCursor(cursor);
    const nowMs = now.getTime();
    const matching = this.escrowedByPan
      .get(query.panHash)
      .filter(
        (k) =>
          k.expiresAtMs !== undefined &&
          k.expiresAtMs > nowMs &&
          (k.escrowOwnerTenantId === undefined
            ? query.includeUnowned
            : k.escrowOwnerTenantId === query.ownerTenantId) &&
          (query.escrowKeyIds === undefined || query.escrowKeyIds.includes(k.escrowKeyId ?? "")) &&
          !(query.excludeEscrowKeyIds ?? []).includes(k.escrowKeyId ?? "") &&
          !(query.excludeHeld === true && k.escrowHeld === true) &&
          (after === undefined ||
            k.createdAtMs > after.createdAt.getTime() ||
            (k.createdAtMs === after.createdAt.getTime() && k.id > after.id)),
      )
      .sort((a, b) => a.createdAtMs - b.createdAtMs || compare(a.id, b.id));
    const receipts = matching.slice(0, capped).map(recordOf);
    const last = receipts.at(-1);
    if (matching.length <= capped || last === undefined) return { receipts };
    return { receipts, nextCursor: encodeCursor(last) };
  }

  async findByMerchantReceipt(merchantId: string, receiptId: string): Promise<ReceiptRecord | undefined> {
    const kept = this.byMerchantReceipt.get(merchantId, receiptId);
    return kept === undefined ? undefined : recordOf(kept);
  }

  async release(
    receipt: Pick<ReceiptRecord, "panHash" | "id">,
    to: { userId: string; issuerTenantId: string; keyBundle: StoredKeyBundle },
    expectedEscrowKeyId?: string,
    events?: readonly EventRecord[],
    keepEscrowCopy?: boolean,
  ): Promise<boolean> {
    const id = receipt.id;
    const kept = this.escrowed.get(id);
    if (kept === undefined || kept.panHash !== receipt.panHash) return false;
    if (expectedEscrowKeyId !== undefined && kept.escrowKeyId !== expectedEscrowKeyId) return false;
    this.events.write(events);
    if (
      keepEscrowCopy === true &&
      kept.escrowOwnerTenantId !== undefined &&
      kept.escrowKeyId !== undefined &&
      kept.expiresAtMs !== undefined
    ) {
      const copy: KeptCopy = {
        receipt: kept,
        ownerTenantId: kept.escrowOwnerTenantId,
        escrowKeyId: kept.escrowKeyId,
        keyBundle: bundleOf(kept),
        expiresAtMs: kept.expiresAtMs,
      };
      this.copies.set(id, copy);
      this.copiesByPan.add(kept.panHash, copy);
    }
    this.escrowedByPan.delete(kept.panHash, kept);
    this.escrowed.delete(id);
    kept.isEscrowed = false;
    kept.escrowKeyId = undefined;
    kept.escrowOwnerTenantId = undefined;
    kept.escrowCardBin = undefined;
    kept.expiresAtMs = undefined;
    kept.escrowHeld = undefined;
    kept.userId = to.userId;
    kept.issuerTenantId = to.issuerTenantId;
    kept.keyId = to.keyBundle.keyId;
    kept.algorithm = to.keyBundle.algorithm;
    kept.encryptedAesKey = to.keyBundle.encryptedAesKey;
    kept.encapsulatedKey = to.keyBundle.encapsulatedKey;
    kept.aadBound = to.keyBundle.aadBound;
    this.byUser.add(to.userId, kept);
    return true;
  }

  async escrowCopyOf(
    receipt: Pick<ReceiptRecord, "panHash" | "id">,
    now: Date,
  ): Promise<EscrowCopy | undefined> {
    const copy = this.liveCopy(receipt, now.getTime());
    return copy === undefined ? undefined : copyOf(copy);
  }

  async findEscrowCopies(
    query: { panHash: string; ownerTenantId: string },
    now: Date,
    limit: number,
    cursor?: string,
  ): Promise<EscrowCopyPage> {
    const capped = pageLimitOf(limit);
    const after = cursor === undefined ? undefined : decodeCursor(cursor);
    const nowMs = now.getTime();
    this.dropExpiredCopies(nowMs);
    const matching = this.copiesByPan
      .get(query.panHash)
      .filter(
        (c) =>
          c.ownerTenantId === query.ownerTenantId &&
          c.expiresAtMs > nowMs &&
          (after === undefined ||
            c.receipt.createdAtMs > after.createdAt.getTime() ||
            (c.receipt.createdAtMs === after.createdAt.getTime() && c.receipt.id > after.id)),
      )
      .sort((a, b) => a.receipt.createdAtMs - b.receipt.createdAtMs || compare(a.receipt.id, b.receipt.id));
    const released = matching
      .slice(0, capped)
      .map((c) => ({ receipt: recordOf(c.receipt), copy: copyOf(c) }));
    const last = released.at(-1);
    if (matching.length <= capped || last === undefined) return { released };
    return { released, nextCursor: encodeCursor(last.receipt) };
  }

  async releaseAgain(
    receipt: Pick<ReceiptRecord, "panHash" | "id">,
    to: { userId: string; keyBundle: StoredKeyBundle },
    ownerTenantId: string,
    now: Date,
    events?: readonly EventRecord[],
  ): Promise<boolean> {
    const copy = this.liveCopy(receipt, now.getTime());
    if (copy === undefined || copy.ownerTenantId !== ownerTenantId) return false;
    const kept = copy.receipt;
    if (kept.isEscrowed || kept.userId !== to.userId) return false;
    this.events.write(events);
    kept.keyId = to.keyBundle.keyId;
    kept.algorithm = to.keyBundle.algorithm;
    kept.encryptedAesKey = to.keyBundle.encryptedAesKey;
    kept.encapsulatedKey = to.keyBundle.encapsulatedKey;
    kept.aadBound = to.keyBundle.aadBound;
    return true;
  }

  /** The receipt's copy, unless it expired at `nowMs` (expired copies are swept first). */
  private liveCopy(receipt: Pick<ReceiptRecord, "panHash" | "id">, nowMs: number): KeptCopy | undefined {
    this.dropExpiredCopies(nowMs);
    const copy = this.copies.get(receipt.id);
    if (copy === undefined || copy.receipt.panHash !== receipt.panHash || copy.expiresAtMs <= nowMs)
      return undefined;
    return copy;
  }

  /** The oldest first, at most `limit`. */
  async deleteByUser(owner: ReceiptOwner, limit: number): Promise<number> {
    const page = this.byUser
      .oldestFirst(owner.userId)
      .filter((k) => ownerCards(owner).includes(k.panHash))
      .slice(0, deleteLimitOf(limit));
    for (const k of page) {
      this.forget(k);
      this.byUser.delete(owner.userId, k);
    }
    return page.length;
  }

  async countByUser(owner: ReceiptOwner): Promise<number> {
    const cards = ownerCards(owner);
    return this.byUser.oldestFirst(owner.userId).filter((k) => cards.includes(k.panHash)).length;
  }

  /** Deletes the receipt of `(merchantId, receiptId)` (a refund's, when its gateway refused); whether there was one. */
  dropByMerchantReceipt(merchantId: string, receiptId: string): boolean {
    const kept = this.byMerchantReceipt.get(merchantId, receiptId);
    if (kept === undefined) return false;
    this.drop(kept);
    return true;
  }

  async deleteByPreviousOwner(
    merchantId: string,
    receiptId: string,
    ownerTenantId: string,
  ): Promise<boolean> {
    const kept = this.byMerchantReceipt.get(merchantId, receiptId);
    if (kept === undefined || kept.merchantTenantId === ownerTenantId) return false;
    this.drop(kept);
    return true;
  }

  /** Deletes the receipt of a payment (the payment store deletes the payment); whether there was one. */
  deleteOfPayment(paymentId: string): boolean {
    const kept = this.byPayment.get(paymentId);
    if (kept === undefined) return false;
    this.drop(kept);
    return true;
  }

  async markHeld(panHash: string, id: string): Promise<void> {
    const kept = this.escrowed.get(id);
    if (kept !== undefined && kept.panHash === panHash) kept.escrowHeld = true;
  }

  async deleteEscrowedFor(panHash: string, ownerTenantId: string, limit: number): Promise<number> {
    const held = this.escrowedByPan
      .get(panHash)
      .filter((k) => k.escrowOwnerTenantId === ownerTenantId)
      .slice(0, deleteLimitOf(limit));
    for (const k of held) this.forget(k);
    return held.length;
  }

  async countEscrowedFor(panHash: string, ownerTenantId: string): Promise<number> {
    return this.escrowedByPan.get(panHash).filter((k) => k.escrowOwnerTenantId === ownerTenantId).length;
  }

  async deleteIfSealedTo(
    panHash: string,
    merchantId: string,
    receiptId: string,
    keyId: string,
  ): Promise<boolean> {
    const kept = this.byMerchantReceipt.get(merchantId, receiptId);
    if (kept === undefined || kept.keyId !== keyId || kept.panHash !== panHash) return false;
    this.forget(kept);
    if (kept.userId !== undefined) this.byUser.delete(kept.userId, kept);
    return true;
  }

  async countEscrowed(now: Date): Promise<EscrowCount[]> {
    const nowMs = now.getTime();
    const counts = new Map<string, EscrowCount>();
    for (const k of this.escrowed.values()) {
      if (k.expiresAtMs === undefined || k.expiresAtMs <= nowMs || k.escrowKeyId === undefined) continue;
      const key = `${k.escrowOwnerTenantId ?? ""}\u0000${k.escrowKeyId}`;
      const count = counts.get(key);
      if (count !== undefined) count.count += 1;
      else {
        const entry: EscrowCount = { escrowKeyId: k.escrowKeyId, count: 1 };
        if (k.escrowOwnerTenantId !== undefined) entry.ownerTenantId = k.escrowOwnerTenantId;
        counts.set(key, entry);
      }
    }
    return [...counts.values()].sort(
      (a, b) =>
        compare(a.ownerTenantId ?? "", b.ownerTenantId ?? "") || compare(a.escrowKeyId, b.escrowKeyId),
    );
  }

  /** Removes a receipt from every index, the user listing too. */
  private drop(kept: KeptReceipt): void {
    this.forget(kept);
    if (kept.userId !== undefined) this.byUser.delete(kept.userId, kept);
  }

  /** Removes a receipt from every index but the user listing (the caller drops or keeps that). */
  private forget(kept: KeptReceipt): void {
    this.byMerchantReceipt.delete(kept.merchantId, kept.receiptId);
    this.byTransaction.update(kept.merchantTenantId, kept.transactionId, (members) =>
      withoutMember(members, kept),
    );
    if (kept.isEscrowed) {
      this.escrowedByPan.delete(kept.panHash, kept);
      this.escrowed.delete(kept.id);
    }
    if (kept.paymentId !== undefined) this.byPayment.delete(kept.paymentId);
    this.dropCopy(kept.id);
  }

  /** Drops the escrow copy of the receipt `id`, if any. */
  private dropCopy(id: string): void {
    const copy = this.copies.get(id);
    if (copy === undefined) return;
    this.copies.delete(id);
    this.copiesByPan.delete(copy.receipt.panHash, copy);
  }

  /**
   * Drops the escrow copies that expired at `nowMs`, at most once a minute, as MongoDB's TTL index on
   * `escrowCopies` deletes them (the receipts stay). Readers check the expiry themselves.
   */
  private dropExpiredCopies(nowMs: number): void {
    this.lastCopySweepMs = sweepExpired(
      this.copies,
      nowMs,
      this.lastCopySweepMs,
      (copy) => copy.expiresAtMs,
      (copy) => this.copiesByPan.delete(copy.receipt.panHash, copy),
    );
  }

  /**
   * Deletes the escrowed receipts that expired at `nowMs` (the time of a receipt being stored, the
   * store's only clock here), at most once a minute ({@link sweepExpired}). Until then readers skip them
   * (`listEscrowed` checks the expiry), as they would skip what a TTL index has not deleted yet.
   */
  private dropExpiredEscrow(nowMs: number): void {
    this.lastSweepMs = sweepExpired(
      this.escrowed,
      nowMs,
      this.lastSweepMs,
      (kept) => kept.expiresAtMs,
      (kept) => this.forget(kept),
    );
  }

  /** Records of `kept`, oldest first (then by id), the order the Mongo store returns them in. */
  private records(kept: KeptReceipt[]): ReceiptRecord[] {
    return kept.sort((a, b) => a.createdAtMs - b.createdAtMs || compare(a.id, b.id)).map(recordOf);
  }
}
