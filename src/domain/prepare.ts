import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import type { PaymentGateway } from "./gateways/gateway.js";
import { withMockItems } from "./mock-items.js";
import { type ValidReceipt, validateReceipt } from "./receipt-rules.js";

/**
 * Turns a receipt request into the receipt to seal: every rule of section 6 checked at once (and the
 * gateway's amount and nonce rules, for payments), then mock items added where asked for.
 */
export function prepareReceipt(input: Receipt, now: Date, gateway?: PaymentGateway): ValidReceipt {
  const valid = gateway
    ? validateReceipt(input, { mode: "payment", now, gateway })
    : validateReceipt(input, { mode: "encrypt", now });
  return withMockItems(valid);
}
