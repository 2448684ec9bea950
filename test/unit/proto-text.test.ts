import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { configureTextEncoding, getTextEncoding } from "@bufbuild/protobuf/wire";
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import { ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { buildApp } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { createLogger } from "../../src/logging.js";
import { decodeUtf8, encodeUtf8, useServiceTextEncoding } from "../../src/proto-text.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { message, reachableMessages } from "../support/messages.js";

/**
 * Protobuf strings are written through `Buffer.from` instead of `TextEncoder` (src/proto-text.ts): the
 * bytes on the wire must not change, for any string (unpaired surrogates included) and any message.
 * They are read as protobuf-es's own decoder reads them, except that a leading U+FEFF is kept.
 */

const standard = new TextEncoder();
const anyString = fc.oneof(
  fc.string(),
  fc.string({ unit: "grapheme" }),
  fc.string({ unit: "binary" }),
  fc.constantFrom("", "caf\u00e9", "\u{1F9FE} receipt", "\ud800", "a\udfffb", "\u0000"),
);

describe("protobuf text encoding and decoding of the service", () => {
  const before = getTextEncoding();
  afterAll(() => configureTextEncoding(before));

  it("writes the same UTF-8 bytes as TextEncoder, unpaired surrogates as U+FFFD", () => {
    fc.assert(
      fc.property(anyString, (text) => {
        expect(Buffer.from(encodeUtf8(text))).toEqual(Buffer.from(standard.encode(text)));
      }),
      { numRuns: 2000 },
    );
  });

  it("is what protobuf-es uses once installed, keeping its UTF-8 check", () => {
    useServiceTextEncoding();
    useServiceTextEncoding();
    const installed = getTextEncoding();
    expect(installed.encodeUtf8).toBe(encodeUtf8);
    expect(installed.decodeUtf8).toBe(decodeUtf8);
    expect(installed.checkUtf8).toBe(before.checkUtf8);
  });

  it("reads bytes as protobuf-es's decoder does, strictly or not, but keeps a leading U+FEFF", () => {
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    const anyBytes = fc.oneof(
      fc.uint8Array({ maxLength: 40 }),
      fc.string({ unit: "binary" }).map((text) => new Uint8Array(Buffer.from(text))),
      fc.uint8Array({ maxLength: 20 }).map((bytes) => new Uint8Array(Buffer.concat([bom, bytes]))),
      fc.string({ unit: "binary" }).map((text) => new Uint8Array(Buffer.from(`\ufeff${text}`))),
    );
    fc.assert(
      fc.property(anyBytes, fc.boolean(), (bytes, strictly) => {
        const leadingBom = bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf;
        let expected: string | undefined;
        try {
          expected = before.decodeUtf8(bytes, strictly);
        } catch {
          expect(() => decodeUtf8(bytes, strictly)).toThrow();
          return;
        }
        const read = decodeUtf8(bytes, strictly);
        expect(read).toBe(expected);
        // protobuf-es 2.17 keeps a leading U+FEFF itself; the service keeps it whatever the library does:
        // a decoder that drops it as a byte order mark, plus the U+FEFF.
        if (leadingBom) {
          expect(read).toBe(`\ufeff${new TextDecoder("utf-8", { fatal: strictly }).decode(bytes)}`);
        }
      }),
      { numRuns: 2000 },
    );
  });

  it("keeps a string field that starts with U+FEFF through toBinary and fromBinary", () => {
    const receipt = create(ReceiptSchema, { merchantName: "\ufeffCorner Coffee", merchantCity: "\ufeff" });
    useServiceTextEncoding();
    const read = fromBinary(ReceiptSchema, toBinary(ReceiptSchema, receipt));
    expect(read.merchantName).toBe("\ufeffCorner Coffee");
    expect(read.merchantCity).toBe("\ufeff");
  });

  it("is installed by buildApp", async () => {
    configureTextEncoding(before);
    const config = loadConfig({ RECEIPTS_ENV: "dev", LOG_LEVEL: "silent" });
    const app = await buildApp({
      config,
      store: createMemoryStore(),
      logger: createLogger("silent"),
      workers: 1,
    });
    try {
      expect(getTextEncoding().encodeUtf8).toBe(encodeUtf8);
      expect(getTextEncoding().decodeUtf8).toBe(decodeUtf8);
    } finally {
      await app.close();
    }
  });

  for (const desc of new Set([...reachableMessages("input"), ...reachableMessages("output")])) {
    it(`leaves the binary encoding of ${desc.typeName} unchanged`, () => {
      fc.assert(
        fc.property(message(desc), (msg) => {
          configureTextEncoding(before);
          const reference = toBinary(desc, msg);
          useServiceTextEncoding();
          expect(Buffer.from(toBinary(desc, msg))).toEqual(Buffer.from(reference));
        }),
        { numRuns: 100 },
      );
    });
  }
});
