import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { compiledMessageToJson as messageToJson } from "../../src/rpc/json-output.js";
import { messageToJsonReflective } from "../../src/rpc/json-reflective.js";
import { message, reachableMessages } from "../support/messages.js";

/**
 * The compiled JSON writers must render exactly what the reflective path (protobuf-es `toJson` with
 * implicit defaults, 64-bit integers as numbers) renders, for every message the REST surface answers
 * with and every message they contain: same keys, same order, same values.
 */

describe("compiled REST JSON writers", () => {
  const messages = reachableMessages("output");

  it("cover every response message, explicit and implicit presence alike", () => {
    expect(messages.length).toBeGreaterThan(10);
    const presences = new Set(messages.flatMap((m) => m.fields.map((f) => f.presence)));
    expect(presences).toContain(FeatureSet_FieldPresence.IMPLICIT);
    expect(presences).toContain(FeatureSet_FieldPresence.EXPLICIT);
  });

  for (const desc of messages) {
    it(`render ${desc.typeName} exactly as the reflective path`, () => {
      fc.assert(
        fc.property(message(desc), (msg) => {
          const fast = messageToJson(desc, msg);
          const reference = messageToJsonReflective(desc, msg);
          expect(JSON.stringify(fast)).toBe(JSON.stringify(reference));
        }),
        { numRuns: 200 },
      );
    });
  }
});
