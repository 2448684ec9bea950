import { describe, expect, it } from "vitest";
import { parAnswerOf } from "../../src/client/device-checks.js";
import { KeyVerificationError, lookupAnswerOf } from "../../src/client/key-trust.js";

/**
 * The client reads the answer's `rootRotation` (the previous root's statement introducing the
 * current one, `kt/root-delay.ts`) in both forms it meets, and refuses a malformed one as `answer`.
 */

const BASE = {
  keyId: "k",
  algorithm: "HPKE-P256-SHA256-A256GCM",
  publicKey: "AAAA",
  isEscrowed: false,
  directory: { index: 1, inclusion: [], sha256: "ab".repeat(32) },
};
const SK = `sk_${"0".repeat(32)}`;

describe("lookupAnswerOf and rootRotation", () => {
  it("reads it from the REST JSON and from a generated message, and leaves it out when absent", () => {
    const json = lookupAnswerOf({
      ...BASE,
      rootRotation: { statement: "AQID", signature: "BAUG", signingKeyId: SK },
    });
    expect(json.rootRotation).toEqual({ statement: "AQID", signature: "BAUG", signingKeyId: SK });
    const message = lookupAnswerOf({
      ...BASE,
      rootRotation: {
        statement: new Uint8Array([1, 2, 3]),
        signature: new Uint8Array([4, 5, 6]),
        signingKeyId: SK,
      },
    });
    expect(message.rootRotation).toEqual({ statement: "AQID", signature: "BAUG", signingKeyId: SK });
    expect("rootRotation" in lookupAnswerOf(BASE)).toBe(false);
    // A generated message's absent member: undefined, or present with empty bytes.
    const empty = { statement: new Uint8Array(), signature: new Uint8Array(), signingKeyId: "" };
    expect("rootRotation" in lookupAnswerOf({ ...BASE, rootRotation: empty })).toBe(false);
  });

  it("keeps the PAR half's rootRotation when a register answer is read as the PAR's look-up answer", () => {
    const rootRotation = { statement: "AQID", signature: "BAUG", signingKeyId: SK };
    const par = { binding: { statement: "BwgJ", signature: "CgsM", signingKeyId: SK }, rootRotation };
    const { directory, ...top } = BASE;
    const answer = parAnswerOf({ ...top, parAnswer: { ...par, opening: "AA==", directory } });
    expect(lookupAnswerOf(answer).rootRotation).toEqual(rootRotation);
    expect("rootRotation" in lookupAnswerOf(parAnswerOf({ ...top, parAnswer: { directory } }))).toBe(false);
  });

  it("refuses a rootRotation that is not an object or whose members have the wrong types", () => {
    for (const rootRotation of ["x", [1], { statement: "AQID", signature: 5, signingKeyId: SK }]) {
      const err = (() => {
        try {
          lookupAnswerOf({ ...BASE, rootRotation });
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(err).toBeInstanceOf(KeyVerificationError);
      expect((err as KeyVerificationError).check).toBe("answer");
      expect((err as Error).message).toMatch(/rootRotation/);
    }
  });
});
