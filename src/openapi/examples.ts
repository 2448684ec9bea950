import type { DescField, JsonObject, JsonValue } from "@bufbuild/protobuf";
import type { HttpBinding } from "../http/bindings.js";
import { rpcExample } from "./comments.js";

/**
 * Each RPC's example (declared once, in its proto comment: see `scripts/protoc-gen-docs.mjs`) as the
 * REST surface carries it: the request message split by the `google.api.http` binding into path
 * parameters, query parameters and body, and the response message (or its `response_body` field) as
 * the `data` of the envelope. A gRPC or Connect caller sends the request message as it is.
 */

/** An example request as it travels over REST. */
export interface RestExample {
  /** Path parameter values by the JSON name of the field path (`userId`). */
  path: Record<string, JsonValue>;
  /** Query parameter values by dotted JSON name; only for bindings without a whole-request body. */
  query: Record<string, JsonValue>;
  /** The JSON body, or undefined for a binding without one. */
  body: JsonValue | undefined;
}

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The member at a field path (by JSON names), or undefined. */
function valueAt(message: JsonValue, fields: readonly DescField[]): JsonValue | undefined {
  let current: JsonValue | undefined = message;
  for (const field of fields) current = isObject(current) ? current[field.jsonName] : undefined;
  return current;
}

/** A copy of `message` without the member at a field path. */
function without(message: JsonObject, fields: readonly DescField[]): JsonObject {
  const [first, ...rest] = fields;
  if (first === undefined) return message;
  const copy = { ...message };
  const inner = copy[first.jsonName];
  if (rest.length === 0 || !isObject(inner)) delete copy[first.jsonName];
  else copy[first.jsonName] = without(inner, rest);
  return copy;
}

/** Query parameters of a request message: every scalar member, nested members dotted, lists as lists. */
function flatten(message: JsonObject, prefix: string, out: Record<string, JsonValue>): void {
  for (const [name, value] of Object.entries(message)) {
    if (isObject(value)) flatten(value, `${prefix}${name}.`, out);
    else out[`${prefix}${name}`] = value;
  }
}

/** The RPC's example request split as `binding` carries it, or undefined when it declares none. */
export function restRequestExample(binding: HttpBinding): RestExample | undefined {
  const request = rpcExample(binding.method).request;
  if (!isObject(request)) return undefined;
  const path: Record<string, JsonValue> = {};
  let rest = request;
  for (const variable of binding.variables) {
    const value = valueAt(request, variable.fields);
    if (value !== undefined) path[variable.fields.map((f) => f.jsonName).join(".")] = value;
    rest = without(rest, variable.fields);
  }
  const query: Record<string, JsonValue> = {};
  switch (binding.body.kind) {
    case "all":
      return { path, query, body: rest };
    case "field":
      return { path, query, body: rest[binding.body.field.jsonName] ?? {} };
    case "none":
      flatten(rest, "", query);
      return { path, query, body: undefined };
  }
}

/** The `data` of the RPC's example response as `binding` renders it, or undefined when none is declared. */
export function restResponseExample(binding: HttpBinding): JsonValue | undefined {
  const response = rpcExample(binding.method).response;
  if (response === undefined || binding.responseField === undefined) return response;
  return isObject(response) ? response[binding.responseField.jsonName] : undefined;
}
