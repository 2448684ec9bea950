import { receiptJsonProblems } from "../receipt-fields.js";

/**
 * What `matchTransaction` and `renderReceiptSvg` check of their inputs before they use them. Both
 * arrive as JSON from elsewhere (a receipt opened on the device, which the merchant may have sealed on
 * its side where the service never checked it; a line of the issuer's card feed), and a field missing,
 * of another type, or a date that is not one must be named, never a TypeError from deep inside (which
 * would also stop `matchStatement` at the first odd line), and never a value drawn unescaped.
 */

/**
 * What a receipt must have to be compared and drawn, beyond the types every member must have
 * (`receiptJsonProblems`, from the receipt's proto): the receipt's own members, then each element's
 * of its lists.
 */
const REQUIRED: Readonly<Record<"receipt" | "items" | "tenders" | "taxBreakdown", readonly string[]>> = {
  receipt: ["receiptId", "merchantName", "currency", "transactionDate"],
  items: ["name", "quantity", "unitPrice", "totalPrice"],
  tenders: ["method", "amount"],
  taxBreakdown: ["rate", "taxableAmount", "taxAmount"],
};

/** A statement line's fields that are strings when set. */
const LINE_TEXT = [
  "originalCurrency",
  "postedDate",
  "descriptor",
  "authorizationCode",
  "retrievalReferenceNumber",
  "acquirerReferenceNumber",
  "terminalId",
  "merchantCategoryCode",
  "cardLast4",
] as const;

const KINDS: readonly unknown[] = ["purchase", "refund", "reversal"];

type Fields = Record<string, unknown>;

/**
 * The problems of a receipt and a statement line that `matchTransaction` cannot compare, each as
 * `<receipt|transaction>.<field>: <rule>`; empty when both are fit to compare.
 */
export function matchInputProblems(receipt: unknown, transaction: unknown): string[] {
  const problems = receiptProblems(receipt);
  if (isObject(transaction)) lineProblems(transaction, problems);
  else problems.push("transaction: must be an object (a line of the card statement)");
  return problems;
}

/**
 * The problems of an opened receipt, each as `receipt.<field>: <rule>`: a member of another type than
 * the receipt's proto gives it, or one it is compared and drawn by missing. Empty when it is fit to use.
 */
export function receiptProblems(receipt: unknown): string[] {
  if (!isObject(receipt)) return ["receipt: must be an object (an opened receipt)"];
  const problems = receiptJsonProblems(receipt).map((problem) => `receipt.${problem}`);
  if (problems.length > 0) return problems;
  for (const field of REQUIRED.receipt) required(receipt, field, "receipt", problems);
  for (const list of ["items", "tenders", "taxBreakdown"] as const) {
    const elements = (receipt[list] ?? []) as Fields[];
    elements.forEach((element, i) => {
      for (const field of REQUIRED[list]) required(element, field, `receipt.${list}[${i}]`, problems);
    });
  }
  return problems;
}

/** Adds `<at>.<field>: is required` unless the member is there (and, for text, not empty). */
function required(fields: Fields, field: string, at: string, problems: string[]): void {
  if (fields[field] === undefined || fields[field] === "") problems.push(`${at}.${field}: is required`);
}

function lineProblems(line: Fields, problems: string[]): void {
  const at = (field: string) => `transaction.${field}`;
  if (!isAmount(line.amount)) problems.push(`${at("amount")}: must be a number (the smallest currency unit)`);
  requiredText(line, "currency", at, problems);
  date(line, "transactionDate", at, problems);
  optionalAmount(line, "originalAmount", at, problems);
  for (const field of LINE_TEXT) optionalText(line, field, at, problems);
  if (line.kind !== undefined && !KINDS.includes(line.kind)) {
    problems.push(`${at("kind")}: must be purchase, refund or reversal`);
  }
}

function requiredText(
  fields: Fields,
  field: string,
  at: (field: string) => string,
  problems: string[],
): void {
  if (typeof fields[field] !== "string" || fields[field] === "")
    problems.push(`${at(field)}: must be a string`);
}

function optionalText(
  fields: Fields,
  field: string,
  at: (field: string) => string,
  problems: string[],
): void {
  if (fields[field] !== undefined && typeof fields[field] !== "string") {
    problems.push(`${at(field)}: must be a string when set`);
  }
}

function optionalAmount(
  fields: Fields,
  field: string,
  at: (field: string) => string,
  problems: string[],
): void {
  if (fields[field] !== undefined && !isAmount(fields[field])) {
    problems.push(`${at(field)}: must be a number (the smallest currency unit) when set`);
  }
}

/** An RFC 3339 date-time, or a date `YYYY-MM-DD`. */
function date(fields: Fields, field: string, at: (field: string) => string, problems: string[]): void {
  const value = fields[field];
  const day = typeof value === "string" && /^\d{4}-\d{2}-\d{2}$/.test(value) ? `${value}T12:00:00Z` : value;
  if (typeof day !== "string" || Number.isNaN(Date.parse(day))) {
    problems.push(`${at(field)}: must be an RFC 3339 date-time or a date YYYY-MM-DD`);
  }
}

function isObject(value: unknown): value is Fields {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isAmount(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}
