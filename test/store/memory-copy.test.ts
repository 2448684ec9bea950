import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { copy } from "../../src/store/memory/copy.js";

/**
 * The memory store's `copy` gives every caller a copy of its own. Bytes are copied with
 * `new Uint8Array` instead of `structuredClone` (which copies the whole backing buffer); the copy
 * must be what `structuredClone` gave (a plain Uint8Array of the same bytes, whatever view or Buffer
 * came in), and writing to either side must not show on the other.
 */

/** Bytes as the store meets them: a plain array, a view into a larger buffer, a Buffer (pooled or not). */
const byteViews = fc
  .tuple(
    fc.uint8Array({ maxLength: 300 }),
    fc.nat(40),
    fc.nat(40),
    fc.constantFrom("plain", "view", "buffer", "pooled"),
  )
  .map(([bytes, before, after, kind]): Uint8Array => {
    if (kind === "plain") return bytes;
    if (kind === "buffer") return Buffer.from(bytes);
    if (kind === "pooled") return Buffer.from(Buffer.from(bytes).toString("base64"), "base64");
    const backing = new Uint8Array(before + bytes.length + after);
    backing.set(bytes, before);
    return backing.subarray(before, before + bytes.length);
  });

describe("memory store copy of bytes", () => {
  it("gives what structuredClone gave, independent of the original", () => {
    fc.assert(
      fc.property(byteViews, (bytes) => {
        const record = { id: "r", body: bytes, nested: [{ at: new Date(0), key: bytes }] };
        const copied = copy(record);
        const cloned = structuredClone(record);
        for (const [ours, theirs] of [
          [copied.body, cloned.body],
          [copied.nested[0]?.key, cloned.nested[0]?.key],
        ] as const) {
          expect(Object.getPrototypeOf(ours)).toBe(Object.getPrototypeOf(theirs));
          expect(ours).toEqual(theirs);
          expect(ours).not.toBe(bytes);
        }
        expect(copied).toEqual(cloned);
        if (bytes.length === 0) return;
        // The copy and the original are separate memory both ways, and the two copies of one record too.
        const first = bytes[0] as number;
        (copied.body as Uint8Array)[0] = first ^ 0xff;
        expect(bytes[0]).toBe(first);
        expect(copied.nested[0]?.key[0]).toBe(first);
        bytes[0] = first ^ 0x0f;
        expect(copied.body[0]).toBe(first ^ 0xff);
        expect(copied.nested[0]?.key[0]).toBe(first);
      }),
    );
  });

  it("still copies other typed arrays as structuredClone does", () => {
    const words = new Uint16Array([1, 2, 65535]);
    const copied = copy(words);
    expect(copied).toBeInstanceOf(Uint16Array);
    expect(copied).toEqual(words);
    expect(copied).not.toBe(words);
  });
});
