/* Over 400 lines on purpose: a binding's rule, the request it reads from path, query and body (with
 * the one-pass read and the duplicate-member count it settles) and the answer it writes are one
 * mapping, read and changed together. */
import {
  type DescField,
  type DescMessage,
  type DescMethod,
  type DescMethodUnary,
  type DescService,
  getOption,
  type JsonObject,
  type JsonValue,
  type MessageShape,
} from "@bufbuild/protobuf";
import { isWrapperDesc } from "@bufbuild/protobuf/wkt";
import { http } from "../../gen/google/api/annotations_pb.js";
import type { HttpRule } from "../../gen/google/api/http_pb.js";
import { type FieldViolation, invalidRequest } from "../errors.js";
import { decodeJson, messageToJson, validateJson } from "../rpc/json.js";
import { membersAndColonsRead, messageToJsonText, readUnchecked } from "../rpc/json-codec.js";
import {
  assertNoDuplicateMembers,
  colonsIn,
  hasNoDuplicateByCounted,
  membersAndColonsOf,
} from "../rpc/json-duplicates.js";
import { coerce } from "./url-values.js";

/**
 * The REST surface as the protos declare it: every unary method's `google.api.http` rule (and its
 * `additional_bindings`) read from the descriptors, and the mapping of path, query and body onto the
 * request message and of the response (or its `response_body` field) onto the `data` of the envelope.
 * Pure functions of the descriptors; `transcoder.ts` mounts them on Fastify.
 */

/** HTTP verbs a binding may use. */
export type HttpVerb = "GET" | "POST" | "PUT" | "DELETE" | "PATCH";
const VERBS = new Set<string>(["GET", "POST", "PUT", "DELETE", "PATCH"]);

/** A `{field.path}` variable of a path template and the Fastify route parameter that carries it. */
export interface PathVariable {
  /** Route parameter name (`p0`, `p1`, ...): field paths may contain dots, parameter names may not. */
  param: string;
  /** The field path from the request message down to a singular scalar or enum field. */
  fields: DescField[];
}

/** One REST endpoint: a method, its verb and path, and where the body and the response go. */
export interface HttpBinding {
  method: DescMethodUnary;
  verb: HttpVerb;
  /** The path template as written in the proto, e.g. `/api/v1/receipts/{user_id}`. */
  template: string;
  /** The Fastify route path, e.g. `/api/v1/receipts/:p0`. */
  routePath: string;
  variables: PathVariable[];
  /** `*`: the body is the request; a field: the body is that field; none: no body. */
  body: { kind: "none" } | { kind: "all" } | { kind: "field"; field: DescField };
  /** The response field rendered as `data` (`response_body`), or the whole response. */
  responseField: DescField | undefined;
}

/**
 * Reads the HTTP bindings of every unary method of `services` that has a `google.api.http` option.
 * Throws at start-up on a rule this transcoder cannot serve (wildcard templates, unknown fields), so
 * a proto change can never silently drop an endpoint.
 */
export function httpBindings(services: readonly DescService[]): HttpBinding[] {
  const bindings: HttpBinding[] = [];
  for (const service of services) {
    for (const method of service.methods) {
      if (!isUnary(method)) continue;
      const rule = getOption(method, http);
      if (rule.pattern.case === undefined) continue;
      for (const r of [rule, ...rule.additionalBindings]) bindings.push(toBinding(method, r));
    }
  }
  return bindings;
}

function isUnary(method: DescMethod): method is DescMethodUnary {
  return method.methodKind === "unary";
}

function toBinding(method: DescMethodUnary, rule: HttpRule): HttpBinding {
  const where = `${method.parent.typeName}.${method.name}`;
  let verb: string;
  let template: string;
  switch (rule.pattern.case) {
    case "custom":
      verb = rule.pattern.value.kind.toUpperCase();
      template = rule.pattern.value.path;
      break;
    case undefined:
      throw new Error(`${where}: an additional binding has no pattern`);
    default:
      verb = rule.pattern.case.toUpperCase();
      template = rule.pattern.value;
  }
  if (!VERBS.has(verb)) throw new Error(`${where}: unsupported HTTP verb ${verb}`);
  const { routePath, variables } = parseTemplate(template, method.input, where);
  const body =
    rule.body === ""
      ? { kind: "none" as const }
      : rule.body === "*"
        ? { kind: "all" as const }
        : {
            kind: "field" as const,
            field: topField(method.input, rule.body, where),
          };
  const responseField =
    rule.responseBody === "" ? undefined : topField(method.output, rule.responseBody, where);
  return { method, verb: verb as HttpVerb, template, routePath, variables, body, responseField };
}

function topField(message: DescMessage, name: string, where: string): DescField {
  const field = message.fields.find((f) => f.name === name);
  if (field === undefined) throw new Error(`${where}: ${message.typeName} has no field "${name}"`);
  return field;
}

const VARIABLE = /^\{([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\}$/;

/** Turns `/a/{b.c}/d` into the Fastify path `/a/:p0/d`; only whole-segment `{field.path}` variables. */
function parseTemplate(template: string, input: DescMessage, where: string) {
  if (!template.startsWith("/")) throw new Error(`${where}: path "${template}" must start with "/"`);
  const variables: PathVariable[] = [];
  const segments = template
    .slice(1)
    .split("/")
    .map((segment) => {
      const match = VARIABLE.exec(segment);
      if (match?.[1] !== undefined) {
        const fields = resolveFieldPath(input, match[1].split("."), false);
        const last = fields?.at(-1);
        if (fields === undefined || last === undefined || !isSingularLeaf(last)) {
          throw new Error(`${where}: "${segment}" must name a singular scalar field`);
        }
        const param = `p${variables.length}`;
        variables.push({ param, fields });
        return `:${param}`;
      }
      if (/[{}*]/.test(segment)) throw new Error(`${where}: unsupported path segment "${segment}"`);
      return segment.replaceAll(":", "::");
    });
  return { routePath: `/${segments.join("/")}`, variables };
}

function isSingularLeaf(field: DescField): boolean {
  return (
    field.fieldKind === "scalar" ||
    field.fieldKind === "enum" ||
    (field.fieldKind === "message" && isStringLike(field.message))
  );
}

/** Well-known messages whose JSON form is a single string or scalar, so a URL can carry them. */
function isStringLike(message: DescMessage): boolean {
  return (
    isWrapperDesc(message) ||
    ["google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask"].includes(
      message.typeName,
    )
  );
}

/** Follows `a.b.c` through singular message fields, by proto name (and JSON name if `jsonNames`). */
function resolveFieldPath(
  message: DescMessage,
  names: string[],
  jsonNames: boolean,
): DescField[] | undefined {
  const fields: DescField[] = [];
  let current: DescMessage | undefined = message;
  for (const name of names) {
    const field: DescField | undefined = current?.fields.find(
      (f) => f.name === name || (jsonNames && f.jsonName === name),
    );
    if (field === undefined) return undefined;
    fields.push(field);
    current = field.fieldKind === "message" && !isStringLike(field.message) ? field.message : undefined;
  }
  return fields;
}

/** The raw parts of an HTTP request that map onto the request message. */
export interface HttpRequestParts {
  params: Record<string, string | undefined>;
  query: Record<string, string | string[] | undefined>;
  /** The parsed JSON body, `undefined` when there is none. */
  body: unknown;
  /**
   * The body's text when its duplicate-member check (src/rpc/json-duplicates.ts) is left to the
   * decode: settled by the compiled reader's count when the one-pass read reads the request, else by
   * the check itself, before any other problem of the request is named.
   */
  bodyText?: string | undefined;
}

/**
 * Builds the request message of `binding` from path parameters, query and body. Every problem (an
 * invalid path segment, an unknown query parameter, each bad body field) is collected and thrown as
 * one `invalid_request`. Query parameters are named by proto or JSON field name (`page_size`,
 * `pageSize`, dotted for nested fields) and coerced by field type; unknown ones are rejected like
 * unknown body fields.
 */
export function decodeHttpRequest(binding: HttpBinding, parts: HttpRequestParts): MessageShape<DescMessage> {
  const violations: FieldViolation[] = [];
  const { leaves, bound } = urlLeaves(binding, parts, violations);
  const text = parts.bodyText;
  let read: MessageShape<DescMessage> | undefined;
  if (violations.length === 0) {
    let added = Number.NaN;
    read = readUnchecked(binding.method.input, () => {
      const json = uncheckedJson(binding, parts.body, leaves, bound);
      if (json !== undefined) added = addedToBody(binding, json, leaves);
      return json;
    });
    if (
      read !== undefined &&
      (text === undefined || hasNoDuplicateByCounted(text, membersAndColonsRead() - added))
    ) {
      return read;
    }
  }
  if (text !== undefined) assertNoDuplicateMembers(text, parts.body);
  return read ?? checkThenRead(binding, parts.body, leaves, bound, violations);
}

/**
 * The members and string colons the request JSON `json` (from {@link uncheckedJson}) holds beyond the
 * body's own: none for a whole body without URL values; for a body under a field, the top-level
 * members and what the URL's values put beside the body; NaN, which no count matches, where URL values
 * may have gone into the body's own objects.
 */
function addedToBody(binding: HttpBinding, json: JsonObject, leaves: UrlLeaf[]): number {
  if (binding.body.kind === "all") return leaves.length === 0 ? 0 : Number.NaN;
  if (binding.body.kind !== "field") return Number.NaN;
  const bodyKey = binding.body.field.jsonName;
  let added = 0;
  for (const key of Object.keys(json)) {
    added += 1 + colonsIn(key);
    if (key !== bodyKey) added += membersAndColonsOf(json[key]);
  }
  return added;
}

/**
 * {@link decodeHttpRequest} without the one-pass read: every part checked field by field, then read.
 * What a request with a problem goes through; exported so tests can hold the one-pass read to it.
 */
export function decodeHttpRequestChecked(
  binding: HttpBinding,
  parts: HttpRequestParts,
): MessageShape<DescMessage> {
  const violations: FieldViolation[] = [];
  const { leaves, bound } = urlLeaves(binding, parts, violations);
  return checkThenRead(binding, parts.body, leaves, bound, violations);
}

function checkThenRead(
  binding: HttpBinding,
  body: unknown,
  leaves: UrlLeaf[],
  bound: Set<DescField>,
  violations: FieldViolation[],
): MessageShape<DescMessage> {
  if (leaves.length > 0) {
    const fromUrl: JsonObject = {};
    for (const leaf of leaves) setPath(fromUrl, leaf.fields, leaf.value);
    violations.push(...validateJson(binding.method.input, fromUrl));
  }
  const json = bodyJson(binding, body, bound, violations);
  if (violations.length > 0) throw invalidRequest(violations);
  for (const leaf of leaves) setPath(json, leaf.fields, leaf.value);
  return decodeJson(binding.method.input, json);
}

/**
 * The request JSON from the body and the URL's values without the field-by-field check, for the
 * one-pass read (`readUnchecked`, src/rpc/json-codec.ts), or undefined when the body clashes with the URL or is
 * not of the shape the binding takes. The one-pass reader gives up on everything the check would
 * name (json-rules.ts), so a request it reads has no problem, and the check runs only to name the
 * problems of one it does not ({@link checkThenRead}, which then reads it again). `leaves` and `bound`
 * are those of a URL without problems.
 */
function uncheckedJson(
  binding: HttpBinding,
  body: unknown,
  leaves: UrlLeaf[],
  bound: Set<DescField>,
): JsonObject | undefined {
  let json: JsonObject;
  if (binding.body.kind === "all") {
    if (body !== undefined && !isObject(body)) return undefined;
    const whole = (body ?? {}) as JsonObject;
    for (const field of bound) if (setsField(whole, field)) return undefined;
    json = leaves.length > 0 ? { ...whole } : whole;
  } else if (binding.body.kind === "none") json = {};
  else {
    const field = binding.body.field;
    const value = fieldBodyValue(field, body);
    // A null body is a problem to name, not an unset field.
    if (field.fieldKind === "message" && !isObject(value)) return undefined;
    // A URL value inside the body field would replace a body value the check has to see.
    if (leaves.some((leaf) => leaf.fields[0] === field)) return undefined;
    json = underField(field, value);
  }
  for (const leaf of leaves) setPath(json, leaf.fields, leaf.value);
  return json;
}

/** A value from the URL (path or query) for the field at the end of `fields`. */
interface UrlLeaf {
  fields: DescField[];
  value: JsonValue;
}

/** The typed values of the path variables and query parameters, and the top fields the path binds. */
function urlLeaves(binding: HttpBinding, parts: HttpRequestParts, violations: FieldViolation[]) {
  const leaves: UrlLeaf[] = [];
  const bound = new Set<DescField>();
  for (const variable of binding.variables) {
    const raw = parts.params[variable.param] ?? "";
    bound.add(variable.fields[0] as DescField);
    const value = coerce(variable.fields, raw, violations);
    if (value !== undefined) leaves.push({ fields: variable.fields, value });
  }
  // The first query name given for each field (a field may be named by its JSON or its proto name).
  const named = new Map<string, string>();
  for (const [key, raw] of Object.entries(parts.query)) {
    if (raw === undefined) continue;
    const fields =
      binding.body.kind === "all" ? undefined : resolveFieldPath(binding.method.input, key.split("."), true);
    const top = fields?.[0];
    const path = fields?.map((f) => f.name).join(".") ?? "";
    if (fields === undefined || top === undefined || !isQueryLeaf(fields)) {
      violations.push({ field: key, description: "unknown query parameter" });
    } else if (bound.has(top) || (binding.body.kind === "field" && binding.body.field === top)) {
      violations.push({ field: key, description: "is set by the URL path or body, not the query" });
    } else if (named.has(path)) {
      violations.push({ field: key, description: `is the same field as ${named.get(path)}; set it once` });
    } else {
      named.set(path, key);
      const value = coerce(fields, raw, violations, key);
      if (value !== undefined) leaves.push({ fields, value });
    }
  }
  return { leaves, bound };
}

/**
 * The request JSON the body contributes: the whole request (`body: "*"`), one field (`body:
 * "receipt"`, with violations named relative to the body) or nothing. Body problems are collected.
 */
function bodyJson(
  binding: HttpBinding,
  body: unknown,
  bound: Set<DescField>,
  violations: FieldViolation[],
): JsonObject {
  const input = binding.method.input;
  if (binding.body.kind === "all") {
    // Only a missing body means "no fields"; a JSON `null` is a body of the wrong type.
    const whole = body === undefined ? {} : body;
    violations.push(...validateJson(input, whole));
    if (!isObject(whole)) return {};
    for (const field of bound) {
      if (setsField(whole as JsonObject, field)) {
        violations.push({
          field: field.jsonName,
          description: "is set by the URL path; leave it out of the body",
        });
      }
    }
    return { ...(whole as JsonObject) };
  }
  if (binding.body.kind === "field") {
    const field = binding.body.field;
    const value = fieldBodyValue(field, body);
    if (field.fieldKind === "message" && !isStringLike(field.message)) {
      violations.push(...validateJson(field.message, value));
    } else {
      violations.push(...validateJson(input, { [field.jsonName]: value }));
    }
    return underField(field, value);
  }
  return {};
}

/** The body of a `body: "field"` binding: no body is an empty message when the field is a message. */
function fieldBodyValue(field: DescField, body: unknown): unknown {
  return body === undefined && field.fieldKind === "message" ? {} : body;
}

/** The request JSON of a `body: "field"` binding's body: the value under the field's JSON name. */
function underField(field: DescField, value: unknown): JsonObject {
  return value === undefined ? {} : { [field.jsonName]: value as JsonValue };
}

/** Whether a whole-request body sets `field` (by its JSON or its proto name). */
function setsField(whole: JsonObject, field: DescField): boolean {
  return Object.hasOwn(whole, field.jsonName) || Object.hasOwn(whole, field.name);
}

/** Renders the response of `binding` as the `data` of the REST envelope. */
export function encodeHttpResponse(binding: HttpBinding, message: MessageShape<DescMessage>): JsonValue {
  const json = messageToJson(binding.method.output, message);
  if (binding.responseField === undefined) return json;
  return (isObject(json) ? json[binding.responseField.jsonName] : undefined) ?? null;
}

/**
 * The `data` of the REST envelope for the response of `binding`, as JSON text written directly (the
 * same characters as `JSON.stringify(encodeHttpResponse(...))`); undefined when the compiled writers
 * are off, and the caller then sends {@link encodeHttpResponse}.
 */
export function encodeHttpResponseText(
  binding: HttpBinding,
  message: MessageShape<DescMessage>,
): string | undefined {
  return messageToJsonText(binding.method.output, message, binding.responseField);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function isQueryLeaf(fields: DescField[]): boolean {
  const last = fields.at(-1);
  if (last === undefined) return false;
  if (last.fieldKind === "list") return last.listKind !== "message";
  return isSingularLeaf(last);
}

function setPath(target: JsonObject, fields: DescField[], value: JsonValue): void {
  let node = target;
  fields.forEach((field, i) => {
    if (i === fields.length - 1) {
      node[field.jsonName] = value;
      return;
    }
    const next = node[field.jsonName];
    const child: JsonObject = isObject(next) ? (next as JsonObject) : {};
    node[field.jsonName] = child;
    node = child;
  });
}
