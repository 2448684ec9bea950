import { type DescField, type JsonValue, ScalarType } from "@bufbuild/protobuf";
import { isWrapperDesc } from "@bufbuild/protobuf/wkt";
import type { FieldViolation } from "../errors.js";
import { is64BitInteger } from "../proto-scalars.js";

/**
 * Converts URL text to the JSON value of the field at the end of `fields`: numbers and booleans are
 * parsed, everything else stays a string for the JSON checks. Returns undefined after recording a
 * violation.
 */
export function coerce(
  fields: DescField[],
  raw: string | string[],
  violations: FieldViolation[],
  name = fields.map((f) => f.jsonName).join("."),
): JsonValue | undefined {
  const field = fields.at(-1) as DescField;
  const values = Array.isArray(raw) ? raw : [raw];
  if (field.fieldKind === "list") {
    const type = field.listKind === "scalar" ? field.scalar : ScalarType.STRING;
    const items = values.map((v) => coerceScalar(type, v));
    if (items.some((item) => item === undefined)) return invalid(violations, name, type);
    return items as JsonValue[];
  }
  if (values.length !== 1) {
    violations.push({ field: name, description: "must be given once" });
    return undefined;
  }
  const text = values[0] as string;
  let type = ScalarType.STRING;
  if (field.fieldKind === "scalar") type = field.scalar;
  else if (field.fieldKind === "message" && isWrapperDesc(field.message))
    type = field.message.fields[0].scalar;
  const value = coerceScalar(type, text);
  return value === undefined ? invalid(violations, name, type) : value;
}

function invalid(violations: FieldViolation[], name: string, type: ScalarType): undefined {
  const what = type === ScalarType.BOOL ? "true or false" : isInteger(type) ? "an integer" : "a number";
  violations.push({ field: name, description: `must be ${what}` });
  return undefined;
}

function isInteger(type: ScalarType): boolean {
  return (
    is64BitInteger(type) ||
    [
      ScalarType.INT32,
      ScalarType.UINT32,
      ScalarType.SINT32,
      ScalarType.FIXED32,
      ScalarType.SFIXED32,
    ].includes(type)
  );
}

function coerceScalar(type: ScalarType, text: string): JsonValue | undefined {
  if (type === ScalarType.BOOL) return text === "true" ? true : text === "false" ? false : undefined;
  if (isInteger(type)) return /^-?\d{1,16}$/.test(text) ? Number(text) : undefined;
  if (type === ScalarType.DOUBLE || type === ScalarType.FLOAT) {
    const n = Number(text);
    return text.trim() !== "" && Number.isFinite(n) ? n : undefined;
  }
  return text;
}
