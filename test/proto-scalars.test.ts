import { create, toJson } from "@bufbuild/protobuf";
import { TimestampSchema } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { dateJson, timestampJson, timestampOf } from "../src/proto-scalars.js";

const MIN_SECONDS = Date.parse("0001-01-01T00:00:00Z") / 1000;
const MAX_SECONDS = Date.parse("9999-12-31T23:59:59Z") / 1000;

/** Seconds since the epoch at the start of a UTC day (years below 100 too, which `Date.UTC` maps to 19xx). */
function utcSeconds(year: number, month: number, day: number): number {
  const date = new Date(0);
  date.setUTCFullYear(year, month, day);
  return date.getTime() / 1000;
}

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

  it("writes every day of leap, non-leap and century years as toJson does", () => {
    // 1900 and 2100 are not leap years, 2000 and 1600 are; 1970 is the epoch, 0001 and 9999 the ends.
    for (const year of [1, 4, 100, 1600, 1900, 1969, 1970, 2000, 2023, 2024, 2100, 9996, 9999]) {
      const first = utcSeconds(year, 0, 1);
      const last = utcSeconds(year, 11, 31);
      for (let seconds = first; seconds <= last; seconds += 86_400) {
        // The first and the last second of each day, with milliseconds.
        for (const s of [seconds, seconds + 86_399]) {
          const ts = create(TimestampSchema, { seconds: BigInt(s), nanos: 7_000_000 });
          expect(timestampJson(ts)).toBe(toJson(TimestampSchema, ts));
        }
      }
    }
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

describe("dateJson", () => {
  it("writes every date as timestampJson writes its Timestamp, in range and out", () => {
    const outcome = (make: () => string) => {
      try {
        return make();
      } catch (err) {
        return `threw ${(err as Error).constructor.name}`;
      }
    };
    const dates = fc.oneof(
      fc.integer({ min: MIN_SECONDS * 1000, max: MAX_SECONDS * 1000 + 999 }).map((ms) => new Date(ms)),
      fc.integer({ min: MIN_SECONDS, max: MAX_SECONDS }).map((s) => new Date(s * 1000)),
      fc.constantFrom(
        new Date(Number.NaN),
        new Date(MIN_SECONDS * 1000 - 1),
        new Date(MAX_SECONDS * 1000 + 1000),
        new Date(MAX_SECONDS * 1000 + 999),
        new Date(-1),
        new Date(0),
      ),
    );
    fc.assert(
      fc.property(dates, (date) => {
        expect(outcome(() => dateJson(date))).toBe(outcome(() => timestampJson(timestampOf(date))));
      }),
      { numRuns: 5_000 },
    );
  });
});
