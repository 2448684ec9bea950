/* Values as MongoDB keeps them, for the driver-level fake: copies, ordering, equality keys. */
import { Binary, MongoServerError, ObjectId } from "mongodb";

/** A stored document: plain data with an `_id`. */
export type Doc = Record<string, unknown> & { _id?: unknown };

/**
 * A deep copy as a round trip through BSON makes it: Dates and ObjectIds stay themselves, and an
 * `undefined` field is dropped (`ignoreUndefined`) or becomes null, as the driver serializes it.
 */
export function bsonCopy<T>(value: T, ignoreUndefined: boolean): T {
  return copyValue(value, ignoreUndefined) as T;
}

function copyValue(value: unknown, ignoreUndefined: boolean): unknown {
  if (typeof value !== "object" || value === null) return value;
  if (value instanceof Date) return new Date(value.getTime());
  if (value instanceof ObjectId) return new ObjectId(value.toHexString());
  if (value instanceof Binary) return new Binary(Buffer.from(value.read(0, value.length())), value.sub_type);
  if (Array.isArray(value)) return value.map((v) => (v === undefined ? null : copyValue(v, ignoreUndefined)));
  const out: Record<string, unknown> = {};
  for (const [key, field] of Object.entries(value)) {
    if (field === undefined) {
      if (!ignoreUndefined) out[key] = null;
      continue;
    }
    if (typeof field === "function") continue;
    out[key] = copyValue(field, ignoreUndefined);
  }
  return out;
}

/** BSON's order of types in comparisons and sorts (the subset the store uses). */
function typeRank(value: unknown): number {
  if (value === undefined || value === null) return 1;
  if (typeof value === "number" || typeof value === "bigint") return 2;
  if (typeof value === "string") return 3;
  if (value instanceof ObjectId) return 7;
  if (typeof value === "boolean") return 8;
  if (value instanceof Date) return 9;
  if (Array.isArray(value)) return 5;
  if (value instanceof Binary) return 6;
  return 4;
}

/** Compares two values in MongoDB's sort order (simple collation: strings by code unit). */
export function compareValues(a: unknown, b: unknown): number {
  const [ra, rb] = [typeRank(a), typeRank(b)];
  if (ra !== rb) return ra - rb;
  if (a instanceof Date && b instanceof Date) return a.getTime() - b.getTime();
  if (a instanceof ObjectId && b instanceof ObjectId) return compareValues(a.toHexString(), b.toHexString());
  if (a instanceof Binary && b instanceof Binary) return compareValues(keyOf(a), keyOf(b));
  if (typeof a === "number" && typeof b === "number") return a - b;
  if (typeof a === "string" && typeof b === "string") return a < b ? -1 : a > b ? 1 : 0;
  if (typeof a === "boolean" && typeof b === "boolean") return Number(a) - Number(b);
  return compareValues(keyOf(a), keyOf(b));
}

/** A string that is equal for two values exactly when MongoDB finds them equal (index keys, `_id`). */
export function keyOf(value: unknown): string {
  return JSON.stringify(tagged(value));
}

function tagged(value: unknown): unknown {
  if (value === undefined || value === null) return null;
  if (value instanceof Date) return { $date: value.getTime() };
  if (value instanceof ObjectId) return { $oid: value.toHexString() };
  if (value instanceof Binary) {
    return { $binary: Buffer.from(value.read(0, value.length())).toString("base64"), $type: value.sub_type };
  }
  if (Array.isArray(value)) return value.map(tagged);
  if (typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, tagged(v)]));
  }
  return value;
}

/** The value at a dotted path of a document (top-level and nested object fields). */
export function valueAt(doc: Doc, path: string): unknown {
  let current: unknown = doc;
  for (const part of path.split(".")) {
    if (typeof current !== "object" || current === null) return undefined;
    current = (current as Record<string, unknown>)[part];
  }
  return current;
}

/** A server error as the driver raises it: a real `MongoServerError`, so the adapter's checks see it. */
export function serverError(
  code: number,
  codeName: string,
  message: string,
  extra: Record<string, unknown> = {},
): MongoServerError {
  return new MongoServerError({ message, errmsg: message, code, codeName, ok: 0, ...extra });
}

/** A small seeded PRNG (mulberry32): the fake's latencies repeat for a given seed. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
