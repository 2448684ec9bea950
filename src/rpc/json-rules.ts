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

/**
 * The bytes of a text {@link isBase64Text} accepted, by Node's native decoder (which reads both
 * alphabets, padded or not): protobuf-es's `base64Decode` runs a JavaScript loop on Node 20 and 22,
 * which was a few per cent of a sealed receipt's CPU time (its ciphertext is kilobytes of base64).
 * The same bytes, in a Uint8Array of their own: a small Buffer is a view into a shared pool, and
 * compares unequal to the library's Uint8Array. Undefined for a text with a lone last character
 * (its length 1 more than a multiple of 4), which protobuf-es refuses and Node would silently drop.
 */
export function base64Bytes(text: string): Uint8Array | undefined {
  if (text.length % 4 === 1) return undefined;
  const decoded = Buffer.from(text, "base64");
  const bytes = new Uint8Array(decoded.length);
  bytes.set(decoded);
  return bytes;
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
