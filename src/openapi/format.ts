import type { JsonValue } from "@bufbuild/protobuf";

/**
 * JSON text laid out the way the project's formatter (Biome, line width 110) lays it out, so the
 * generated `openapi/openapi.json` passes `biome check` as written: non-empty objects one member per
 * line; arrays of scalars on one line when that line, trailing comma included, fits the width, one
 * element per line otherwise; arrays holding objects or arrays always one element per line.
 */

/** The line width of `biome.json`. */
export const LINE_WIDTH = 110;

const INDENT = "  ";

/** Formats `value` as JSON text with a trailing newline. */
export function formatJson(value: JsonValue, lineWidth = LINE_WIDTH): string {
  return `${render(value, 0, 0, 0, lineWidth)}\n`;
}

/**
 * Renders `value` at nesting `depth`; `lead` is the length of the text before it on its line and
 * `trail` the length after it (a comma), which decide whether an array fits on one line.
 */
function render(value: JsonValue, depth: number, lead: number, trail: number, width: number): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  const inner = INDENT.repeat(depth + 1);
  const close = `\n${INDENT.repeat(depth)}`;
  if (Array.isArray(value)) {
    if (value.length === 0) return "[]";
    const flat = value.every((v) => v === null || typeof v !== "object");
    if (flat) {
      const line = `[${value.map((v) => JSON.stringify(v)).join(", ")}]`;
      if (lead + line.length + trail <= width) return line;
    }
    const items = value.map((item, i) => {
      const comma = i < value.length - 1 ? 1 : 0;
      return `${inner}${render(item, depth + 1, inner.length, comma, width)}${comma ? "," : ""}`;
    });
    return `[\n${items.join("\n")}${close}]`;
  }
  const entries = Object.entries(value).filter(([, v]) => v !== undefined);
  if (entries.length === 0) return "{}";
  const members = entries.map(([key, item], i) => {
    const comma = i < entries.length - 1 ? 1 : 0;
    const prefix = `${inner}${JSON.stringify(key)}: `;
    return `${prefix}${render(item as JsonValue, depth + 1, prefix.length, comma, width)}${comma ? "," : ""}`;
  });
  return `{\n${members.join("\n")}${close}}`;
}
