import { toBinary } from "@bufbuild/protobuf";
import { configureTextEncoding, getTextEncoding } from "@bufbuild/protobuf/wire";
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import { buildApp } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { createLogger } from "../../src/logging.js";
import { encodeUtf8, useBufferTextEncoding } from "../../src/proto-text.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { message, reachableMessages } from "../support/messages.js";

/**
 * Protobuf strings are written through `Buffer.from` instead of `TextEncoder` (src/proto-text.ts): the
 * bytes on the wire must not change, for any string (unpaired surrogates included) and any message.
 */

const standard = new TextEncoder();
const anyString = fc.oneof(
  fc.string(),
  fc.string({ unit: "grapheme" }),
  fc.string({ unit: "binary" }),
  fc.constantFrom("", "caf\u00e9", "\u{1F9FE} receipt", "\ud800", "a\udfffb", "\u0000"),
);

describe("protobuf text encoding through Buffer", () => {
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

  it("is what protobuf-es uses once installed, keeping its decoder and UTF-8 check", () => {
    useBufferTextEncoding();
    useBufferTextEncoding();
    const installed = getTextEncoding();
    expect(installed.encodeUtf8).toBe(encodeUtf8);
    expect(installed.decodeUtf8).toBe(before.decodeUtf8);
    expect(installed.checkUtf8).toBe(before.checkUtf8);
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
          useBufferTextEncoding();
          expect(Buffer.from(toBinary(desc, msg))).toEqual(Buffer.from(reference));
        }),
        { numRuns: 100 },
      );
    });
  }
});
