import type { JsonObject } from "@bufbuild/protobuf";
import { isBase64Text } from "../rpc/json-rules.js";

/**
 * A small JSON Schema validator for the subset the OpenAPI document uses, to check real responses
 * against it in tests without a dependency: `$ref` (JSON pointers into the document), `type`
 * (`integer` distinct from `number`), `const`, `enum`, `required`, `properties`,
 * `additionalProperties`, `items`, `minItems`/`maxItems`, `minimum`/`maximum`,
 * `minLength`/`maxLength`, `pattern`, `allOf`/`anyOf`/`oneOf`, and the formats `date-time` and
 * `byte` (with `contentEncoding: base64`), checked loosely. Other keywords are annotations here.
 */

/** How many `$ref`s may be followed without descending into the value (a reference cycle). */
const MAX_REF_HOPS = 32;

const DATE_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/i;

type Schema = JsonObject | boolean;

/**
 * Validates `value` against the schema at `schemaRef` in `doc` and returns every problem found, each
 * as `path: problem` with the path from `$` (e.g. `$.data.keyBundle.keyId: must be string`); an empty
 * list means valid. `schemaRef` is a JSON pointer into the document (`#/components/schemas/Receipt`,
 * or see {@link responseSchemaRef}) or a bare component name (`Receipt`).
 */
export function validateAgainst(doc: JsonObject, schemaRef: string, value: unknown): string[] {
  const pointer = schemaRef.startsWith("#") ? schemaRef : `#/components/schemas/${schemaRef}`;
  const problems: string[] = [];
  check(doc, resolvePointer(doc, pointer), value, "$", problems, 0);
  return problems;
}

/** The JSON pointer of the schema of an operation's response, e.g. for `/api/v1/receipts/encrypt`. */
export function responseSchemaRef(
  path: string,
  verb: string,
  status = "200",
  media = "application/json",
): string {
  const token = (s: string) => s.replaceAll("~", "~0").replaceAll("/", "~1");
  return `#/paths/${token(path)}/${verb.toLowerCase()}/responses/${status}/content/${token(media)}/schema`;
}

/** Follows a `#/a/b` JSON pointer through `doc`, and through `$ref`s met on the way (response refs). */
function resolvePointer(doc: JsonObject, pointer: string): Schema {
  let node: unknown = doc;
  for (const raw of pointer
    .replace(/^#\/?/, "")
    .split("/")
    .filter((s) => s !== "")) {
    const key = raw.replaceAll("~1", "/").replaceAll("~0", "~");
    if (isObject(node) && typeof node.$ref === "string" && !(key in node))
      node = resolvePointer(doc, node.$ref);
    node = isObject(node) || Array.isArray(node) ? (node as Record<string, unknown>)[key] : undefined;
    if (node === undefined) throw new Error(`${pointer} does not resolve in the document`);
  }
  if (typeof node === "boolean" || isObject(node)) return node as Schema;
  throw new Error(`${pointer} is not a schema`);
}

function check(doc: JsonObject, schema: Schema, value: unknown, path: string, out: string[], hops: number) {
  if (schema === true) return;
  if (schema === false) {
    out.push(`${path}: is not allowed`);
    return;
  }
  if (typeof schema.$ref === "string") {
    if (hops >= MAX_REF_HOPS) throw new Error(`${schema.$ref}: reference cycle`);
    check(doc, resolvePointer(doc, schema.$ref), value, path, out, hops + 1);
  }
  if (schema.const !== undefined && !deepEqual(schema.const, value)) {
    out.push(`${path}: must be ${JSON.stringify(schema.const)}`);
    return;
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((v) => deepEqual(v, value))) {
    out.push(`${path}: must be one of ${schema.enum.map((v) => JSON.stringify(v)).join(", ")}`);
    return;
  }
  const types =
    typeof schema.type === "string" ? [schema.type] : Array.isArray(schema.type) ? schema.type : [];
  if (types.length > 0 && !types.some((t) => typeof t === "string" && hasType(value, t))) {
    out.push(`${path}: must be ${types.join(" or ")}, not ${typeName(value)}`);
    return;
  }
  composite(doc, schema, value, path, out, hops);
  if (typeof value === "string") checkString(schema, value, path, out);
  else if (typeof value === "number") checkNumber(schema, value, path, out);
  else if (Array.isArray(value)) checkArray(doc, schema, value, path, out);
  else if (isObject(value)) checkObject(doc, schema, value, path, out);
}

function composite(
  doc: JsonObject,
  schema: JsonObject,
  value: unknown,
  path: string,
  out: string[],
  hops: number,
) {
  const sub = (s: unknown) => {
    const problems: string[] = [];
    check(doc, s as Schema, value, path, problems, hops);
    return problems;
  };
  if (Array.isArray(schema.allOf)) for (const s of schema.allOf) out.push(...sub(s));
  if (Array.isArray(schema.anyOf) && !schema.anyOf.some((s) => sub(s).length === 0)) {
    out.push(`${path}: matches none of anyOf`);
  }
  if (Array.isArray(schema.oneOf)) {
    const matches = schema.oneOf.filter((s) => sub(s).length === 0).length;
    if (matches !== 1) out.push(`${path}: matches ${matches} of oneOf, not exactly one`);
  }
}

function checkString(schema: JsonObject, value: string, path: string, out: string[]) {
  if (typeof schema.minLength === "number" && value.length < schema.minLength) {
    out.push(`${path}: must be at least ${schema.minLength} characters`);
  }
  if (typeof schema.maxLength === "number" && value.length > schema.maxLength) {
    out.push(`${path}: must be at most ${schema.maxLength} characters`);
  }
  if (typeof schema.pattern === "string" && !new RegExp(schema.pattern, "u").test(value)) {
    out.push(`${path}: must match ${schema.pattern}`);
  }
  if (schema.format === "date-time" && !(DATE_TIME.test(value) && !Number.isNaN(Date.parse(value)))) {
    out.push(`${path}: must be an RFC 3339 date-time`);
  }
  const base64 = schema.format === "byte" || schema.contentEncoding === "base64";
  if (base64 && !isBase64Text(value)) out.push(`${path}: must be base64`);
}

function checkNumber(schema: JsonObject, value: number, path: string, out: string[]) {
  if (typeof schema.minimum === "number" && value < schema.minimum) {
    out.push(`${path}: must be at least ${schema.minimum}`);
  }
  if (typeof schema.maximum === "number" && value > schema.maximum) {
    out.push(`${path}: must be at most ${schema.maximum}`);
  }
}

function checkArray(doc: JsonObject, schema: JsonObject, value: unknown[], path: string, out: string[]) {
  if (typeof schema.minItems === "number" && value.length < schema.minItems) {
    out.push(`${path}: must have at least ${schema.minItems} items`);
  }
  if (typeof schema.maxItems === "number" && value.length > schema.maxItems) {
    out.push(`${path}: must have at most ${schema.maxItems} items`);
  }
  const items = schema.items;
  if (typeof items === "boolean" || isObject(items)) {
    value.forEach((item, i) => {
      check(doc, items as Schema, item, `${path}[${i}]`, out, 0);
    });
  }
}

function checkObject(
  doc: JsonObject,
  schema: JsonObject,
  value: Record<string, unknown>,
  path: string,
  out: string[],
) {
  const properties = isObject(schema.properties) ? (schema.properties as Record<string, Schema>) : {};
  if (Array.isArray(schema.required)) {
    for (const name of schema.required) {
      if (typeof name === "string" && !Object.hasOwn(value, name)) {
        out.push(`${path}: missing required property ${name}`);
      }
    }
  }
  const extra = schema.additionalProperties;
  for (const [name, item] of Object.entries(value)) {
    const at = `${path}.${name}`;
    if (Object.hasOwn(properties, name)) check(doc, properties[name] as Schema, item, at, out, 0);
    else if (extra === false) out.push(`${at}: is not a known property`);
    else if (isObject(extra)) check(doc, extra as JsonObject, item, at, out, 0);
  }
}

function hasType(value: unknown, type: string): boolean {
  switch (type) {
    case "integer":
      return typeof value === "number" && Number.isInteger(value);
    case "number":
      return typeof value === "number" && Number.isFinite(value);
    case "array":
      return Array.isArray(value);
    case "object":
      return isObject(value);
    case "null":
      return value === null;
    default:
      return typeof value === type;
  }
}

function typeName(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function deepEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b))
    return a.length === b.length && a.every((v, i) => deepEqual(v, b[i]));
  if (isObject(a) && isObject(b)) {
    const keys = Object.keys(a);
    return (
      keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && deepEqual(a[k], b[k]))
    );
  }
  return false;
}
