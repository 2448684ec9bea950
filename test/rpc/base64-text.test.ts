import { base64Decode } from "@bufbuild/protobuf/wire";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { EncryptedReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { base64OfBytes, keptBase64 } from "../../src/base64-text.js";
import { base64Of } from "../../src/rpc/base64-bytes.js";
import { compiledJsonReader, compiledMessageFromJson } from "../../src/rpc/json-input.js";
import { messageFromJsonReflective } from "../../src/rpc/json-reflective.js";
import { bytesOfBase64Text, isBase64Text } from "../../src/rpc/json-rules.js";
import { fuzzSettings } from "../hardening/support.js";

/**
 * The compiled JSON reader decodes a `bytes` field with Node's decoder (`bytesOfBase64Text`) instead of
 * protobuf-es's `base64Decode`, and without the patterns of `isBase64Text`: for every string it must
 * give undefined where the patterns refuse the text, and otherwise the library's bytes, in a
 * Uint8Array of their own; a text the library refuses (a lone last character) must be refused too,
 * never read as fewer bytes.
 */

/** What the reader must give: the patterns' verdict, then protobuf-es's bytes or its refusal. */
function reference(text: string): Uint8Array | undefined {
  if (!isBase64Text(text)) return undefined;
  try {
    return base64Decode(text);
  } catch {
    return undefined;
  }
}

/**
 * Strings near base64: characters of both alphabets, padding anywhere, whitespace and other ASCII the
 * decoder skips, characters past U+00FF whose low byte is a base64 character (U+0141 is read as "A"),
 * Latin-1 and lone surrogates, at every length.
 */
const nearTexts = fc
  .array(
    fc.oneof(
      {
        weight: 6,
        arbitrary: fc.constantFrom(..."ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
      },
      { weight: 3, arbitrary: fc.constantFrom("+", "/", "-", "_", "=") },
      {
        weight: 1,
        arbitrary: fc.constantFrom(
          " ",
          "\n",
          ".",
          "\u0000",
          "\u00c1",
          "\u0141",
          "\u012b",
          "\u012f",
          "\u013d",
          "\u012d",
          "\u015f",
          "\ud800",
        ),
      },
    ),
    { maxLength: 24 },
  )
  .map((chars) => chars.join(""));

/** Real texts of both alphabets, padded or not, with one character replaced or inserted. */
const editedTexts = fc
  .tuple(
    fc.uint8Array({ maxLength: 40 }),
    fc.constantFrom("base64", "base64url", "unpadded"),
    fc.nat(),
    fc.constantFrom("", "=", "==", "-", "+", " ", "\u0141", "A"),
    fc.boolean(),
  )
  .map(([bytes, kind, at, char, insert]) => {
    const base = Buffer.from(bytes);
    const text =
      kind === "base64url"
        ? base.toString("base64url")
        : kind === "unpadded"
          ? base.toString("base64").replace(/=+$/, "")
          : base.toString("base64");
    const i = at % (text.length + 1);
    return text.slice(0, i) + char + text.slice(insert ? i : i + 1);
  });

describe("bytesOfBase64Text", () => {
  it("gives the patterns' verdict and protobuf-es's bytes for every string near base64", () => {
    let accepted = 0;
    fc.assert(
      fc.property(
        fc.oneof(nearTexts, editedTexts, texts, fc.string({ unit: "binary", maxLength: 12 })),
        (text) => {
          const bytes = bytesOfBase64Text(text);
          expect(bytes).toStrictEqual(reference(text));
          if (bytes !== undefined) accepted++;
        },
      ),
      fuzzSettings(5000),
    );
    expect(accepted).toBeGreaterThan(500);
  });
});

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

describe("bytesOfBase64Text on the texts the readers accept", () => {
  it("gives protobuf-es's bytes for every text the JSON readers accept", () => {
    let accepted = 0;
    fc.assert(
      fc.property(texts, (text) => {
        if (!isBase64Text(text)) return;
        accepted++;
        const bytes = bytesOfBase64Text(text);
        // protobuf-es decodes every text the patterns accept (none ends on a lone character), so a
        // REST body's bad bytes field is named by the field check, never by the library's message.
        const library = base64Decode(text);
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

  it("decodes texts on both sides of the reader's scratch size alike, each into bytes of its own", () => {
    // Decodings up to 4,096 bytes go through a scratch buffer, larger ones straight into their own.
    fc.assert(
      fc.property(
        fc.integer({ min: 4_000, max: 4_200 }),
        fc.nat(),
        fc.constantFrom("", " ", "-", "\u0141", "A"),
        (size, at, char) => {
          const raw = Buffer.from(Array.from({ length: size }, (_, i) => (i * 31 + size) % 256));
          const standard = raw.toString("base64");
          const i = at % standard.length;
          const edited = char === "" ? standard : standard.slice(0, i) + char + standard.slice(i + 1);
          const bytes = bytesOfBase64Text(edited);
          expect(bytes).toStrictEqual(reference(edited));
          if (edited === standard) expect(bytes).toStrictEqual(new Uint8Array(raw));
          if (bytes === undefined) return;
          expect(Buffer.isBuffer(bytes)).toBe(false);
          expect(bytes.buffer.byteLength).toBe(bytes.length);
        },
      ),
      fuzzSettings(200),
    );
    const first = bytesOfBase64Text("QUJD");
    bytesOfBase64Text("WFla");
    expect(first).toStrictEqual(new Uint8Array([65, 66, 67]));
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
      expect(bytesOfBase64Text(text), text).toStrictEqual(base64Decode(text));
    }
    expect(bytesOfBase64Text(raw.toString("base64"))).toStrictEqual(new Uint8Array(raw));
    // A lone last character: no whole byte in it, refused by the patterns as by protobuf-es.
    expect(isBase64Text("QUJDR")).toBe(false);
    expect(() => base64Decode("QUJDR")).toThrow();
    expect(bytesOfBase64Text("QUJDR")).toBeUndefined();
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

/**
 * A REST request's bytes keep their text when it is exactly the standard base64 of the bytes, so that
 * the stored record (`base64OfBytes`) and the answer (`base64Of`) use it instead of encoding the bytes
 * again. For every text the reader accepts, both must give `Buffer#toString("base64")` of the bytes,
 * and the text must be kept exactly when it is that (else the short cut is never taken).
 */
describe("the canonical base64 text kept by the reader", () => {
  it("is kept exactly when it is the bytes' standard base64, and both encoders give that", () => {
    let kept = 0;
    let encoded = 0;
    fc.assert(
      fc.property(
        fc.oneof(
          nearTexts,
          editedTexts,
          texts,
          fc.uint8Array({ maxLength: 80 }).map((b) => Buffer.from(b).toString("base64")),
        ),
        (text) => {
          const bytes = bytesOfBase64Text(text);
          if (bytes === undefined) return;
          const standard = Buffer.from(bytes).toString("base64");
          expect(keptBase64(bytes)).toBe(text === standard ? text : undefined);
          expect(base64OfBytes(bytes)).toBe(standard);
          expect(base64Of(bytes)).toBe(standard);
          if (text === standard) kept++;
          else encoded++;
        },
      ),
      fuzzSettings(5000),
    );
    expect(kept).toBeGreaterThan(500);
    expect(encoded).toBeGreaterThan(500);
  });

  it("is not kept for texts that decode to the same bytes in another form", () => {
    // Bits set past the last byte, base64url letters, no padding: Node decodes each, to these bytes.
    for (const [text, standard] of [
      ["QR==", "QQ=="],
      ["QUJ=", "QUI="],
      ["-_-_", "+/+/"],
      ["QQ", "QQ=="],
    ] as const) {
      const bytes = bytesOfBase64Text(text);
      expect(bytes, text).toBeDefined();
      if (bytes === undefined) continue;
      expect(keptBase64(bytes), text).toBeUndefined();
      expect(base64OfBytes(bytes), text).toBe(standard);
    }
    // Padding inside a text: Node's decoder stops at the first "=", so the reader refuses it.
    expect(bytesOfBase64Text("QQ==QUJD")).toBeUndefined();
    const bytes = bytesOfBase64Text("QUI=");
    expect(bytes && keptBase64(bytes)).toBe("QUI=");
  });
});
