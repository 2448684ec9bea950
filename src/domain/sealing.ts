import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import { receiptAadText } from "../crypto/envelope.js";
import { RSA_OAEP_256 } from "../crypto/suites.js";
import { randomId } from "../ids.js";
import type { ApiKeyRecord, ReceiptRecord } from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import { releaseEscrow } from "./escrow.js";
import { panHashOf } from "./pan.js";
import {
  type SealedReceiptFields,
  sealedPlaintextOf,
  toReceiptMessage,
  type ValidReceipt,
} from "./receipt-rules.js";

/** The sealed plaintext of a receipt: the UTF-8 JSON of its fields (REST names, money as numbers), section 5. */
export function plaintextOf(receipt: ValidReceipt): Buffer {
  return Buffer.from(plaintextTextOf(receipt), "utf8");
}

/** {@link plaintextOf} before its UTF-8 encoding: the JSON text. */
export function plaintextTextOf(receipt: ValidReceipt): string {
  return JSON.stringify(sealedPlaintextOf(receipt));
}

/** Parses a sealed plaintext back into a receipt message. */
export function receiptFromPlaintext(plaintext: Uint8Array): Receipt {
  return toReceiptMessage(JSON.parse(Buffer.from(plaintext).toString("utf8")) as SealedReceiptFields);
}

/**
 * Seals a validated receipt to its recipient and returns the record to store (not yet stored). A card
 * that no user has registered gets the receipt sealed to the escrow key, held for the retention period.
 * The sealing runs on the worker pool, off the event loop.
 */
export async function sealForRecipient(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  receipt: ValidReceipt,
  paymentId?: string,
): Promise<ReceiptRecord> {
  const panHash = panHashOf(deps.pepper, receipt.recipientHashedPan);
  const now = deps.clock.now();
  const user = await deps.store.users.findByPanHash(panHash);
  const key = user ? await deps.store.users.findKey(user.activeKeyId) : undefined;

  const keyId = key ? key.keyId : deps.escrow.keyId;
  const sealed = await deps.pool.seal({
    plaintext: plaintextTextOf(receipt),
    aad: receiptAadText(receipt),
    keyId,
    spki: key ? key.publicKey : deps.escrow.spki,
    // The stored key bundle has no encapsulatedKey yet, so only RSA keys can be sealed to here.
    algorithm: RSA_OAEP_256,
  });
  const record: ReceiptRecord = {
    id: randomId("rcp", 12),
    receiptId: receipt.receiptId,
    merchantId: receipt.merchantId,
    transactionId: receipt.transactionId,
    version: receipt.version,
    merchantTenantId: principal.tenantId,
    // The user's own copy of the same value: a store that keeps both in memory keeps one string.
    panHash: user ? user.panHash : panHash,
    keyBundle: { keyId, encryptedAesKey: sealed.encryptedAesKey },
    ciphertext: sealed.ciphertext,
    iv: sealed.iv,
    authTag: sealed.authTag,
    createdAt: now,
    isEscrowed: key === undefined,
  };
  if (user && key) {
    record.userId = user.userId;
    record.issuerTenantId = user.tenantId;
  } else {
    record.escrowKeyId = deps.escrow.keyId;
    record.expiresAt = new Date(now.getTime() + deps.escrowRetentionDays * 86_400_000);
  }
  if (paymentId !== undefined) record.paymentId = paymentId;
  return record;
}

/**
 * Closes the race between a new escrowed receipt and a registration of its card running at the same
 * time: after storing an escrowed receipt, if the card is now registered, release it here. Either the
 * registration's release or this one sees the receipt; `release` lets only one of them win.
 *
 * The receipt (and its payment) are stored by then, so a failure here must not turn the call into an
 * error: the caller would retry something that already happened. The receipt stays escrowed, and the
 * next registration of the card (every register call releases pending escrow) releases it.
 */
export async function settleEscrowRace(deps: DomainDeps, record: ReceiptRecord): Promise<void> {
  if (!record.isEscrowed) return;
  try {
    const user = await deps.store.users.findByPanHash(record.panHash);
    const key = user ? await deps.store.users.findKey(user.activeKeyId) : undefined;
    if (!user || !key) return;
    await releaseEscrow(deps, {
      panHash: record.panHash,
      userId: user.userId,
      issuerTenantId: user.tenantId,
      keyId: key.keyId,
      spki: key.publicKey,
    });
  } catch (err) {
    deps.logger.warn({ err, receiptId: record.id }, "escrow release after storing a receipt failed");
  }
}
