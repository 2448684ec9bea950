import { configureTextEncoding, getTextEncoding } from "@bufbuild/protobuf/wire";

/**
 * How protobuf-es turns strings into UTF-8 and back in this service and its TypeScript client, set
 * process-wide (protobuf-es keeps it in a global) by {@link useServiceTextEncoding}, which `buildApp`
 * and `createReceiptsClient` call; calling it again changes nothing.
 *
 * - Writing goes through Node's `Buffer` rather than the WHATWG `TextEncoder` protobuf-es uses by
 *   default: `TextEncoder.encode` costs about 325 ns per string here against 80 ns for `Buffer.from`
 *   (a binding call and a fresh ArrayBuffer each time), and a gRPC receipt call encodes a few dozen
 *   strings. Both write the same bytes: UTF-8, an unpaired surrogate as U+FFFD.
 * - Reading keeps a leading U+FEFF. protobuf-es decodes with a default `TextDecoder`, which takes a
 *   leading U+FEFF for a byte order mark and drops it, so a string field "\uFEFFx" arrived as "x"
 *   through the Connect path while the gRPC fast path (src/rpc/binary-input.ts), the JSON paths and
 *   the protobuf runtimes of other languages keep it: inside a protobuf string it is a character like
 *   any other. Invalid UTF-8 is replaced or refused exactly as before.
 * - The UTF-8 check stays protobuf-es's own.
 *
 * protobuf-es 2.17 caught up on both counts: its decoder keeps a leading U+FEFF (`ignoreBOM`), and
 * `toBinary` writes strings with `TextEncoder.encodeInto` into its own buffer (`encodeUtf8Into`, which
 * this module leaves as it is) instead of calling `encodeUtf8`. So with 2.17 this module changes no
 * byte and no cost; it stays until the fast paths are folded into one module, because the client
 * (src/client/client.ts) calls it too, and test/unit/proto-text.test.ts keeps the U+FEFF promise
 * whatever the library does.
 */
export function useServiceTextEncoding(): void {
  const current = getTextEncoding();
  if (current.encodeUtf8 === encodeUtf8 && current.decodeUtf8 === decodeUtf8) return;
  configureTextEncoding({ ...current, encodeUtf8, decodeUtf8 });
}

/** UTF-8 bytes of `text`; for short strings a view into Node's shared pool, which protobuf-es copies at once. */
export function encodeUtf8(text: string): Uint8Array<ArrayBuffer> {
  return Buffer.from(text, "utf8");
}

const lenient = new TextDecoder("utf-8", { ignoreBOM: true });
const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * The text of UTF-8 `bytes`, a leading U+FEFF included. Invalid bytes become U+FFFD, or with `strictly`
 * throw, as protobuf-es's own decoder does for fields without and with UTF-8 validation.
 */
export function decodeUtf8(bytes: Uint8Array, strictly = false): string {
  return (strictly ? strict : lenient).decode(bytes);
}
