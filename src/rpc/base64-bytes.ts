/**
 * Bytes that remember the base64 text they were decoded from. The store keeps a receipt's sealed parts
 * as base64; a response message holds them as bytes (gRPC sends bytes), and REST JSON writes them as
 * base64 again: encoding them a second time, with the Buffers it makes, was about 6% of the event
 * loop's time listing a page of receipts.
 *
 * What is remembered here is a text the JSON writers may put between quotes as it is (it needs no
 * escaping and decodes to the bytes); src/base64-text.ts keeps the stronger kind, a text that is exactly
 * the bytes' standard encoding, which the domain may also store. `base64Of` takes either.
 */

import { base64OfBytes } from "../base64-text.js";
import { isWellFormed } from "./json-rules.js";

const TEXT = Symbol("base64 text");
type WithText = Uint8Array & { [TEXT]?: string };

/**
 * `text` decoded, remembering `text` when each of its characters was read as data (all but the exact
 * padding) and it needs no escaping in JSON: a text with whitespace, without padding or with anything
 * else in it is encoded afresh when written. The store's texts are all written by
 * `Buffer#toString("base64")`, so they are remembered. The JSON text writers put a remembered text
 * between quotes as it is: Node's decoder skips a character outside its alphabets (a quote, a
 * backslash, a control character), which leaves fewer bytes than the length promises, and reads a
 * character past U+00FF by its low byte, which lets a lone surrogate (the one such character JSON
 * escapes) through the count; both are refused here, in constant time for a one-byte string. What is
 * not checked, because it would take a scan: base64url letters and non-zero bits after the last byte,
 * which the store's texts never have and which need no escaping either.
 */
export function bytesFromBase64(text: string): Uint8Array {
  const bytes: WithText = Buffer.from(text, "base64");
  if (isEncodingOf(text, bytes.length) && isWellFormed(text)) bytes[TEXT] = text;
  return bytes;
}

/**
 * Whether padded base64 of `length` characters gives exactly `decoded` bytes: every character but the
 * padding then counted as data (a skipped one costs at least one byte), and the padding is exact.
 */
function isEncodingOf(text: string, decoded: number): boolean {
  const length = text.length;
  if (length % 4 !== 0) return false;
  const padding = text.endsWith("==") ? 2 : text.endsWith("=") ? 1 : 0;
  return decoded === (length / 4) * 3 - padding;
}

/** Standard base64 of `bytes`: the text they were decoded from, when they remember it. */
export function base64Of(bytes: Uint8Array): string {
  return (bytes as WithText)[TEXT] ?? base64OfBytes(bytes);
}

/** Where {@link base64TextOf} decodes, to count the bytes: grown to the largest text seen, never shrunk. */
let scratch = Buffer.allocUnsafe(0);

/**
 * `base64Of(bytesFromBase64(text))` without keeping the bytes: `text` itself when `bytesFromBase64`
 * would remember it (the same decode, into a scratch buffer, gives the same count of bytes), else the
 * bytes decoded and encoded afresh. For a REST answer written straight from stored texts: the decode
 * still proves the text needs no escaping, but no `Buffer` is made for each part.
 */
export function base64TextOf(text: string): string {
  const expected = Buffer.byteLength(text, "base64");
  if (scratch.length < expected) scratch = Buffer.allocUnsafe(Math.max(expected, 2 * scratch.length));
  const decoded = scratch.write(text, 0, expected, "base64");
  return isEncodingOf(text, decoded) && isWellFormed(text) ? text : base64Of(bytesFromBase64(text));
}
