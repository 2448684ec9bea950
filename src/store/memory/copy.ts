/**
 * Deep copy used on the way in and out of the memory store, so that no caller ever holds a reference
 * to a stored object (the contract's "records are returned as copies"). Dates stay Dates.
 *
 * Records are plain data (objects, arrays, strings, numbers, booleans, Dates), which this copies by
 * hand; anything else goes to `structuredClone`. Every call of the encrypt path copies a record or
 * two, and `structuredClone` (serialize, then deserialize) cost about seven times as much per record.
 *
 * Bytes (a `Uint8Array`, a `Buffer` or any other subclass) come back as a plain `Uint8Array` of the
 * same bytes, as `structuredClone` gives them, but copied by `new Uint8Array`: `structuredClone`
 * copies the view's whole backing `ArrayBuffer` (a `Buffer` from Node's pool drags kilobytes along)
 * and took 8% of the trivial checkpoint call's busy main thread. The copy's `byteOffset` is 0 and its buffer
 * holds only its bytes; nothing reads stored bytes other than through their offset and length.
 */
export function copy<T>(value: T): T {
  return copyValue(value) as T;
}

function copyValue(value: unknown): unknown {
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) return value.map(copyValue);
  if (value instanceof Date) return new Date(value.getTime());
  if (value instanceof Uint8Array) return new Uint8Array(value);
  if (Object.getPrototypeOf(value) !== Object.prototype) return structuredClone(value);
  // A spread copies a record of a known shape in one fast step (three times faster than setting the
  // keys one by one); only the nested objects and Dates need copies of their own.
  const out: Record<string, unknown> = { ...value };
  for (const key in out) {
    const field = out[key];
    if (typeof field === "object" && field !== null) out[key] = copyValue(field);
  }
  return out;
}
