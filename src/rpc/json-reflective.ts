import {
  type DescField,
  type DescMessage,
  fromJson,
  type JsonObject,
  type JsonValue,
  type MessageShape,
  toJson,
} from "@bufbuild/protobuf";
import { isWrapperDesc } from "@bufbuild/protobuf/wkt";
import { is64BitInteger } from "../proto-scalars.js";

/**
 * REST JSON through protobuf-es alone: what the REST surface reads and writes with the fast paths off
 * (src/rpc/json-input.ts, json-output.ts), and the reference the compiled readers and writers are tested against.
 *
 * Output: lowerCamelCase names, implicit defaults included (`isEscrowed: false`,
 * `releasedReceipts: 0`), unset optional fields absent, 64-bit integers as JSON numbers, bytes as
 * standard base64, timestamps as RFC 3339 UTC: `toJson` with `alwaysEmitImplicit`, its 64-bit strings
 * then made numbers. A 64-bit value beyond JavaScript's safe range stays a string rather than be
 * silently rounded; the domain never produces one.
 */
export function messageToJsonReflective<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc>,
): JsonValue {
  return numbersFor64Bit(schema, toJson(schema, message, { alwaysEmitImplicit: true }));
}

/** Input: `fromJson` rejecting unknown fields. */
export function messageFromJsonReflective<Desc extends DescMessage>(
  schema: Desc,
  json: JsonValue,
): MessageShape<Desc> {
  return fromJson(schema, json, { ignoreUnknownFields: false });
}

function toNumber(value: JsonValue): JsonValue {
  if (typeof value !== "string") return value;
  const n = Number(value);
  return Number.isSafeInteger(n) ? n : value;
}

function numbersFor64Bit(desc: DescMessage, json: JsonValue): JsonValue {
  if (isWrapperDesc(desc)) return is64BitInteger(desc.fields[0].scalar) ? toNumber(json) : json;
  if (!isJsonObject(json) || desc.typeName.startsWith("google.protobuf.")) return json;
  for (const field of desc.fields) {
    const value = json[field.jsonName];
    if (value === undefined || value === null) continue;
    json[field.jsonName] = convertField(field, value);
  }
  return json;
}

function isJsonObject(value: JsonValue): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function convertField(field: DescField, value: JsonValue): JsonValue {
  switch (field.fieldKind) {
    case "scalar":
      return is64BitInteger(field.scalar) ? toNumber(value) : value;
    case "message":
      return numbersFor64Bit(field.message, value);
    case "enum":
      return value;
    case "list":
      if (!Array.isArray(value)) return value;
      if (field.listKind === "scalar") return is64BitInteger(field.scalar) ? value.map(toNumber) : value;
      if (field.listKind === "message") return value.map((item) => numbersFor64Bit(field.message, item));
      return value;
    case "map":
      if (!isJsonObject(value)) return value;
      for (const [key, item] of Object.entries(value)) {
        if (field.mapKind === "scalar" && is64BitInteger(field.scalar)) value[key] = toNumber(item);
        if (field.mapKind === "message") value[key] = numbersFor64Bit(field.message, item);
      }
      return value;
  }
}
