import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import type { SealRequest } from "../crypto/crypto-pool.js";
import { receiptAadText } from "../crypto/envelope.js";
import { storedAadBound } from "../crypto/suites.js";
import { randomId } from "../ids.js";
import type { ApiKeyRecord, ReceiptRecord, StoredKeyBundle } from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import { keepIfKeyLives } from "./erasure.js";
import { admitToEscrow, type ReleaseTarget, releaseReceipt } from "./escrow.js";
import { INTERNAL_CALLER } from "./grants.js";
import { releaseNeedsCheck, verifiedReleaseTarget } from "./kt/release-check.js";
import { checkSealingKey } from "./kt/seal-check.js";
import {
  type SealedReceiptFields,
  sealedPlaintextOf,
  toReceiptMessage,
  type ValidReceipt,
} from "./receipt-rules.js";
import { type BindingConflict, type CardRef, type Recipient, recipientOf, sealingKeyOf } from "./routing.js";

/** The sealed plaintext of a receipt: the UTF-8 JSON of its fields (REST names, money as numbers). */
export function plaintextOf(receipt: ValidReceipt): Buffer {
  return Buffer.from(plaintextTextOf(receipt), "utf8");
}

/** {@link plaintextOf} before its UTF-8 encoding: the JSON text. */
export function plaintextTextOf(receipt: ValidReceipt): string {
  return JSON.stringify(sealedPlaintextOf(receipt));
}

/**
 * Parses a sealed plaintext back into a receipt message. Throws when it is not UTF-8 (strictly: no
 * byte is replaced), not JSON, or not a receipt's fields.
 */
export function receiptFromPlaintext(plaintext: Uint8Array): Receipt {
  const text = new TextDecoder("utf-8", { fatal: true }).decode(plaintext);
  return toReceiptMessage(JSON.parse(text) as SealedReceiptFields);
}

/** The parts of a receipt record that do not depend on how it was sealed. */
export interface ReceiptIdentityFields {
  receiptId: string;
  merchantId: string;
  transactionId: string;
  version: string;
}

/** The sealed parts of a receipt, as base64 text. */
export interface SealedParts {
  keyBundle: StoredKeyBundle;
  ciphertext: string;
  iv: string;
  authTag: string;
}

/**
 * The record to store for a receipt sealed to `recipient` (by the service or by the merchant): a
 * user's receipt, or escrow held for the retention period (for the BIN's owner, when there is one).
 */
export function receiptRecordOf(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  recipient: Recipient,
  identity: ReceiptIdentityFields,
  sealed: SealedParts,
  paymentId?: string,
): ReceiptRecord {
  const now = deps.clock.now();
  const record: ReceiptRecord = {
    id: randomId("rcp", 12),
    receiptId: identity.receiptId,
    merchantId: identity.merchantId,
    transactionId: identity.transactionId,
    version: identity.version,
    merchantTenantId: principal.tenantId,
    // The user's own copy of the same value: a store that keeps both in memory keeps one string.
    panHash: recipient.kind === "user" ? recipient.user.panHash : recipient.panHash,
    keyBundle: sealed.keyBundle,
    ciphertext: sealed.ciphertext,
    iv: sealed.iv,
    authTag: sealed.authTag,
    createdAt: now,
    isEscrowed: recipient.kind === "escrow",
  };
  if (recipient.kind === "user") {
    record.userId = recipient.user.userId;
    record.issuerTenantId = recipient.user.tenantId;
  } else {
    record.escrowKeyId = recipient.key.keyId;
    if (recipient.ownerTenantId !== undefined) record.escrowOwnerTenantId = recipient.ownerTenantId;
    if (recipient.cardBin !== undefined) record.escrowCardBin = recipient.cardBin;
    record.expiresAt = new Date(now.getTime() + deps.escrowRetentionDays * 86_400_000);
  }
  if (paymentId !== undefined) record.paymentId = paymentId;
  return record;
}

/** A receipt record ready to store, and the binding conflict to audit once it is stored. */
export interface PreparedReceipt {
  record: ReceiptRecord;
  conflict?: BindingConflict | undefined;
  /**
   * The card as the merchant named it (sealed by the service): what releasing the receipt from
   * escrow to a requireBindings card's key checks against the key log ({@link settleEscrowRace}).
   */
  card?: CardRef | undefined;
}

/** The prepared receipt of `record`, sealed to `recipient`. */
export function preparedFor(record: ReceiptRecord, recipient: Recipient): PreparedReceipt {
  return recipient.kind === "escrow" ? { record, conflict: recipient.conflict } : { record };
}

/**
 * Seals a validated receipt to its recipient (the routing) and returns the record to store
 * (not yet stored); writes nothing. For a tenant with `requireBindings`, only to a key that verifies
 * against the key log (`integrity_failure` otherwise). The sealing runs on the worker pool, off the event loop.
 *
 * Not an async function, and neither is any step that waits for the worker: a suspended async
 * function keeps every parameter and local alive, used later or not, and a receipt (a 50-item one is
 * some 200 objects) and its plaintext kept through the seal by each of 64 calls in flight made the
 * garbage collector the largest single cost of sealing. What waits for the worker holds only the
 * receipt's ids and card references ({@link SealingPlan}).
 */
export function sealForRecipient(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  receipt: ValidReceipt,
  { paymentId, cardKey }: SealOptions = {},
): Promise<PreparedReceipt> {
  return planSealing(deps, principal, receipt, cardKey).then((plan) =>
    sealPlanned(deps, principal, plan, paymentId),
  );
}

/** Options of {@link sealForRecipient}. */
export interface SealOptions {
  /** The payment the receipt belongs to. */
  paymentId?: string | undefined;
  /**
   * The receipt's card's keyed reference, `cardKeyOfRef(deps, receipt)`, when the call has it already
   * (`assertPlaintextAccepted` returns it): an HMAC not taken twice.
   */
  cardKey?: string | undefined;
}

/** A receipt ready to seal: what to send to the worker and what its record needs, without the receipt. */
interface SealingPlan {
  request: SealRequest;
  recipient: Recipient;
  identity: ReceiptIdentityFields;
  card: CardRef;
}

/** The routing and key checks of {@link sealForRecipient}, and the plaintext to seal. */
async function planSealing(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  receipt: ValidReceipt,
  cardKey: string | undefined,
): Promise<SealingPlan> {
  const recipient = await recipientOf(deps, receipt, cardKey);
  // A tenant with requireBindings: only a key the key log vouches for (kt/seal-check.ts).
  await checkSealingKey(deps, receipt, recipient);
  await admitToEscrow(deps, principal, recipient);
  const { keyId, algorithm, spki, aadBound } = recipient.key;
  const { receiptId, merchantId, transactionId, version } = receipt;
  const card: CardRef = { recipientHashedPan: receipt.recipientHashedPan };
  if (receipt.recipientPar !== undefined) card.recipientPar = receipt.recipientPar;
  if (receipt.cardBin !== undefined) card.cardBin = receipt.cardBin;
  return {
    request: {
      plaintext: plaintextTextOf(receipt),
      aad: receiptAadText(receipt),
      keyId,
      spki,
      algorithm,
      aadBound,
    },
    recipient,
    identity: { receiptId, merchantId, transactionId, version },
    card,
  };
}

/** Seals a planned receipt on the pool and makes its record; the plaintext is the message's alone. */
function sealPlanned(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  { request, recipient, identity, card }: SealingPlan,
  paymentId: string | undefined,
): Promise<PreparedReceipt> {
  return deps.pool.seal(request).then((sealed) => {
    const { keyId, algorithm, aadBound } = recipient.key;
    const keyBundle: StoredKeyBundle = {
      keyId,
      algorithm,
      encryptedAesKey: sealed.encryptedAesKey,
      ...storedAadBound(algorithm, aadBound),
    };
    if (sealed.encapsulatedKey !== undefined) keyBundle.encapsulatedKey = sealed.encapsulatedKey;
    const record = receiptRecordOf(
      deps,
      principal,
      recipient,
      identity,
      { keyBundle, ciphertext: sealed.ciphertext, iv: sealed.iv, authTag: sealed.authTag },
      paymentId,
    );
    return { ...preparedFor(record, recipient), card };
  });
}

/**
 * Closes the races of a receipt just stored (with or without a payment) with the card's registration
 * and erasure: a receipt for a user is deleted when an erasure took the user's key meanwhile
 * (`keepIfKeyLives`); an escrowed one is released when the card registered meanwhile
 * ({@link settleEscrowRace}). Neither fails the call, whose receipt (and payment) are stored.
 */
export async function settleStoredReceipt(
  deps: DomainDeps,
  record: ReceiptRecord,
  card?: CardRef,
): Promise<void> {
  if (record.isEscrowed) {
    await settleEscrowRace(deps, record, card);
    return;
  }
  try {
    await keepIfKeyLives(deps, record);
  } catch (err) {
    // The erasure that took the key may still be sweeping (it answers 503 and is retried until done).
    deps.logger.warn({ err, receiptId: record.id }, "checking a stored receipt's key failed");
  }
}

/**
 * Closes the race between a new escrowed receipt and a registration of its card running at the same
 * time: after storing an escrowed receipt, if the card is now registered by a tenant that may have it,
 * release it here. Either the registration's release or this one sees the receipt; `release` lets only
 * one of them win.
 *
 * The receipt (and its payment) are stored by then, so a failure here must not turn the call into an
 * error: the caller would retry something that already happened. The receipt stays escrowed, and the
 * next registration of the card (every register call releases pending escrow) releases it.
 */
export async function settleEscrowRace(
  deps: DomainDeps,
  record: ReceiptRecord,
  card?: CardRef,
): Promise<void> {
  if (!record.isEscrowed) return;
  try {
    const user = await deps.store.users.findByPanHash(record.panHash);
    if (!user) return;
    if (record.escrowOwnerTenantId !== undefined && record.escrowOwnerTenantId !== user.tenantId) return;
    let target: Omit<ReleaseTarget, "panHash"> | undefined;
    if (await releaseNeedsCheck(deps, user.tenantId)) {
      // Only to a key verified against the key log, which needs the card in the clear: without it
      // (a merchant-sealed receipt) the registration's own release, which has it, takes the receipt.
      if (card === undefined) return;
      target = await verifiedReleaseTarget(deps, card, user.userId, INTERNAL_CALLER);
    } else {
      const key = await deps.store.users.findKey(user.activeKeyId);
      target = key === undefined ? undefined : { user, key: sealingKeyOf(key) };
    }
    if (target === undefined) return;
    // This receipt only: the registration releases the card's other escrow, a page at a time.
    await releaseReceipt(deps, { panHash: record.panHash, ...target }, record, INTERNAL_CALLER);
  } catch (err) {
    deps.logger.warn({ err, receiptId: record.id }, "escrow release after storing a receipt failed");
  }
}
