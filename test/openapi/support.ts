import {
  create,
  type DescField,
  type DescMessage,
  type JsonObject,
  type MessageShape,
  ScalarType,
} from "@bufbuild/protobuf";
import type { OpenApiDocument } from "../../src/openapi/openapi.js";
import { serviceOpenApi } from "../../src/openapi/openapi.js";

/** The document the server serves, built once per test file. */
export const doc: OpenApiDocument = serviceOpenApi();

/** A component schema by name; fails the test when it is missing. */
export function component(name: string): JsonObject {
  const schema = doc.components.schemas[name];
  if (schema === undefined) throw new Error(`no component schema ${name}`);
  return schema;
}

/** Follows `$ref`s (schemas, responses, parameters, headers) until a non-reference object. */
export function deref<T = JsonObject>(node: unknown): T {
  let current = node as JsonObject;
  for (let hops = 0; typeof current.$ref === "string"; hops++) {
    if (hops > 10) throw new Error("reference cycle");
    const parts = current.$ref.replace(/^#\//, "").split("/");
    let next: unknown = doc;
    for (const part of parts) next = (next as Record<string, unknown>)[part.replaceAll("~1", "/")];
    if (next === undefined) throw new Error(`${current.$ref} does not resolve`);
    current = next as JsonObject;
  }
  return current as T;
}

/** The operation object at `path` and `verb`. */
export function operation(path: string, verb: string): JsonObject {
  const op = doc.paths[path]?.[verb];
  if (op === undefined) throw new Error(`no operation ${verb} ${path}`);
  return op as JsonObject;
}

function sampleScalar(type: ScalarType): unknown {
  switch (type) {
    case ScalarType.STRING:
      return "sample";
    case ScalarType.BOOL:
      return true;
    case ScalarType.BYTES:
      return new Uint8Array([1, 2, 3, 250]);
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return 0.5;
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return 1_234_567_890_123n;
    default:
      return 7;
  }
}

function sampleField(field: DescField, depth: number): unknown {
  switch (field.fieldKind) {
    case "scalar":
      return sampleScalar(field.scalar);
    case "enum":
      return field.enum.values.at(-1)?.number ?? 0;
    case "message":
      return fillInit(field.message, depth + 1);
    case "list":
      if (field.listKind === "scalar") return [sampleScalar(field.scalar)];
      if (field.listKind === "enum") return [field.enum.values.at(-1)?.number ?? 0];
      return [fillInit(field.message, depth + 1)];
    case "map": {
      const value =
        field.mapKind === "scalar"
          ? sampleScalar(field.scalar)
          : field.mapKind === "enum"
            ? (field.enum.values.at(-1)?.number ?? 0)
            : fillInit(field.message, depth + 1);
      return { "1": value };
    }
  }
}

function fillInit(desc: DescMessage, depth: number): Record<string, unknown> {
  if (depth > 4) return {};
  if (desc.typeName === "google.protobuf.Timestamp") return { seconds: 1_767_225_600n, nanos: 5_000_000 };
  const init: Record<string, unknown> = {};
  for (const field of desc.fields) init[field.localName] = sampleField(field, depth);
  return init;
}

/** A message of `desc` with every field set (optionals, lists and nested messages included). */
export function filled<Desc extends DescMessage>(desc: Desc): MessageShape<Desc> {
  return create(desc, fillInit(desc, 0) as never);
}
