import { type DescMessage, fromBinary, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import { CreatePaymentRequestSchema } from "../../gen/receipts/v1/payments_pb.js";
import { hasCompiledReader, messageFromBinary } from "../../src/fast/binary-input.js";
import { message, reachableMessages, richStrings } from "../support/messages.js";

// fromBinary counted, so a test can tell the compiled path from the fallback.
vi.mock("@bufbuild/protobuf", async (importOriginal) => {
  const actual = await importOriginal<typeof import("@bufbuild/protobuf")>();
  return { ...actual, fromBinary: vi.fn(actual.fromBinary) };
});

/**
 * The compiled binary readers (src/fast/binary-input.ts) must give exactly what `fromBinary` gives:
 * the same message for every encoding of our messages, and for anything malformed or unusual the
 * same message or the same error (a leading U+FEFF kept, as protobuf-es 2.17 keeps it).
 */

/** What decoding gives: the message, or the error's message. */
function outcome(decode: () => unknown): { ok: unknown } | { error: string } {
  try {
    return { ok: decode() };
  } catch (err) {
    return { error: err instanceof Error ? err.message : String(err) };
  }
}

function sameAsFromBinary(desc: DescMessage, bytes: Uint8Array): void {
  const buffer = Buffer.from(bytes);
  expect(outcome(() => messageFromBinary(desc, buffer))).toEqual(outcome(() => fromBinary(desc, buffer)));
}

/** Ways to damage an encoding: truncate it, change a byte, insert a byte, append another copy. */
const damage = fc.oneof(
  fc.record({ kind: fc.constant("truncate" as const), at: fc.nat() }),
  fc.record({ kind: fc.constant("set" as const), at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ kind: fc.constant("insert" as const), at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ kind: fc.constant("twice" as const), at: fc.constant(0) }),
);

function damaged(bytes: Uint8Array, d: { kind: string; at: number; byte?: number }): Uint8Array {
  const b = Buffer.from(bytes);
  const at = b.length === 0 ? 0 : d.at % b.length;
  switch (d.kind) {
    case "truncate":
      return b.subarray(0, at);
    case "set":
      if (b.length > 0) b[at] = d.byte ?? 0;
      return b;
    case "insert":
      return Buffer.concat([b.subarray(0, at), Buffer.from([d.byte ?? 0]), b.subarray(at)]);
    default:
      return Buffer.concat([b, b]);
  }
}

describe("compiled protobuf binary readers", () => {
  const messages = [...new Set([...reachableMessages("input"), ...reachableMessages("output")])];

  it("cover every message of the services", () => {
    expect(messages.length).toBeGreaterThan(10);
    expect(messages.filter((desc) => !hasCompiledReader(desc)).map((d) => d.typeName)).toEqual([]);
  });

  for (const desc of messages) {
    it(`read ${desc.typeName} exactly as fromBinary, whole or damaged`, () => {
      fc.assert(
        fc.property(message(desc, 0, richStrings), damage, (msg, d) => {
          const bytes = Buffer.from(toBinary(desc, msg));
          const calls = vi.mocked(fromBinary).mock.calls.length;
          const fast = messageFromBinary(desc, bytes);
          // A well-formed encoding of our message is read without fromBinary.
          expect(vi.mocked(fromBinary).mock.calls.length).toBe(calls);
          expect(fast).toEqual(fromBinary(desc, bytes));
          sameAsFromBinary(desc, damaged(bytes, d));
        }),
        { numRuns: 300 },
      );
    });
  }

  it("reads arbitrary bytes as fromBinary does", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) =>
        sameAsFromBinary(CreatePaymentRequestSchema, bytes),
      ),
      { numRuns: 5000 },
    );
  });

  it("leaves unknown fields, invalid UTF-8 and non-canonical varints to fromBinary", () => {
    const valid = toBinary(CreatePaymentRequestSchema, {
      $typeName: "receipts.v1.CreatePaymentRequest",
      gateway: "a",
    } as never);
    const cases = [
      Buffer.concat([valid, Buffer.from([0xf8, 0x06, 0x01])]), // field 111, varint: unknown
      Buffer.from([0x0a, 0x02, 0xc3, 0x28]), // gateway: invalid UTF-8
      Buffer.from([0x0a, 0x81, 0x00]), // a length written in two bytes
    ];
    for (const bytes of cases) {
      sameAsFromBinary(CreatePaymentRequestSchema, bytes);
      const calls = vi.mocked(fromBinary).mock.calls.length;
      outcome(() => messageFromBinary(CreatePaymentRequestSchema, bytes));
      expect(vi.mocked(fromBinary).mock.calls.length).toBe(calls + 1);
    }
    const unknown = messageFromBinary(CreatePaymentRequestSchema, cases[0] as Buffer);
    expect(unknown.$unknown?.length).toBe(1);
  });
});
