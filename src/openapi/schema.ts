import {
  type DescEnum,
  type DescField,
  type DescMessage,
  type JsonObject,
  ScalarType,
} from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence, isWrapperDesc } from "@bufbuild/protobuf/wkt";
import { isRequiredField, leadingComment } from "./comments.js";

/**
 * JSON Schemas (OpenAPI 3.1 dialect) for protobuf messages as the REST surface renders them: the
 * proto3 JSON mapping with lowerCamelCase names, 64-bit integers as JSON integers,
 * bytes as base64 strings, well-known types in their JSON form (Timestamp: RFC 3339 string).
 *
 * A message has two JSON shapes. As a response, every field with implicit presence (proto3 scalars,
 * lists, maps) is always present, so it is `required`; fields with explicit presence (`optional`,
 * messages) may be absent. As a request, any field may be left out (the proto default applies). A
 * message used in both directions with different `required` lists gets two components, `Receipt`
 * (response) and `ReceiptInput` (request); one used in a single direction gets one, under its name.
 * Every message schema has `additionalProperties: false`: the service rejects unknown fields.
 *
 * Request fields whose proto comment begins with `Required.` carry `x-required: true`:
 * the service refuses them empty. They are not in `required`, because in the proto3 JSON mapping
 * an absent field and an empty one are the same message (the check is on the value), and because a
 * field moved into `required` is a breaking change to every client generated from the document.
 */

/** The extension that marks a request field the service refuses empty. */
export const X_REQUIRED = "x-required";

/** Which side of the API a schema describes. */
export type Direction = "input" | "output";

/** A JSON Schema object. */
export type JsonSchema = JsonObject;

/** Where component schemas live in the document. */
export const SCHEMA_PREFIX = "#/components/schemas/";

/** The largest integer JSON parsers round-trip exactly; 64-bit values are limited to it. */
const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** JSON forms of the well-known types that do not render as plain objects. */
const WELL_KNOWN: Readonly<Record<string, JsonSchema>> = {
  "google.protobuf.Timestamp": {
    type: "string",
    format: "date-time",
    description: "RFC 3339 date-time, UTC, e.g. 2026-01-31T12:00:00Z.",
  },
  "google.protobuf.Duration": {
    type: "string",
    pattern: "^-?\\d{1,12}(\\.\\d{1,9})?s$",
    description: 'Seconds with an "s" suffix, e.g. "1.5s".',
  },
  "google.protobuf.FieldMask": { type: "string", description: "Comma-separated lowerCamelCase field paths." },
  "google.protobuf.Empty": { type: "object", additionalProperties: false },
  "google.protobuf.Struct": { type: "object" },
  "google.protobuf.Value": { description: "Any JSON value." },
  "google.protobuf.ListValue": { type: "array" },
  "google.protobuf.Any": {
    type: "object",
    required: ["@type"],
    properties: { "@type": { type: "string" } },
  },
};

/** The JSON Schema of a scalar field value. */
export function scalarSchema(type: ScalarType): JsonSchema {
  switch (type) {
    case ScalarType.STRING:
      return { type: "string" };
    case ScalarType.BOOL:
      return { type: "boolean" };
    case ScalarType.BYTES:
      return { type: "string", format: "byte", contentEncoding: "base64" };
    case ScalarType.DOUBLE:
      return { type: "number", format: "double" };
    case ScalarType.FLOAT:
      return { type: "number", format: "float" };
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return { type: "integer", format: "int32" };
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return { type: "integer", minimum: 0, maximum: 4294967295 };
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return { type: "integer", format: "int64", minimum: 0, maximum: MAX_SAFE };
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return { type: "integer", format: "int64", minimum: -MAX_SAFE, maximum: MAX_SAFE };
  }
}

/** Whether a field is always rendered in a response (implicit presence) or must be sent (proto2). */
function requiredIn(field: DescField, direction: Direction): boolean {
  if (field.presence === FeatureSet_FieldPresence.LEGACY_REQUIRED) return true;
  return direction === "output" && field.presence === FeatureSet_FieldPresence.IMPLICIT;
}

/**
 * Whether the input and output forms of `desc` differ: in its own `required` list, or in any message
 * it contains (whose form it then refers to). `visiting` stops at recursive messages.
 */
function differsByDirection(desc: DescMessage, visiting: ReadonlySet<DescMessage> = new Set()): boolean {
  if (visiting.has(desc) || WELL_KNOWN[desc.typeName] !== undefined) return false;
  const inner = new Set([...visiting, desc]);
  return desc.fields.some(
    (f) =>
      requiredIn(f, "input") !== requiredIn(f, "output") ||
      (f.message !== undefined && differsByDirection(f.message, inner)),
  );
}

/**
 * Builds `components.schemas` from message descriptors. Call {@link SchemaBuilder.use} for every root
 * message (request messages as input, response messages as output) before asking for any
 * reference, so a message's component names are fixed before the first `$ref` to it is written.
 */
export class SchemaBuilder {
  private readonly directions = new Map<DescMessage, Set<Direction>>();
  private readonly names = new Map<string, string>();
  private readonly taken = new Set<string>();
  private readonly schemas = new Map<string, JsonSchema>();

  /** Adds a schema that is not a proto message (e.g. the error envelope) under a fixed name. */
  reserve(name: string, schema: JsonSchema): string {
    if (this.taken.has(name)) throw new Error(`OpenAPI schema name ${name} is used twice`);
    this.taken.add(name);
    this.schemas.set(name, schema);
    return `${SCHEMA_PREFIX}${name}`;
  }

  /** Records that `desc` (and everything it contains) appears on the `direction` side of the API. */
  use(desc: DescMessage, direction: Direction): void {
    const seen = this.directions.get(desc) ?? new Set<Direction>();
    if (seen.has(direction)) return;
    seen.add(direction);
    this.directions.set(desc, seen);
    for (const field of desc.fields) {
      if (field.message !== undefined) this.use(field.message, direction);
    }
  }

  /** A `$ref` to the component of `desc` for `direction`, building it (and what it uses) on first use. */
  ref(desc: DescMessage, direction: Direction): JsonSchema {
    const wellKnown = WELL_KNOWN[desc.typeName];
    if (wellKnown !== undefined) {
      return {
        $ref: this.component(desc.typeName, desc.typeName, desc.typeName, () => structuredClone(wellKnown)),
      };
    }
    if (isWrapperDesc(desc)) return scalarSchema(desc.fields[0].scalar);
    const seen = this.directions.get(desc);
    if (seen?.has(direction) !== true) {
      throw new Error(`${desc.typeName} is used as ${direction} but was not registered with use()`);
    }
    const split = seen.size > 1 && differsByDirection(desc);
    const shape: Direction = split ? direction : seen.has("output") ? "output" : "input";
    const suffix = split && shape === "input" ? "Input" : "";
    return {
      $ref: this.component(
        `${desc.typeName}#${shape}`,
        shortName(desc) + suffix,
        desc.typeName + suffix,
        () => this.message(desc, shape),
      ),
    };
  }

  /** The schema of a message as an inline object, leaving out `exclude` (e.g. fields bound by the path). */
  message(desc: DescMessage, direction: Direction, exclude: ReadonlySet<DescField> = new Set()): JsonSchema {
    const properties: JsonObject = {};
    const required: string[] = [];
    const input = this.directions.get(desc)?.has("input") === true;
    for (const field of desc.fields) {
      if (exclude.has(field)) continue;
      const property = this.field(field, direction);
      if (input && isRequiredField(field)) property[X_REQUIRED] = true;
      properties[field.jsonName] = property;
      if (requiredIn(field, direction)) required.push(field.jsonName);
    }
    const schema: JsonSchema = { type: "object" };
    const comment = leadingComment(desc);
    if (comment !== undefined) schema.description = comment;
    if (required.length > 0) schema.required = required;
    schema.properties = properties;
    schema.additionalProperties = false;
    return schema;
  }

  /** The schema of one field's JSON value, with its proto comment as description when available. */
  field(field: DescField, direction: Direction): JsonSchema {
    const schema = this.value(field, direction);
    const comment = leadingComment(field);
    if (comment !== undefined) schema.description = comment;
    if (field.deprecated) schema.deprecated = true;
    return schema;
  }

  /** The components built so far, sorted by name. */
  components(): Record<string, JsonSchema> {
    const sorted = [...this.schemas.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return Object.fromEntries(sorted);
  }

  private value(field: DescField, direction: Direction): JsonSchema {
    switch (field.fieldKind) {
      case "scalar":
        return scalarSchema(field.scalar);
      case "enum":
        return this.enumRef(field.enum);
      case "message":
        return this.ref(field.message, direction);
      case "list": {
        const items =
          field.listKind === "scalar"
            ? scalarSchema(field.scalar)
            : field.listKind === "enum"
              ? this.enumRef(field.enum)
              : this.ref(field.message, direction);
        return { type: "array", items };
      }
      case "map": {
        const values =
          field.mapKind === "scalar"
            ? scalarSchema(field.scalar)
            : field.mapKind === "enum"
              ? this.enumRef(field.enum)
              : this.ref(field.message, direction);
        return { type: "object", additionalProperties: values };
      }
    }
  }

  private enumRef(desc: DescEnum): JsonSchema {
    if (desc.typeName === "google.protobuf.NullValue") return { type: "null" };
    return {
      $ref: this.component(desc.typeName, shortName(desc), desc.typeName, () => {
        const schema: JsonSchema = { type: "string", enum: desc.values.map((v) => v.name) };
        const comment = leadingComment(desc);
        if (comment !== undefined) schema.description = comment;
        return schema;
      }),
    };
  }

  /**
   * The `$ref` of the component identified by `key`, named `preferred` (or, if another type has that
   * name, the fully qualified `fallback`), built once; the name is claimed before `build` runs so
   * recursive messages can refer to themselves.
   */
  private component(key: string, preferred: string, fallback: string, build: () => JsonSchema): string {
    let name = this.names.get(key);
    if (name === undefined) {
      name = this.taken.has(preferred) ? fallback : preferred;
      if (this.taken.has(name)) throw new Error(`OpenAPI schema name ${name} is used twice`);
      this.names.set(key, name);
      this.taken.add(name);
      this.schemas.set(name, build());
    }
    return `${SCHEMA_PREFIX}${name}`;
  }
}

/** The name of a type within its package, e.g. `Receipt` or `Outer.Inner`. */
function shortName(desc: DescMessage | DescEnum): string {
  const pkg = desc.file.proto.package;
  return pkg === "" ? desc.typeName : desc.typeName.slice(pkg.length + 1);
}
