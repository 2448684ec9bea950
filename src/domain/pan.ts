import { createHmac } from "node:crypto";
import type { Violations } from "../errors.js";

const HASHED_PAN = /^[0-9a-fA-F]{64}$/;

/** Whether `value` is a hashed PAN as the API accepts it: 64 hexadecimal characters, any case. */
export function isHashedPan(value: string): boolean {
  return HASHED_PAN.test(value);
}

/** Records a violation on `field` unless `value` is a hashed PAN. */
export function checkHashedPan(value: string, field: string, violations: Violations): void {
  if (value === "") violations.add(field, "is required");
  else if (!isHashedPan(value)) violations.add(field, "must be 64 hexadecimal characters");
}

/** A card BIN as merchants send it and BIN prefixes as issuers own them: 6 or 8 digits (section 17). */
export const BIN_PATTERN = /^(\d{6}|\d{8})$/;

/** Records a violation on `field` unless `value` is absent or a card BIN; returns the valid BIN. */
export function checkCardBin(
  value: string | undefined,
  field: string,
  violations: Violations,
): string | undefined {
  if (value === undefined) return undefined;
  if (BIN_PATTERN.test(value)) return value;
  violations.add(field, "must be the card's first 6 or 8 digits");
  return undefined;
}

/**
 * The form in which a hashed PAN is stored: HMAC-SHA256 under the server's pepper, lower-case hex.
 * A copy of the database alone cannot be brute-forced back to card numbers (section 8).
 */
export function panHashOf(pepper: string, hashedPan: string): string {
  return createHmac("sha256", pepper).update(hashedPan.toLowerCase(), "utf8").digest("hex");
}
