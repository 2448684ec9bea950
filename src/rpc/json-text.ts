import {
  type DescEnum,
  type DescField,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  type MessageShape,
  ScalarType,
} from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence, type Timestamp } from "@bufbuild/protobuf/wkt";
import { timestampJson } from "../proto-scalars.js";
import { base64Of } from "./base64-bytes.js";
import { enumWriter, isCompilable, scalarWriter } from "./json-output.js";
import { messageToJsonReflective } from "./json-reflective.js";
import { perDescriptor } from "./per-descriptor.js";

/**
 * The compiled JSON text writers (fast path `json-writer`): a REST answer written straight as JSON
 * text, exactly the characters `JSON.stringify(compiledMessageToJson(...))` gives (src/rpc/json-output.ts:
 * same members in the same order, the same numbers and escapes), one writer per message type compiled
 * from its descriptor. Building the answer as objects and then having Fastify stringify them scanned
 * every sealed part's base64 (7 KB a receipt of 50 items) for characters to escape: base64 has none,
 * so bytes are written between quotes as they are, every other string through `JSON.stringify`.
 * Every value goes through the object writer's own conversion (64-bit integers, NaN, enum names), so
 * the two cannot disagree on a value; a message type the object writer leaves to the reflective path
 * is written by `JSON.stringify` of that path's JSON here too.
 */

/** A message's own properties, read by field `localName`. */
type Fields = Record<string, unknown>;
type TextWriter = (message: Fields) => string;
/** JSON text of a value, or undefined where `JSON.stringify` leaves the member out (an undefined value). */
type ValueText = (value: unknown) => string | undefined;
/** The value of one field of a message as JSON text, or undefined when the message's JSON has no member for it. */
type MemberText = (message: Fields) => string | undefined;

/**
 * Where a message may carry its own JSON text: a function giving exactly what the compiled writer
 * would write for the message as it is now, or undefined when it cannot tell (the message is then
 * written as any other). Non-enumerable, so no copy of the message carries it (src/rpc/receipt-page.ts).
 */
export const OWN_JSON_TEXT = Symbol("own JSON text");

/** A message as REST JSON text: `JSON.stringify(compiledMessageToJson(schema, message))`, written directly. */
export function compiledMessageToJsonText<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc>,
): string {
  const own = (message as { [OWN_JSON_TEXT]?: () => string | undefined })[OWN_JSON_TEXT];
  return own?.() ?? textWriterFor(schema)(message as unknown as Fields);
}

/**
 * One top-level field of a message as REST JSON text, `null` when the message's JSON has no member for
 * it: the `data` of a REST answer whose binding answers with one field (`response_body`), as
 * `JSON.stringify(compiledMessageToJson(schema, message)[field.jsonName] ?? null)` gives it.
 */
export function compiledFieldToJsonText<Desc extends DescMessage>(
  schema: Desc,
  field: DescField,
  message: MessageShape<Desc>,
): string {
  const fields = message as unknown as Fields;
  if (!isCompilable(schema)) {
    const json = messageToJsonReflective(schema, message);
    const member = isJsonObject(json) ? json[field.jsonName] : undefined;
    return JSON.stringify(member ?? null);
  }
  return fieldValueFor(field)(fields) ?? "null";
}

function isJsonObject(json: JsonValue): json is JsonObject {
  return typeof json === "object" && json !== null && !Array.isArray(json);
}

const textWriterFor = perDescriptor(compile);

function compile(desc: DescMessage): TextWriter {
  if (desc.typeName === "google.protobuf.Timestamp") {
    // timestampJson writes RFC 3339 (digits, "-", ":", "T", ".", "Z") or throws: nothing to escape.
    return (m) => `"${timestampJson(m as unknown as Timestamp)}"`;
  }
  if (!isCompilable(desc)) {
    return (m) => JSON.stringify(messageToJsonReflective(desc, m as MessageShape<DescMessage>));
  }
  const fields = [...desc.fields].sort((a, b) => a.number - b.number);
  // Each member's name with the comma before it, but the first member written: one string added per member.
  const first = fields.map((f) => `{${JSON.stringify(f.jsonName)}:`);
  const next = fields.map((f) => `,${JSON.stringify(f.jsonName)}:`);
  const values = fields.map(fieldValueFor);
  return (message) => {
    let text = "";
    for (let i = 0; i < values.length; i++) {
      const written = (values[i] as MemberText)(message);
      if (written !== undefined) text = text === "" ? first[i] + written : text + next[i] + written;
    }
    return text === "" ? "{}" : `${text}}`;
  };
}

/** The value of `field` in a message as JSON text, undefined when the message's JSON has no member for it. */
const fieldValueFor = perDescriptor(fieldValue);

function fieldValue(field: DescField): MemberText {
  const { localName } = field;
  const value = valueText(field);
  if (field.presence === FeatureSet_FieldPresence.IMPLICIT) return (m) => value(m[localName]);
  return (m) => {
    const v = m[localName];
    return v !== undefined && Object.hasOwn(m, localName) ? value(v) : undefined;
  };
}

function valueText(field: DescField): ValueText {
  switch (field.fieldKind) {
    case "scalar":
      return scalarText(field.scalar);
    case "enum":
      return enumText(field.enum);
    case "message":
      return messageText(field.message);
    case "list": {
      const item =
        field.listKind === "scalar"
          ? scalarText(field.scalar)
          : field.listKind === "enum"
            ? enumText(field.enum)
            : messageText(field.message);
      return (v) => listText(v as unknown[], item);
    }
    case "map": {
      const item =
        field.mapKind === "scalar"
          ? scalarText(field.scalar)
          : field.mapKind === "enum"
            ? enumText(field.enum)
            : messageText(field.message);
      return (v) => mapText(v as Fields, item);
    }
  }
}

function messageText(desc: DescMessage): ValueText {
  // Looked up on first use, not here: a message type may contain itself.
  let writer: TextWriter | undefined;
  return (v) => {
    if (writer === undefined) writer = textWriterFor(desc);
    return writer(v as Fields);
  };
}

function enumText(desc: DescEnum): ValueText {
  const json = enumWriter(desc);
  return (v) => primitiveText(json(v));
}

/** Items `JSON.stringify` would leave out of an object become `null` in an array, as there. */
function listText(list: unknown[], item: ValueText): string {
  let text = "";
  for (let i = 0; i < list.length; i++) {
    const written = item(list[i]) ?? "null";
    text = i === 0 ? written : `${text},${written}`;
  }
  return `[${text}]`;
}

/**
 * A map as the object writer builds it (`json[key] = item(entry)` in `Object.entries` order) and
 * `JSON.stringify` then writes it: an entry whose value has no JSON is left out, and so is a
 * `__proto__` key, which that assignment turns into the object's prototype rather than a member.
 */
function mapText(map: Fields, item: ValueText): string {
  let text = "";
  for (const [key, entry] of Object.entries(map)) {
    if (key === "__proto__") continue;
    const written = item(entry);
    if (written === undefined) continue;
    const member = `${JSON.stringify(key)}:${written}`;
    text = text === "" ? member : `${text},${member}`;
  }
  return `{${text}}`;
}

function scalarText(type: ScalarType): ValueText {
  // Standard base64 (the bytes' own encoding, or the text they remember, which src/rpc/base64-bytes.ts
  // keeps only when it needs no escaping): written between quotes without a scan for escapes.
  if (type === ScalarType.BYTES) return (v) => `"${base64Of(v as Uint8Array)}"`;
  const json = scalarWriter(type);
  return (v) => primitiveText(json(v));
}

/** `JSON.stringify` of a scalar's JSON, without its set-up for the common kinds. */
function primitiveText(json: JsonValue): string | undefined {
  switch (typeof json) {
    case "string":
      return stringText(json);
    case "number":
      return Number.isFinite(json) ? `${json}` : "null";
    case "boolean":
      return json ? "true" : "false";
    default:
      return JSON.stringify(json);
  }
}

/** Strings this long or shorter are checked here; a longer one is left to `JSON.stringify`'s own scan. */
const SHORT = 64;

/**
 * `JSON.stringify(value)` of a string: a short one that needs no escape (no quote, backslash, control
 * character or surrogate) between quotes as it is, which for the ids and names of an answer is a third
 * of the builtin's call; anything else through the builtin. A surrogate, paired or not, is left to it.
 */
export function stringText(value: string): string {
  if (value.length > SHORT) return JSON.stringify(value);
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c || (c >= 0xd800 && c <= 0xdfff)) return JSON.stringify(value);
  }
  return `"${value}"`;
}
