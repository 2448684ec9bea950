import { randomId } from "../ids.js";
import type { EventData, EventRecord, EventType } from "../store/event-types.js";
import type { Role } from "../store/types.js";

export type { EventData, EventRecord, EventType } from "../store/event-types.js";

/** What one event type is: who receives it, what it says, which ids it carries. */
export interface EventTypeInfo {
  /** The role of the tenant it is sent to. */
  role: Role;
  description: string;
  /** The `data` members it carries (docs/events.md lists them; a test checks it against this). */
  data: readonly (keyof EventData)[];
}

/**
 * The event types, the one table that endpoint subscriptions, the feed's filter and
 * docs/events.md are checked against. Thin: ids and times only, never receipt content, a hashed PAN or
 * a PAR.
 */
export const EVENT_TYPES = {
  "receipt.created": {
    role: "issuer",
    description: "A receipt was stored for one of the issuer's cardholders.",
    data: ["userId", "receiptId", "merchantId", "createdAt"],
  },
  "escrow.pending": {
    role: "issuer",
    description:
      "A receipt was escrowed for the issuer (its BIN, a card not registered to it). `escrowRef` lists " +
      "the card's pending escrow (POST /api/v1/escrow/pending) in place of the hashed PAN.",
    data: ["escrowRef", "cardBin", "receiptId", "merchantId"],
  },
  "escrow.released": {
    role: "issuer",
    description: "An escrowed receipt was released to one of the issuer's cardholders.",
    data: ["userId", "receiptId", "merchantId"],
  },
  "key.changed": {
    role: "issuer",
    description:
      "A cardholder's active key changed: a first registration (no key before) or a rotation. A convenience " +
      "in honest operation: against a dishonest service, the issuer's key-directory monitor is the alarm.",
    data: ["userId", "keyIdBefore", "keyIdAfter", "version"],
  },
  "card.claim_conflict": {
    role: "issuer",
    description:
      "A card registered by one issuer was claimed by the issuer that owns its BIN; sent to both, each with its own user.",
    data: ["userId", "cardBin"],
  },
  "user.erased": {
    role: "issuer",
    description: "A cardholder was erased.",
    data: ["userId"],
  },
  "payment.created": {
    role: "merchant",
    description: "A payment was created, with its receipt.",
    data: ["paymentId", "merchantId", "transactionId", "receiptId", "createdAt"],
  },
  "payment.declined": {
    role: "merchant",
    description: "The gateway declined a payment: it is kept as declined, without a receipt.",
    data: ["paymentId", "merchantId", "transactionId", "receiptId"],
  },
  "payment.refunded": {
    role: "merchant",
    description: "A payment was refunded.",
    data: ["paymentId", "refundId", "merchantId", "transactionId"],
  },
} as const satisfies Record<EventType, EventTypeInfo>;

/** Every event type, in the order of {@link EVENT_TYPES}. */
export const ALL_EVENT_TYPES = Object.keys(EVENT_TYPES) as EventType[];

/** Whether `value` is an event type. */
export function isEventType(value: string): value is EventType {
  return Object.hasOwn(EVENT_TYPES, value);
}

/** The event types a tenant of `role` receives. */
export function eventTypesFor(role: Role): EventType[] {
  return ALL_EVENT_TYPES.filter((type) => EVENT_TYPES[type].role === role);
}

/**
 * The one way to make an event: a new id, the time of the change, and only the members its type
 * carries (anything else given is dropped, so no caller can widen an event by mistake). Store it with
 * the change that causes it: pass it to that store operation (`events` argument), or to
 * `store.events.append` when the change writes nothing else (a declined payment).
 */
export function newEvent(type: EventType, tenantId: string, at: Date, data: EventData): EventRecord {
  const allowed: readonly (keyof EventData)[] = EVENT_TYPES[type].data;
  const kept: Record<string, unknown> = {};
  for (const name of allowed) {
    const value = data[name];
    if (value !== undefined) kept[name] = value;
  }
  return { id: randomId("evt", 16), type, tenantId, createdAt: at, data: kept as EventData };
}
