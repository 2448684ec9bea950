import { create, toJson } from "@bufbuild/protobuf";
import { TimestampSchema } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { timestampJson } from "../../src/proto-scalars.js";

const MIN_SECONDS = Date.parse("0001-01-01T00:00:00Z") / 1000;
const MAX_SECONDS = Date.parse("9999-12-31T23:59:59Z") / 1000;

describe("timestampJson", () => {
  it("writes every timestamp in range exactly as protobuf's toJson does", () => {
    const nanos = fc.oneof(
      fc.constant(0),
      fc.integer({ min: 0, max: 999 }).map((ms) => ms * 1_000_000),
      fc.integer({ min: 0, max: 999_999 }).map((us) => us * 1_000),
      fc.integer({ min: 0, max: 999_999_999 }),
    );
    fc.assert(
      fc.property(fc.integer({ min: MIN_SECONDS, max: MAX_SECONDS }), nanos, (seconds, n) => {
        const ts = create(TimestampSchema, { seconds: BigInt(seconds), nanos: n });
        expect(timestampJson(ts)).toBe(toJson(TimestampSchema, ts));
      }),
      { numRuns: 2_000 },
    );
  });

  it("writes the edges of the range, and fails outside it as toJson does", () => {
    for (const seconds of [MIN_SECONDS, -1, 0, MAX_SECONDS]) {
      const ts = create(TimestampSchema, { seconds: BigInt(seconds), nanos: 999_999_999 });
      expect(timestampJson(ts)).toBe(toJson(TimestampSchema, ts));
    }
    for (const bad of [
      { seconds: BigInt(MIN_SECONDS - 1), nanos: 0 },
      { seconds: BigInt(MAX_SECONDS + 1), nanos: 0 },
      { seconds: 0n, nanos: -1 },
      { seconds: 0n, nanos: 1_000_000_000 },
    ]) {
      const ts = create(TimestampSchema, bad);
      expect(() => toJson(TimestampSchema, ts)).toThrow();
      expect(() => timestampJson(ts)).toThrow();
    }
  });
});
