/**
 * Bytes that keep the standard base64 text they were decoded from, when that text is exactly what
 * `Buffer#toString("base64")` would give for them. A REST request's sealed parts arrive as base64, are
 * decoded to bytes for the message, then encoded again for the stored record (the domain) and again
 * for the answer (the JSON writer): with the text kept, neither encodes.
 *
 * Only the decoder that proves a text canonical keeps it ({@link keepCanonicalBase64}); whoever holds
 * such bytes must not change them afterwards (request messages' bytes are read, never written).
 */

const CANONICAL = Symbol("canonical base64 text");
type WithCanonical = Uint8Array & { [CANONICAL]?: string };

/** The low bits of each standard base64 character's value, two of them: what a last character leaves. */
function lowBits(code: number, mask: number): number {
  // A-Z 0-25, a-z 26-51, 0-9 52-61, + 62, / 63.
  const value =
    code >= 97 ? code - 71 : code >= 65 ? code - 65 : code >= 48 ? code + 4 : code === 43 ? 62 : 63;
  return value & mask;
}

/**
 * Keeps `text` on `bytes` when `bytes` are its decoding and `text` is their standard base64: padded to
 * a multiple of four, no base64url letter, and no bit set past the last byte. The caller proves the
 * rest: `text` is ASCII and Node's decoder read every character but the padding as data, so
 * `bytes.length` is what the length and padding promise; that decoder stops at the first `=`, so the
 * count also proves there is none before the padding.
 */
export function keepCanonicalBase64(bytes: Uint8Array, text: string): void {
  const length = text.length;
  if (length % 4 !== 0) return;
  const padding =
    length === 0 ? 0 : text.charCodeAt(length - 1) !== 61 ? 0 : text.charCodeAt(length - 2) === 61 ? 2 : 1;
  if (text.includes("-") || text.includes("_")) return;
  if (padding === 2 && lowBits(text.charCodeAt(length - 3), 0xf) !== 0) return;
  if (padding === 1 && lowBits(text.charCodeAt(length - 2), 0x3) !== 0) return;
  (bytes as WithCanonical)[CANONICAL] = text;
}

/**
 * Whether `text` is the standard padded base64 of its own bytes, exactly as Node writes it: a text
 * nobody decoded yet (a stored one), checked by decoding and encoding it again.
 */
export function isCanonicalBase64(text: unknown): boolean {
  return typeof text === "string" && Buffer.from(text, "base64").toString("base64") === text;
}

/** The standard base64 text `bytes` keep from their decoding, if any. */
export function keptBase64(bytes: Uint8Array): string | undefined {
  return (bytes as WithCanonical)[CANONICAL];
}

/**
 * Standard base64 of `bytes`: the text they were decoded from when it was canonical, else encoded
 * where they are (`Buffer.from(bytes)` would copy them first).
 */
export function base64OfBytes(bytes: Uint8Array): string {
  return (
    (bytes as WithCanonical)[CANONICAL] ??
    Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64")
  );
}
