import { base64Decode } from "@bufbuild/protobuf/wire";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { EncryptedReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { compiledJsonReader, compiledMessageFromJson } from "../../src/rpc/json-input.js";
import { messageFromJsonReflective } from "../../src/rpc/json-reflective.js";
import { base64Bytes, isBase64Text } from "../../src/rpc/json-rules.js";
import { fuzzSettings } from "../hardening/support.js";

/**
 * The compiled JSON reader decodes a `bytes` field with Node's decoder (`base64Bytes`) instead of
 * protobuf-es's `base64Decode`: for every text the reader accepts (base64, padded or not, and
 * base64url), the bytes must be the library's, in a Uint8Array of their own, and a text the library
 * refuses (a lone last character) must be refused too, never read as fewer bytes.
 */

const STANDARD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const URL_SAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/** Texts over one alphabet, of any length, with 0 to 2 padding characters after them. */
const texts = fc
  .tuple(
    fc.constantFrom(STANDARD, URL_SAFE),
    fc.array(fc.nat(63), { maxLength: 70 }),
    fc.constantFrom("", "=", "=="),
  )
  .map(([alphabet, digits, padding]) => digits.map((d) => alphabet[d]).join("") + padding);

describe("base64Bytes", () => {
  it("gives protobuf-es's bytes for every text the JSON readers accept", () => {
    let accepted = 0;
    fc.assert(
      fc.property(texts, (text) => {
        if (!isBase64Text(text)) return;
        accepted++;
        const bytes = base64Bytes(text);
        let library: Uint8Array | undefined;
        try {
          library = base64Decode(text);
        } catch {
          // protobuf-es refuses it: so must base64Bytes, and the reader then leaves it to fromJson.
        }
        expect(bytes).toStrictEqual(library);
        if (bytes === undefined) return;
        expect(Buffer.isBuffer(bytes)).toBe(false);
        expect(bytes.byteOffset).toBe(0);
        expect(bytes.buffer.byteLength).toBe(bytes.length);
      }),
      fuzzSettings(500),
    );
    expect(accepted).toBeGreaterThan(0);
  });

  it("decodes both alphabets, padded and unpadded, and a real envelope's parts", () => {
    const raw = Buffer.from(Array.from({ length: 257 }, (_, i) => (i * 37) % 256));
    for (const text of [
      raw.toString("base64"),
      raw.toString("base64url"),
      raw.toString("base64").replace(/=+$/, ""),
      "+/+/",
      "-_-_",
      "QQ",
      "QUI=",
      "",
    ]) {
      expect(isBase64Text(text), text).toBe(true);
      expect(base64Bytes(text), text).toStrictEqual(base64Decode(text));
    }
    expect(base64Bytes(raw.toString("base64"))).toStrictEqual(new Uint8Array(raw));
    expect(isBase64Text("QUJDR")).toBe(true);
    expect(() => base64Decode("QUJDR")).toThrow();
    expect(base64Bytes("QUJDR")).toBeUndefined();
  });

  it("leaves a text with a lone last character to fromJson, which refuses it", () => {
    expect(compiledJsonReader(EncryptedReceiptSchema)).toBeDefined();
    const body = { ciphertext: "QUJDR" };
    expect(() => messageFromJsonReflective(EncryptedReceiptSchema, body)).toThrow();
    expect(() => compiledMessageFromJson(EncryptedReceiptSchema, body)).toThrow();
    expect(compiledMessageFromJson(EncryptedReceiptSchema, { ciphertext: "QUJD" }).ciphertext).toStrictEqual(
      new Uint8Array([65, 66, 67]),
    );
  });
});
