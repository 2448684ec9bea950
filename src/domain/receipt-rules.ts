/* Over 400 lines on purpose: every rule in one pass, so that one error names every
 * offending field; the rules read best side by side. */
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { type LineItem, type Receipt, ReceiptSchema, type Tax } from "../../gen/receipts/v1/receipt_pb.js";
import { ElementViolations, type ViolationSink, Violations } from "../errors.js";
import { timestampJson } from "../proto-scalars.js";
import { INPUT_ONLY_FIELDS, type ReceiptJsonOf } from "../receipt-fields.js";
import {
  checkText,
  codePoints,
  identifier,
  isTaxRate,
  money,
  requiredText,
  TAX_RATE_RULE,
} from "./field-rules.js";
import type { PaymentGateway } from "./gateways/gateway.js";
import * as limits from "./limits.js";
import { checkCardBin, checkCardReference, MERCHANT_CARD_FIELDS } from "./pan.js";
import {
  checkRefundReceipt,
  checkTransactionFields,
  type OriginalLookup,
  type RefundOf,
  type TransactionFields,
} from "./transaction-fields.js";

/**
 * The receipt rules: one pass over a request's `Receipt` that collects every
 * problem, then either throws one `invalid_request` naming every offending field or returns a
 * normalised plain object ({@link ValidReceipt}) that the service seals.
 *
 * Money on the wire is int64 (`bigint` in the generated code); here it becomes `number`, which is
 * exact because every money field is checked to be within `Number.MAX_SAFE_INTEGER`.
 */

/** Which endpoint a receipt arrived on: `encrypt` (receipt only) or `payment` (create payment). */
export type ReceiptMode = "encrypt" | "payment";

/** A tax on a line item. `rate` is a fraction (0.19 for 19%); `amount` in the smallest currency unit. */
export type ReceiptTax = ReceiptJsonOf<Tax>;

/** A validated line item; prices in the smallest currency unit. */
export type ReceiptLineItem = ReceiptJsonOf<LineItem>;

/**
 * A validated, normalised receipt: `version` defaulted, `currency` upper-cased, `recipientHashedPan`
 * lower-cased, `mockItems` defaulted to true, `transactionDate` as an RFC 3339 UTC string (the proto
 * JSON form). Optional fields are present exactly when the request set them. The shape is the proto's
 * `Receipt` ({@link ReceiptJsonOf}: names of the JSON surface, money as numbers), so
 * {@link sealedPlaintextOf} of it is the proto JSON of a `Receipt`; what differs is written here:
 * what only the service answers (`keyId`, `decryptedAt`) and the sealed form (`sealedReceipt`) are
 * left out, the normalised fields are always present, and the card-transaction fields are those of
 * {@link TransactionFields}. A field added to receipt.proto is here with no edit.
 *
 * `merchantSignature` and `merchantKeyId` are set by the service, never from input: the merchant's
 * verified Ed25519 signature (base64) and the id of its key, sealed with the receipt so the
 * cardholder's app can verify it (README, "Merchant signatures").
 */
export type ValidReceipt = Omit<
  ReceiptJsonOf<Receipt>,
  | "keyId"
  | "decryptedAt"
  | "sealedReceipt"
  | "transactionDate"
  | "recipientHashedPan"
  | "mockItems"
  | keyof TransactionFields
> & {
  transactionDate: string;
  /** "" when the merchant routes by the card's PAR (`recipientPar`) instead. */
  recipientHashedPan: string;
  mockItems: boolean;
} & TransactionFields;

/**
 * Input-only fields: instructions to the service, never sealed. Of the output-only fields, `keyId` and
 * `decryptedAt` never get this far; `merchantSignature` and `merchantKeyId` are set by the service and sealed.
 */
export { INPUT_ONLY_FIELDS };

/** The receipt fields that go into the sealed plaintext: everything but {@link INPUT_ONLY_FIELDS}. */
export type SealedReceiptFields = Omit<ValidReceipt, (typeof INPUT_ONLY_FIELDS)[number]>;

/** Options of {@link validateReceipt}; `now` is the injected clock's time, for the date range. */
export type ValidateOptions = (
  | { mode: "encrypt" }
  | {
      mode: "payment";
      /** When given, its amount and nonce rules are checked in the same pass, so one error lists all. */
      gateway?: PaymentGateway;
    }
) & {
  now: Date;
  /** Whether a refund's or void's original receipt was found (`originals.ts`); unchecked when unset. */
  original?: OriginalLookup;
  /** For the receipt of a payment's refund (mode `payment`): the payment, whose rules it follows. */
  refundOf?: RefundOf;
};

/**
 * Active ISO 4217 currency codes a card payment can be made in (ISO 4217 list one, 2025 edition),
 * without fund codes (BOV, CHE, CLF, USN, ...), precious metals, SDR and the testing codes XTS / XXX.
 */
const CURRENCIES: ReadonlySet<string> = new Set(
  `AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD BTN BWP BYN BZD
   CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP
   GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW KRW KWD
   KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN
   NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP
   SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD UYU UZS VED VES
   VND VUV WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG`.split(/\s+/),
);

const VERSION = /^[0-9]{1,4}(\.[0-9]{1,4}){0,2}$/;
const CARD_LAST4 = /^[0-9]{4}$/;
/** Atext of RFC 5322 plus non-ASCII letters and digits (internationalised addresses, RFC 6531). */
const EMAIL_LOCAL = /^[\p{L}\p{N}!#$%&'*+/=?^_`{|}~-]+(\.[\p{L}\p{N}!#$%&'*+/=?^_`{|}~-]+)*$/u;
const EMAIL_DOMAIN = /^([\p{L}\p{N}]([\p{L}\p{N}-]{0,61}[\p{L}\p{N}])?\.)+[\p{L}]{2,63}$/u;
/** The shape of an IANA zone name; excludes the numeric offsets newer engines would also accept. */
const TIMEZONE_NAME = /^[A-Za-z][A-Za-z0-9_+-]*(\/[A-Za-z0-9_+-]+)*$/;
const PAYMENTS_ONLY = "only accepted by payments";

const MIN_QUANTITY = BigInt(limits.MIN_QUANTITY);
const MAX_QUANTITY = BigInt(limits.MAX_QUANTITY);

const CANONICAL_ZONES: ReadonlySet<string> = new Set([...Intl.supportedValuesOf("timeZone"), "UTC"]);

type OptionalTextField =
  | "merchantStreet"
  | "merchantCity"
  | "merchantState"
  | "merchantPostalCode"
  | "merchantCountry"
  | "merchantTaxId"
  | "merchantContactEmail"
  | "transactionTimezone"
  | "paymentMethod"
  | "cardLast4"
  | "cardBrand";

/** Optional free-text fields: maximum length, and a format check returning the problem if any. */
const OPTIONAL_TEXT: ReadonlyArray<
  readonly [OptionalTextField, number, ((value: string) => string | null)?]
> = [
  ["merchantStreet", limits.MAX_STREET_LENGTH],
  ["merchantCity", limits.MAX_PLACE_LENGTH],
  ["merchantState", limits.MAX_PLACE_LENGTH],
  ["merchantPostalCode", limits.MAX_POSTAL_CODE_LENGTH],
  ["merchantCountry", limits.MAX_PLACE_LENGTH],
  ["merchantTaxId", limits.MAX_TAX_ID_LENGTH],
  ["merchantContactEmail", limits.MAX_EMAIL_LENGTH, (v) => (isEmail(v) ? null : "must be an email address")],
  [
    "transactionTimezone",
    limits.MAX_TIMEZONE_LENGTH,
    (v) => (isTimeZone(v) ? null : "must be an IANA time zone name, e.g. Europe/Berlin"),
  ],
  ["paymentMethod", limits.MAX_LABEL_LENGTH],
  ["cardLast4", 4, (v) => (CARD_LAST4.test(v) ? null : "must be exactly 4 digits")],
  ["cardBrand", limits.MAX_LABEL_LENGTH],
];

const MONEY_FIELDS = ["subtotal", "taxAmount", "totalAmount"] as const;
/** The fields a gateway's amount rules read besides the items and `amount`. */
const GATEWAY_AMOUNT_FIELDS: ReadonlySet<string> = new Set([...MONEY_FIELDS, "tipAmount"]);

/**
 * Validates and normalises a receipt of an encrypt or create-payment request.
 * Throws `invalid_request` listing every offending field (paths as in JSON, e.g.
 * `items[3].taxes[0].rate`); returns the normalised receipt otherwise. With `mode: "encrypt"`, the
 * payment fields `amount` and `cardNonce` are rejected; with `mode: "payment"` they are checked and,
 * when `gateway` is given, so are that gateway's amount and nonce rules.
 */
export function validateReceipt(input: Receipt, options: ValidateOptions): ValidReceipt {
  const v = new Violations();
  const currency = input.currency.toUpperCase();
  const receipt: ValidReceipt = {
    version: checkVersion(v, "version", input.version),
    receiptId: identifier(v, "receiptId", input.receiptId),
    merchantId: identifier(v, "merchantId", input.merchantId),
    merchantName: requiredText(v, "merchantName", input.merchantName, limits.MAX_MERCHANT_NAME_LENGTH),
    transactionId: identifier(v, "transactionId", input.transactionId),
    transactionDate: transactionDate(v, input.transactionDate, options.now),
    currency,
    recipientHashedPan: (input.recipientHashedPan ?? "").toLowerCase(),
    items: [],
    mockItems: input.mockItems ?? true,
  };
  checkCurrency(v, input.currency);
  checkReceiptCard(v, input, receipt);
  if (input.sealedReceipt !== undefined) {
    v.add(
      "sealedReceipt",
      options.mode === "encrypt"
        ? "is only accepted by payments: use /api/v1/receipts/sealed for a receipt without a payment"
        : "cannot stand beside plaintext receipt fields",
    );
  }
  for (const [field, max, format] of OPTIONAL_TEXT) {
    const value = input[field];
    if (value === undefined) continue;
    if (checkText(v, field, value, max)) {
      const problem = format?.(value);
      if (problem) v.add(field, problem);
    }
    receipt[field] = value;
  }
  for (const field of MONEY_FIELDS) {
    const value = input[field];
    if (value !== undefined) receipt[field] = money(v, field, value);
  }
  if (input.keyId !== undefined) v.add("keyId", "is output only");
  if (input.decryptedAt !== undefined) v.add("decryptedAt", "is output only");
  if (input.merchantSignature !== undefined) {
    v.add("merchantSignature", "is output only: send the signature in the X-Receipt-Signature header");
  }
  if (input.merchantKeyId !== undefined) v.add("merchantKeyId", "is output only");
  checkTransactionFields(v, input, receipt, {
    receiptId: receipt.receiptId,
    totalAmount: receipt.totalAmount,
    taxAmount: receipt.taxAmount,
    amount: input.amount === undefined ? undefined : Number(input.amount),
    original: options.original,
    refundOf: options.refundOf,
  });

  const beforePayment = v.list.length;
  receipt.items = lineItems(v, input.items);
  if (input.amount !== undefined) {
    if (options.mode === "encrypt") v.add("amount", PAYMENTS_ONLY);
    else receipt.amount = money(v, "amount", input.amount);
  }
  if (input.cardNonce !== undefined) {
    if (options.mode === "encrypt") v.add("cardNonce", PAYMENTS_ONLY);
    else if (checkText(v, "cardNonce", input.cardNonce, limits.MAX_CARD_NONCE_LENGTH)) {
      receipt.cardNonce = input.cardNonce;
    }
  }
  if (options.refundOf !== undefined) checkRefundReceipt(v, input, receipt.amount, options.refundOf);
  // Gateway rules compare the amount with the item totals: on broken items or a broken amount they
  // would only add noise, so they wait until those are fixed. That includes the totals checked
  // earlier: a gateway derives mock items from totalAmount less tipAmount.
  const amountsBroken = v.list.some((violation) => GATEWAY_AMOUNT_FIELDS.has(violation.field));
  if (options.mode === "payment" && options.gateway && v.list.length === beforePayment && !amountsBroken) {
    options.gateway.checkPayment(receipt, v);
  }
  v.throwIfAny();
  return receipt;
}

/**
 * Checks that the receipt names its card by exactly one hashed PAN or PAR and a well-formed card BIN,
 * and keeps the PAR and the BIN on `receipt`.
 */
function checkReceiptCard(v: Violations, input: Receipt, receipt: ValidReceipt): void {
  const card = { hashedPan: input.recipientHashedPan, par: input.recipientPar };
  checkCardReference(card, MERCHANT_CARD_FIELDS, v);
  if (input.recipientPar !== undefined && input.recipientPar !== "")
    receipt.recipientPar = input.recipientPar;
  const cardBin = checkCardBin(input.cardBin, "cardBin", v);
  if (cardBin !== undefined) receipt.cardBin = cardBin;
}

/**
 * The fields of a receipt that are sealed: everything except the input-only `recipientHashedPan`,
 * `recipientPar`, `mockItems`, `cardNonce` and `cardBin` (the output-only `keyId` and `decryptedAt` are never in a
 * {@link ValidReceipt}). Generate mock items first (`withMockItems`) so that they are sealed too, and
 * set a verified merchant signature (`signatures.ts`) first so that it is sealed with them.
 * The result is the proto JSON of a `Receipt` with money as JSON numbers: `JSON.stringify` it.
 */
export function sealedPlaintextOf(receipt: ValidReceipt): SealedReceiptFields {
  const {
    recipientHashedPan: _pan,
    recipientPar: _par,
    mockItems: _mock,
    cardNonce: _nonce,
    cardBin: _bin,
    ...sealed
  } = receipt;
  return sealed;
}

/** The identity of a receipt (the fields of its AAD), validated: `version` defaulted. */
export interface ReceiptIdentityInput {
  version: string;
  receiptId: string;
  merchantId: string;
  transactionId: string;
}

/**
 * Checks the fields of a receipt's identity (the AAD) with the rules, adding
 * violations under their own names (or under `prefix` + name), and returns them with `version` defaulted.
 */
export function checkReceiptIdentity(
  v: Violations,
  input: ReceiptIdentityInput,
  prefix = "",
): ReceiptIdentityInput {
  return {
    version: checkVersion(v, `${prefix}version`, input.version),
    receiptId: identifier(v, `${prefix}receiptId`, input.receiptId),
    merchantId: identifier(v, "merchantId", input.merchantId),
    transactionId: identifier(v, "transactionId", input.transactionId),
  };
}

/** The receipt format version, defaulted when empty; a violation on `field` unless it is like `1.0`. */
function checkVersion(v: Violations, field: string, given: string): string {
  const version = given === "" ? limits.DEFAULT_VERSION : given;
  if (checkText(v, field, version, limits.MAX_VERSION_LENGTH) && !VERSION.test(version)) {
    v.add(field, "must be a version number such as 1.0");
  }
  return version;
}

/** Adds a violation on `currency` unless it is an ISO 4217 code (any case). */
export function checkCurrency(v: Violations, currency: string): void {
  if (currency === "") v.add("currency", "is required");
  else if (!CURRENCIES.has(currency.toUpperCase())) v.add("currency", "must be an ISO 4217 code");
}

/**
 * The `Receipt` message of a validated receipt or of its sealed fields (e.g. decrypted plaintext), for
 * code that needs the generated type. Both are proto JSON, so this is `fromJson`: a field that is not
 * a `Receipt` field is an error, never silently dropped.
 */
export function toReceiptMessage(receipt: ValidReceipt | SealedReceiptFields): Receipt {
  return fromJson(ReceiptSchema, receipt as JsonObject);
}

function transactionDate(v: Violations, value: Timestamp | undefined, now: Date): string {
  if (value === undefined) {
    v.add("transactionDate", "is required");
    return "";
  }
  const ms = Number(value.seconds) * 1000 + Math.floor(value.nanos / 1e6);
  if (!Number.isFinite(ms) || value.nanos < 0 || value.nanos > 999_999_999) {
    v.add("transactionDate", "must be an RFC 3339 date-time");
  } else if (ms < limits.MIN_TRANSACTION_DATE.getTime()) {
    v.add("transactionDate", `must not be before ${limits.MIN_TRANSACTION_DATE.toISOString()}`);
  } else if (ms > now.getTime() + limits.MAX_TRANSACTION_DATE_SKEW_MS) {
    v.add("transactionDate", "must not be more than 24 hours in the future");
  } else {
    return timestampJson(value);
  }
  return "";
}

function lineItems(v: Violations, items: readonly LineItem[]): ReceiptLineItem[] {
  if (items.length > limits.MAX_ITEMS) {
    v.add("items", `must have at most ${limits.MAX_ITEMS} entries`);
    return [];
  }
  const seen = new Set<string>();
  return items.map((item, i) => {
    const at = new ElementViolations(v, "items", i);
    const lineItemId = identifier(at, "lineItemId", item.lineItemId);
    if (lineItemId !== "" && seen.has(lineItemId)) at.add("lineItemId", "must be unique within the receipt");
    seen.add(lineItemId);
    const out: ReceiptLineItem = {
      lineItemId,
      name: requiredText(at, "name", item.name, limits.MAX_ITEM_NAME_LENGTH),
      quantity: quantity(at, "quantity", item.quantity),
      unitPrice: money(at, "unitPrice", item.unitPrice),
      totalPrice: money(at, "totalPrice", item.totalPrice),
      taxes: taxes(at, item.taxes),
    };
    if (item.category !== undefined) {
      checkText(at, "category", item.category, limits.MAX_LABEL_LENGTH);
      out.category = item.category;
    }
    return out;
  });
}

function quantity(v: ViolationSink, field: string, value: bigint): number {
  if (value < MIN_QUANTITY || value > MAX_QUANTITY) {
    v.add(field, `must be an integer between ${limits.MIN_QUANTITY} and ${limits.MAX_QUANTITY}`);
  }
  return Number(value);
}

/** The taxes of one line item; `item` reports under the item's path. */
function taxes(item: ViolationSink, list: readonly Tax[]): ReceiptTax[] {
  if (list.length > limits.MAX_TAXES_PER_ITEM) {
    item.add("taxes", `must have at most ${limits.MAX_TAXES_PER_ITEM} entries`);
    return [];
  }
  return list.map((tax, i) => {
    const at = new ElementViolations(item, "taxes", i);
    const name = requiredText(at, "name", tax.name, limits.MAX_LABEL_LENGTH);
    if (!isTaxRate(tax.rate)) at.add("rate", TAX_RATE_RULE);
    return { name, rate: tax.rate, amount: money(at, "amount", tax.amount) };
  });
}

function isEmail(value: string): boolean {
  const at = value.lastIndexOf("@");
  if (at <= 0) return false;
  const local = value.slice(0, at);
  const domain = value.slice(at + 1);
  return (
    codePoints(local) <= limits.MAX_EMAIL_LOCAL_PART_LENGTH &&
    EMAIL_LOCAL.test(local) &&
    EMAIL_DOMAIN.test(domain)
  );
}

function isTimeZone(value: string): boolean {
  if (CANONICAL_ZONES.has(value)) return true;
  if (!TIMEZONE_NAME.test(value)) return false;
  try {
    // Accepts the IANA aliases (Asia/Calcutta, US/Eastern) that are not in the canonical list.
    new Intl.DateTimeFormat("en", { timeZone: value });
    return true;
  } catch {
    return false;
  }
}
