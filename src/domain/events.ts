import type { PaymentRecord, ReceiptRecord, RegisterOutcome, UserRecord } from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import { EscrowRefs } from "./escrow-ref.js";
import { type EventRecord, newEvent } from "./event-types.js";

/**
 * Which events each change of the domain causes (docs/events.md), decided in one place. The store
 * operation that makes the change takes these events and writes them in the same atomic step (an
 * outbox), so an event exists exactly when its change does. Changes made by other modules call the
 * builders here the same way.
 */

/** Escrow references per pepper: derived once (an HKDF), used for every escrowed receipt. */
const escrowRefs = new WeakMap<DomainDeps, EscrowRefs>();

function escrowRefsOf(deps: DomainDeps): EscrowRefs {
  let refs = escrowRefs.get(deps);
  if (refs === undefined) {
    refs = new EscrowRefs(deps.pepper);
    escrowRefs.set(deps, refs);
  }
  return refs;
}

/** The card of an `escrowRef` made for `tenantId`, or undefined (another tenant's, or not one). */
export function panHashOfEscrowRef(
  deps: DomainDeps,
  tenantId: string,
  escrowRef: string,
): string | undefined {
  return escrowRefsOf(deps).open(tenantId, escrowRef);
}

/**
 * A stored receipt's events: `receipt.created` to the issuer of its cardholder, or `escrow.pending` to
 * the issuer it is escrowed for (escrow without an owner tells no one: nobody owns the card's BIN).
 */
export function receiptEvents(deps: DomainDeps, record: ReceiptRecord): EventRecord[] {
  if (record.userId !== undefined && record.issuerTenantId !== undefined) {
    return [
      newEvent("receipt.created", record.issuerTenantId, record.createdAt, {
        userId: record.userId,
        receiptId: record.receiptId,
        merchantId: record.merchantId,
        createdAt: record.createdAt,
      }),
    ];
  }
  const owner = record.escrowOwnerTenantId;
  if (!record.isEscrowed || owner === undefined) return [];
  return [
    newEvent("escrow.pending", owner, record.createdAt, {
      escrowRef: escrowRefsOf(deps).make(owner, record.panHash),
      ...(record.escrowCardBin === undefined ? {} : { cardBin: record.escrowCardBin }),
      receiptId: record.receiptId,
      merchantId: record.merchantId,
    }),
  ];
}

/** A created payment's events: `payment.created` to the merchant, and its receipt's. */
export function paymentEvents(
  deps: DomainDeps,
  payment: PaymentRecord,
  record: ReceiptRecord,
): EventRecord[] {
  return [
    newEvent("payment.created", payment.merchantTenantId, payment.createdAt, {
      paymentId: payment.paymentId,
      merchantId: payment.merchantId,
      transactionId: payment.transactionId,
      receiptId: payment.receiptId,
      createdAt: payment.createdAt,
    }),
    ...receiptEvents(deps, record),
  ];
}

/** A declined payment's event, to the merchant, written with the declined payment. */
export function declinedEvent(
  merchantTenantId: string,
  at: Date,
  ids: { paymentId: string; merchantId: string; transactionId: string; receiptId: string },
): EventRecord {
  return newEvent("payment.declined", merchantTenantId, at, ids);
}

/** A refund's event, to the merchant: for the store operation that records the refund. */
export function refundedEvent(
  payment: Pick<PaymentRecord, "paymentId" | "merchantTenantId" | "merchantId" | "transactionId">,
  refundId: string,
  at: Date,
): EventRecord {
  return newEvent("payment.refunded", payment.merchantTenantId, at, {
    paymentId: payment.paymentId,
    refundId,
    merchantId: payment.merchantId,
    transactionId: payment.transactionId,
  });
}

/** An escrowed receipt released to `user`: `escrow.released` to the user's issuer. */
export function releasedEvent(receipt: ReceiptRecord, user: UserRecord, at: Date): EventRecord {
  return newEvent("escrow.released", user.tenantId, at, {
    userId: user.userId,
    receiptId: receipt.receiptId,
    merchantId: receipt.merchantId,
  });
}

/**
 * A registration's events: `key.changed` to the issuer when a key became active (a new user, a
 * rotation, or a card taken by its BIN's owner); none when nothing changed. A card taken by the owner
 * of its BIN (`cardBin`) also writes `card.claim_conflict` to both issuers. Called by the store inside
 * its atomic step, with the outcome.
 */
export function registerEvents(outcome: RegisterOutcome, at: Date, cardBin?: string): EventRecord[] {
  if (outcome.kind !== "created" && outcome.kind !== "rotated" && outcome.kind !== "superseded") return [];
  const changed = newEvent("key.changed", outcome.user.tenantId, at, {
    userId: outcome.user.userId,
    keyIdBefore: outcome.kind === "rotated" ? outcome.previousKeyId : "",
    keyIdAfter: outcome.key.keyId,
    version: outcome.user.keyVersion ?? 1,
  });
  if (outcome.kind !== "superseded") return [changed];
  return [changed, ...claimConflictEvents(cardBin ?? "", outcome.previous, outcome.user, at)];
}

/**
 * A card registered by one issuer and claimed by the issuer that owns its BIN: `card.claim_conflict`
 * to both, each naming only its own user (never the other tenant's), for the store operation that
 * moves the card.
 */
export function claimConflictEvents(
  cardBin: string,
  superseded: { tenantId: string; userId: string },
  claimant: { tenantId: string; userId: string },
  at: Date,
): EventRecord[] {
  return [
    newEvent("card.claim_conflict", superseded.tenantId, at, { userId: superseded.userId, cardBin }),
    newEvent("card.claim_conflict", claimant.tenantId, at, { userId: claimant.userId, cardBin }),
  ];
}

/** An erased user's event, to its issuer. */
export function erasedEvent(user: Pick<UserRecord, "userId" | "tenantId">, at: Date): EventRecord {
  return newEvent("user.erased", user.tenantId, at, { userId: user.userId });
}
