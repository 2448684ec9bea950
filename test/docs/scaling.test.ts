import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { ShardKeyDeclaration } from "../../src/store/mongo/collection.js";
import { MONGO_COLLECTIONS } from "../../src/store/mongo/index.js";

/**
 * docs/scaling.md's shard keys and sharding commands are printed from the collections' declarations
 * (each beside its repository in src/store/mongo/), never edited by hand: this test fails when the
 * document is stale, and `UPDATE_SCALING=1 npx vitest run test/docs/scaling.test.ts` rewrites the
 * marked blocks. (test/store/sharding-declarations.test.ts reads the same blocks back.)
 */
const FILE = join(import.meta.dirname, "..", "..", "docs", "scaling.md");

/** The width docs/scaling.md's prose wraps at. */
const WIDTH = 104;

/** `text` wrapped at {@link WIDTH}, lines after the first indented by `indent`. */
function wrapped(text: string, indent: string): string {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(" ")) {
    if (line !== "" && `${line} ${word}`.length > WIDTH) {
      lines.push(line);
      line = `${indent}${word}`;
    } else {
      line = line === "" ? word : `${line} ${word}`;
    }
  }
  lines.push(line);
  return lines.join("\n");
}

/** A key's fields as the document writes them: `panHash: 1, id: 1`. */
function fields(key: Readonly<Record<string, 1 | "hashed">>): string {
  return Object.entries(key)
    .map(([field, kind]) => `${field}: ${JSON.stringify(kind)}`)
    .join(", ");
}

/** Where a collection goes: `` `{panHash: 1, id: 1}`, unique`` or `unsharded`. */
function placeOf(shardKey: ShardKeyDeclaration): string {
  if (shardKey.key === "unsharded") return "unsharded";
  return `\`{${fields(shardKey.key)}}\`${shardKey.unique === true ? ", unique" : ""}`;
}

/** The shard-keys block: one item per collection, its place and why, in the store's order. */
function shardKeysBlock(): string {
  return MONGO_COLLECTIONS.map(({ name, shardKey }) =>
    wrapped(`- \`${name}\`: ${placeOf(shardKey)}. ${shardKey.why}`, "  "),
  ).join("\n");
}

/**
 * The sharded collections whose documents need an index on the key before `sh.shardCollection` (no
 * declared index starts with the key, and the key is not `_id`'s own index).
 */
function needingAnIndexFirst(): Array<{ name: string; key: Readonly<Record<string, 1 | "hashed">> }> {
  const found = [];
  for (const { name, indexes, shardKey } of MONGO_COLLECTIONS) {
    const key = shardKey.key;
    if (key === "unsharded" || fields(key) === "_id: 1") continue;
    const entries = Object.entries(key);
    const led = indexes.some((index) =>
      entries.every(
        ([field, kind], i) => Object.entries(index.key as object)[i]?.join() === [field, kind].join(),
      ),
    );
    if (!led) found.push({ name, key });
  }
  return found;
}

/** The shard-commands block: the commands an operator runs in mongosh, and the indexes to make first. */
function shardCommandsBlock(): string {
  const commands = [`sh.enableSharding("receipts");`];
  for (const { name, shardKey } of MONGO_COLLECTIONS) {
    if (shardKey.key === "unsharded") continue;
    const unique = shardKey.unique === true ? ", true" : "";
    commands.push(`sh.shardCollection("receipts.${name}", { ${fields(shardKey.key)} }${unique});`);
  }
  const first = needingAnIndexFirst();
  const lead =
    "The `true` (unique) matters: sharded without it, the key's index is not unique, and `init()` refuses " +
    "to start, naming the index. A collection that already holds documents needs an index on its key first";
  const rest =
    first.length === 0
      ? "; all have one."
      : `; all have one but ${first.map(({ name }) => `\`${name}\``).join(", ")}: run ${first
          .map(({ name, key }) => `\`db.${name}.createIndex({ ${fields(key)} })\``)
          .join(", ")} before sharding ${first.length === 1 ? "it" : "them"}.`;
  return ["```js", ...commands, "```", "", wrapped(`${lead}${rest}`, "")].join("\n");
}

/** The blocks, by their start marker, and the end marker of each. */
const BLOCKS = [
  { start: "<!-- shard-keys:start -->", end: "<!-- shard-keys:end -->", text: shardKeysBlock },
  { start: "<!-- shard-commands -->", end: "<!-- shard-commands:end -->", text: shardCommandsBlock },
];

/** `doc` with every marked block replaced by its text from the declarations. */
function regenerated(doc: string): string {
  let out = doc;
  for (const block of BLOCKS) {
    const start = out.indexOf(block.start);
    const end = out.indexOf(block.end);
    if (start < 0 || end < start) throw new Error(`docs/scaling.md lacks ${block.start} ... ${block.end}`);
    out = `${out.slice(0, start + block.start.length)}\n${block.text()}\n${out.slice(end)}`;
  }
  return out;
}

describe("docs/scaling.md", () => {
  it("lists every collection's shard key and the sharding commands as declared", () => {
    if (process.env.UPDATE_SCALING === "1") writeFileSync(FILE, regenerated(readFileSync(FILE, "utf8")));
    const doc = readFileSync(FILE, "utf8");
    expect(
      doc === regenerated(doc),
      "docs/scaling.md is stale: run UPDATE_SCALING=1 npx vitest run test/docs/scaling.test.ts",
    ).toBe(true);
  });

  it("names every collection once in its shard keys", () => {
    const doc = readFileSync(FILE, "utf8");
    const block = doc.slice(doc.indexOf("<!-- shard-keys:start -->"), doc.indexOf("<!-- shard-keys:end -->"));
    const named = [...block.matchAll(/^- `([A-Za-z]+)`:/gm)].map((m) => m[1]);
    expect(named.sort()).toEqual(MONGO_COLLECTIONS.map(({ name }) => name).sort());
  });

  it("says which sharded collection needs an index on its key before sharding", () => {
    // audit is sharded on a hashed _id, which no declared index serves.
    expect(needingAnIndexFirst().map(({ name }) => name)).toEqual(["audit"]);
    expect(shardCommandsBlock()).toContain(
      'run `db.audit.createIndex({ _id: "hashed" })` before sharding it.',
    );
  });
});
