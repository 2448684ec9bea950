import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";

/**
 * A protobuf string is text like any other: a leading U+FEFF is a character of it, not a byte order
 * mark, on every path (the raw gRPC server of src/http/grpc-unary.ts, the Connect path, REST JSON, other languages'
 * runtimes). protobuf-es before 2.17 dropped it when decoding binary, and the service set its own
 * decoder to keep it; 2.17 keeps it itself, so the service uses the library's. This holds the
 * library to it: an upgrade that went back would fail here.
 */
describe("protobuf-es text decoding", () => {
  it("keeps a string field that starts with U+FEFF through toBinary and fromBinary", () => {
    const receipt = create(ReceiptSchema, { merchantName: "\ufeffCorner Coffee", merchantCity: "\ufeff" });
    const read = fromBinary(ReceiptSchema, toBinary(ReceiptSchema, receipt));
    expect(read.merchantName).toBe("\ufeffCorner Coffee");
    expect(read.merchantCity).toBe("\ufeff");
  });
});
