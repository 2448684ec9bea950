import { create, ScalarType } from "@bufbuild/protobuf";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { EncryptedReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { type FastPath, fastPathsOn, useFastPaths } from "../../src/fast-paths.js";
import { encodeHttpResponse, httpBindings } from "../../src/http/bindings.js";
import { bytesFromBase64 } from "../../src/rpc/base64-bytes.js";
import { compiledMessageToJson } from "../../src/rpc/json-output.js";
import { messageToJsonReflective } from "../../src/rpc/json-reflective.js";
import { compiledFieldToJsonText, compiledMessageToJsonText } from "../../src/rpc/json-text.js";
import { API_SERVICES } from "../../src/rpc/policy.js";
import { fuzzSettings } from "../hardening/support.js";
import { message, reachableMessages, richStrings } from "../support/messages.js";

/**
 * The compiled JSON text writers (`json-writer`) must write exactly the characters
 * `JSON.stringify` gives for the compiled object writers' JSON (and so for the reflective path's, on
 * bytes that remember no text), for every message the REST surface answers with: the same members in
 * the same order, the same numbers (-0, 64-bit values past the safe range, NaN), the same escapes
 * (quotes, backslashes, control characters, lone surrogates, U+2028), empty lists, unset optional
 * fields. Bytes come fresh or decoded from a stored text (`bytesFromBase64`), which the writers put
 * between quotes unscanned: a corrupt text (a quote, a lone surrogate) must not reach the answer.
 */

/** Strings that need escaping in JSON, and some that do not but look as if they might. */
const nasty = fc.constantFrom(
  '"',
  "\\",
  '"},"success":false,"x":{"',
  "\u0000\u0001\b\f\n\r\t\u001f\u007f",
  "\u2028\u2029",
  "\ud800",
  "a\udc00b",
  "\ud83d\ude00",
  "</script>",
  "",
);
const strings = fc.oneof(
  richStrings,
  nasty,
  fc.array(fc.oneof(nasty, fc.string()), { maxLength: 4 }).map((parts) => parts.join("")),
);

const BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** Texts as the store might hold them: canonical, and corrupt in ways Node's decoder would read past. */
const storedTexts = fc.oneof(
  fc.uint8Array({ maxLength: 60 }).map((bytes) => Buffer.from(bytes).toString("base64")),
  fc
    .tuple(
      fc.uint8Array({ minLength: 3, maxLength: 60 }),
      fc.nat(),
      fc.constantFrom('"', "\\", "\n", "\u0001", "\ud841", "\u0141", "=", "-"),
    )
    .map(([bytes, at, bad]) => {
      const text = Buffer.from(bytes).toString("base64");
      const i = at % text.length;
      return text.slice(0, i) + bad + text.slice(i + 1);
    }),
  fc.string({ unit: "binary", maxLength: 12 }),
  fc.array(fc.constantFrom(...BASE64, '"', "\\", "\ud800"), { maxLength: 16 }).map((chars) => chars.join("")),
);

const bytes = fc.oneof(fc.uint8Array({ maxLength: 40 }), storedTexts.map(bytesFromBase64));

describe("compiled REST JSON text writers", () => {
  const messages = reachableMessages("output");

  it("cover every response message", () => {
    expect(messages.length).toBeGreaterThan(10);
    const typeNames = messages.map((m) => m.typeName);
    expect(typeNames).toContain("receipts.v1.EncryptedReceipt");
    expect(typeNames).toContain("receipts.v1.ListReceiptsResponse");
  });

  for (const desc of messages) {
    it(`write ${desc.typeName} as JSON.stringify writes the compiled JSON`, () => {
      fc.assert(
        fc.property(message(desc, 0, strings, bytes), (msg) => {
          const text = compiledMessageToJsonText(desc, msg);
          expect(text).toBe(JSON.stringify(compiledMessageToJson(desc, msg)));
        }),
        fuzzSettings(150),
      );
    });

    it(`write ${desc.typeName} as JSON.stringify writes the reflective JSON`, () => {
      fc.assert(
        fc.property(message(desc, 0, strings), (msg) => {
          expect(compiledMessageToJsonText(desc, msg)).toBe(
            JSON.stringify(messageToJsonReflective(desc, msg)),
          );
        }),
        fuzzSettings(100),
      );
    });
  }

  it("write a REST answer's one field (response_body) as its envelope's data, null when unset", () => {
    const bindings = httpBindings(API_SERVICES).filter((b) => b.responseField !== undefined);
    expect(bindings.map((b) => b.method.name)).toContain("EncryptReceipt");
    for (const binding of bindings) {
      const field = binding.responseField;
      if (field === undefined) continue;
      fc.assert(
        fc.property(message(binding.method.output, 0, strings, bytes), (msg) => {
          const text = compiledFieldToJsonText(binding.method.output, field, msg);
          expect(text).toBe(JSON.stringify(encodeHttpResponse(binding, msg)));
        }),
        fuzzSettings(50),
      );
    }
  });

  it("write every string as JSON.stringify does, short ones checked by hand and long ones by it", () => {
    // The text writer quotes a short string that needs no escape itself: each character class at the
    // edges of what JSON.stringify escapes, at any place in strings on both sides of the length the
    // writer checks by hand (64).
    const edge = fc.constantFrom(
      ...'\u0000\u001f "\\/\u007f\u00ff\u0100\u2028\ud7ff\ud800\udbff\udc00\udfff\ue000\uffff',
      "\ud83d\ude00",
    );
    const texts = fc
      .tuple(fc.string({ maxLength: 130 }), fc.array(fc.tuple(fc.nat(), edge), { maxLength: 3 }))
      .map(([body, inserts]) => {
        let text = body;
        for (const [at, char] of inserts) {
          const i = at % (text.length + 1);
          text = text.slice(0, i) + char + text.slice(i);
        }
        return text;
      });
    const schema = EncryptedReceiptSchema;
    let short = 0;
    fc.assert(
      fc.property(texts, (text) => {
        if (text.length <= 64) short++;
        const msg = create(schema, { receiptId: text, merchantId: text });
        expect(compiledMessageToJsonText(schema, msg)).toBe(
          JSON.stringify(compiledMessageToJson(schema, msg)),
        );
      }),
      fuzzSettings(1000),
    );
    expect(short).toBeGreaterThan(100);
  });

  it("write the edge values as JSON.stringify does, in every field that can hold them", () => {
    const edges: Partial<Record<ScalarType, unknown[]>> = {
      [ScalarType.STRING]: ['a"b\\c', "\u0000\u001f\n", "\u2028\u2029", "\ud800", "x\udfff", ""],
      [ScalarType.DOUBLE]: [-0, Number.NaN, Number.NEGATIVE_INFINITY, 1e21, 5e-324],
      [ScalarType.INT64]: [2n ** 63n - 1n, -(2n ** 63n), 2n ** 53n, -(2n ** 53n) + 1n, 0n],
      [ScalarType.UINT64]: [2n ** 64n - 1n, 2n ** 53n],
      [ScalarType.BYTES]: [bytesFromBase64('QU"D'), bytesFromBase64("Q\ud841JD"), new Uint8Array()],
    };
    let checked = 0;
    // A Timestamp out of its range has no JSON at all (both writers throw); its range is tested above.
    for (const desc of messages.filter((m) => !m.typeName.startsWith("google.protobuf."))) {
      for (const field of desc.fields) {
        const scalar = field.fieldKind === "scalar" || field.fieldKind === "list" ? field.scalar : undefined;
        for (const edge of scalar === undefined ? [] : (edges[scalar] ?? [])) {
          const msg = create(desc, {
            [field.localName]: field.fieldKind === "list" ? [edge, edge] : edge,
          } as never);
          expect(compiledMessageToJsonText(desc, msg)).toBe(JSON.stringify(compiledMessageToJson(desc, msg)));
          checked++;
        }
        if (field.fieldKind === "list") {
          const msg = create(desc, { [field.localName]: [] } as never);
          expect(compiledMessageToJsonText(desc, msg)).toContain(`${JSON.stringify(field.jsonName)}:[]`);
        }
      }
      // Nothing set: every optional member absent, every implicit one at its default.
      const empty = create(desc);
      expect(compiledMessageToJsonText(desc, empty)).toBe(JSON.stringify(compiledMessageToJson(desc, empty)));
    }
    expect(checked).toBeGreaterThan(50);
  });
});

describe("REST answers written as text", () => {
  const before: FastPath[] = fastPathsOn();
  afterEach(() => useFastPaths(before));

  it("are not serialised a second time with json-writer on, and are with it off", async () => {
    const { startTestServer } = await import("./support.js");
    const serialised: string[] = [];
    const svc = await startTestServer({
      addRoutes: (app) => {
        // Fastify runs preSerialization only for a payload it is about to serialise.
        app.addHook("preSerialization", (request, _reply, payload, done) => {
          serialised.push(request.url);
          done(null, payload);
        });
      },
    });
    try {
      const call = () =>
        fetch(`${svc.baseUrl}/api/v1/onboarding/generate-keys`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: "{}",
        });
      useFastPaths(["json-writer"]);
      const on = await call();
      const onText = await on.text();
      useFastPaths([]);
      const off = await call();
      const offText = await off.text();
      expect(on.status).toBe(200);
      expect(on.headers.get("content-type")).toBe("application/json; charset=utf-8");
      expect(onText).toBe(offText);
      expect(JSON.parse(onText)).toMatchObject({ success: true });
      expect(serialised).toEqual(["/api/v1/onboarding/generate-keys"]);
    } finally {
      await svc.close();
    }
  });
});
