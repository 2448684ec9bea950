import type { DescField, DescMessage, JsonValue, MessageShape } from "@bufbuild/protobuf";
import { isOn } from "../fast-paths.js";
import { compiledJsonReader, compiledMessageFromJson } from "./json-input.js";
import { compiledMessageToJson } from "./json-output.js";
import { messageFromJsonReflective, messageToJsonReflective } from "./json-reflective.js";
import { compiledFieldToJsonText, compiledMessageToJsonText } from "./json-text.js";

export { membersAndColonsRead } from "./json-input.js";

/**
 * REST JSON in and out of messages: the compiled readers and writers when their fast paths are on
 * (`json-reader`, `json-writer`, `one-pass`; see src/fast-paths.ts), protobuf-es's reflective
 * `fromJson`/`toJson` otherwise. Both give the same answer for every input.
 */

/** A REST JSON request body as a message of `schema`; throws what `fromJson` throws. */
export function messageFromJson<Desc extends DescMessage>(schema: Desc, json: JsonValue): MessageShape<Desc> {
  return isOn("json-reader")
    ? compiledMessageFromJson(schema, json)
    : messageFromJsonReflective(schema, json);
}

/**
 * A REST JSON request read without its field-by-field check first (`one-pass`), or undefined: when
 * one-pass reading is off, when `schema` has no compiled reader, when `assemble` (the request JSON
 * from body and URL, unchecked) gives none, or when the reader gives up on it (which it does on
 * everything the check would name). Then the caller checks and reads.
 */
export function readUnchecked<Desc extends DescMessage>(
  schema: Desc,
  assemble: () => JsonValue | undefined,
): MessageShape<Desc> | undefined {
  if (!isOn("one-pass") || !isOn("json-reader")) return undefined;
  const read = compiledJsonReader(schema);
  if (read === undefined) return undefined;
  const json = assemble();
  if (json === undefined) return undefined;
  try {
    return read(json);
  } catch {
    return undefined;
  }
}

/** A message as REST JSON (see src/rpc/json-reflective.ts). */
export function messageToJson<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc>,
): JsonValue {
  return isOn("json-writer")
    ? compiledMessageToJson(schema, message)
    : messageToJsonReflective(schema, message);
}

/**
 * A message, or its one top-level field `field` (`null` when unset), as REST JSON text written
 * directly by the compiled text writers; undefined when `json-writer` is off, and the caller then
 * renders {@link messageToJson} and has it serialised. Either way the same characters.
 */
export function messageToJsonText<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc>,
  field?: DescField,
): string | undefined {
  if (!isOn("json-writer")) return undefined;
  return field === undefined
    ? compiledMessageToJsonText(schema, message)
    : compiledFieldToJsonText(schema, field, message);
}
