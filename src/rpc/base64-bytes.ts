/**
 * Bytes that remember the base64 text they were decoded from. The store keeps a receipt's sealed parts
 * as base64; a response message holds them as bytes (gRPC sends bytes), and REST JSON writes them as
 * base64 again: encoding them a second time, with the Buffers it makes, was about 6% of the event
 * loop's time listing a page of receipts.
 */

const TEXT = Symbol("base64 text");
type WithText = Uint8Array & { [TEXT]?: string };

/**
 * `text` decoded, remembering `text` when its length is that of the bytes' encoding: a text with
 * whitespace or without padding is encoded afresh when written. The store's texts are all written by
 * `Buffer#toString("base64")`, so they are the encoding.
 */
export function bytesFromBase64(text: string): Uint8Array {
  const bytes: WithText = Buffer.from(text, "base64");
  if (text.length === 4 * Math.ceil(bytes.length / 3)) bytes[TEXT] = text;
  return bytes;
}

/** Standard base64 of `bytes`: the text they were decoded from, when they remember it. */
export function base64Of(bytes: Uint8Array): string {
  return (
    (bytes as WithText)[TEXT] ??
    Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64")
  );
}
