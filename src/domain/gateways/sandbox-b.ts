import { invalidRequest, Violations } from "../../errors.js";
import { MAX_MONEY } from "../limits.js";
import { mockItems, mockTargetAmount, needsMockItems } from "../mock-items.js";
import type { ValidReceipt } from "../receipt-rules.js";
import { type DeclineCode, paymentDeclined } from "./declines.js";
import {
  type ChargeInput,
  type ChargeResult,
  itemsTotal,
  oncePerIdempotencyKey,
  type PaymentGateway,
  randomHex,
  sandboxRefund,
  systemRandomBytes,
} from "./gateway.js";
import type { SandboxDeps } from "./sandbox-a.js";

/** The sandbox nonce of a card that is charged successfully (also what no nonce means). */
export const NONCE_OK = "cnon:card-nonce-ok";
/** The sandbox nonce of a card the issuer declines: the charge fails with `payment_declined`. */
export const NONCE_DECLINED = "cnon:card-nonce-declined";

/**
 * The sandbox's test cards: each card nonce and the outcome it triggers, `approved` or the decline
 * code of the `payment_declined` it gets. Any other nonce is `invalid_request`.
 */
export const SANDBOX_NONCES: Readonly<Record<string, "approved" | DeclineCode>> = {
  [NONCE_OK]: "approved",
  [NONCE_DECLINED]: "generic_decline",
  "cnon:card-nonce-insufficient-funds": "insufficient_funds",
  "cnon:card-nonce-rejected-cvv": "incorrect_cvc",
  "cnon:card-nonce-rejected-expiration": "expired_card",
  "cnon:card-nonce-rejected-postalcode": "incorrect_zip",
};

const NONCE_RULE = `must be a sandbox card nonce: ${Object.keys(SANDBOX_NONCES).join(", ")}`;

/** The outcome `nonce` triggers, or undefined for a nonce the sandbox does not know. */
function outcomeOf(nonce: string): "approved" | DeclineCode | undefined {
  return Object.hasOwn(SANDBOX_NONCES, nonce) ? SANDBOX_NONCES[nonce] : undefined;
}

/**
 * The offline sandbox of gateway_b, orders with card nonces in the style of Square: the amount is
 * derived from the items (sum of `totalPrice` plus item tax amounts; from the mock items when the
 * receipt has none) plus the `tipAmount` (Square charges `amount_money` plus `tip_money`), a stated
 * `amount` must agree, and the sandbox nonce decides the outcome
 * ({@link SANDBOX_NONCES}; no nonce is approved).
 */
export function createSandboxGatewayB(deps: SandboxDeps = {}): PaymentGateway {
  const random = deps.random ?? systemRandomBytes;

  /** Adds violations and returns the derived amount (meaningful only when none were added). */
  function derive(receipt: ValidReceipt, violations: Violations): number {
    if (receipt.cardNonce !== undefined && outcomeOf(receipt.cardNonce) === undefined) {
      violations.add("cardNonce", NONCE_RULE);
    }
    if (receipt.items.length === 0 && !receipt.mockItems) {
      violations.add(
        "items",
        "must not be empty when mockItems is false: gateway_b derives the amount from them",
      );
      return 0;
    }
    // The same deterministic items withMockItems seals, so the order of the two calls does not matter.
    const items = needsMockItems(receipt)
      ? mockItems(receipt.receiptId, mockTargetAmount(receipt))
      : receipt.items;
    const total = itemsTotal(items) + BigInt(receipt.tipAmount ?? 0);
    if (total > BigInt(MAX_MONEY)) {
      violations.add("items", `must add up to at most ${MAX_MONEY} (totalPrice plus tax amounts)`);
    } else if (receipt.amount !== undefined && BigInt(receipt.amount) !== total) {
      const tip = receipt.tipAmount === undefined ? "" : " plus tipAmount";
      violations.add("amount", `must be ${total}, the sum of the items' totalPrice and tax amounts${tip}`);
    } else if (total === 0n) {
      if (receipt.amount !== undefined) violations.add("amount", "must be greater than 0");
      else violations.add("items", "must add up to an amount greater than 0");
    }
    return Number(total);
  }

  return {
    name: "gateway_b",
    checkPayment(receipt: ValidReceipt, violations: Violations): void {
      derive(receipt, violations);
    },
    resolveAmount(receipt: ValidReceipt): number {
      const violations = new Violations();
      const amount = derive(receipt, violations);
      violations.throwIfAny();
      return amount;
    },
    charge: oncePerIdempotencyKey(async (input: ChargeInput): Promise<ChargeResult> => {
      if (!(Number.isSafeInteger(input.amount) && input.amount > 0)) {
        throw invalidRequest([{ field: "amount", description: "must be greater than 0" }]);
      }
      const outcome = input.cardNonce === undefined ? "approved" : outcomeOf(input.cardNonce);
      if (outcome === undefined) throw invalidRequest([{ field: "cardNonce", description: NONCE_RULE }]);
      if (outcome !== "approved") throw paymentDeclined(outcome);
      return { status: "succeeded", orderId: `ord_${randomHex(random)}` };
    }),
    refund: sandboxRefund("rfd", random),
  };
}
