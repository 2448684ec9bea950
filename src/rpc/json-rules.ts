/**
 * Rules of REST JSON input shared by its two readers: the field-by-field check (json.ts), which names
 * every problem of a body, and the compiled readers (json-input.ts), which turn a body into a message
 * and give up on anything the check would refuse. A body a compiled reader accepts therefore has no
 * problem to name, and is not checked a second time.
 */

/** How deeply messages (and Struct values) may nest in a request body. */
export const MAX_JSON_DEPTH = 32;

/** Keys that are never fields or map keys: accepting them would invite prototype pollution further down. */
export const FORBIDDEN_KEYS: ReadonlySet<string> = new Set(["__proto__", "constructor", "prototype"]);

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}(?:==)?|[A-Za-z0-9+/]{3}=?)?$/;
const BASE64URL = /^[A-Za-z0-9_-]*$/;

/** Whether `value` is base64 (padded or not) or base64url, as a JSON `bytes` field must be. */
export function isBase64Text(value: string): boolean {
  return BASE64.test(value) || BASE64URL.test(value);
}

interface WellFormed {
  isWellFormed?: (this: string) => boolean;
}

const nativeWellFormed = (String.prototype as WellFormed).isWellFormed;

/** Whether a string has no lone surrogates: protobuf-es rejects those (its `checkUtf8`). */
export function isWellFormed(value: string): boolean {
  if (nativeWellFormed !== undefined) return nativeWellFormed.call(value);
  try {
    encodeURIComponent(value);
    return true;
  } catch {
    return false;
  }
}
