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

/**
 * The form in which a hashed PAN is stored: HMAC-SHA256 under the server's pepper, lower-case hex.
 * A copy of the database alone cannot be brute-forced back to card numbers (section 8).
 */
export function panHashOf(pepper: string, hashedPan: string): string {
  return createHmac("sha256", pepper).update(hashedPan.toLowerCase(), "utf8").digest("hex");
}
