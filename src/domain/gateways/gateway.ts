import { secureRandomBytes } from "../../crypto/random.js";
import type { Violations } from "../../errors.js";
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
   * The caller's Idempotency-Key. A real client forwards it so the gateway's own retries never
   * charge twice; the sandboxes ignore it (the service replays stored responses itself).
   */
  idempotencyKey?: string;
}

/** What a gateway answered. */
export interface ChargeResult {
  /** The gateway's payment status; the sandboxes only ever answer `succeeded`. */
  status: string;
  /** The gateway's order / payment-intent id (`ord_...`). */
  orderId: string;
  /** gateway_a: `<paymentId>_secret_<random>`, for the POS to confirm the intent. Shown once. */
  clientSecret?: string;
}

/**
 * A payment gateway (SPEC section 7). The built-in implementations are offline sandboxes
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
