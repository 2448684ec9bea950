import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ALL_EVENT_TYPES, EVENT_TYPES } from "../../src/domain/event-types.js";
import { DEFAULT_RETRY_SCHEDULE } from "../../src/events/config.js";

/**
 * docs/events.md against the code it describes: the table of event types (who receives each and the
 * members it carries) is EVENT_TYPES, every variable the events configuration reads is documented, and
 * the published retry schedule is the default one.
 */
const ROOT = join(import.meta.dirname, "..", "..");
const DOC = readFileSync(join(ROOT, "docs", "events.md"), "utf8");

/** The rows of the table between the event-types markers: type, role, data members. */
function documentedTypes(): Map<string, { role: string; data: string[] }> {
  const start = DOC.indexOf("<!-- event-types:start -->");
  const end = DOC.indexOf("<!-- event-types:end -->");
  expect(start, "docs/events.md has the event-types markers").toBeGreaterThanOrEqual(0);
  const rows = new Map<string, { role: string; data: string[] }>();
  for (const line of DOC.slice(start, end).split("\n")) {
    const cells = line.split("|").map((c) => c.trim());
    const type = /^`([a-z_.]+)`$/.exec(cells[1] ?? "")?.[1];
    if (type === undefined) continue;
    rows.set(type, {
      role: cells[2] ?? "",
      data: [...(cells[3] ?? "").matchAll(/`([A-Za-z]+)`/g)].map((m) => m[1] as string),
    });
  }
  return rows;
}

describe("docs/events.md", () => {
  it("lists every event type with the role it is sent to and exactly the members it carries", () => {
    const rows = documentedTypes();
    expect([...rows.keys()]).toEqual(ALL_EVENT_TYPES);
    for (const type of ALL_EVENT_TYPES) {
      expect(rows.get(type), type).toEqual({
        role: EVENT_TYPES[type].role,
        data: [...EVENT_TYPES[type].data],
      });
    }
  });

  it("documents every variable the events configuration reads, and the default retry schedule", () => {
    const source = readFileSync(join(ROOT, "src", "events", "config.ts"), "utf8");
    const names = new Set([...source.matchAll(/"((?:WEBHOOK|EVENTS|WATCH)_[A-Z_]+)"/g)].map((m) => m[1]));
    names.add("WEBHOOK_SECRET_KEY");
    names.add("WEBHOOK_RETRY_SCHEDULE");
    expect(names.size).toBeGreaterThanOrEqual(13);
    for (const name of names) expect(DOC, name).toContain(`| \`${name}\``);
    expect(DOC).toContain(`\`${DEFAULT_RETRY_SCHEDULE}\``);
  });
});
