import { decodeCursor, encodeCursor } from "../cursor.js";
import type { ReceiptPage, ReceiptRecord, ReceiptStore, StoredKeyBundle } from "../types.js";
import { compare } from "./api-keys.js";
import { copy, MultiIndex, sweepExpired } from "./copy.js";
import { ListingIndex } from "./listing.js";

/** Sealed receipts held in memory, with the secondary indexes the queries need. */
export class MemoryReceipts implements ReceiptStore {
  private readonly byId = new Map<string, ReceiptRecord>();
  private readonly idByMerchantReceipt = new Map<string, string>();
  /** Each user's receipts in listing order (the stored objects themselves). */
  private readonly byUser = new ListingIndex<ReceiptRecord>();
  private readonly byTransaction = new MultiIndex();
  private readonly escrowedByPan = new MultiIndex();
  private readonly idByPayment = new Map<string, string>();
  /** The escrowed receipts, for {@link dropExpiredEscrow}. */
  private readonly escrowed = new Map<string, ReceiptRecord>();
  private lastSweepMs = Number.NEGATIVE_INFINITY;

  /**
   * Whether `receipt` can be stored: its id and its `(merchantId, receiptId)` are both unused. Expired
   * escrow is deleted first, as MongoDB's TTL index deletes it (so its ids are free again).
   */
  canInsert(receipt: ReceiptRecord): boolean {
    this.dropExpiredEscrow(receipt.createdAt.getTime());
    return !this.byId.has(receipt.id) && !this.idByMerchantReceipt.has(merchantReceiptKey(receipt));
  }

  /** Stores a receipt that {@link canInsert} accepted, in the same synchronous step. */
  put(receipt: ReceiptRecord): void {
    const stored = copy(receipt);
    this.byId.set(stored.id, stored);
    this.idByMerchantReceipt.set(merchantReceiptKey(stored), stored.id);
    this.byTransaction.add(transactionKey(stored.merchantTenantId, stored.transactionId), stored.id);
    if (stored.userId !== undefined) this.byUser.add(stored.userId, stored);
    if (stored.isEscrowed) {
      this.escrowedByPan.add(stored.panHash, stored.id);
      this.escrowed.set(stored.id, stored);
    }
    if (stored.paymentId !== undefined) this.idByPayment.set(stored.paymentId, stored.id);
  }

  async insert(receipt: ReceiptRecord): Promise<boolean> {
    if (!this.canInsert(receipt)) return false;
    this.put(receipt);
    return true;
  }

  /** Oldest first (then by id), the order of the user's listing index. */
  async findByReceiptId(receiptId: string, userId: string): Promise<ReceiptRecord[]> {
    return copy(this.byUser.oldestFirst(userId).filter((r) => r.receiptId === receiptId));
  }

  async findByTransaction(merchantTenantId: string, transactionId: string): Promise<ReceiptRecord[]> {
    return this.copies(this.byTransaction.get(transactionKey(merchantTenantId, transactionId)));
  }

  async findByPaymentId(paymentId: string): Promise<ReceiptRecord | undefined> {
    const id = this.idByPayment.get(paymentId);
    return id === undefined ? undefined : copy(this.byId.get(id));
  }

  async listByUser(userId: string, limit: number, cursor?: string): Promise<ReceiptPage> {
    if (!Number.isInteger(limit) || limit < 1)
      throw new RangeError("The page size must be a positive integer.");
    const after = cursor === undefined ? undefined : decodeCursor(cursor);
    // One more than the page, to know whether another page follows.
    const newestFirst = this.byUser.newestFirst(userId, limit + 1, after);
    const receipts = copy(newestFirst.slice(0, limit));
    const last = receipts.at(-1);
    if (newestFirst.length <= limit || last === undefined) return { receipts };
    return { receipts, nextCursor: encodeCursor(last) };
  }

  async listEscrowed(panHash: string, now: Date): Promise<ReceiptRecord[]> {
    return this.copies(this.escrowedByPan.get(panHash)).filter(
      (r) => r.isEscrowed && r.expiresAt !== undefined && r.expiresAt > now,
    );
  }

  async release(
    id: string,
    to: { userId: string; issuerTenantId: string; keyBundle: StoredKeyBundle },
  ): Promise<boolean> {
    const receipt = this.byId.get(id);
    if (receipt === undefined || !receipt.isEscrowed) return false;
    this.escrowedByPan.delete(receipt.panHash, id);
    this.escrowed.delete(id);
    receipt.isEscrowed = false;
    delete receipt.escrowKeyId;
    delete receipt.expiresAt;
    receipt.userId = to.userId;
    receipt.issuerTenantId = to.issuerTenantId;
    receipt.keyBundle = copy(to.keyBundle);
    this.byUser.add(to.userId, receipt);
    return true;
  }

  /**
   * Deletes the escrowed receipts that expired at `nowMs` (the time of a receipt being stored, the
   * store's only clock here), at most once a minute ({@link sweepExpired}). Until then readers skip them
   * (`listEscrowed` checks `expiresAt`), as they would skip what a TTL index has not deleted yet.
   */
  private dropExpiredEscrow(nowMs: number): void {
    this.lastSweepMs = sweepExpired(this.escrowed, nowMs, this.lastSweepMs, (receipt) => {
      this.byId.delete(receipt.id);
      this.idByMerchantReceipt.delete(merchantReceiptKey(receipt));
      this.byTransaction.delete(transactionKey(receipt.merchantTenantId, receipt.transactionId), receipt.id);
      this.escrowedByPan.delete(receipt.panHash, receipt.id);
      if (receipt.paymentId !== undefined) this.idByPayment.delete(receipt.paymentId);
    });
  }

  /** Copies of the records, oldest first (then by id), the order the Mongo store returns them in. */
  private copies(ids: string[]): ReceiptRecord[] {
    return copy(
      ids
        .flatMap((id) => this.byId.get(id) ?? [])
        .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || compare(a.id, b.id)),
    );
  }
}

function merchantReceiptKey(receipt: ReceiptRecord): string {
  return `${receipt.merchantId}\u0000${receipt.receiptId}`;
}

function transactionKey(merchantTenantId: string, transactionId: string): string {
  return `${merchantTenantId}\u0000${transactionId}`;
}
