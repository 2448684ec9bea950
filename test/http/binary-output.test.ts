import { create, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import { GrantAccessResponseSchema } from "../../gen/receipts/v1/keys_pb.js";
import { ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { hasCompiledWriter, messageToBinary } from "../../src/fast/binary-output.js";
import { message, reachableMessages, richStrings } from "../support/messages.js";

// toBinary counted, so a test can tell the compiled path from the fallback.
vi.mock("@bufbuild/protobuf", async (importOriginal) => {
  const actual = await importOriginal<typeof import("@bufbuild/protobuf")>();
  return { ...actual, toBinary: vi.fn(actual.toBinary) };
});

/**
 * The compiled binary writers (src/rpc/binary-output.ts) must write exactly the bytes `toBinary`
 * writes, for every message the gRPC fast path answers with and every message those contain.
 */

const same = (a: Uint8Array, b: Uint8Array) =>
  expect(Buffer.from(a).toString("hex")).toBe(Buffer.from(b).toString("hex"));

describe("compiled protobuf binary writers", () => {
  const messages = [...new Set([...reachableMessages("output"), ...reachableMessages("input")])];

  it("cover every message of the services", () => {
    expect(messages.length).toBeGreaterThan(10);
    expect(messages.filter((desc) => !hasCompiledWriter(desc)).map((d) => d.typeName)).toEqual([]);
  });

  for (const desc of messages) {
    it(`write ${desc.typeName} exactly as toBinary`, () => {
      fc.assert(
        fc.property(message(desc, 0, richStrings), (msg) => {
          const calls = vi.mocked(toBinary).mock.calls.length;
          const fast = messageToBinary(desc, msg);
          // Our messages are written without toBinary.
          expect(vi.mocked(toBinary).mock.calls.length).toBe(calls);
          same(fast, toBinary(desc, msg));
        }),
        { numRuns: 300 },
      );
    });
  }

  it("writes lengths of three bytes, answers past 16 KiB and past 1 MiB, and small ones after those", () => {
    for (const size of [127, 128, 16_383, 16_384, 70_000, 600_000, 100]) {
      const receipt = create(ReceiptSchema, {
        receiptId: "r".repeat(size),
        merchantName: "\u00e9".repeat(size),
      });
      same(messageToBinary(ReceiptSchema, receipt), toBinary(ReceiptSchema, receipt));
    }
  });

  it("leaves a message with unknown fields or an unexpected value to toBinary, and its errors", () => {
    const withUnknown = create(GrantAccessResponseSchema, { userId: "u" });
    withUnknown.$unknown = [{ no: 99, wireType: 2, data: new Uint8Array([1, 2, 3]) }];
    same(
      messageToBinary(GrantAccessResponseSchema, withUnknown),
      toBinary(GrantAccessResponseSchema, withUnknown),
    );
    expect(
      Buffer.from(messageToBinary(GrantAccessResponseSchema, withUnknown)).includes(Buffer.from([1, 2, 3])),
    ).toBe(true);

    const stringAmount = create(ReceiptSchema, { receiptId: "r" });
    (stringAmount as unknown as { totalAmount: string }).totalAmount = "950";
    same(messageToBinary(ReceiptSchema, stringAmount), toBinary(ReceiptSchema, stringAmount));

    const tooBig = create(ReceiptSchema, { receiptId: "r", totalAmount: 2n ** 63n });
    expect(() => messageToBinary(ReceiptSchema, tooBig)).toThrow();
    expect(() => toBinary(ReceiptSchema, tooBig)).toThrow();
  });
});
