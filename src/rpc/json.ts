import {
  type DescEnum,
  type DescField,
  type DescMessage,
  type JsonValue,
  type MessageShape,
  ScalarType,
} from "@bufbuild/protobuf";
import { isWrapperDesc } from "@bufbuild/protobuf/wkt";
import { type FieldViolation, invalidRequest } from "../errors.js";
import { is64BitInteger, isRfc3339 } from "../proto-scalars.js";
import { messageFromJson } from "./json-codec.js";
import { FORBIDDEN_KEYS, isBase64Text, isWellFormed, MAX_JSON_DEPTH } from "./json-rules.js";

export { messageToJson } from "./json-codec.js";
export { is64BitInteger };

/**
 * JSON <-> protobuf messages for the REST surface, driven by the message descriptors only.
 *
 * Input is checked field by field before `fromJson` sees it, so one response names every problem
 * (`items[2].unitPrice: must be an integer`) instead of the first one `fromJson` trips over, and so the
 * REST rules hold: unknown fields are rejected by name, 64-bit integers
 * (money) are JSON integers and never strings. Output renders every field, implicit defaults
 * included, with 64-bit integers as JSON numbers.
 */

/** At most this many violations are reported for one request; the rest are summarised. */
const MAX_VIOLATIONS = 100;

const INT32_RANGE = { min: -2147483648, max: 2147483647 };
const UINT32_RANGE = { min: 0, max: 4294967295 };
const DURATION = /^-?\d{1,12}(\.\d{1,9})?s$/;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Field lookup by JSON name and proto name, per message; a Map so "constructor" never hits Object. */
const fieldIndex = new WeakMap<DescMessage, Map<string, DescField>>();
function fieldsByName(desc: DescMessage): Map<string, DescField> {
  let index = fieldIndex.get(desc);
  if (index === undefined) {
    index = new Map();
    for (const field of desc.fields) {
      index.set(field.name, field);
      index.set(field.jsonName, field);
    }
    fieldIndex.set(desc, index);
  }
  return index;
}

function join(path: string, name: string): string {
  return path === "" ? name : `${path}.${name}`;
}

/** Walks a JSON value alongside a message descriptor and collects every problem. */
class JsonChecker {
  readonly violations: FieldViolation[] = [];
  private dropped = 0;

  constructor(private readonly maxDepth: number) {}

  add(field: string, description: string): void {
    if (this.violations.length < MAX_VIOLATIONS)
      this.violations.push({ field: field || "body", description });
    else this.dropped++;
  }

  finish(): FieldViolation[] {
    if (this.dropped > 0)
      this.violations.push({ field: "(more)", description: `${this.dropped} more problems` });
    return this.violations;
  }

  message(desc: DescMessage, json: unknown, path: string, depth: number): void {
    if (depth > this.maxDepth) {
      this.add(path, `nesting is deeper than ${this.maxDepth} levels`);
      return;
    }
    if (this.wellKnown(desc, json, path, depth)) return;
    if (!isPlainObject(json)) {
      this.add(path, "must be a JSON object");
      return;
    }
    const index = fieldsByName(desc);
    // Made only when needed: a field named twice (by its JSON and its proto name), a oneof member.
    let seen: Map<number, string> | undefined;
    let oneofs: Map<string, string> | undefined;
    for (const key in json) {
      const value = json[key];
      const field = FORBIDDEN_KEYS.has(key) ? undefined : index.get(key);
      if (field === undefined) {
        this.add(join(path, key), "unknown field");
        continue;
      }
      const otherName = key === field.jsonName ? field.name : field.jsonName;
      if (otherName !== key && Object.hasOwn(json, otherName)) {
        seen ??= new Map();
        const first = seen.get(field.number);
        if (first !== undefined) {
          this.add(join(path, key), `is the same field as ${first}; set it once`);
          continue;
        }
        seen.set(field.number, key);
      }
      if (value === null) continue;
      if (field.oneof !== undefined) {
        oneofs ??= new Map();
        const other = oneofs.get(field.oneof.name);
        if (other !== undefined) this.add(join(path, key), `cannot be set together with ${other}`);
        oneofs.set(field.oneof.name, key);
      }
      this.field(field, value, path, key, depth);
    }
  }

  /** Checks the value of `field`, found under `key` in the object at `parent`. */
  private field(field: DescField, value: unknown, parent: string, key: string, depth: number): void {
    if (field.fieldKind === "scalar") {
      // The path is built only for a problem: most fields have none.
      const problem = this.scalarProblem(field.scalar, value);
      if (problem !== undefined) this.add(join(parent, key), problem);
      return;
    }
    const path = join(parent, key);
    switch (field.fieldKind) {
      case "enum":
        this.enumValue(field.enum, value, path);
        return;
      case "message":
        this.message(field.message, value, path, depth + 1);
        return;
      case "list":
        if (!Array.isArray(value)) {
          this.add(path, "must be a JSON array");
          return;
        }
        value.forEach((item: unknown, i) => {
          const at = `${path}[${i}]`;
          if (item === null) this.add(at, "must not be null");
          else if (field.listKind === "scalar") this.scalar(field.scalar, item, at);
          else if (field.listKind === "enum") this.enumValue(field.enum, item, at);
          else this.message(field.message, item, at, depth + 1);
        });
        return;
      case "map":
        if (!isPlainObject(value)) {
          this.add(path, "must be a JSON object");
          return;
        }
        for (const [key, item] of Object.entries(value)) {
          const at = join(path, key);
          if (FORBIDDEN_KEYS.has(key)) this.add(at, "is not an allowed key");
          else if (!this.mapKeyValid(field.mapKey, key)) this.add(at, "is not a valid key");
          else if (item === null) this.add(at, "must not be null");
          else if (field.mapKind === "scalar") this.scalar(field.scalar, item, at);
          else if (field.mapKind === "enum") this.enumValue(field.enum, item, at);
          else this.message(field.message, item, at, depth + 1);
        }
        return;
    }
  }

  private mapKeyValid(type: ScalarType, key: string): boolean {
    if (type === ScalarType.STRING) return true;
    if (type === ScalarType.BOOL) return key === "true" || key === "false";
    return /^-?\d{1,20}$/.test(key) && this.integerProblem(type, Number(key)) === undefined;
  }

  scalar(type: ScalarType, value: unknown, path: string): void {
    const problem = this.scalarProblem(type, value);
    if (problem !== undefined) this.add(path, problem);
  }

  /** What is wrong with `value` as a JSON scalar of `type`, if anything. */
  private scalarProblem(type: ScalarType, value: unknown): string | undefined {
    switch (type) {
      case ScalarType.STRING:
        if (typeof value !== "string") return "must be a string";
        // Not encodable as UTF-8, so protobuf refuses it; say which field rather than "body".
        if (!isWellFormed(value)) return "must be valid Unicode text (it has an unpaired surrogate)";
        return undefined;
      case ScalarType.BOOL:
        return typeof value === "boolean" ? undefined : "must be true or false";
      case ScalarType.DOUBLE:
      case ScalarType.FLOAT:
        return typeof value === "number" && Number.isFinite(value) ? undefined : "must be a number";
      case ScalarType.BYTES:
        return typeof value === "string" && isBase64Text(value) ? undefined : "must be a base64 string";
      default:
        if (typeof value === "string") return "must be a JSON integer, not a string";
        return typeof value === "number" ? this.integerProblem(type, value) : "must be an integer";
    }
  }

  /** What is wrong with `value` as an integer of `type`, if anything. */
  private integerProblem(type: ScalarType, value: number): string | undefined {
    if (!Number.isInteger(value)) return "must be an integer";
    if (is64BitInteger(type)) {
      if (!Number.isSafeInteger(value)) return `must be an integer between ±${Number.MAX_SAFE_INTEGER}`;
      if (type === ScalarType.UINT64 || type === ScalarType.FIXED64) {
        return value < 0 ? "must not be negative" : undefined;
      }
      return undefined;
    }
    const unsigned = type === ScalarType.UINT32 || type === ScalarType.FIXED32;
    const range = unsigned ? UINT32_RANGE : INT32_RANGE;
    if (value < range.min || value > range.max) return `must be an integer from ${range.min} to ${range.max}`;
    return undefined;
  }

  private enumValue(desc: DescEnum, value: unknown, path: string): void {
    const known =
      typeof value === "string"
        ? desc.values.some((v) => v.name === value)
        : typeof value === "number" && desc.values.some((v) => v.number === value);
    if (!known) {
      const names = desc.values.slice(0, 10).map((v) => v.name);
      this.add(path, `must be one of ${names.join(", ")}${desc.values.length > 10 ? ", ..." : ""}`);
    }
  }

  /** Checks the well-known types that have their own JSON form; false when `desc` is not one. */
  private wellKnown(desc: DescMessage, json: unknown, path: string, depth: number): boolean {
    if (isWrapperDesc(desc)) {
      this.scalar(desc.fields[0].scalar, json, path);
      return true;
    }
    switch (desc.typeName) {
      case "google.protobuf.Timestamp":
        if (!isRfc3339(json)) this.add(path, "must be an RFC 3339 timestamp, e.g. 2026-01-31T12:00:00Z");
        return true;
      case "google.protobuf.Duration":
        if (typeof json !== "string" || !DURATION.test(json))
          this.add(path, 'must be a duration such as "1.5s"');
        return true;
      case "google.protobuf.FieldMask":
        if (typeof json !== "string") this.add(path, "must be a string");
        return true;
      case "google.protobuf.Any":
        this.add(path, "is not supported in JSON requests");
        return true;
      case "google.protobuf.Struct":
      case "google.protobuf.ListValue":
      case "google.protobuf.Value": {
        const wantObject = desc.typeName === "google.protobuf.Struct";
        const wantArray = desc.typeName === "google.protobuf.ListValue";
        if (wantObject && !isPlainObject(json)) this.add(path, "must be a JSON object");
        else if (wantArray && !Array.isArray(json)) this.add(path, "must be a JSON array");
        else if (jsonDepth(json, this.maxDepth - depth) > this.maxDepth - depth) {
          this.add(path, `nesting is deeper than ${this.maxDepth} levels`);
        }
        return true;
      }
      default:
        return false;
    }
  }
}

/** Depth of a JSON value, counting stops once it exceeds `limit`. */
function jsonDepth(value: unknown, limit: number): number {
  if (typeof value !== "object" || value === null) return 0;
  if (limit < 0) return 1;
  let deepest = 0;
  for (const item of Object.values(value)) {
    deepest = Math.max(deepest, jsonDepth(item, limit - 1));
    if (deepest > limit) break;
  }
  return deepest + 1;
}

/**
 * Checks a parsed JSON request against a message descriptor and returns every problem found, each
 * named by its lowerCamelCase path (`items[2].unitPrice`), prefixed with `prefix` when given. An
 * empty list means `fromJson` will accept the value. Nesting is bounded by `maxDepth`.
 */
export function validateJson(
  schema: DescMessage,
  json: unknown,
  prefix = "",
  maxDepth = MAX_JSON_DEPTH,
): FieldViolation[] {
  const checker = new JsonChecker(maxDepth);
  if (!isPlainObject(json)) checker.add(prefix === "" ? "body" : prefix, "must be a JSON object");
  else checker.message(schema, json, prefix, 0);
  return checker.finish();
}

/**
 * Converts a parsed JSON request to a message of `schema`. Every problem is collected first and
 * thrown as one `invalid_request` naming each offending field; unknown fields are rejected.
 */
export function parseJsonBody<Desc extends DescMessage>(schema: Desc, json: unknown): MessageShape<Desc> {
  const violations = validateJson(schema, json);
  if (violations.length > 0) throw invalidRequest(violations);
  return decodeJson(schema, json as JsonValue);
}

/**
 * `fromJson` for a value that passed {@link validateJson} (through the compiled readers when the
 * `json-reader` fast path is on); any remaining failure is `invalid_request`.
 */
export function decodeJson<Desc extends DescMessage>(schema: Desc, json: JsonValue): MessageShape<Desc> {
  try {
    return messageFromJson(schema, json);
  } catch (err) {
    const reason = err instanceof Error ? err.message : "cannot be decoded";
    throw invalidRequest([{ field: "body", description: reason }]);
  }
}
