/**
 * A strict DER reader (ITU-T X.690) for the few structures keys are made of, in plain TypeScript over
 * `Uint8Array` (no `node:` module, no `Buffer`): the service and the client library both run it, the
 * latter in browsers too. It exists so that an attacker's bytes are read by our code, whose failures
 * are exceptions, before OpenSSL or WebCrypto reads them (a key Node
 * cannot digest can abort the whole process).
 *
 * Strict means: single-byte tags, definite lengths in their shortest form, at most 16 MiB, every
 * element inside its parent and nothing after the last one, INTEGERs in their shortest form. Anything
 * else throws {@link DerError}, whose message never quotes the input.
 */

/** A byte string that is not the DER this reader expects. */
export class DerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DerError";
  }
}

/** DER tags used by key encodings. */
export const TAG = {
  INTEGER: 0x02,
  BIT_STRING: 0x03,
  OCTET_STRING: 0x04,
  NULL: 0x05,
  OID: 0x06,
  SEQUENCE: 0x30,
  /** `[0]` and `[1]`, constructed (EXPLICIT), as ECPrivateKey uses them. */
  CONTEXT_0: 0xa0,
  CONTEXT_1: 0xa1,
} as const;

/** One element: its tag and where its content starts and ends in the buffer it was read from. */
export interface DerElement {
  tag: number;
  start: number;
  end: number;
}

/** The element at `offset`, which must end at or before `limit`. */
export function elementAt(der: Uint8Array, offset: number, limit: number): DerElement {
  if (offset + 2 > limit) throw new DerError("truncated element");
  const tag = der[offset] as number;
  // High tag numbers (low five bits all set) are never used by key encodings.
  if ((tag & 0x1f) === 0x1f) throw new DerError("multi-byte tag");
  const first = der[offset + 1] as number;
  let length = first;
  let start = offset + 2;
  if (first & 0x80) {
    const count = first & 0x7f;
    // 0x80 is BER's indefinite length; more than three length bytes is over 16 MiB.
    if (count === 0 || count > 3) throw new DerError("indefinite or oversized length");
    if (start + count > limit) throw new DerError("truncated length");
    if (der[start] === 0) throw new DerError("length not in its shortest form");
    length = 0;
    for (let i = 0; i < count; i++) length = length * 256 + (der[start + i] as number);
    if (length < 0x80) throw new DerError("length not in its shortest form");
    start += count;
  }
  const end = start + length;
  if (end > limit) throw new DerError("element runs past its container");
  return { tag, start, end };
}

/** The one element that is the whole of `der`, which must have tag `tag`. */
export function wholeElement(der: Uint8Array, tag: number): DerElement {
  const root = elementAt(der, 0, der.length);
  if (root.end !== der.length) throw new DerError("bytes after the element");
  if (root.tag !== tag) throw new DerError("unexpected tag");
  return root;
}

/** The elements inside a constructed element, in order; they must fill it exactly. */
export function childrenOf(der: Uint8Array, parent: DerElement): DerElement[] {
  const items: DerElement[] = [];
  let offset = parent.start;
  while (offset < parent.end) {
    const item = elementAt(der, offset, parent.end);
    items.push(item);
    offset = item.end;
  }
  return items;
}

/** The children of `parent`, of which there must be from `min` to `max`. */
export function childrenCount(der: Uint8Array, parent: DerElement, min: number, max = min): DerElement[] {
  const items = childrenOf(der, parent);
  if (items.length < min || items.length > max) throw new DerError("wrong number of elements");
  return items;
}

/** The content bytes of an element (a view, not a copy). */
export function contentOf(der: Uint8Array, item: DerElement): Uint8Array {
  return der.subarray(item.start, item.end);
}

/** Asserts the element's tag. */
export function expectTag(item: DerElement | undefined, tag: number): DerElement {
  if (item === undefined || item.tag !== tag) throw new DerError("unexpected tag");
  return item;
}

/**
 * The magnitude of a positive INTEGER in its shortest form, without the sign byte. Zero, negative
 * numbers and padded encodings throw.
 */
export function positiveInteger(der: Uint8Array, item: DerElement | undefined): Uint8Array {
  const bytes = contentOf(der, expectTag(item, TAG.INTEGER));
  if (bytes.length === 0) throw new DerError("empty INTEGER");
  const first = bytes[0] as number;
  if (first & 0x80) throw new DerError("negative INTEGER");
  if (first === 0) {
    if (bytes.length === 1) throw new DerError("zero INTEGER");
    if (!((bytes[1] as number) & 0x80)) throw new DerError("INTEGER not in its shortest form");
    return bytes.subarray(1);
  }
  return bytes;
}

/** A small non-negative INTEGER (a version number): its value, which must be at most 127. */
export function smallInteger(der: Uint8Array, item: DerElement | undefined): number {
  const bytes = contentOf(der, expectTag(item, TAG.INTEGER));
  if (bytes.length !== 1 || (bytes[0] as number) & 0x80) throw new DerError("not a small INTEGER");
  return bytes[0] as number;
}

/** The content of a BIT STRING with no unused bits (as every key's bit string is). */
export function bitStringBytes(der: Uint8Array, item: DerElement | undefined): Uint8Array {
  const bytes = contentOf(der, expectTag(item, TAG.BIT_STRING));
  if (bytes.length === 0 || bytes[0] !== 0) throw new DerError("BIT STRING with unused bits");
  return bytes.subarray(1);
}

/** The content of an OBJECT IDENTIFIER as lowercase hex (compared with the constants of callers). */
export function oidHex(der: Uint8Array, item: DerElement | undefined): string {
  const bytes = contentOf(der, expectTag(item, TAG.OID));
  if (bytes.length === 0) throw new DerError("empty OBJECT IDENTIFIER");
  return toHex(bytes);
}

/** Asserts an element is the NULL of an algorithm's parameters. */
export function expectNull(item: DerElement | undefined): void {
  if (expectTag(item, TAG.NULL).end !== (item as DerElement).start) throw new DerError("NULL with content");
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, "0"));

/**
 * A copy of `bytes` (or of a range of it) as a plain Uint8Array. Never `slice()`: on a Node Buffer,
 * which callers may pass, `slice` is a view of the same memory, not a copy.
 */
export function copyOf(bytes: Uint8Array, start = 0, end = bytes.length): Uint8Array {
  return new Uint8Array(bytes.subarray(start, end));
}

/** Lowercase hex of bytes. */
export function toHex(bytes: Uint8Array): string {
  let out = "";
  for (const byte of bytes) out += HEX[byte];
  return out;
}

/** The unsigned big-endian integer of bytes. */
export function toBigInt(bytes: Uint8Array): bigint {
  return bytes.length === 0 ? 0n : BigInt(`0x${toHex(bytes)}`);
}

/** An unsigned integer as exactly `size` big-endian bytes (it must fit). */
export function fromBigInt(value: bigint, size: number): Uint8Array {
  const out = new Uint8Array(size);
  let rest = value;
  for (let i = size - 1; i >= 0; i--) {
    out[i] = Number(rest & 0xffn);
    rest >>= 8n;
  }
  return out;
}

/** The number of significant bits of an unsigned big-endian integer without leading zero bytes. */
export function bitLength(magnitude: Uint8Array): number {
  const first = magnitude[0] ?? 0;
  return first === 0 ? 0 : (magnitude.length - 1) * 8 + (32 - Math.clz32(first));
}
