import { transform } from "receiptline";
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

/** receiptline's special characters, escaped in every value taken from a receipt. */
const SPECIAL = /[\\|{}\-=~_"`^]/g;

/**
 * Draws an opened receipt (what `openReceipt` returns) as an SVG till receipt: merchant name and
 * address, date, receipt id, one line per item with quantity and price, subtotal, tax and total,
 * payment method, and a QR code of the receipt id. Money is in the smallest currency unit in the
 * receipt and shown with the currency's decimals (EUR 9.50). Text from the receipt is escaped for
 * receiptline, which in turn escapes it for XML, so a receipt cannot inject markup into the image.
 */
export function renderReceiptSvg(receipt: ReceiptJson, options: ReceiptImageOptions = {}): string {
  const cpl = options.charactersPerLine ?? 42;
  const money = moneyFormatter(receipt.currency);
  const lines: string[] = [];
  const add = (...parts: string[]) => lines.push(...parts);

  add(`^^^${esc(receipt.merchantName)}`);
  const address = [
    receipt.merchantStreet,
    [receipt.merchantPostalCode, receipt.merchantCity].filter(Boolean).join(" "),
    receipt.merchantCountry,
  ].filter((part): part is string => typeof part === "string" && part !== "");
  for (const part of address) add(esc(part));
  if (receipt.merchantTaxId) add(`Tax ID ${esc(receipt.merchantTaxId)}`);
  add("", dateOf(receipt, options.locale ?? "en-GB"), `Receipt ${esc(receipt.receiptId)}`, "---");

  const items = receipt.items ?? [];
  for (const item of items) {
    const quantity = item.quantity === 1 ? "" : ` x${item.quantity}`;
    add(`|${esc(item.name)}${quantity} | ${money(item.totalPrice)}|`);
    if (item.quantity !== 1) add(`|~~${item.quantity} @ ${money(item.unitPrice)} |`);
  }
  add("---");
  if (receipt.subtotal !== undefined) add(`|Subtotal | ${money(receipt.subtotal)}|`);
  if (receipt.taxAmount !== undefined) add(`|Tax | ${money(receipt.taxAmount)}|`);
  const total =
    receipt.totalAmount ?? receipt.amount ?? items.reduce((sum, item) => sum + item.totalPrice, 0);
  add(`|^"TOTAL | ^"${esc(receipt.currency)} ${money(total)}|`);
  const card = [receipt.cardBrand, receipt.cardLast4 ? `**** ${receipt.cardLast4}` : ""].filter(Boolean);
  if (receipt.paymentMethod || card.length > 0) {
    add("", `|${esc([receipt.paymentMethod, ...card].filter(Boolean).join(" "))} |`);
  }
  if (options.qrCode !== false) {
    add("", `{code:${escProperty(receipt.receiptId)}; option:qrcode,4,m}`);
  }
  add("", "Thank you!");
  const svg = transform(lines.join("\n"), { cpl, encoding: "multilingual", command: "svg" });
  // receiptline's SVG imports its font from Google Fonts; a receipt image must not call out (that
  // would tell a third party when a receipt is viewed), so the image uses the device's monospace font.
  return svg.replace(REMOTE_FONT, "");
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

/** Escapes receiptline's special characters in text. */
function esc(text: string): string {
  return text.replace(SPECIAL, (c) => `\\${c}`);
}

/** Escapes a property value (`{code: ...}`): its delimiters are `;`, `{`, `}` and `\`. */
function escProperty(text: string): string {
  return text.replace(/[\\;{}]/g, (c) => `\\${c}`);
}
