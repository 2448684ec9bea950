/**
 * What `matchTransaction` and `renderReceiptSvg` check of their inputs before they use them. Both
 * arrive as JSON from elsewhere (a receipt opened on the device, which the merchant may have sealed on
 * its side where the service never checked it; a line of the issuer's card feed), and a field missing,
 * of another type, or a date that is not one must be named, never a TypeError from deep inside (which
 * would also stop `matchStatement` at the first odd line), and never a value drawn unescaped.
 */

/** A receipt's fields that are strings when set. */
const RECEIPT_TEXT = [
  "merchantStreet",
  "merchantCity",
  "merchantPostalCode",
  "merchantCountry",
  "merchantTaxId",
  "paymentMethod",
  "cardBrand",
  "originalReceiptId",
  "transactionTimezone",
  "receiptType",
  "cardLast4",
  "cardAcceptorName",
  "merchantCategoryCode",
  "authorizationCode",
  "retrievalReferenceNumber",
  "acquirerReferenceNumber",
  "terminalId",
] as const;

/** A receipt's amounts, numbers when set. */
const RECEIPT_AMOUNTS = ["subtotal", "taxAmount", "totalAmount", "amount", "tipAmount"] as const;

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
 * The problems of an opened receipt, each as `receipt.<field>: <rule>`: the fields a receipt is
 * compared and drawn by, of the types the service seals them with. Empty when it is fit to use.
 */
export function receiptProblems(receipt: unknown): string[] {
  const problems: string[] = [];
  if (isObject(receipt)) receiptFieldProblems(receipt, problems);
  else problems.push("receipt: must be an object (an opened receipt)");
  return problems;
}

function receiptFieldProblems(receipt: Fields, problems: string[]): void {
  const at = (field: string) => `receipt.${field}`;
  requiredText(receipt, "currency", at, problems);
  requiredText(receipt, "merchantName", at, problems);
  requiredText(receipt, "receiptId", at, problems);
  date(receipt, "transactionDate", at, problems);
  for (const field of RECEIPT_TEXT) optionalText(receipt, field, at, problems);
  for (const field of RECEIPT_AMOUNTS) optionalAmount(receipt, field, at, problems);
  elements(receipt, "items", problems, (item, here) => {
    requiredText(item, "name", here, problems);
    for (const field of ["quantity", "unitPrice", "totalPrice"]) number(item, field, here, problems);
  });
  elements(receipt, "tenders", problems, (tender, here) => {
    requiredText(tender, "method", here, problems);
    number(tender, "amount", here, problems);
    optionalText(tender, "cardBrand", here, problems);
    optionalText(tender, "cardLast4", here, problems);
  });
  elements(receipt, "taxBreakdown", problems, (line, here) => {
    for (const field of ["rate", "taxableAmount", "taxAmount"]) number(line, field, here, problems);
  });
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

function number(fields: Fields, field: string, at: (field: string) => string, problems: string[]): void {
  if (!isAmount(fields[field])) problems.push(`${at(field)}: must be a number`);
}

/** Each object of the receipt's list `field`, checked by `each` with its own field namer. */
function elements(
  receipt: Fields,
  field: string,
  problems: string[],
  each: (element: Fields, at: (field: string) => string) => void,
): void {
  const value = receipt[field];
  if (value === undefined) return;
  if (!Array.isArray(value)) {
    problems.push(`receipt.${field}: must be a list when set`);
    return;
  }
  value.forEach((element: unknown, i) => {
    if (isObject(element)) each(element, (name) => `receipt.${field}[${i}].${name}`);
    else problems.push(`receipt.${field}[${i}]: must be an object`);
  });
}

function isObject(value: unknown): value is Fields {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isAmount(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}
