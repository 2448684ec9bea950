import {
  type DescEnum,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  type MessageShape,
  ScalarType,
} from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence, type Timestamp } from "@bufbuild/protobuf/wkt";
import { is64BitInteger, timestampJson } from "../proto-scalars.js";
import { base64Of } from "./base64-bytes.js";
import { messageToJsonReflective } from "./json-reflective.js";
import { perDescriptor } from "./per-descriptor.js";

/**
 * The compiled JSON writers (fast path `json-writer`): REST JSON of a message, exactly what
 * `messageToJsonReflective` (src/rpc/json-reflective.ts: `toJson` with implicit defaults, 64-bit
 * integers as numbers) renders, and that remains the path for messages this module does not compile
 * (well-known types other than Timestamp, oneofs, proto2 features). For the service's own messages a
 * writer is compiled once per message type from its descriptor: `toJson` looks every field up through
 * reflection on each call, which made rendering a page of receipts cost more than the rest of the
 * request.
 */

/**
 * Renders a message as REST JSON. A 64-bit value beyond JavaScript's safe range stays a string rather
 * than be silently rounded; the domain never produces one.
 */
export function compiledMessageToJson<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc>,
): JsonValue {
  return writerFor(schema)(message as unknown as Fields);
}

/** A message's own properties, read by field `localName`. */
type Fields = Record<string, unknown>;
type Writer = (message: Fields) => JsonValue;

const writerFor = perDescriptor(compile);

/**
 * Whether a writer is compiled for `desc`: not for well-known types (Timestamp has its own), oneofs or
 * proto2 required fields, which the reflective path renders.
 */
export function isCompilable(desc: DescMessage): boolean {
  return (
    !desc.typeName.startsWith("google.protobuf.") &&
    desc.oneofs.length === 0 &&
    desc.fields.every((f) => f.presence !== FeatureSet_FieldPresence.LEGACY_REQUIRED)
  );
}

function compile(desc: DescMessage): Writer {
  if (desc.typeName === "google.protobuf.Timestamp") return (m) => timestampJson(m as unknown as Timestamp);
  if (!isCompilable(desc)) return (m) => messageToJsonReflective(desc, m as MessageShape<DescMessage>);
  const fields = [...desc.fields].sort((a, b) => a.number - b.number).map(fieldWriter);
  return (message) => {
    const json: JsonObject = {};
    for (const write of fields) write(message, json);
    return json;
  };
}

type FieldWriter = (message: Fields, json: JsonObject) => void;

function fieldWriter(field: DescField): FieldWriter {
  const { localName, jsonName } = field;
  const explicit = field.presence !== FeatureSet_FieldPresence.IMPLICIT;
  const value = valueWriter(field);
  if (!explicit) {
    return (m, json) => {
      json[jsonName] = value(m[localName]);
    };
  }
  return (m, json) => {
    const v = m[localName];
    if (v !== undefined && Object.hasOwn(m, localName)) json[jsonName] = value(v);
  };
}

function valueWriter(field: DescField): (value: unknown) => JsonValue {
  switch (field.fieldKind) {
    case "scalar":
      return scalarWriter(field.scalar);
    case "enum":
      return enumWriter(field.enum);
    case "message": {
      const desc = field.message;
      return (v) => writerFor(desc)(v as Fields);
    }
    case "list": {
      const item =
        field.listKind === "scalar"
          ? scalarWriter(field.scalar)
          : field.listKind === "enum"
            ? enumWriter(field.enum)
            : (v: unknown) => writerFor(field.message)(v as Fields);
      return (v) => (v as unknown[]).map(item);
    }
    case "map": {
      const item =
        field.mapKind === "scalar"
          ? scalarWriter(field.scalar)
          : field.mapKind === "enum"
            ? enumWriter(field.enum)
            : (v: unknown) => writerFor(field.message)(v as Fields);
      return (v) => {
        const json: JsonObject = {};
        for (const [key, entry] of Object.entries(v as Fields)) json[key] = item(entry);
        return json;
      };
    }
  }
}

const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** The JSON of one value of a scalar field of `type` (the JSON text writers use it too). */
export function scalarWriter(type: ScalarType): (value: unknown) => JsonValue {
  if (is64BitInteger(type)) return (v) => int64Json(v as bigint | string);
  switch (type) {
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return (v) => {
        const n = v as number;
        if (Number.isFinite(n)) return n;
        return Number.isNaN(n) ? "NaN" : n > 0 ? "Infinity" : "-Infinity";
      };
    case ScalarType.BYTES:
      return (v) => base64Of(v as Uint8Array);
    default:
      return (v) => v as JsonValue;
  }
}

/** A JSON number when exact, else the decimal string (as protobuf JSON has it). */
function int64Json(value: bigint | string): JsonValue {
  if (typeof value === "bigint")
    return value >= MIN_SAFE && value <= MAX_SAFE ? Number(value) : value.toString();
  return toNumber(value);
}

/** The JSON of one value of an enum field: its name, or its number when it has none. */
export function enumWriter(desc: DescEnum): (value: unknown) => JsonValue {
  if (desc.typeName === "google.protobuf.NullValue") return () => null;
  return (v) => desc.value[v as number]?.name ?? (v as number);
}

function toNumber(value: JsonValue): JsonValue {
  if (typeof value !== "string") return value;
  const n = Number(value);
  return Number.isSafeInteger(n) ? n : value;
}
