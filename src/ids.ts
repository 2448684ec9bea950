import { randomUUID } from "node:crypto";
import { secureRandomText } from "./crypto/random.js";

/**
 * Random identifiers and secrets. Every id with a prefix is `<prefix>_<base64url>` of `bytes` random
 * bytes; 16 bytes = 128 bits, the minimum for anything that acts as a secret (tokens, API keys).
 */
export function randomId(prefix: string, bytes = 12): string {
  return `${prefix}_${secureRandomText(bytes, "base64url")}`;
}

/** A UUID v4 (key ids). */
export function uuid(): string {
  return randomUUID();
}

/** Whether a string is a UUID v4. */
export function isUuidV4(value: string): boolean {
  return /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/i.test(value);
}
