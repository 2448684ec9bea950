import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { COLLECTIONS, INDEXES, SHARD_KEYS } from "../../src/store/mongo/indexes.js";
import { CLAIMS_BACKFILL } from "../../src/store/mongo/receipts.js";
import { SCATTER_GATHER, TRANSACTIONS } from "../../src/store/mongo/sharding.js";

/** A shard key as docs/scaling.md writes it: `{panHash: 1, id: 1}`. */
function rendered(key: Readonly<Record<string, 1 | "hashed">>): string {
  return `{${Object.entries(key)
    .map(([field, kind]) => `${field}: ${JSON.stringify(kind)}`)
    .join(", ")}}`;
}

/** The bulleted items of a Markdown text, each on one line. */
function bullets(markdown: string): string[] {
  return markdown
    .split(/\n(?=- )|\n\n/)
    .filter((item) => item.startsWith("- "))
    .map((item) => item.replace(/\n\s*/g, " "));
}

/**
 * Every declared unique index that its collection's declared shard key cannot carry on a cluster (an
 * index must start with every field of a ranged key; a hashed key carries none).
 */
function uncarriedUniqueRules(): string[] {
  const found: string[] = [];
  for (const [collection, indexes] of Object.entries(INDEXES)) {
    const declared = SHARD_KEYS[collection as keyof typeof SHARD_KEYS];
    if (declared === undefined || declared.key === "unsharded") continue;
    const key = declared.key;
    const hashed = Object.values(key).includes("hashed");
    for (const index of indexes) {
      if (index.unique !== true) continue;
      const fields = Object.keys(index.key as Record<string, unknown>);
      const prefixed = Object.keys(key).every((field, i) => fields[i] === field);
      if (hashed || !prefixed) found.push(`${collection}.${index.name}`);
    }
  }
  return found;
}

describe("shard key declarations (docs/scaling.md)", () => {
  it("declare a place for every collection, with a reason", () => {
    for (const name of Object.values(COLLECTIONS)) {
      expect(SHARD_KEYS[name]?.why.trim(), name).not.toBe("");
    }
  });

  it("ask a unique shard key only of ranged keys", () => {
    for (const [name, declared] of Object.entries(SHARD_KEYS)) {
      if (declared.unique !== true || declared.key === "unsharded") continue;
      expect(Object.values(declared.key), name).not.toContain("hashed");
    }
  });

  it("leave no unique index that a collection's shard key cannot carry", () => {
    // Each would let duplicates in across shards; MongoDB refuses to create or keep one on a
    // collection sharded as declared.
    expect(uncarriedUniqueRules()).toEqual([]);
  });

  it("declare scatter-gather only on sharded collections, each with a reason", () => {
    for (const [id, declared] of Object.entries(SCATTER_GATHER)) {
      expect(SHARD_KEYS[declared.collection].key, id).not.toBe("unsharded");
      expect(declared.reason.trim(), id).not.toBe("");
      expect(id.startsWith(`${declared.collection}.`), id).toBe(true);
    }
    for (const [id, declared] of Object.entries(TRANSACTIONS)) {
      expect(declared.maxShards, id).toBeGreaterThanOrEqual(1);
      expect(declared.maxShards, id).toBeLessThanOrEqual(4);
    }
  });

  it("are the keys, scatter-gathers and transactions docs/scaling.md lists", () => {
    const doc = readFileSync(join(import.meta.dirname, "..", "..", "docs", "scaling.md"), "utf8");
    for (const [name, declared] of Object.entries(SHARD_KEYS)) {
      const item = bullets(doc).find((text) => text.split(":")[0]?.includes(`\`${name}\``));
      const place =
        declared.key === "unsharded"
          ? ": unsharded."
          : `: \`${rendered(declared.key)}\`${declared.unique === true ? ", unique" : ""}.`;
      expect(item, name).toContain(place);
    }
    for (const id of Object.keys(SCATTER_GATHER)) expect(doc, id).toMatch(new RegExp(`\\| \`${id}\` +\\|`));
    for (const [id, declared] of Object.entries(TRANSACTIONS)) {
      expect(doc, id).toMatch(new RegExp(`\\| \`${id}\` +\\| +${declared.maxShards} \\|`));
    }
  });
});

describe("docs/scaling.md's commands for operators", () => {
  const doc = readFileSync(join(import.meta.dirname, "..", "..", "docs", "scaling.md"), "utf8");
  /** The fenced block after `<!-- name -->`. */
  const block = (name: string) =>
    /```js\n([\s\S]*?)```/.exec(doc.slice(doc.indexOf(`<!-- ${name} -->`)))?.[1] ?? "";

  it("shard every sharded collection as declared, and only those", () => {
    const expected = [`sh.enableSharding("receipts");`];
    for (const [name, declared] of Object.entries(SHARD_KEYS)) {
      if (declared.key === "unsharded") continue;
      const key = `{ ${Object.entries(declared.key)
        .map(([field, kind]) => `${field}: ${JSON.stringify(kind)}`)
        .join(", ")} }`;
      expected.push(
        `sh.shardCollection("receipts.${name}", ${key}${declared.unique === true ? ", true" : ""});`,
      );
    }
    expect(block("shard-commands").trim().split("\n")).toEqual(expected);
  });

  it("backfill claims with the adapter's own pipeline", () => {
    const text = block("claims-backfill")
      .replace(/^\s*db\.receipts\.aggregate\(/, "")
      .replace(/\)\s*$/, "");
    expect(JSON.parse(text)).toEqual(CLAIMS_BACKFILL);
  });
});
