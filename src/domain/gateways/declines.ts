import { AppError } from "../../errors.js";

/**
 * Why a gateway declined a card: the `decline_code` of a `payment_declined` error (in the REST
 * envelope's `error` and `details`, and in the `google.rpc.ErrorInfo` metadata of gRPC and Connect).
 * The names follow the common vocabulary of card gateways; a real gateway client maps its own codes
 * onto these, and anything it cannot map onto one is `generic_decline`.
 */
export const DECLINE_CODES = {
  generic_decline: {
    reason: "the card's issuer declined the charge without giving a reason",
    action: "Ask the cardholder for another card, or to contact their bank.",
  },
  insufficient_funds: {
    reason: "the card has insufficient funds",
    action: "Ask the cardholder for another card.",
  },
  incorrect_cvc: {
    reason: "the card's security code (CVC) is wrong",
    action: "Ask the cardholder to enter the card again.",
  },
  expired_card: {
    reason: "the card has expired",
    action: "Ask the cardholder for another card.",
  },
  incorrect_zip: {
    reason: "the postal code does not match the card's (address verification failed)",
    action: "Ask the cardholder to check the billing postal code.",
  },
} as const satisfies Record<string, { reason: string; action: string }>;

/** A decline code, e.g. `insufficient_funds`. */
export type DeclineCode = keyof typeof DECLINE_CODES;

/** The `payment_declined` error for `code`: its reason in the message, the code in the metadata. */
export function paymentDeclined(code: DeclineCode): AppError {
  return new AppError("payment_declined", `The card was declined: ${DECLINE_CODES[code].reason}.`, {
    metadata: { decline_code: code },
  });
}
