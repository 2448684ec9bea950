import { fromBase64, toBase64 } from "./base64.js";

/**
 * Byte helpers for the key-transparency code, which runs in Node, browsers and React Native: no
 * `Buffer`, no `node:` module. Decoders here are strict (one encoding per value), because what a
 * verifier accepts in two spellings a monitor may compare in one.
 */

const encoder = new TextEncoder();
// `ignoreBOM` keeps a leading byte-order mark in the text (the default drops it): bytes
// EF BB BF + X would otherwise read as X, a second spelling of X whose signature covers other bytes.
const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** UTF-8 bytes of `text`. */
export function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}

/** The text of UTF-8 `bytes`; undefined when they are not valid UTF-8. */
export function fromUtf8(bytes: Uint8Array): string | undefined {
  try {
    return decoder.decode(bytes);
  } catch {
    return undefined;
  }
}

/** The concatenation of `parts`. */
export function concat(...parts: Uint8Array[]): Uint8Array {
  let length = 0;
  for (const part of parts) length += part.length;
  const out = new Uint8Array(length);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** Whether two byte strings are equal (not constant time: everything compared here is public). */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** Lower-case hex of `bytes`. */
export function toHex(bytes: Uint8Array): string {
  let out = "";
  for (const byte of bytes) out += byte.toString(16).padStart(2, "0");
  return out;
}

/** The bytes of lower-case hex `text`; undefined for anything else (upper case, odd length). */
export function fromHex(text: string): Uint8Array | undefined {
  if (text.length % 2 !== 0 || !/^[0-9a-f]*$/.test(text)) return undefined;
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = Number.parseInt(text.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** Standard padded base64 (RFC 4648 section 4). */
export function base64(bytes: Uint8Array): string {
  return toBase64(bytes);
}

/**
 * The bytes of standard padded base64 `text` in its one canonical spelling (no URL-safe alphabet, no
 * missing padding, no stray bits), optionally of exactly `length` bytes; undefined otherwise.
 */
export function fromBase64Strict(text: string, length?: number): Uint8Array | undefined {
  const bytes = fromBase64(text);
  if (bytes === undefined || toBase64(bytes) !== text) return undefined;
  if (length !== undefined && bytes.length !== length) return undefined;
  return bytes;
}

/** Unpadded base64url (RFC 4648 section 5), as `spkiSha256` is written. */
export function base64url(bytes: Uint8Array): string {
  return toBase64(bytes).replace(/=+$/, "").replace(/\+/g, "-").replace(/\//g, "_");
}

/** The bytes of unpadded base64url `text` in its canonical spelling, optionally of `length` bytes. */
export function fromBase64urlStrict(text: string, length?: number): Uint8Array | undefined {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) return undefined;
  const bytes = fromBase64(text);
  if (bytes === undefined || base64url(bytes) !== text) return undefined;
  if (length !== undefined && bytes.length !== length) return undefined;
  return bytes;
}

/** Big-endian bytes of a non-negative integer below 2^53, in `width` bytes. */
export function uintBE(value: number, width: number): Uint8Array {
  const out = new Uint8Array(width);
  let rest = value;
  for (let i = width - 1; i >= 0; i--) {
    out[i] = rest % 256;
    rest = Math.floor(rest / 256);
  }
  return out;
}
