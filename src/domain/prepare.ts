import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import type { ApiKeyRecord } from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import type { PaymentGateway } from "./gateways/gateway.js";
import { withMockItems } from "./mock-items.js";
import { originalReceiptOf } from "./originals.js";
import { type ValidReceipt, validateReceipt } from "./receipt-rules.js";

/**
 * Turns a receipt request into the receipt to seal: every rule checked at once
 * (and the gateway's amount and nonce rules, for payments), then mock items added where asked for.
 * A refund's or void's original receipt is looked up first, so that a missing one is named in the
 * same error as every other problem.
 */
export async function prepareReceipt(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: Receipt,
  gateway?: PaymentGateway,
): Promise<ValidReceipt> {
  const original = await originalReceiptOf(deps, principal, input);
  const now = deps.clock.now();
  const valid = gateway
    ? validateReceipt(input, { mode: "payment", now, gateway, original })
    : validateReceipt(input, { mode: "encrypt", now, original });
  return withMockItems(valid);
}
