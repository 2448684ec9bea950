import { transform } from "receiptline";
import { receiptProblems } from "./match-input.js";
import type { ReceiptJson } from "./webcrypto.js";

/**
 * Renders opened receipts as images on the device, with the receiptline renderer (Markdown for
 * receipts: https://github.com/receiptline/receiptline). The service never renders: it never holds a
 * plaintext receipt. No `node:` module here, so it runs in browsers and React Native as in Node
 * (receiptline loads its printer-command helpers only under Node, and the SVG output needs none).
 */

/** Options of {@link renderReceiptSvg}. */
export interface ReceiptImageOptions {
  /** Characters per line, i.e. the paper's width (receiptline's `cpl`): 42 is an 80 mm till roll. */
  charactersPerLine?: number;
  /** BCP 47 locale for the date; default `en-GB`. */
  locale?: string;
  /** Adds a QR code of the receipt id at the foot (default true). */
  qrCode?: boolean;
}

/** The style element by which receiptline's SVG loads a web font from another host. */
const REMOTE_FONT = /<style type="text\/css"><!\[CDATA\[@import url\("https:\/\/[^"]*"\);\]\]><\/style>/;

/**
 * The most characters of one text, and the most entries of one list, the image draws (the service's
 * own limits on a receipt it is given in the clear). A merchant may seal anything to the card's key,
 * and receiptline's time grows faster than a line's length: a 64,000-character name took 2 s, a
 * 700,000-character one (within the service's body limit) minutes.
 */
const MAX_TEXT = 200;
const MAX_ITEMS = 500;
const MAX_LINES = 20;

/** receiptline's special characters, escaped in every value taken from a receipt. */
const SPECIAL = /[\\|{}\-=~_"`^]/g;

/**
 * Draws an opened receipt (what `openReceipt` returns) as an SVG till receipt: merchant name and
 * address, date, receipt id, a REFUND or VOID banner naming the original receipt, one line per item
 * with quantity and price, subtotal, tax, tip and total (negative for a refund or void), how it was
 * paid (each tender of a split payment, else the payment method and card), the tax per rate, the
 * identifiers the card statement knows it by (statement descriptor, authorization code, terminal,
 * RRN, ARN), and a QR code of the receipt id. Money is in the smallest currency unit in the receipt
 * and shown with the currency's decimals (EUR 9.50). Text from the receipt is escaped for
 * receiptline, which in turn escapes it for XML, so a receipt cannot inject markup into the image;
 * a receipt whose fields are not of their types (a quantity that is text) is a TypeError naming them.
 */
export function renderReceiptSvg(receipt: ReceiptJson, options: ReceiptImageOptions = {}): string {
  // A receipt the merchant sealed was never checked by the service: its numbers are drawn raw.
  const problems = receiptProblems(receipt);
  if (problems.length > 0) {
    throw new TypeError(`renderReceiptSvg: cannot draw this receipt: ${problems.join("; ")}`);
  }
  const cpl = options.charactersPerLine ?? 42;
  const money = moneyFormatter(receipt.currency);
  const lines = [
    ...headerLines(receipt, options.locale ?? "en-GB"),
    ...itemLines(receipt, money),
    ...totalLines(receipt, money),
    ...paymentLines(receipt, money),
    ...taxBreakdownLines(receipt, money),
    ...networkLines(receipt),
  ];
  if (options.qrCode !== false) {
    lines.push("", `{code:${escProperty(receipt.receiptId)}; option:qrcode,4,m}`);
  }
  lines.push("", "Thank you!");
  const svg = transform(lines.join("\n"), { cpl, encoding: "multilingual", command: "svg" });
  // receiptline's SVG imports its font from Google Fonts; a receipt image must not call out (that
  // would tell a third party when a receipt is viewed), so the image uses the device's monospace font.
  return svg.replace(REMOTE_FONT, "");
}

type Money = (minor: number) => string;

/** Whether the receipt undoes a sale: a refund or a void. */
function undoes(receipt: ReceiptJson): "REFUND" | "VOID" | undefined {
  if (receipt.receiptType === "refund") return "REFUND";
  if (receipt.receiptType === "void") return "VOID";
  return undefined;
}

/** Merchant, address, tax id, date, receipt id, and the banner of a refund or void. */
function headerLines(receipt: ReceiptJson, locale: string): string[] {
  const lines = [`^^^${esc(receipt.merchantName)}`];
  const address = [
    receipt.merchantStreet,
    [receipt.merchantPostalCode, receipt.merchantCity].filter(Boolean).join(" "),
    receipt.merchantCountry,
  ].filter((part): part is string => typeof part === "string" && part !== "");
  for (const part of address) lines.push(esc(part));
  if (receipt.merchantTaxId) lines.push(`Tax ID ${esc(receipt.merchantTaxId)}`);
  lines.push("", dateOf(receipt, locale), `Receipt ${esc(receipt.receiptId)}`);
  const banner = undoes(receipt);
  if (banner !== undefined) {
    lines.push("", `\`^^${banner}\``);
    if (receipt.originalReceiptId) lines.push(`of receipt ${esc(receipt.originalReceiptId)}`);
  }
  lines.push("---");
  return lines;
}

function itemLines(receipt: ReceiptJson, money: Money): string[] {
  const lines: string[] = [];
  const items = receipt.items ?? [];
  for (const item of items.slice(0, MAX_ITEMS)) {
    const quantity = item.quantity === 1 ? "" : ` x${item.quantity}`;
    lines.push(`|${esc(item.name)}${quantity} | ${money(item.totalPrice)}|`);
    if (item.quantity !== 1) lines.push(`|~~${item.quantity} @ ${money(item.unitPrice)} |`);
  }
  if (items.length > MAX_ITEMS) lines.push(`|~~and ${items.length - MAX_ITEMS} more items not shown |`);
  lines.push("---");
  return lines;
}

/** Subtotal, tax, tip and the total: negative, and named so, for a refund or void. */
function totalLines(receipt: ReceiptJson, money: Money): string[] {
  const lines: string[] = [];
  if (receipt.subtotal !== undefined) lines.push(`|Subtotal | ${money(receipt.subtotal)}|`);
  if (receipt.taxAmount !== undefined) lines.push(`|Tax | ${money(receipt.taxAmount)}|`);
  if (receipt.tipAmount !== undefined) lines.push(`|Tip | ${money(receipt.tipAmount)}|`);
  const items = receipt.items ?? [];
  const total =
    receipt.totalAmount ?? receipt.amount ?? items.reduce((sum, item) => sum + item.totalPrice, 0);
  // A refund or void gives money back (the banner above says which): its total is negative.
  const sign = undoes(receipt) === undefined || total === 0 ? "" : "-";
  lines.push(`|^"TOTAL | ^"${esc(receipt.currency)} ${sign}${money(total)}|`);
  return lines;
}

/** Each tender of a split payment with its amount; else the payment method and card. */
function paymentLines(receipt: ReceiptJson, money: Money): string[] {
  const tenders = receipt.tenders ?? [];
  if (tenders.length > 0) {
    const lines = ["", "|Paid with |"];
    for (const tender of tenders.slice(0, MAX_LINES)) {
      const card = [tender.cardBrand, tender.cardLast4 ? `**** ${tender.cardLast4}` : ""].filter(Boolean);
      const label = card.length > 0 ? card.join(" ") : tender.method.replace(/_/g, " ");
      lines.push(`|~~${esc(label)} | ${money(tender.amount)}|`);
    }
    return lines;
  }
  const card = [receipt.cardBrand, receipt.cardLast4 ? `**** ${receipt.cardLast4}` : ""].filter(Boolean);
  if (!receipt.paymentMethod && card.length === 0) return [];
  return ["", `|${esc([receipt.paymentMethod, ...card].filter(Boolean).join(" "))} |`];
}

/** The tax per rate: rate, the amount it applies to, and the tax. */
function taxBreakdownLines(receipt: ReceiptJson, money: Money): string[] {
  const breakdown = receipt.taxBreakdown ?? [];
  if (breakdown.length === 0) return [];
  const lines = ["", "|Tax rate | Net | Tax|"];
  for (const line of breakdown.slice(0, MAX_LINES)) {
    lines.push(`|${percent(line.rate)} | ${money(line.taxableAmount)} | ${money(line.taxAmount)}|`);
  }
  return lines;
}

/** What the card statement knows the transaction by, for the cardholder to compare. */
function networkLines(receipt: ReceiptJson): string[] {
  const ids: [string, string | undefined][] = [
    ["Statement", receipt.cardAcceptorName],
    ["Auth code", receipt.authorizationCode],
    ["Terminal", receipt.terminalId],
    ["RRN", receipt.retrievalReferenceNumber],
    ["ARN", receipt.acquirerReferenceNumber],
  ];
  const shown = ids.filter((id): id is [string, string] => id[1] !== undefined && id[1] !== "");
  if (shown.length === 0) return [];
  // Labels in a column of 10, the values in the rest: a 23-digit ARN fits on one line.
  const rows = shown.map(([label, value]) => `|${label} | ${esc(value)}|`);
  return ["", "{width: 10 *}", ...rows, "{width: auto}"];
}

/** A rate fraction as a percentage: 0.23 is "23%", 0.075 "7.5%". */
function percent(rate: number): string {
  return `${Number((rate * 100).toFixed(4))}%`;
}

/** Amounts in the smallest unit of `currency`, shown with its decimals (JPY 0, EUR 2, BHD 3). */
function moneyFormatter(currency: string): (minor: number) => string {
  let digits = 2;
  try {
    digits = new Intl.NumberFormat("en", { style: "currency", currency }).resolvedOptions()
      .maximumFractionDigits as number;
  } catch {
    // An unknown code: two decimals, the common case.
  }
  const format = new Intl.NumberFormat("en", {
    minimumFractionDigits: digits,
    maximumFractionDigits: digits,
  });
  return (minor) => format.format(minor / 10 ** digits);
}

/** The transaction's date and time in its own time zone when known, else in UTC. */
function dateOf(receipt: ReceiptJson, locale: string): string {
  const date = new Date(receipt.transactionDate);
  if (Number.isNaN(date.getTime())) return esc(receipt.transactionDate);
  const timeZone = receipt.transactionTimezone || "UTC";
  try {
    const local = new Intl.DateTimeFormat(locale, { dateStyle: "medium", timeStyle: "short", timeZone });
    return esc(`${local.format(date)} ${timeZone}`);
  } catch {
    return esc(date.toISOString());
  }
}

/** Escapes receiptline's special characters in text, cut to {@link MAX_TEXT} characters. */
function esc(text: string): string {
  return clip(text).replace(SPECIAL, (c) => `\\${c}`);
}

/** `text`, or its first {@link MAX_TEXT} characters and an ellipsis (never half a surrogate pair). */
function clip(text: string): string {
  if (text.length <= MAX_TEXT) return text;
  return `${Array.from(text.slice(0, MAX_TEXT * 2))
    .slice(0, MAX_TEXT)
    .join("")}…`;
}

/** Escapes a property value (`{code: ...}`): its delimiters are `;`, `{`, `}` and `\`. */
function escProperty(text: string): string {
  return text.replace(/[\\;{}]/g, (c) => `\\${c}`);
}
