import { matchInputProblems } from "./match-input.js";
import type { ReceiptJson } from "./webcrypto.js";

/**
 * Matching an opened receipt with a line of the card statement, on the device (README, "Refunds, and receipts
 * that find their card statement line"): the issuer's app knows the card's transactions, the receipt knows
 * what was bought; this says which line a receipt belongs to, and how sure that is. The identifiers the card
 * networks give a transaction decide first, then amount, date and statement descriptor. No `node:` module
 * here: it runs in browsers and React Native as in Node.
 */

/**
 * One line of a card statement as the issuer's app knows it (from its card processor's feed).
 * Amounts are integers in the smallest unit of their currency, as in receipts.
 */
export interface CardTransaction {
  /**
   * The billed amount: positive for a purchase, negative for a refund or another credit (or give a
   * positive amount and `kind: "refund"`).
   */
  amount: number;
  /** ISO 4217 code of `amount`: the card's billing currency. */
  currency: string;
  /**
   * The amount and currency the merchant charged, when the card was billed in another currency (a
   * purchase abroad): the receipt's amount is compared with these.
   */
  originalAmount?: number;
  originalCurrency?: string;
  /**
   * When the transaction happened: an RFC 3339 date-time (the authorization's time), or a date
   * `YYYY-MM-DD` when the feed gives only the day.
   */
  transactionDate: string;
  /** The day the transaction posted (cleared), `YYYY-MM-DD` or RFC 3339, often a day or more later. */
  postedDate?: string;
  /** `purchase` (the default for a positive amount), `refund` (a credit), or `reversal` (an authorization undone). */
  kind?: "purchase" | "refund" | "reversal";
  /** The statement descriptor, as the statement prints it ("SQ *CORNER COFFEE DUBLIN IE"). */
  descriptor?: string;
  /** The approval code of the authorization (ISO 8583 field 38). */
  authorizationCode?: string;
  /** The retrieval reference number (ISO 8583 field 37). */
  retrievalReferenceNumber?: string;
  /** The acquirer reference number of the clearing record (23 digits), once it cleared. */
  acquirerReferenceNumber?: string;
  /** The terminal id (ISO 8583 field 41). */
  terminalId?: string;
  /** The merchant category code (ISO 18245). */
  merchantCategoryCode?: string;
  /** The last four digits of the card used, for an account with several cards. */
  cardLast4?: string;
}

/** How a receipt relates to a statement line: whether it is its receipt, how sure, and why. */
export interface TransactionMatch {
  /** Whether the receipt belongs to the line: `confidence` at least {@link MATCH_THRESHOLD}. */
  matches: boolean;
  /**
   * From 0 (certainly another transaction) to 1 (certainly this one). A network identifier both sides
   * share (ARN, RRN, authorization code with terminal) gives 0.95 or more; amount, date and
   * descriptor alone give at most {@link DETAILS_CEILING}, since two purchases can share all three.
   */
  confidence: number;
  /** What agreed and what did not, in words, strongest first. */
  reasons: string[];
}

/** The confidence from which a receipt is said to match a line. */
export const MATCH_THRESHOLD = 0.7;

/** The highest confidence without a network identifier: two purchases may share amount, day and name. */
export const DETAILS_CEILING = 0.9;

/**
 * Tips a diner adds after the card was authorised (written on the slip, or given at the terminal
 * after the receipt was printed) are rarely above this share of the bill: a statement amount above
 * the receipt's by up to this much is read as a tip added after the receipt.
 */
const MAX_TIP_SHARE = 0.3;

/**
 * Merchant category codes (ISO 18245) of places where a tip is added after the authorization, on a
 * signed slip or at the table: restaurants (5812), bars (5813), taxis (4121), barbers and beauty
 * salons (7230), spas (7298). Not fast food (5814): a counter asks for the tip before the charge.
 */
const TIPPING_MCCS = new Set(["5812", "5813", "4121", "7230", "7298"]);

/** The prefixes payment facilitators put before a merchant's name in the statement descriptor. */
const FACILITATOR_PREFIX = /^(SQ|SP|TST|PP|PAYPAL|IZ|IZETTLE|SUMUP|ZTL|SMP|CKO|STRIPE)\s*\*\s*/;

/**
 * Says whether `receipt` (as `openReceipt` gives it) is the receipt of `transaction`, a line of the
 * card's statement, and how sure that is:
 *
 * 1. A refund or void receipt matches only a credit (a refund or a reversal), a sale only a purchase;
 *    differing card digits rule the line out. This comes first: a refund receipt often repeats the
 *    network identifiers of the sale it undoes.
 * 2. Network identifiers, when both sides have them: the acquirer reference number, then the
 *    retrieval reference number, then the authorization code with the terminal id. One that agrees
 *    decides for the line; one that differs decides against it.
 * 3. Otherwise the amount (exactly; the amount before the tip for an authorization taken before the
 *    tip; a tip of up to 30% added after the receipt at places where diners tip; the original
 *    amount for a line billed in another currency), the date (same day, then nearby days: a
 *    statement may date a purchase by its posting) and the statement descriptor (the receipt's
 *    `cardAcceptorName`, else its merchant name) make a score of at most {@link DETAILS_CEILING}.
 */
export function matchTransaction(receipt: ReceiptJson, transaction: CardTransaction): TransactionMatch {
  // JSON from a device and from a card feed: what cannot be compared is named, never thrown.
  const problems = matchInputProblems(receipt, transaction);
  if (problems.length > 0) return { matches: false, confidence: 0, reasons: problems };
  // Before the ids: a refund or void receipt often repeats its sale's ids, and must never match the sale.
  const ruledOut = ruleOut(receipt, transaction);
  if (ruledOut !== undefined) return ruledOut;
  const ids = compareIds(receipt, transaction);
  if (ids !== undefined) return ids;
  const reasons: string[] = [];
  const amount = amountScore(receipt, transaction, reasons);
  const date = dateScore(receipt, transaction, reasons);
  const descriptor = descriptorScore(receipt, transaction, reasons);
  // Without a descriptor on both sides its weight goes to amount and date.
  const weighted =
    descriptor === undefined ? amount * 0.65 + date * 0.35 : amount * 0.5 + date * 0.25 + descriptor * 0.25;
  // What clearly disagrees is not made up for by the rest: another amount, another date (the same
  // coffee next week), another merchant (the same amount elsewhere that day).
  const cap = amount === 0 ? 0.3 : date === 0 || descriptor === 0 ? 0.5 : 1;
  const confidence = round(Math.min(cap, weighted * DETAILS_CEILING));
  return { matches: confidence >= MATCH_THRESHOLD, confidence, reasons };
}

/** The line of `transactions` that `receipt` matches best, and whether another came as close. */
export interface StatementMatch {
  /** The index in `transactions` of the best line, or -1 when none matches. */
  index: number;
  match: TransactionMatch;
  /**
   * Whether another line matched within 0.05 of the best (the same merchant, amount and day twice,
   * and nothing to tell them apart): the app should let the cardholder choose.
   */
  ambiguous: boolean;
}

/** Matches a receipt against every line of a statement and picks the best (see {@link matchTransaction}). */
export function matchStatement(
  receipt: ReceiptJson,
  transactions: readonly CardTransaction[],
): StatementMatch {
  if (!Array.isArray(transactions)) {
    throw new TypeError("matchStatement: transactions: must be a list of card statement lines");
  }
  const scored = transactions.map((t, index) => ({ index, match: matchTransaction(receipt, t) }));
  const ranked = scored
    .filter((s) => s.match.matches)
    .sort((a, b) => b.match.confidence - a.match.confidence);
  const [best, second] = ranked;
  if (best === undefined) {
    return {
      index: -1,
      match: { matches: false, confidence: 0, reasons: ["no line matches"] },
      ambiguous: false,
    };
  }
  const ambiguous = second !== undefined && best.match.confidence - second.match.confidence < 0.05;
  return { index: best.index, match: best.match, ambiguous };
}

/** A decision by network identifiers, or undefined when the two sides share none. */
function compareIds(receipt: ReceiptJson, t: CardTransaction): TransactionMatch | undefined {
  const pairs: [string, string | undefined, string | undefined, number][] = [
    ["acquirer reference number", receipt.acquirerReferenceNumber, t.acquirerReferenceNumber, 0.99],
    ["retrieval reference number", receipt.retrievalReferenceNumber, t.retrievalReferenceNumber, 0.97],
  ];
  for (const [name, mine, theirs, confidence] of pairs) {
    if (!mine || !theirs) continue;
    if (same(mine, theirs)) return { matches: true, confidence, reasons: [`the ${name} agrees`] };
    return { matches: false, confidence: 0.01, reasons: [`the ${name} differs: another transaction`] };
  }
  const code = [receipt.authorizationCode, t.authorizationCode];
  if (!code[0] || !code[1]) return undefined;
  if (!same(code[0], code[1])) {
    return {
      matches: false,
      confidence: 0.02,
      reasons: ["the authorization code differs: another transaction"],
    };
  }
  const terminals = [receipt.terminalId, t.terminalId];
  if (terminals[0] && terminals[1]) {
    if (same(terminals[0], terminals[1])) {
      return { matches: true, confidence: 0.95, reasons: ["the authorization code and the terminal agree"] };
    }
    return {
      matches: false,
      confidence: 0.05,
      reasons: ["the authorization code agrees but the terminal differs"],
    };
  }
  // Six characters, assigned by the card's own issuer: on one card within days, a repeat is rare.
  return { matches: true, confidence: 0.95, reasons: ["the authorization code agrees"] };
}

/** A line the receipt cannot belong to: the other direction of money, or another card. */
function ruleOut(receipt: ReceiptJson, t: CardTransaction): TransactionMatch | undefined {
  const undoes = receipt.receiptType === "refund" || receipt.receiptType === "void";
  const credit = t.kind === "refund" || t.kind === "reversal" || t.amount < 0;
  if (undoes !== credit) {
    const reason = undoes
      ? `a ${receipt.receiptType} receipt, and the line is a purchase`
      : "a sale receipt, and the line is a refund or reversal";
    return { matches: false, confidence: 0.02, reasons: [reason] };
  }
  const cards = [cardOf(receipt), t.cardLast4];
  if (cards[0] && cards[1] && cards[0] !== cards[1]) {
    return {
      matches: false,
      confidence: 0.02,
      reasons: [`paid with card ${cards[0]}, the line is card ${cards[1]}`],
    };
  }
  return undefined;
}

/** The last four digits of the card a receipt was paid with (of its card tender, for a split tender). */
function cardOf(receipt: ReceiptJson): string | undefined {
  return receipt.cardLast4 ?? receipt.tenders?.find((tender) => tender.cardLast4)?.cardLast4;
}

/**
 * The amount on the card: the card tender's of a split payment, else the total. A card tender is one
 * with the card's digits, else one paid by "card" (a gift card is not on the card statement).
 */
function receiptAmount(receipt: ReceiptJson): number {
  const tenders = receipt.tenders ?? [];
  const withDigits = tenders.filter((tender) => tender.cardLast4 !== undefined);
  const card =
    withDigits.length > 0
      ? withDigits
      : tenders.filter((tender) => /\bcard\b/i.test(tender.method) && !/gift/i.test(tender.method));
  if (card.length === 1 && card[0] !== undefined && tenders.length > 1) return card[0].amount;
  const items = (receipt.items ?? []).reduce((sum, item) => sum + item.totalPrice, 0);
  return receipt.totalAmount ?? receipt.amount ?? items;
}

/** 1 for the same amount, less for a tip or currency story, 0 for another amount. */
function amountScore(receipt: ReceiptJson, t: CardTransaction, reasons: string[]): number {
  const expected = receiptAmount(receipt);
  const currency = receipt.currency.toUpperCase();
  let billed = Math.abs(t.amount);
  if (t.currency.toUpperCase() !== currency) {
    if (t.originalAmount === undefined || t.originalCurrency?.toUpperCase() !== currency) {
      reasons.push(`billed in ${t.currency}, the receipt is in ${currency}: the amounts cannot be compared`);
      return 0.5;
    }
    billed = Math.abs(t.originalAmount);
    reasons.push(`compared in ${currency}, the currency the merchant charged`);
  }
  if (billed === expected) {
    reasons.push("the amount agrees");
    return 1;
  }
  const tip = receipt.tipAmount ?? 0;
  if (tip > 0 && billed === expected - tip) {
    reasons.push("the line is the amount before the tip (the authorization, taken before the tip was added)");
    return 0.85;
  }
  const tipping = TIPPING_MCCS.has(receipt.merchantCategoryCode ?? t.merchantCategoryCode ?? "");
  if (tipping && billed > expected && billed <= expected * (1 + MAX_TIP_SHARE)) {
    reasons.push("the line is the amount plus what reads as a tip added after the receipt");
    return 0.7;
  }
  reasons.push(`the amount differs (${billed} against ${expected})`);
  return 0;
}

/** 1 for the same day (close in time when both have times), less for nearby days, 0 beyond. */
function dateScore(receipt: ReceiptJson, t: CardTransaction, reasons: string[]): number {
  const sold = Date.parse(receipt.transactionDate);
  if (Number.isNaN(sold)) return 0.5;
  const zone = receipt.transactionTimezone || "UTC";
  const at = Date.parse(t.transactionDate);
  if (!isDateOnly(t.transactionDate) && !Number.isNaN(at)) {
    const minutes = Math.abs(at - sold) / 60_000;
    if (minutes <= 15) {
      reasons.push("the time agrees");
      return 1;
    }
    if (localDay(sold, zone) === localDay(at, zone)) {
      reasons.push("the same day, at another time");
      return 0.75;
    }
  } else if (localDay(sold, zone) === t.transactionDate.slice(0, 10)) {
    reasons.push("the same day");
    return 1;
  }
  const day = isDateOnly(t.transactionDate) ? Date.parse(`${t.transactionDate}T12:00:00Z`) : at;
  const daysAfter = (day - sold) / 86_400_000;
  if (Math.abs(daysAfter) <= 1.5) {
    reasons.push("a day apart (time zones or the statement's cut-off)");
    return 0.6;
  }
  if (daysAfter > 0 && daysAfter <= 5) {
    reasons.push("dated a few days later, as a posting date would be");
    return 0.4;
  }
  reasons.push("another date");
  return 0;
}

/** 1 when the descriptors agree, less for the merchant's name in it, 0 for another; undefined without one. */
function descriptorScore(receipt: ReceiptJson, t: CardTransaction, reasons: string[]): number | undefined {
  if (!t.descriptor) return undefined;
  const line = normalised(t.descriptor);
  const acceptor = receipt.cardAcceptorName ? normalised(receipt.cardAcceptorName) : "";
  if (acceptor !== "" && (line.startsWith(acceptor) || acceptor.startsWith(line))) {
    reasons.push("the statement descriptor agrees");
    return 1;
  }
  const words = normalised(receipt.merchantName)
    .split(" ")
    .filter((word) => word.length >= 3);
  const seen = new Set(line.split(" "));
  const shared = words.filter((word) => seen.has(word)).length;
  if (words.length > 0 && shared / words.length >= 0.5) {
    reasons.push("the descriptor names the merchant");
    return 0.75;
  }
  if (shared > 0) {
    reasons.push("the descriptor shares a word with the merchant's name");
    return 0.4;
  }
  reasons.push("the descriptor names another merchant");
  return 0;
}

/** A descriptor or name without a facilitator prefix, upper case, letters and digits in single-spaced words. */
function normalised(text: string): string {
  return text
    .toUpperCase()
    .normalize("NFKD")
    .replace(/[\u0300-\u036f]/g, "")
    .replace(FACILITATOR_PREFIX, "")
    .replace(/[^A-Z0-9]+/g, " ")
    .trim();
}

function same(a: string, b: string): boolean {
  return a.trim().toUpperCase() === b.trim().toUpperCase();
}

function isDateOnly(text: string): boolean {
  return /^\d{4}-\d{2}-\d{2}$/.test(text);
}

/** The day (`YYYY-MM-DD`) of an instant in a time zone (UTC when the zone is unknown). */
function localDay(ms: number, zone: string): string {
  try {
    return new Intl.DateTimeFormat("en-CA", {
      timeZone: zone,
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
    }).format(ms);
  } catch {
    return new Date(ms).toISOString().slice(0, 10);
  }
}

function round(value: number): number {
  return Math.round(value * 100) / 100;
}
