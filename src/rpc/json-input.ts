/* Over 400 lines on purpose: the compiled JSON readers are one compiler, from what it compiles to the
 * readers of every field kind, Timestamp's arithmetic and the member count the duplicate check uses. */
import {
  type DescEnum,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  type MessageShape,
  ScalarType,
} from "@bufbuild/protobuf";
import { FLOAT32_MAX, FLOAT32_MIN } from "@bufbuild/protobuf/wire";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { is64BitInteger } from "../proto-scalars.js";
import { colonsIn } from "./json-duplicates.js";
import { messageFromJsonReflective } from "./json-reflective.js";
import { bytesOfBase64Text, FORBIDDEN_KEYS, isWellFormed, MAX_JSON_DEPTH } from "./json-rules.js";
import { perDescriptor } from "./per-descriptor.js";

/**
 * The compiled JSON readers (fast path `json-reader`): REST JSON request bodies to messages, exactly what
 * `fromJson(schema, json, { ignoreUnknownFields: false })` returns, same `$typeName`, same defaults
 * for unset fields, 64-bit integers as bigint, timestamps converted as protobuf-es converts them.
 *
 * `fromJson` stays the path for messages this module does not compile (well-known types other than
 * Timestamp, oneofs, maps with non-string keys, proto2 and editions files, and messages holding any
 * of those) and for any value a compiled reader does not expect: a reader gives up by throwing, and
 * the whole body is read again by `fromJson`, which then returns the same message or throws its own
 * error. For the service's own messages a reader is compiled once per message type from its
 * descriptor: `fromJson` goes through reflection for every field on every call, which made decoding
 * a receipt cost more than checking it.
 *
 * A compiled reader also gives up on everything the REST field-by-field check (`validateJson`)
 * refuses, where that is more than `fromJson` refuses (json-rules.ts: nesting depth, forbidden keys,
 * base64, enum numbers): a body it reads has no problem to name, so REST checks a body only when
 * its reader gives up.
 */

/** A message being built, its properties named by field `localName`. */
type Fields = Record<string, unknown>;
/** Reads one JSON value at message nesting level `depth` (the body is level 1). */
type Reader = (json: JsonValue, depth: number) => unknown;
/** Reads one member of a JSON object into `message`; `json` is the object, for duplicate checks. */
type FieldReader = (message: Fields, value: JsonValue, json: JsonObject, depth: number) => void;

/**
 * Message nesting a compiled reader reads (the body is level 1): the check refuses deeper than
 * `MAX_JSON_DEPTH` levels below the body, so giving up here is never later than the check.
 */
const MAX_LEVEL = MAX_JSON_DEPTH;
const EDITION_PROTO3 = 999;
const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;
const UINT32_MAX = 4294967295;

/** Thrown by compiled readers to hand the body to `fromJson`; made once, so throwing it is cheap. */
const GIVE_UP = new Error("the compiled JSON reader does not handle this value");

/**
 * The members of every object a compiled reader read, plus the colons in every string it read (member
 * names included), since the last {@link compiledJsonReader} call began; what the duplicate-member
 * count (src/rpc/json-duplicates.ts) would find walking the JSON again. Field names and enum value
 * names are proto identifiers, without colons, so only string values and map keys are searched.
 */
let membersAndColons = 0;

/** Parses a REST JSON request as a message of `schema`; throws what `fromJson` throws. */
export function compiledMessageFromJson<Desc extends DescMessage>(
  schema: Desc,
  json: JsonValue,
): MessageShape<Desc> {
  const entry = readerFor(schema);
  if (entry.compiled) {
    membersAndColons = 0;
    try {
      return entry.read(json, 1) as MessageShape<Desc>;
    } catch {
      // Not the value this reader was compiled for: fromJson decides.
    }
  }
  return messageFromJsonReflective(schema, json);
}

/**
 * The compiled reader for `schema`, or undefined when that message type is read reflectively. It
 * throws where {@link compiledMessageFromJson} falls back; exported so tests can prove the fast path is taken.
 */
export function compiledJsonReader<Desc extends DescMessage>(
  schema: Desc,
): ((json: JsonValue) => MessageShape<Desc>) | undefined {
  const entry = readerFor(schema);
  if (!entry.compiled) return undefined;
  return (json) => {
    membersAndColons = 0;
    return entry.read(json, 1) as MessageShape<Desc>;
  };
}

/**
 * The members and string colons of the JSON the last reader from {@link compiledJsonReader} read, when
 * it returned: every member of every object in it, for it gives up on a member it does not know.
 */
export function membersAndColonsRead(): number {
  return membersAndColons;
}

interface Entry {
  read: Reader;
  compiled: boolean;
}

const readerFor = perDescriptor(compile);

function compile(desc: DescMessage): Entry {
  if (desc.typeName === "google.protobuf.Timestamp") return { read: timestampFromJson, compiled: true };
  if (!isCompilable(desc)) {
    // Also when nested in a compiled message: the body is then read by `fromJson` as a whole.
    const read: Reader = () => {
      throw GIVE_UP;
    };
    return { read, compiled: false };
  }
  const template: Fields = { $typeName: desc.typeName };
  const fresh: [string, () => unknown][] = [];
  const byKey = new Map<string, FieldReader>();
  for (const field of desc.fields) {
    if (field.presence === FeatureSet_FieldPresence.IMPLICIT) {
      const zero = zeroValue(field);
      if (typeof zero === "function") fresh.push([field.localName, zero as () => unknown]);
      template[field.localName] = typeof zero === "function" ? undefined : zero;
    }
    const read = fieldReader(field);
    // A proto name is an identifier; a `json_name` option could hold a colon, which the count needs.
    byKey.set(field.jsonName, withNameColons(read, colonsIn(field.jsonName)));
    if (field.name !== field.jsonName) byKey.set(field.name, duplicateChecked(read, field.jsonName));
  }
  // The members of the last object read, in order, with their readers: the line items of one body
  // (and of most bodies) name the same members in the same order, so a lookup is mostly a comparison.
  const lastKeys: string[] = [];
  const lastReaders: FieldReader[] = [];
  const read: Reader = (json, depth) => {
    if (depth > MAX_LEVEL || !isJsonObject(json)) throw GIVE_UP;
    // Not `{ ...template }`: V8 makes adding properties to a spread copy slower than all of fromJson.
    const message: Fields = Object.assign({}, template);
    for (const [name, zero] of fresh) message[name] = zero();
    // for-in walks V8's enum cache where Object.keys makes an array per object; an inherited key
    // (only code in this process could add one to Object.prototype) is not a member: give up.
    let at = 0;
    for (const key in json) {
      let readField = lastKeys[at] === key ? lastReaders[at] : undefined;
      if (readField === undefined) {
        readField = byKey.get(key);
        if (readField === undefined) throw GIVE_UP;
        lastKeys[at] = key;
        lastReaders[at] = readField;
      }
      if (!Object.hasOwn(json, key)) throw GIVE_UP;
      readField(message, json[key] as JsonValue, json, depth);
      at++;
    }
    membersAndColons += at;
    return message;
  };
  return { read, compiled: true };
}

/**
 * Whether a message can be compiled: a proto3 message without oneofs whose fields keep their JSON
 * value as is (no wrappers, Struct, Value or other well-known types but Timestamp, no NullValue or
 * closed enums, no 64-bit integers as strings, maps keyed by strings only). A field of a message type
 * that cannot be compiled makes its reader give up whenever it is set.
 */
function isCompilable(desc: DescMessage): boolean {
  return (
    desc.file.edition === EDITION_PROTO3 &&
    !desc.typeName.startsWith("google.protobuf.") &&
    desc.oneofs.length === 0 &&
    desc.fields.every(isCompilableField)
  );
}

function isCompilableField(field: DescField): boolean {
  const singular = field.fieldKind === "scalar" || field.fieldKind === "enum";
  if (singular && field.getDefaultValue() !== undefined) return false;
  if (field.fieldKind === "map" && field.mapKey !== ScalarType.STRING) return false;
  if (field.message !== undefined) {
    const name = field.message.typeName;
    return !name.startsWith("google.protobuf.") || name === "google.protobuf.Timestamp";
  }
  if (field.enum !== undefined) return field.enum.open && field.enum.typeName !== "google.protobuf.NullValue";
  if (field.scalar !== undefined && is64BitInteger(field.scalar)) {
    return !("longAsString" in field && field.longAsString);
  }
  return true;
}

/** The zero value of an implicit-presence field, or a factory for it when it is mutable. */
function zeroValue(field: DescField): unknown {
  switch (field.fieldKind) {
    case "list":
      return () => [];
    case "map":
      return () => ({});
    case "enum":
      return field.enum.values[0]?.number ?? 0;
    case "message":
      return undefined;
    case "scalar":
      switch (field.scalar) {
        case ScalarType.STRING:
          return "";
        case ScalarType.BOOL:
          return false;
        case ScalarType.BYTES:
          return () => new Uint8Array(0);
        default:
          return is64BitInteger(field.scalar) ? 0n : 0;
      }
  }
}

/** `read`, counting `colons` for the colons of the member name it is looked up by. */
function withNameColons(read: FieldReader, colons: number): FieldReader {
  if (colons === 0) return read;
  return (message, value, json, depth) => {
    membersAndColons += colons;
    read(message, value, json, depth);
  };
}

/**
 * A field named both ways in one object is an error in `fromJson`: give up so it says so. Checking
 * from the proto name's side is enough, and leaves the usual lowerCamelCase keys unchecked.
 */
function duplicateChecked(read: FieldReader, jsonName: string): FieldReader {
  return (message, value, json, depth) => {
    if (Object.hasOwn(json, jsonName)) throw GIVE_UP;
    read(message, value, json, depth);
  };
}

/** JSON `null` leaves any compiled field unset (its default), as `fromJson` does. */
function fieldReader(field: DescField): FieldReader {
  const name = field.localName;
  const read = valueReader(field);
  return (message, value, _json, depth) => {
    if (value !== null) message[name] = read(value, depth);
  };
}

function valueReader(field: DescField): Reader {
  switch (field.fieldKind) {
    case "scalar":
      return scalarReader(field.scalar);
    case "enum":
      return enumReader(field.enum);
    case "message":
      return nestedReader(field.message);
    case "list": {
      const item = itemReader(field);
      return (value, depth) => {
        if (!Array.isArray(value)) throw GIVE_UP;
        return value.map((v) => {
          if (v === null) throw GIVE_UP;
          return item(v, depth);
        });
      };
    }
    case "map": {
      const item = itemReader(field);
      return (value, depth) => {
        if (!isJsonObject(value)) throw GIVE_UP;
        const map: Fields = {};
        const keys = Object.keys(value);
        for (const key of keys) {
          const v = value[key] as JsonValue;
          if (v === null || FORBIDDEN_KEYS.has(key) || !isWellFormed(key)) throw GIVE_UP;
          membersAndColons += colonsIn(key);
          map[key] = item(v, depth);
        }
        membersAndColons += keys.length;
        return map;
      };
    }
  }
}

function itemReader(field: DescField & { fieldKind: "list" | "map" }): Reader {
  if (field.scalar !== undefined) return scalarReader(field.scalar);
  if (field.enum !== undefined) return enumReader(field.enum);
  return nestedReader(field.message);
}

/** A message one level down, its reader looked up on first use (message types may recurse). */
function nestedReader(desc: DescMessage): Reader {
  let read: Reader | undefined;
  return (value, depth) => {
    read ??= readerFor(desc).read;
    return read(value, depth + 1);
  };
}

function scalarReader(type: ScalarType): Reader {
  if (is64BitInteger(type)) {
    const unsigned = type === ScalarType.UINT64 || type === ScalarType.FIXED64;
    return (v) => {
      if (typeof v !== "number" || !Number.isSafeInteger(v) || (unsigned && v < 0)) throw GIVE_UP;
      return BigInt(v);
    };
  }
  switch (type) {
    case ScalarType.STRING:
      return (v) => {
        if (typeof v !== "string" || !isWellFormed(v)) throw GIVE_UP;
        membersAndColons += colonsIn(v);
        return v;
      };
    case ScalarType.BOOL:
      return (v) => {
        if (typeof v !== "boolean") throw GIVE_UP;
        return v;
      };
    case ScalarType.DOUBLE:
      return (v) => {
        if (typeof v !== "number" || !Number.isFinite(v)) throw GIVE_UP;
        return v;
      };
    case ScalarType.FLOAT:
      return (v) => {
        if (typeof v !== "number" || !(v >= FLOAT32_MIN && v <= FLOAT32_MAX)) throw GIVE_UP;
        return v;
      };
    case ScalarType.BYTES:
      return (v) => {
        const bytes = typeof v === "string" ? bytesOfBase64Text(v) : undefined;
        if (bytes === undefined) throw GIVE_UP;
        membersAndColons += colonsIn(v as string);
        return bytes;
      };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return (v) => integer(v, 0, UINT32_MAX);
    default:
      return (v) => integer(v, INT32_MIN, INT32_MAX);
  }
}

function integer(v: JsonValue, min: number, max: number): number {
  if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) throw GIVE_UP;
  return v;
}

/**
 * Enum values by name or number. `fromJson` accepts any int32 number for an open enum; the REST check
 * accepts only the enum's own, so the reader gives up on the others.
 */
function enumReader(desc: DescEnum): Reader {
  const byName = new Map(desc.values.map((v) => [v.name, v.number]));
  const numbers = new Set(desc.values.map((v) => v.number));
  return (v) => {
    if (typeof v === "number") {
      if (!numbers.has(v)) throw GIVE_UP;
      return v;
    }
    const number = typeof v === "string" ? byName.get(v) : undefined;
    if (number === undefined) throw GIVE_UP;
    return number;
  };
}

/** protobuf-es's pattern: RFC 3339 with up to 9 fractional digits and `Z` or a `±hh:mm` offset. */
const RFC3339 =
  /^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:[0-9]{2})$/;
const MIN_TIMESTAMP_SECONDS = Date.parse("0001-01-01T00:00:00Z") / 1000;
const MAX_TIMESTAMP_SECONDS = Date.parse("9999-12-31T23:59:59Z") / 1000;
const Z = 90;
const MINUS = 45;

/**
 * A Timestamp from its RFC 3339 string: what protobuf-es computes with `Date.parse`, by arithmetic.
 * Dates `Date.parse` rejects or rolls over (February 30, 24:00:00) and instants outside years
 * 0001-9999 are left to `fromJson`.
 */
function timestampFromJson(json: JsonValue, depth: number): Fields {
  if (depth > MAX_LEVEL || typeof json !== "string" || !RFC3339.test(json)) throw GIVE_UP;
  const year = digits(json, 0, 4);
  const month = digits(json, 5, 2);
  const day = digits(json, 8, 2);
  const hour = digits(json, 11, 2);
  const minute = digits(json, 14, 2);
  const second = digits(json, 17, 2);
  let end = json.length - 1;
  let offsetMinutes = 0;
  if (json.charCodeAt(end) !== Z) {
    end -= 5;
    const offsetHour = digits(json, end + 1, 2);
    const offsetMinute = digits(json, end + 4, 2);
    if (offsetHour > 23 || offsetMinute > 59) throw GIVE_UP;
    offsetMinutes = (offsetHour * 60 + offsetMinute) * (json.charCodeAt(end) === MINUS ? -1 : 1);
  }
  // Year 0000 is RFC 3339 but not a date the REST check accepts, whatever the offset.
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) throw GIVE_UP;
  if (hour > 23 || minute > 59 || second > 59) throw GIVE_UP;
  const seconds =
    daysFromCivil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offsetMinutes * 60;
  if (seconds < MIN_TIMESTAMP_SECONDS || seconds > MAX_TIMESTAMP_SECONDS) throw GIVE_UP;
  const nanos = end > 19 ? Number(json.slice(20, end).padEnd(9, "0")) : 0;
  membersAndColons += colonsIn(json);
  return { $typeName: "google.protobuf.Timestamp", seconds: BigInt(seconds), nanos };
}

/** The decimal number in `count` ASCII digits of `text` from `start`. */
function digits(text: string, start: number, count: number): number {
  let n = 0;
  for (let i = start; i < start + count; i++) n = n * 10 + text.charCodeAt(i) - 48;
  return n;
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's `days_from_civil`). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yearOfEra = y - era * 400;
  const dayOfYear = Math.floor((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5) + day - 1;
  const dayOfEra = yearOfEra * 365 + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100) + dayOfYear;
  return era * 146_097 + dayOfEra - 719_468;
}

function isJsonObject(value: JsonValue): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
