/**
 * Rules of REST JSON input shared by its two readers: the field-by-field check (json.ts), which names
 * every problem of a body, and the compiled readers (json-input.ts), which turn a body into a message
 * and give up on anything the check would refuse. A body a compiled reader accepts therefore has no
 * problem to name, and is not checked a second time.
 */

import { keepCanonicalBase64 } from "../base64-text.js";

/** How deeply messages (and Struct values) may nest in a request body. */
export const MAX_JSON_DEPTH = 32;

/** Keys that are never fields or map keys: accepting them would invite prototype pollution further down. */
export const FORBIDDEN_KEYS: ReadonlySet<string> = new Set(["__proto__", "constructor", "prototype"]);

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}(?:==)?|[A-Za-z0-9+/]{3}=?)?$/;
const BASE64URL = /^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2,3})?$/;

/**
 * Whether `value` is base64 (padded or not) or base64url, as a JSON `bytes` field must be. Neither
 * alphabet may end on a lone character (a length 1 more than a multiple of 4): it holds no whole byte,
 * protobuf-es refuses it, and the field's problem is then named here like any other text's.
 */
export function isBase64Text(value: string): boolean {
  return BASE64.test(value) || BASE64URL.test(value);
}

/**
 * The bytes of a JSON `bytes` value, as the compiled readers read it: undefined for a text
 * {@link isBase64Text} refuses (a lone last character among them, which Node would silently drop),
 * else the bytes protobuf-es's `base64Decode` gives, decoded by Node's native decoder (protobuf-es's
 * runs a JavaScript loop on Node 20 and 22, a few per cent of a sealed receipt's CPU), in a Uint8Array
 * of their own (a small Buffer is a view into a shared pool, and compares unequal to the library's
 * Uint8Array), with the text kept on them when it is their canonical encoding (src/base64-text.ts).
 *
 * Without the patterns' scan, which costs about 8 ns a character (60 us for a 50-item receipt's
 * ciphertext, a tenth of a REST sealed call's CPU): once the length and padding, one alphabet and ASCII
 * are checked, Node's decoder proves the rest. It reads every character of either alphabet as data and
 * skips or stops at any other, and, the data's length never being 1 more than a multiple of 4, one
 * character fewer read is always at least one byte fewer: the text is base64 exactly when it decodes
 * to every byte its length promises. ASCII, because the decoder reads a character past U+00FF by its
 * low byte.
 */
export function bytesOfBase64Text(text: string): Uint8Array | undefined {
  const length = text.length;
  const padding = text.endsWith("==") ? 2 : text.endsWith("=") ? 1 : 0;
  const tail = (length - padding) % 4;
  // Groups of four, then two characters ("==" or no padding) or three ("=" or none); never one.
  if (tail === 1 || (padding === 1 && tail !== 3) || (padding === 2 && tail !== 2)) return undefined;
  // One alphabet, not both; base64url has no padding.
  if (
    (text.includes("-") || text.includes("_")) &&
    (padding > 0 || text.includes("+") || text.includes("/"))
  ) {
    return undefined;
  }
  if (Buffer.byteLength(text, "utf8") !== length) return undefined;
  const bytes = decodedExactly(text, ((length - padding) >> 2) * 3 + (tail === 0 ? 0 : tail - 1));
  // A sealed part is stored and answered as this very text when it is canonical: not encoded twice.
  if (bytes !== undefined) keepCanonicalBase64(bytes, text);
  return bytes;
}

/** The largest decoding that goes through {@link scratch}; a larger one is decoded where it will stay. */
const SCRATCH_BYTES = 4096;

/** Where a small text is decoded before its bytes are copied into their own Uint8Array. */
const scratch = Buffer.allocUnsafeSlow(SCRATCH_BYTES);

/**
 * `text` decoded by Node's decoder when that gives exactly `count` bytes, in a Uint8Array of their own.
 * A small one is decoded into {@link scratch} and copied out: decoding straight into a new Uint8Array
 * needs a Buffer over its `ArrayBuffer`, and asking a small typed array for its buffer moves its bytes
 * off V8's heap (an IV and a tag: most of the cost of reading them, about 2 us of a sealed body's four
 * parts in a loop).
 */
function decodedExactly(text: string, count: number): Uint8Array | undefined {
  if (count > SCRATCH_BYTES) {
    const bytes = new Uint8Array(count);
    return Buffer.from(bytes.buffer).write(text, "base64") === count ? bytes : undefined;
  }
  if (scratch.write(text, 0, count, "base64") !== count) return undefined;
  return new Uint8Array(scratch.subarray(0, count));
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
