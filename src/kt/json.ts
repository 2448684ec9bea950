import canonicalizeModule from "canonicalize";

/**
 * Canonical JSON for statements (RFC 8785, with the RFC's reference implementation, `canonicalize`):
 * a statement is accepted only as the exact bytes its content canonicalises to, so one statement has
 * one spelling, and whatever a verifier parses is what the signer signed. Duplicate member names are
 * refused by name first (I-JSON, RFC 7493), so the reason says so.
 */

/** A JSON value. */
export type Json = string | number | boolean | null | Json[] | { [name: string]: Json };

/** A JSON object. */
export type JsonObject = { [name: string]: Json };

const canonicalize = canonicalizeModule as unknown as (input: unknown) => string | undefined;

/** The RFC 8785 canonical text of a JSON value. */
export function canonicalJson(value: Json): string {
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError("a value has no canonical JSON");
  return text;
}

/** An answer with a reason when it is no. */
export type Checked<T> = { ok: true; value: T } | { ok: false; reason: string };

/** The name of the first member that appears twice in one object of JSON `text`, if any. */
export function duplicateMember(text: string): string | undefined {
  const stack: Array<Set<string> | undefined> = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      let k = j + 1;
      while (k < text.length && /\s/.test(text[k] as string)) k++;
      const names = stack[stack.length - 1];
      if (text[k] === ":" && names !== undefined) {
        const name = JSON.parse(text.slice(i, j + 1)) as string;
        if (names.has(name)) return name;
        names.add(name);
      }
      i = j;
    } else if (c === "{") stack.push(new Set());
    else if (c === "[") stack.push(undefined);
    else if (c === "}" || c === "]") stack.pop();
  }
  return undefined;
}

/**
 * The object `text` holds, when `text` is exactly its RFC 8785 canonical form: JSON, an object, no
 * duplicate member, and byte-equal to its re-serialisation.
 */
export function parseCanonicalObject(text: string): Checked<JsonObject> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false, reason: "is not JSON" };
  }
  const duplicate = duplicateMember(text);
  if (duplicate !== undefined) return { ok: false, reason: `has the member "${duplicate}" twice` };
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return { ok: false, reason: "is not a JSON object" };
  }
  if (canonicalize(value) !== text) return { ok: false, reason: "is not in RFC 8785 canonical form" };
  return { ok: true, value: value as JsonObject };
}
