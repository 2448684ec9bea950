import { sha256Hex } from "../../crypto/digest.js";
import { secureRandomBytes } from "../../crypto/random.js";
import { invalidRequest, type Violations } from "../../errors.js";
import type { ReceiptLineItem, ValidReceipt } from "../receipt-rules.js";

/** The gateways a payment can be created through (the `{gateway}` of the create path). */
export type GatewayName = "gateway_a" | "gateway_b";

/** Every gateway name, in the order error messages list them. */
export const GATEWAY_NAMES: readonly GatewayName[] = ["gateway_a", "gateway_b"];

/** What the service asks a gateway to charge. `amount` is in the smallest unit of `currency`. */
export interface ChargeInput {
  /** The service's id of the payment (`pay_...`). */
  paymentId: string;
  amount: number;
  /** ISO 4217, upper case. */
  currency: string;
  /** gateway_b: the card nonce from the POS SDK. */
  cardNonce?: string;
  /**
   * The gateway's idempotency key ({@link gatewayIdempotencyKey} of the caller's Idempotency-Key): a
   * retry that reaches the gateway again (the first attempt charged, then failed before the payment
   * was stored) gets the first charge back instead of a second one. The sandboxes honour it too.
   */
  idempotencyKey?: string;
}

/** What a gateway answered. */
export interface ChargeResult {
  /** The gateway charged the card (a decline is thrown as `payment_declined`). */
  status: "succeeded";
  /** The gateway's order / payment-intent id (`ord_...`). */
  orderId: string;
  /** gateway_a: `<paymentId>_secret_<random>`, for the POS to confirm the intent. Shown once. */
  clientSecret?: string;
}

/** What the service asks a gateway to refund. `amount` is in the smallest unit of `currency`. */
export interface RefundInput {
  /** The service's id of the payment (`pay_...`). */
  paymentId: string;
  /** The gateway's id of the charge, as `charge` answered it. */
  orderId: string;
  /** The service's id of the refund (`ref_...`). */
  refundId: string;
  amount: number;
  /** ISO 4217, upper case: the payment's. */
  currency: string;
  /**
   * The payment as the service recorded it: its status, the amount charged, and the amount of the
   * refunds before this one. A real gateway checks its own records; the offline sandboxes keep none,
   * so they check these, as their real counterparts would.
   */
  payment: { status: string; amount: number; refunded: number };
  /** The gateway's idempotency key, as for a charge (see {@link ChargeInput}). */
  idempotencyKey?: string;
}

/** What a gateway answered to a refund. */
export interface RefundResult {
  /** The gateway's id of the refund (`re_...`, `rfd_...`). */
  gatewayRefundId: string;
}

/**
 * A payment gateway. The built-in implementations are offline sandboxes
 * (`sandbox-a.ts`, `sandbox-b.ts`); a real gateway client (Stripe, Square, ...) is another
 * implementation of this same interface, passed to `gatewayByName` in their place.
 *
 * Order of calls in create-payment: `validateReceipt(receipt, { mode: "payment", gateway })` (which
 * runs {@link checkPayment} in the same pass, so one error lists every problem), `withMockItems`,
 * {@link resolveAmount}, seal and store, {@link charge}. Mock items are deterministic, so
 * `resolveAmount` gives the same answer before and after `withMockItems`.
 */
export interface PaymentGateway {
  readonly name: GatewayName;
  /** Adds a violation for every broken amount or nonce rule of this gateway to `violations`. */
  checkPayment(receipt: ValidReceipt, violations: Violations): void;
  /**
   * The amount to charge, in the smallest currency unit: given (gateway_a) or derived from the items
   * (gateway_b). Throws `invalid_request` naming `amount`, `items` or `cardNonce` when a rule breaks.
   */
  resolveAmount(receipt: ValidReceipt): number;
  /**
   * Charges the card. Rejects with `payment_declined` when the gateway declines it and with
   * `invalid_request` when it refuses the input (e.g. an unknown nonce).
   */
  charge(input: ChargeInput): Promise<ChargeResult>;
  /**
   * Refunds part or all of a charge. Rejects with `invalid_request` when the gateway refuses: a
   * payment that was not charged (declined), an amount of 0, or more than is left to refund.
   */
  refund(input: RefundInput): Promise<RefundResult>;
}

/**
 * The refund of the offline sandboxes, which refuse what their real counterparts refuse (Stripe's
 * `charge_already_refunded` and `amount_too_large`, Square's refunds of a failed payment): a payment
 * that was not charged, an amount that is not positive, and refunds adding up to more than the charge.
 * `prefix` starts the refund ids it makes.
 */
export function sandboxRefund(
  prefix: string,
  random: RandomBytes,
): (input: RefundInput) => Promise<RefundResult> {
  return async (input) => {
    const { payment, amount } = input;
    if (payment.status !== "succeeded") {
      throw invalidRequest([
        { field: "paymentId", description: "was declined: a declined payment has nothing to refund" },
      ]);
    }
    if (!(Number.isSafeInteger(amount) && amount > 0)) {
      throw invalidRequest([{ field: "amount", description: "must be greater than 0" }]);
    }
    const left = payment.amount - payment.refunded;
    if (amount > left) {
      throw invalidRequest([{ field: "amount", description: refundTooLarge(left, payment) }]);
    }
    return { gatewayRefundId: `${prefix}_${randomHex(random)}` };
  };
}

/** Why a refund is too large: what is left, of how much. */
export function refundTooLarge(left: number, payment: { amount: number; refunded: number }): string {
  return `must be at most ${left}, what is left to refund of the payment's ${payment.amount} (${payment.refunded} refunded)`;
}

/** A source of cryptographically strong random bytes, injected so tests can pin generated ids. */
export type RandomBytes = (size: number) => Uint8Array;

/** The default {@link RandomBytes}: the CSPRNG, through the service's pooled reader. */
export const systemRandomBytes: RandomBytes = (size) => secureRandomBytes(size);

/** Bytes of randomness in generated order ids and client secrets: 128 bits, as hex. */
export const RANDOM_ID_BYTES = 16;

/** 128 random bits from `random` as 32 hex digits (hex, so `_` stays a separator in ids built from it). */
export function randomHex(random: RandomBytes): string {
  return Buffer.from(random(RANDOM_ID_BYTES)).toString("hex");
}

/**
 * The sum of the items' `totalPrice` and tax amounts, in the smallest currency unit, as a bigint:
 * 500 items of up to 2^53 each can exceed the safe range, which the caller must report.
 */
export function itemsTotal(items: readonly ReceiptLineItem[]): bigint {
  let total = 0n;
  for (const item of items) {
    total += BigInt(item.totalPrice);
    for (const tax of item.taxes) total += BigInt(tax.amount);
  }
  return total;
}

/**
 * The idempotency key the service sends a gateway for a caller's `Idempotency-Key`, or undefined when
 * the caller sent none. A gateway scopes keys to the service's one account, so the caller's key as is
 * would let two API keys' `order-1` meet there (the second caller would get the first one's charge),
 * and a charge and a refund sent with the same key would meet too: the key is the SHA-256 of the
 * operation, the caller's API key id (`scope`) and its key, 40 hex digits (within Stripe's 255 and
 * Square's 45 characters).
 */
export function gatewayIdempotencyKey(
  operation: "charge" | "refund",
  scope: string,
  key: string | null | undefined,
): string | undefined {
  if (key === null || key === undefined || key === "") return undefined;
  return sha256Hex(`${operation}\n${scope}\n${key}`).slice(0, 40);
}

/** How many idempotency keys a sandbox remembers; the oldest is forgotten first. */
export const SANDBOX_REMEMBERED_KEYS = 10_000;

/**
 * A sandbox's charge made idempotent as its real counterpart's is: the same idempotency key with the
 * same amount, currency and nonce gets the first answer (a success or a decline) without charging
 * again; with other parameters it is `invalid_request` (Stripe's `idempotency_error`). A charge with
 * no key is always a new charge.
 */
export function oncePerIdempotencyKey(
  charge: (input: ChargeInput) => Promise<ChargeResult>,
): (input: ChargeInput) => Promise<ChargeResult> {
  const seen = new Map<string, { parameters: string; answer: Promise<ChargeResult> }>();
  return (input) => {
    const key = input.idempotencyKey;
    if (key === undefined) return charge(input);
    const parameters = JSON.stringify([input.amount, input.currency, input.cardNonce ?? null]);
    const first = seen.get(key);
    if (first !== undefined) {
      if (first.parameters === parameters) return first.answer;
      return Promise.reject(
        invalidRequest([
          { field: "Idempotency-Key", description: "was used with another amount, currency or card nonce" },
        ]),
      );
    }
    const answer = charge(input);
    // Read once here so that a remembered decline is never an unhandled rejection.
    answer.catch(() => {});
    seen.set(key, { parameters, answer });
    if (seen.size > SANDBOX_REMEMBERED_KEYS) seen.delete(seen.keys().next().value as string);
    return answer;
  };
}
