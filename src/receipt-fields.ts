import { type DescMessage, type JsonObject, type JsonValue, type Message, toJson } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
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
