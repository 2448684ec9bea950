import { createHmac } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { cardKeyOf, panHashOf, parKeyOf } from "../../src/domain/pan.js";

/**
 * The keyed card references are HMAC-SHA256 under the pepper as `createHmac` takes it from the string
 * (its UTF-8). The pepper's key object is kept between calls: whatever pepper comes next, in whatever
 * order, the answer is the string key's, byte for byte.
 */
const byString = {
  pan: (pepper: string, hashedPan: string) =>
    createHmac("sha256", pepper).update(hashedPan.toLowerCase(), "utf8").digest("hex"),
  par: (pepper: string, par: string) =>
    createHmac("sha256", pepper).update(`par:${par}`, "utf8").digest("hex"),
};

describe("keyed card references under a kept pepper key", () => {
  it("are the HMAC under the pepper string, for any peppers in any order", () => {
    const pepper = fc.oneof(fc.string(), fc.string({ unit: "grapheme" }), fc.string({ unit: "binary" }));
    fc.assert(
      fc.property(
        fc.array(fc.tuple(pepper, fc.string({ unit: "binary" })), { minLength: 1, maxLength: 6 }),
        (calls) => {
          for (const [p, value] of calls) {
            expect(panHashOf(p, value)).toBe(byString.pan(p, value));
            expect(parKeyOf(p, value)).toBe(byString.par(p, value));
            expect(cardKeyOf(p, { hashedPan: value })).toBe(byString.pan(p, value));
            expect(cardKeyOf(p, { hashedPan: "", par: value || "X" })).toBe(byString.par(p, value || "X"));
          }
        },
      ),
      { numRuns: Number(process.env.FC_RUNS ?? 300) },
    );
  });

  it("follow a change of pepper back and forth", () => {
    const pan = "AB".repeat(32);
    const a = "a pepper of at least thirty-two characters";
    const b = "another pepper of at least 32 characters";
    const seen = [a, b, a, a, b].map((p) => panHashOf(p, pan));
    expect(seen).toEqual([a, b, a, a, b].map((p) => byString.pan(p, pan)));
    expect(seen[0]).not.toBe(seen[1]);
  });
});
