import {
  type DescField,
  type DescMessage,
  fromJson,
  type JsonObject,
  type JsonValue,
  type Message,
  ScalarType,
  toJson,
} from "@bufbuild/protobuf";
import { type Timestamp, TimestampSchema } from "@bufbuild/protobuf/wkt";
import canonicalizeModule from "canonicalize";
import { type Receipt, ReceiptSchema } from "../gen/receipts/v1/receipt_pb.js";
import { is64BitInteger } from "./proto-scalars.js";

/**
 * Facts about a receipt's fields shared by the service and the client library (which runs in
 * browsers, so nothing here may need Node): which fields are instructions to the service and never
 * sealed, and the exact form a merchant signature covers (README, "Merchant signatures").
 */

/** Input-only receipt fields: instructions to the service, never sealed. */
export const INPUT_ONLY_FIELDS = [
  "recipientHashedPan",
  "recipientPar",
  "mockItems",
  "cardNonce",
  "cardBin",
] as const;

/**
 * Receipt members a signature does not cover: the input-only instructions to the service, and what
 * the service adds (`keyId`, `decryptedAt`, and the signature with its key id).
 */
export const UNSIGNED_FIELDS: readonly string[] = [
  ...INPUT_ONLY_FIELDS,
  "keyId",
  "decryptedAt",
  "merchantSignature",
  "merchantKeyId",
];

/**
 * A generated message (protobuf-es's `MessageShape`, e.g. `Receipt` of gen/) as receipts are written
 * in JSON, so that the receipt's shape is written once, in receipt.proto: the same members under the
 * same names, optional exactly where the message's are (explicit presence, message fields), 64-bit
 * integers as JSON numbers (money: the rules keep it within `Number.MAX_SAFE_INTEGER`), a Timestamp
 * as its RFC 3339 string, bytes as base64, nested messages the same way. The proto's comments stay
 * on the members.
 */
export type ReceiptJsonOf<T> = T extends bigint
  ? number
  : T extends Timestamp
    ? string
    : T extends Uint8Array
      ? string
      : T extends readonly (infer E)[]
        ? ReceiptJsonOf<E>[]
        : T extends Message
          ? { [K in keyof MembersOf<T>]: ReceiptJsonOf<Exclude<MembersOf<T>[K], undefined>> }
          : T;

/** The members of a generated message, without protobuf-es's own (`$typeName`, `$unknown`). */
type MembersOf<T> = Omit<T, "$typeName" | "$unknown">;

/** The members of `T` whose values are lists. */
type ListMembers<T> = { [K in keyof T]-?: NonNullable<T[K]> extends readonly unknown[] ? K : never }[keyof T];

/**
 * {@link ReceiptJsonOf} as a request may send it: lists may be left out too, at every depth (the
 * receipt rules read a missing list as empty).
 */
export type ReceiptInputJsonOf<T> = T extends bigint | Timestamp | Uint8Array
  ? ReceiptJsonOf<T>
  : T extends readonly (infer E)[]
    ? ReceiptInputJsonOf<E>[]
    : T extends Message
      ? InputMembers<MembersOf<T>>
      : T;

/** The members of {@link ReceiptInputJsonOf}: as they are, and the lists optional. */
type InputMembers<M> = {
  [K in keyof Omit<M, ListMembers<M>>]: ReceiptInputJsonOf<Exclude<M[K], undefined>>;
} & { [K in keyof Pick<M, ListMembers<M>>]?: ReceiptInputJsonOf<Exclude<M[K], undefined>> };

/** A JSON value, as receipts are written. */
export type Json = string | number | boolean | null | Json[] | { [name: string]: Json };

/**
 * RFC 8785 canonical JSON (the RFC's reference implementation). The package is CommonJS with a typing
 * that declares an ES default export, which NodeNext reads as `{ default }`; at run time the default
 * import is the function itself, so its type is restated here.
 */
const canonicalize = canonicalizeModule as unknown as (input: unknown) => string | undefined;

/**
 * The signed form of a receipt's JSON: without {@link UNSIGNED_FIELDS} at the top level, and with
 * every member whose value is `null`, `""` or `[]` removed at any depth (array elements are kept).
 */
export function signedFormOf(receipt: { [name: string]: Json | undefined }): { [name: string]: Json } {
  const out: { [name: string]: Json } = {};
  for (const [name, value] of Object.entries(receipt)) {
    if (!UNSIGNED_FIELDS.includes(name)) keepMember(out, name, value);
  }
  return out;
}

/** The text a receipt signature covers: the RFC 8785 canonical JSON of {@link signedFormOf}; sign its UTF-8. */
export function signingTextOf(receipt: { [name: string]: Json | undefined }): string {
  return canonicalJsonOf(signedFormOf(receipt));
}

/** RFC 8785 canonical JSON of a JSON value. */
export function canonicalJsonOf(value: Json | undefined): string {
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError("A value has no canonical JSON.");
  return text;
}

function keepMember(out: { [name: string]: Json }, name: string, value: Json | undefined): void {
  const pruned = withoutEmptyMembers(value);
  if (pruned === undefined || pruned === null || pruned === "") return;
  if (Array.isArray(pruned) && pruned.length === 0) return;
  out[name] = pruned;
}

function withoutEmptyMembers(value: Json | undefined): Json | undefined {
  if (Array.isArray(value)) return value.map((element) => withoutEmptyMembers(element) ?? null);
  if (typeof value !== "object" || value === null) return value;
  const out: { [name: string]: Json } = {};
  for (const [name, member] of Object.entries(value)) keepMember(out, name, member);
  return out;
}

/**
 * The JSON of a receipt message as a signature covers it: the REST JSON form of a `Receipt`
 * (lowerCamelCase names, every non-optional field present, optional fields present exactly when set,
 * int64 as JSON integers, timestamps as protobuf renders them: RFC 3339 UTC with `Z` and 0, 3, 6 or
 * 9 fractional digits). For a REST body in that form this gives the body back, whatever order its
 * members came in. The service checks signatures against it, and the client library signs it.
 */
export function receiptJsonOf(receipt: Receipt): JsonObject {
  const json = toJson(ReceiptSchema, receipt, { alwaysEmitImplicit: true }) as JsonObject;
  return int64AsNumbers(ReceiptSchema, json);
}

/** Turns protobuf JSON's 64-bit integer strings into numbers, in place, guided by the descriptor. */
function int64AsNumbers(desc: DescMessage, json: JsonObject): JsonObject {
  for (const field of desc.fields) {
    const value = json[field.jsonName];
    if (value === undefined || value === null) continue;
    if (field.fieldKind === "scalar" && is64BitInteger(field.scalar)) json[field.jsonName] = Number(value);
    else if (field.fieldKind === "list" && field.listKind === "scalar" && is64BitInteger(field.scalar)) {
      json[field.jsonName] = (value as JsonValue[]).map(Number);
    } else if (field.fieldKind === "message" && !isWellKnown(field.message)) {
      int64AsNumbers(field.message, value as JsonObject);
    } else if (field.fieldKind === "list" && field.listKind === "message" && !isWellKnown(field.message)) {
      for (const element of value as JsonObject[]) int64AsNumbers(field.message, element);
    }
  }
  return json;
}

/** Well-known types have their own JSON forms (a Timestamp is a string). */
function isWellKnown(desc: DescMessage): boolean {
  return desc.typeName.startsWith("google.protobuf.");
}

/** At most this many problems are named by {@link receiptJsonProblems}: enough to fix, bounded. */
const MAX_PROBLEMS = 10;

/**
 * What is wrong with `value` as a receipt in its JSON form (`ReceiptJson`), member by member: a member
 * of the wrong JSON type or `null`, an integer that is not one (or not a safe one), a date that is not
 * an RFC 3339 time; at most ten, each `path: what it must be`. Empty when the value has the shape the
 * client's types promise. A merchant seals on its side whatever it likes and the service cannot look
 * inside, so the client checks a receipt before sealing it and after opening it, and an app never reads
 * `items` that are a string. Members `Receipt` does not have are left alone: a newer receipt may have
 * them, and a signature covers them.
 */
export function receiptJsonProblems(value: unknown): string[] {
  const problems: string[] = [];
  if (!isJsonObject(value)) return ["must be a JSON object"];
  messageProblems(ReceiptSchema, value, "", problems);
  return problems.slice(0, MAX_PROBLEMS);
}

function messageProblems(desc: DescMessage, json: JsonObject, prefix: string, problems: string[]): void {
  for (const field of desc.fields) {
    if (problems.length >= MAX_PROBLEMS) return;
    // An own member only: JSON.parse makes no other, and an inherited one is not the receipt's.
    const member = Object.hasOwn(json, field.jsonName) ? json[field.jsonName] : undefined;
    if (member === undefined) continue;
    const path = `${prefix}${field.jsonName}`;
    if (field.fieldKind !== "list") {
      const problem = valueProblem(field, member, path, problems);
      if (problem !== undefined) problems.push(`${path}: ${problem}`);
    } else if (!Array.isArray(member)) {
      problems.push(`${path}: must be an array`);
    } else {
      member.forEach((element, i) => {
        const problem = valueProblem(field, element, `${path}[${i}]`, problems);
        if (problem !== undefined) problems.push(`${path}[${i}]: ${problem}`);
      });
    }
  }
}

/** What is wrong with one value of `field` (a list's element for a list), or undefined. */
function valueProblem(
  field: DescField,
  value: JsonValue,
  path: string,
  problems: string[],
): string | undefined {
  switch (field.fieldKind) {
    case "map":
      return isJsonObject(value) ? undefined : "must be a JSON object";
    case "enum":
      return typeof value === "string" ? undefined : "must be a string";
    case "scalar":
      return scalarProblem(field.scalar, value);
    case "message":
      return messageValueProblem(field.message, value, path, problems);
    case "list":
      if (field.listKind === "enum") return typeof value === "string" ? undefined : "must be a string";
      if (field.listKind === "scalar") return scalarProblem(field.scalar, value);
      return messageValueProblem(field.message, value, path, problems);
  }
}

function messageValueProblem(
  message: DescMessage,
  value: JsonValue,
  path: string,
  problems: string[],
): string | undefined {
  if (message.typeName === TimestampSchema.typeName) return timestampProblem(value);
  if (!isJsonObject(value)) return "must be a JSON object";
  messageProblems(message, value, `${path}.`, problems);
  return undefined;
}

function scalarProblem(scalar: ScalarType, value: JsonValue): string | undefined {
  switch (scalar) {
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return typeof value === "string" ? undefined : "must be a string";
    case ScalarType.BOOL:
      return typeof value === "boolean" ? undefined : "must be true or false";
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return typeof value === "number" && Number.isFinite(value) ? undefined : "must be a number";
    default:
      return Number.isSafeInteger(value) ? undefined : "must be an integer (a JSON number)";
  }
}

function timestampProblem(value: JsonValue): string | undefined {
  if (typeof value !== "string") return "must be an RFC 3339 date-time string";
  try {
    fromJson(TimestampSchema, value);
    return undefined;
  } catch {
    return "must be an RFC 3339 date-time string";
  }
}

function isJsonObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
