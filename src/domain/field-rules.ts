import type { ViolationSink } from "../errors.js";
import * as limits from "./limits.js";

/**
 * The checks every receipt field is made of, shared by the receipt rules
 * (`receipt-rules.ts`) and the card-transaction fields (`transaction-fields.ts`): ids,
 * free text, money. Each adds a violation naming the field to a sink and never throws, so that one
 * error can name every offending field.
 */

/** What an id must look like; said in every violation of an id. */
export const ID_RULE =
  "must start with a letter or digit and contain only letters, digits, '.', '_', ':' and '-'";

const MAX_MONEY = BigInt(limits.MAX_MONEY);
/** C0 controls, DEL and C1 controls (Unicode category Cc). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
/** Anything {@link checkText} looks at closer: control characters and surrogates, paired or not. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point.
const CONTROL_OR_SURROGATE = /[\u0000-\u001f\u007f-\u009f\uD800-\uDFFF]/;

/** An id (receiptId, merchantId, ...): required, at most `MAX_ID_LENGTH`, {@link ID_RULE}. */
export function identifier(v: ViolationSink, field: string, value: string): string {
  let problem: string | null = null;
  if (value === "") problem = "is required";
  else if (value.length > limits.MAX_ID_LENGTH)
    problem = `must be at most ${limits.MAX_ID_LENGTH} characters`;
  else if (!limits.ID_PATTERN.test(value)) problem = ID_RULE;
  if (problem !== null) v.add(field, problem);
  return value;
}

/** Required free text: not blank, and {@link checkText}. */
export function requiredText(v: ViolationSink, field: string, value: string, max: number): string {
  if (value.trim() === "") v.add(field, "is required");
  else checkText(v, field, value, max);
  return value;
}

/** Adds a violation and returns false when `value` has control characters, bad UTF-16 or is too long. */
export function checkText(v: ViolationSink, field: string, value: string, max: number): boolean {
  let problem: string | null = null;
  if (!CONTROL_OR_SURROGATE.test(value)) {
    // No surrogates: one code point per UTF-16 unit.
    if (value.length > max) problem = `must be at most ${max} characters`;
  } else if (CONTROL.test(value)) problem = "must not contain control characters";
  else if (LONE_SURROGATE.test(value)) problem = "must be valid Unicode text (it has an unpaired surrogate)";
  else if (codePoints(value) > max) problem = `must be at most ${max} characters`;
  if (problem !== null) v.add(field, problem);
  return problem === null;
}

/** The number of Unicode code points of `value` (what a person calls characters). */
export function codePoints(value: string): number {
  let count = 0;
  for (const _ of value) count++;
  return count;
}

/**
 * A money field (int64 on the wire) as a number: a violation unless it is from 0 to `MAX_MONEY`, so
 * the number is exact.
 */
export function money(v: ViolationSink, field: string, value: bigint): number {
  if (value < 0n || value > MAX_MONEY) {
    v.add(field, `must be an integer between 0 and ${limits.MAX_MONEY}`);
  }
  return Number(value);
}

/** Whether `rate` is a tax rate: a finite fraction from `MIN_TAX_RATE` to `MAX_TAX_RATE`. */
export function isTaxRate(rate: number): boolean {
  return Number.isFinite(rate) && rate >= limits.MIN_TAX_RATE && rate <= limits.MAX_TAX_RATE;
}

/** What a tax rate must be; said in every violation of one. */
export const TAX_RATE_RULE = "must be a fraction between 0 and 1, e.g. 0.19 for 19%";
