import { ScalarType, toJson } from "@bufbuild/protobuf";
import { type Timestamp, TimestampSchema } from "@bufbuild/protobuf/wkt";

/**
 * Whether a protobuf scalar type is a 64-bit integer: what protobuf JSON renders as a string and the
 * service's REST JSON (and the signed form of a receipt) renders as a number.
 */
export function is64BitInteger(type: ScalarType): boolean {
  return (
    type === ScalarType.INT64 ||
    type === ScalarType.UINT64 ||
    type === ScalarType.SINT64 ||
    type === ScalarType.FIXED64 ||
    type === ScalarType.SFIXED64
  );
}

const MIN_TIMESTAMP_MS = Date.parse("0001-01-01T00:00:00Z");
const MAX_TIMESTAMP_MS = Date.parse("9999-12-31T23:59:59Z");

/**
 * A Timestamp as protobuf JSON writes it: RFC 3339 in UTC with 0, 3, 6 or 9 fractional digits, the
 * same string as `toJson(TimestampSchema, ts)` without its reflection (about a tenth of the time).
 */
export function timestampJson(ts: Timestamp): string {
  const ms = Number(ts.seconds) * 1000;
  // Out of range: protobuf's own writer throws the error that explains it.
  if (ms < MIN_TIMESTAMP_MS || ms > MAX_TIMESTAMP_MS || ts.nanos < 0 || ts.nanos > 999_999_999) {
    return toJson(TimestampSchema, ts) as string;
  }
  let fraction = "";
  if (ts.nanos > 0) {
    const digits = (ts.nanos + 1_000_000_000).toString().substring(1);
    fraction = digits.endsWith("000000")
      ? `.${digits.substring(0, 3)}`
      : digits.endsWith("000")
        ? `.${digits.substring(0, 6)}`
        : `.${digits}`;
  }
  return `${isoSeconds(Number(ts.seconds))}${fraction}Z`;
}

/**
 * `timestampJson(timestampOf(date))` without the `Timestamp` and its BigInt: a `Date` holds whole
 * milliseconds, so its fraction is none or three digits. A page of receipts writes twenty to forty.
 */
export function dateJson(date: Date): string {
  const ms = date.getTime();
  if (!(ms >= MIN_TIMESTAMP_MS && ms < MAX_TIMESTAMP_MS + 1000)) return timestampJson(timestampOf(date));
  const seconds = Math.floor(ms / 1000);
  const millis = ms - seconds * 1000;
  return millis === 0
    ? `${isoSeconds(seconds)}Z`
    : `${isoSeconds(seconds)}.${String(millis + 1000).substring(1)}Z`;
}

/**
 * `YYYY-MM-DDTHH:MM:SS` of `seconds` since the epoch, in years 0001-9999 of the proleptic Gregorian
 * calendar (the first 19 characters of `Date#toISOString`), from the days-to-civil arithmetic of
 * Howard Hinnant's date algorithms. A third of the time of `new Date(ms).toISOString()`: a page of
 * receipts writes twenty to forty timestamps, and this was 6.5% of the event loop's time listing them.
 */
function isoSeconds(seconds: number): string {
  const days = Math.floor(seconds / 86_400);
  let rest = seconds - days * 86_400;
  // Days since 0000-03-01, in 400-year eras of 146,097 days; years begin in March, so the leap day ends one.
  const z = days + 719_468;
  const era = Math.floor(z / 146_097);
  const dayOfEra = z - era * 146_097;
  const yearOfEra = Math.floor(
    (dayOfEra -
      Math.floor(dayOfEra / 1_460) +
      Math.floor(dayOfEra / 36_524) -
      Math.floor(dayOfEra / 146_096)) /
      365,
  );
  const dayOfYear = dayOfEra - (365 * yearOfEra + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100));
  const monthFromMarch = Math.floor((5 * dayOfYear + 2) / 153);
  const day = dayOfYear - Math.floor((153 * monthFromMarch + 2) / 5) + 1;
  const month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9;
  const year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0);
  const hour = Math.floor(rest / 3_600);
  rest -= hour * 3_600;
  const minute = Math.floor(rest / 60);
  const second = rest - minute * 60;
  return `${String(year + 10_000).substring(1)}-${two(month)}-${two(day)}T${two(hour)}:${two(minute)}:${two(second)}`;
}

/** A number below 100 in two digits. */
function two(n: number): string {
  return n < 10 ? `0${n}` : `${n}`;
}

/** An RFC 3339 date-time: date, time, optional fraction of up to 9 digits, `Z` or an offset. */
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?(Z|[+-](\d{2}):(\d{2}))$/;

/** Whether `value` is an RFC 3339 date-time string naming a real instant in years 0001-9999. */
export function isRfc3339(value: unknown): boolean {
  if (typeof value !== "string") return false;
  const m = RFC3339.exec(value);
  if (m === null) return false;
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  const hour = Number(m[4]);
  const minute = Number(m[5]);
  const second = Number(m[6]);
  const date = new Date(Date.UTC(year, month - 1, day));
  date.setUTCFullYear(year);
  const offsetOk = m[9] === undefined || (Number(m[9]) < 24 && Number(m[10]) < 60);
  return (
    year >= 1 &&
    date.getUTCMonth() === month - 1 &&
    date.getUTCDate() === day &&
    hour < 24 &&
    minute < 60 &&
    second < 60 &&
    offsetOk
  );
}

/** A `Date` as a `google.protobuf.Timestamp` message: what `timestampFromDate` gives, without `create()`. */
export function timestampOf(date: Date): Timestamp {
  const ms = date.getTime();
  const seconds = Math.floor(ms / 1000);
  return {
    $typeName: "google.protobuf.Timestamp",
    seconds: BigInt(seconds),
    nanos: (ms - seconds * 1000) * 1_000_000,
  };
}
