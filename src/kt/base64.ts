/**
 * Base64 without `Buffer`, `atob` or `btoa`, so that the WebCrypto helpers run unchanged in a browser,
 * React Native or a worker. Decoding accepts the standard and the URL-safe alphabet (protobuf JSON
 * parsers accept both), with or without padding.
 */

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** Value of each character code in either alphabet; -1 for a character that is not base64. */
const VALUES: Int8Array = (() => {
  const values = new Int8Array(128).fill(-1);
  for (let i = 0; i < ALPHABET.length; i++) values[ALPHABET.charCodeAt(i)] = i;
  values["-".charCodeAt(0)] = 62;
  values["_".charCodeAt(0)] = 63;
  return values;
})();

/** Standard base64 (RFC 4648 section 4) of `bytes`, padded, as the API sends bytes in JSON. */
export function toBase64(bytes: Uint8Array): string {
  let out = "";
  for (let i = 0; i < bytes.length; i += 3) {
    const b0 = bytes[i] ?? 0;
    const b1 = bytes[i + 1] ?? 0;
    const b2 = bytes[i + 2] ?? 0;
    const chunk = (b0 << 16) | (b1 << 8) | b2;
    out += ALPHABET.charAt(chunk >> 18) + ALPHABET.charAt((chunk >> 12) & 63);
    out += i + 1 < bytes.length ? ALPHABET.charAt((chunk >> 6) & 63) : "=";
    out += i + 2 < bytes.length ? ALPHABET.charAt(chunk & 63) : "=";
  }
  return out;
}

/**
 * The bytes of base64 `text` (standard or URL-safe alphabet, padding optional). Returns undefined
 * when `text` is not base64, rather than decoding garbage into a key or a ciphertext.
 */
export function fromBase64(text: string): Uint8Array<ArrayBuffer> | undefined {
  const body = text.endsWith("==") ? text.slice(0, -2) : text.endsWith("=") ? text.slice(0, -1) : text;
  if (body.length % 4 === 1) return undefined;
  const out = new Uint8Array(Math.floor((body.length * 3) / 4));
  let buffer = 0;
  let bits = 0;
  let at = 0;
  for (let i = 0; i < body.length; i++) {
    const code = body.charCodeAt(i);
    const value = code < 128 ? (VALUES[code] ?? -1) : -1;
    if (value < 0) return undefined;
    buffer = ((buffer << 6) | value) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[at++] = (buffer >> bits) & 0xff;
    }
  }
  return out;
}
