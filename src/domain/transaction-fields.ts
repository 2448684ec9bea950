import type { Receipt, TaxBreakdownLine, Tender } from "../../gen/receipts/v1/receipt_pb.js";
import { ElementViolations, type ViolationSink, type Violations } from "../errors.js";
import type { ReceiptJsonOf } from "../receipt-fields.js";
import { checkText, identifier, isTaxRate, money, requiredText, TAX_RATE_RULE } from "./field-rules.js";
import { refundTooLarge } from "./gateways/gateway.js";
import * as limits from "./limits.js";

/**
 * The receipt fields, with which a cardholder's app finds the line of the card
 * statement a receipt belongs to and shows what the card statement cannot: what kind of receipt it
 * is (a refund or void names the sale it undoes), the identifiers the card networks give the
 * transaction, the tip, how a split payment was made, and the tax per rate. All optional, all sealed
 * with the rest of the receipt. The formats (each rule's message says it too):
 *
 * - `authorizationCode`: ISO 8583 data element 38, "approval code", fixed `an 6`: 6 letters or digits.
 * - `retrievalReferenceNumber`: ISO 8583 data element 37, fixed `an 12`: 12 letters or digits (Visa
 *   fills it with digits, `YDDDhhnnnnnn`; other networks use letters too).
 * - `acquirerReferenceNumber`: the 23-digit reference of the clearing record (Visa's ARN in the Base II
 *   draft, Mastercard's Acquirer Reference Data, data element 31 of its clearing messages): a format
 *   digit, the acquirer's 6-digit BIN, the processing date as `YDDD`, an 11-digit sequence number and a
 *   check digit, the Luhn (mod 10) digit of the 22 before it. The check digit is checked: a mistyped
 *   ARN is refused rather than sealed where nobody can correct it. The other parts are not checked.
 * - `terminalId`: ISO 8583 data element 41, fixed `ans 8`: up to 8 printable ASCII characters; the
 *   spaces that pad it to 8 in the message are left out.
 * - `merchantCategoryCode`: ISO 18245, 4 digits (ISO 8583 data element 18).
 * - `cardAcceptorName`: the statement descriptor, the name part (25 positions) of ISO 8583 data
 *   element 43.
 */

/** What a receipt records: a sale (also when unset), or the refund or void of one. */
export const RECEIPT_TYPES = ["sale", "refund", "void"] as const;
export type ReceiptType = (typeof RECEIPT_TYPES)[number];

/** One means of payment of a split tender; `amount` in the smallest currency unit. */
export type ReceiptTender = ReceiptJsonOf<Tender>;

/** The tax of one rate across the receipt; `rate` a fraction, amounts in the smallest currency unit. */
export type ReceiptTaxLine = ReceiptJsonOf<TaxBreakdownLine>;

/**
 * The card-transaction fields of a validated receipt, each present exactly when the request set it:
 * the proto's (receipt.proto), with `receiptType` narrowed to {@link RECEIPT_TYPES} and the lists
 * present only when the request gave at least one element.
 */
export type TransactionFields = Partial<
  Pick<
    ReceiptJsonOf<Receipt>,
    | "originalReceiptId"
    | "authorizationCode"
    | "retrievalReferenceNumber"
    | "acquirerReferenceNumber"
    | "terminalId"
    | "merchantCategoryCode"
    | "cardAcceptorName"
    | "tipAmount"
    | "tenders"
    | "taxBreakdown"
  >
> & { receiptType?: ReceiptType };

/**
 * Whether the original receipt a refund or void names exists, as the service found it before
 * validating (`originalReceiptOf` in `originals.ts`): `found`, `missing`, or undefined when it was
 * not looked up (no refund or void, or an id that breaks the id rules and is reported as such).
 */
export type OriginalLookup = "found" | "missing" | undefined;

/** What the card-transaction rules compare with: the receipt's own id and its validated totals. */
export interface TransactionTotals {
  receiptId: string;
  totalAmount: number | undefined;
  taxAmount: number | undefined;
  /** The payment amount, when the request gave one. */
  amount: number | undefined;
  original: OriginalLookup;
  /** Set for the receipt of a payment's refund: the payment it refunds. */
  refundOf?: RefundOf | undefined;
}

/**
 * The payment a refund receipt belongs to (`RefundPayment`): its receipt is the original, its
 * merchantId and currency are the refund's, and `refundable` is what is left to refund of `charged`.
 */
export interface RefundOf {
  receiptId: string;
  merchantId: string;
  currency: string;
  charged: number;
  refunded: number;
  refundable: number;
}

/** Identifier fields with a fixed format: the field, its pattern, and the rule its violation states. */
const NETWORK_IDS = [
  ["authorizationCode", /^[A-Za-z0-9]{6}$/, "must be 6 letters or digits (ISO 8583 field 38)"],
  ["retrievalReferenceNumber", /^[A-Za-z0-9]{12}$/, "must be 12 letters or digits (ISO 8583 field 37)"],
  [
    "terminalId",
    /^[\x21-\x7e]{1,8}$/,
    "must be 1 to 8 ASCII letters, digits or symbols, without spaces (ISO 8583 field 41)",
  ],
  ["merchantCategoryCode", /^[0-9]{4}$/, "must be 4 digits (ISO 18245)"],
] as const;

const ARN = /^[0-9]{23}$/;
const CARD_LAST4 = /^[0-9]{4}$/;

/**
 * Checks the card-transaction fields of `input` against `totals`, adds a violation for every problem and
 * copies each field that is set onto `out`. Never throws: the caller throws once for every field.
 */
export function checkTransactionFields(
  v: Violations,
  input: Receipt,
  out: TransactionFields,
  totals: TransactionTotals,
): void {
  checkReceiptType(v, input, out, totals);
  for (const [field, pattern, rule] of NETWORK_IDS) {
    const value = input[field];
    if (value === undefined) continue;
    if (!pattern.test(value)) v.add(field, rule);
    out[field] = value;
  }
  if (input.acquirerReferenceNumber !== undefined) {
    const arn = input.acquirerReferenceNumber;
    if (!ARN.test(arn)) v.add("acquirerReferenceNumber", "must be 23 digits");
    else if (!luhnValid(arn)) {
      v.add(
        "acquirerReferenceNumber",
        "has a wrong check digit: the last digit is the Luhn digit of the 22 before it",
      );
    }
    out.acquirerReferenceNumber = arn;
  }
  if (input.cardAcceptorName !== undefined) {
    const name = input.cardAcceptorName;
    if (name.trim() === "") v.add("cardAcceptorName", "must not be empty");
    else checkText(v, "cardAcceptorName", name, limits.MAX_CARD_ACCEPTOR_NAME_LENGTH);
    out.cardAcceptorName = name;
  }
  if (input.tipAmount !== undefined) {
    const tip = money(v, "tipAmount", input.tipAmount);
    // Within the total, or on a payment without one the amount charged (as tenders add up to it).
    const [name, total] =
      totals.totalAmount !== undefined ? ["totalAmount", totals.totalAmount] : ["amount", totals.amount];
    if (total !== undefined && tip > total)
      v.add("tipAmount", `must not be more than ${name}, which includes it`);
    out.tipAmount = tip;
  }
  if (input.tenders.length > 0) out.tenders = tenders(v, input.tenders, totals);
  if (input.taxBreakdown.length > 0) out.taxBreakdown = taxBreakdown(v, input.taxBreakdown, totals);
}

/** `receiptType` and `originalReceiptId`: a refund or void must name a stored original, a sale none. */
function checkReceiptType(
  v: Violations,
  input: Receipt,
  out: TransactionFields,
  totals: TransactionTotals,
): void {
  if (totals.refundOf !== undefined) {
    checkRefundLink(v, input, out, totals.refundOf);
    return;
  }
  const type = input.receiptType;
  const undoes = type === "refund" || type === "void";
  if (type !== undefined) {
    if (!(RECEIPT_TYPES as readonly string[]).includes(type))
      v.add("receiptType", "must be sale, refund or void");
    out.receiptType = type as ReceiptType;
  }
  const original = input.originalReceiptId;
  if (original === undefined) {
    if (undoes)
      v.add("originalReceiptId", `is required for a ${type} receipt: the receiptId of the sale it undoes`);
    return;
  }
  out.originalReceiptId = original;
  if (!undoes) {
    v.add("originalReceiptId", "is only for a receiptType of refund or void");
    return;
  }
  const before = v.list.length;
  identifier(v, "originalReceiptId", original);
  if (v.list.length > before) return;
  if (original === totals.receiptId) v.add("originalReceiptId", "must name another receipt than this one");
  else if (totals.original === "missing") {
    v.add(
      "originalReceiptId",
      "must name a receipt of this merchantId that the service stored: there is none with this receiptId",
    );
  }
}

/** A payment's refund receipt: `receiptType` refund, `originalReceiptId` the payment's receipt. */
function checkRefundLink(v: Violations, input: Receipt, out: TransactionFields, refundOf: RefundOf): void {
  if (input.receiptType !== "refund") v.add("receiptType", "must be refund on the receipt of a refund");
  if (input.receiptType !== undefined) out.receiptType = input.receiptType as ReceiptType;
  if (input.originalReceiptId !== refundOf.receiptId) {
    v.add("originalReceiptId", `must be ${refundOf.receiptId}, the receiptId of the payment's receipt`);
  }
  if (input.originalReceiptId !== undefined) out.originalReceiptId = input.originalReceiptId;
}

/**
 * The payment rules of a refund's receipt: the payment's merchantId and currency, an `amount` to
 * refund that is positive and within what is left, a `totalAmount` (when given) equal to it, no card
 * nonce. `amount` is the validated amount, undefined when the request gave none.
 */
export function checkRefundReceipt(
  v: ViolationSink,
  input: Receipt,
  amount: number | undefined,
  refundOf: RefundOf,
): void {
  if (input.merchantId !== refundOf.merchantId) {
    v.add("merchantId", `must be ${refundOf.merchantId}, the payment's merchantId`);
  }
  if (input.currency.toUpperCase() !== refundOf.currency) {
    v.add("currency", `must be ${refundOf.currency}, the payment's currency`);
  }
  if (input.cardNonce !== undefined) v.add("cardNonce", "is not taken by a refund");
  if (amount === undefined) v.add("amount", "is required: the amount to refund");
  else if (amount <= 0) v.add("amount", "must be greater than 0");
  else if (amount > refundOf.refundable) {
    const payment = { amount: refundOf.charged, refunded: refundOf.refunded };
    v.add("amount", refundTooLarge(refundOf.refundable, payment));
  }
  if (input.totalAmount !== undefined && amount !== undefined && Number(input.totalAmount) !== amount) {
    v.add("totalAmount", "must be the amount refunded");
  }
}

function tenders(v: Violations, list: readonly Tender[], totals: TransactionTotals): ReceiptTender[] {
  if (list.length > limits.MAX_TENDERS) {
    v.add("tenders", `must have at most ${limits.MAX_TENDERS} entries`);
    return [];
  }
  const before = v.list.length;
  let sum = 0;
  const out = list.map((tender, i) => {
    const at = new ElementViolations(v, "tenders", i);
    const checked: ReceiptTender = {
      method: requiredText(at, "method", tender.method, limits.MAX_LABEL_LENGTH),
      amount: money(at, "amount", tender.amount),
    };
    if (tender.cardBrand !== undefined) {
      checkText(at, "cardBrand", tender.cardBrand, limits.MAX_LABEL_LENGTH);
      checked.cardBrand = tender.cardBrand;
    }
    if (tender.cardLast4 !== undefined) {
      if (!CARD_LAST4.test(tender.cardLast4)) at.add("cardLast4", "must be exactly 4 digits");
      checked.cardLast4 = tender.cardLast4;
    }
    sum += checked.amount;
    return checked;
  });
  if (v.list.length === before) checkTenderSum(v, sum, totals);
  return out;
}

/** Tenders add up to `totalAmount`, or on a payment without one to its `amount`. */
function checkTenderSum(v: ViolationSink, sum: number, totals: TransactionTotals): void {
  const [name, target] =
    totals.totalAmount !== undefined ? ["totalAmount", totals.totalAmount] : ["amount", totals.amount];
  if (target === undefined) {
    v.add("totalAmount", "is required with tenders: they must add up to it");
  } else if (!Number.isSafeInteger(target) || target < 0) {
    // A broken total is reported on its own field; a sum compared with it would only add noise.
  } else if (!Number.isSafeInteger(sum) || sum !== target) {
    v.add("tenders", `must add up to ${name} (${target}); their amounts add up to ${sum}`);
  }
}

function taxBreakdown(
  v: Violations,
  list: readonly TaxBreakdownLine[],
  totals: TransactionTotals,
): ReceiptTaxLine[] {
  if (list.length > limits.MAX_TAX_BREAKDOWN_LINES) {
    v.add("taxBreakdown", `must have at most ${limits.MAX_TAX_BREAKDOWN_LINES} entries`);
    return [];
  }
  const before = v.list.length;
  let sum = 0;
  const out = list.map((line, i) => {
    const at = new ElementViolations(v, "taxBreakdown", i);
    if (!isTaxRate(line.rate)) at.add("rate", TAX_RATE_RULE);
    const checked: ReceiptTaxLine = {
      rate: line.rate,
      taxableAmount: money(at, "taxableAmount", line.taxableAmount),
      taxAmount: money(at, "taxAmount", line.taxAmount),
    };
    sum += checked.taxAmount;
    return checked;
  });
  const total = totals.taxAmount;
  if (v.list.length === before && total !== undefined && sum !== total) {
    v.add("taxBreakdown", `tax amounts must add up to taxAmount (${total}); they add up to ${sum}`);
  }
  return out;
}

/** Whether a string of digits ends in its Luhn (mod 10) check digit. */
export function luhnValid(digits: string): boolean {
  let sum = 0;
  for (let i = digits.length - 1, double = false; i >= 0; i--, double = !double) {
    let d = digits.charCodeAt(i) - 48;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return sum % 10 === 0;
}
