import { invalidRequest, Violations } from "../../errors.js";
import type { ValidReceipt } from "../receipt-rules.js";
import {
  type ChargeInput,
  type ChargeResult,
  oncePerIdempotencyKey,
  type PaymentGateway,
  type RandomBytes,
  randomHex,
  sandboxRefund,
  systemRandomBytes,
} from "./gateway.js";

/** Dependencies of the sandbox gateways. */
export interface SandboxDeps {
  /** Randomness for order ids and client secrets; `crypto.randomBytes` by default. */
  random?: RandomBytes;
}

/**
 * The offline sandbox of gateway_a, card-present payment intents in the style of Stripe: the merchant
 * states the `amount` (required, greater than 0) and gets back a client secret
 * `<paymentId>_secret_<128 random bits, hex>` with which the POS confirms the intent. There are no
 * card nonces. Every charge succeeds.
 */
export function createSandboxGatewayA(deps: SandboxDeps = {}): PaymentGateway {
  const random = deps.random ?? systemRandomBytes;

  function checkPayment(receipt: ValidReceipt, violations: Violations): void {
    if (receipt.amount === undefined) violations.add("amount", "is required by gateway_a");
    else if (receipt.amount <= 0) violations.add("amount", "must be greater than 0");
    if (receipt.cardNonce !== undefined) violations.add("cardNonce", "only accepted by gateway_b");
  }

  return {
    name: "gateway_a",
    checkPayment,
    resolveAmount(receipt: ValidReceipt): number {
      const violations = new Violations();
      checkPayment(receipt, violations);
      violations.throwIfAny();
      return receipt.amount ?? 0;
    },
    charge: oncePerIdempotencyKey(async (input: ChargeInput): Promise<ChargeResult> => {
      if (!(Number.isSafeInteger(input.amount) && input.amount > 0)) {
        throw invalidRequest([{ field: "amount", description: "must be greater than 0" }]);
      }
      return {
        status: "succeeded",
        orderId: `ord_${randomHex(random)}`,
        clientSecret: `${input.paymentId}_secret_${randomHex(random)}`,
      };
    }),
    refund: sandboxRefund("re", random),
  };
}
