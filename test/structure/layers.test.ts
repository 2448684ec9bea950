import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

/**
 * The layers of docs/architecture.md stay layers: no import runs back up. Each top-level folder of
 * src/ (and each file directly in src/) is one part, gen/ another; part A depends on part B when a
 * file of A imports one of B (type-only imports and re-exports included: they tie the code as much
 * as any). The parts must depend on each other without a loop: a loop means some import climbs from
 * a lower layer into a higher one, whichever way the layers are drawn. Loops inside one part are the
 * part's own business.
 */

const ROOT = join(import.meta.dirname, "../..");

/** Every TypeScript source file under `dir`, as paths from the repository's root. */
function sourcesUnder(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: "utf8" })
    .filter((file) => file.endsWith(".ts") && !file.endsWith(".d.ts"))
    .map((file) => join(dir, file));
}

/** The part a file belongs to: `gen`, `src/<folder>/`, or the file itself when it sits in src/. */
function partOf(file: string): string {
  if (file.startsWith("gen/")) return "gen";
  const [, first, rest] = /^src\/([^/]+)(\/.*)?$/.exec(file) ?? [];
  if (first === undefined) return file;
  return rest === undefined ? `src/${first}` : `src/${first}/`;
}

/** The project files `file` imports (relative specifiers, `.js` written for the `.ts` source). */
function importsOf(file: string): string[] {
  const info = ts.preProcessFile(readFileSync(join(ROOT, file), "utf8"), true, true);
  return info.importedFiles
    .map((i) => i.fileName)
    .filter((spec) => spec.startsWith("."))
    .map((spec) => relative(ROOT, join(ROOT, dirname(file), spec)).replace(/\.js$/, ".ts"));
}

/** An edge between parts with one file-level import that makes it, for the failure message. */
type Edges = Map<string, Map<string, string>>;

function partGraph(files: string[]): Edges {
  const edges: Edges = new Map();
  for (const file of files) {
    const from = partOf(file);
    for (const target of importsOf(file)) {
      const to = partOf(target);
      if (to === from) continue;
      const out = edges.get(from) ?? new Map<string, string>();
      if (!out.has(to)) out.set(to, `${file} -> ${target}`);
      edges.set(from, out);
    }
  }
  return edges;
}

/** One loop of the graph as its imports, or undefined when there is none. */
function loopIn(edges: Edges): string[] | undefined {
  const state = new Map<string, "open" | "done">();
  const path: string[] = [];
  const visit = (part: string): string[] | undefined => {
    state.set(part, "open");
    path.push(part);
    for (const next of edges.get(part)?.keys() ?? []) {
      if (state.get(next) === "open") {
        const loop = [...path.slice(path.indexOf(next)), next];
        return loop.slice(1).map((to, i) => edges.get(loop[i] as string)?.get(to) ?? "");
      }
      if (state.get(next) === undefined) {
        const found = visit(next);
        if (found) return found;
      }
    }
    path.pop();
    state.set(part, "done");
    return undefined;
  };
  for (const part of [...edges.keys()].sort()) {
    if (state.get(part) === undefined) {
      const found = visit(part);
      if (found) return found;
    }
  }
  return undefined;
}

describe("the layers", () => {
  it("finds a loop between parts, and none inside one", () => {
    const edges: Edges = new Map([
      ["src/a/", new Map([["src/b.ts", "src/a/x.ts -> src/b.ts"]])],
      ["src/b.ts", new Map([["src/a/", "src/b.ts -> src/a/y.ts"]])],
    ]);
    expect(loopIn(edges)).toEqual(["src/a/x.ts -> src/b.ts", "src/b.ts -> src/a/y.ts"]);
    edges.delete("src/b.ts");
    expect(loopIn(edges)).toBeUndefined();
    expect(partOf("src/domain/kt/log.ts")).toBe("src/domain/");
    expect(partOf("src/config.ts")).toBe("src/config.ts");
    expect(partOf("gen/receipts/v1/receipt_pb.ts")).toBe("gen");
  });

  it("have no import running back up: the parts of src/ and gen/ import each other without a loop", () => {
    const files = [...sourcesUnder("src"), ...sourcesUnder("gen")];
    expect(files.length).toBeGreaterThan(300);
    const edges = partGraph(files);
    expect(edges.get("src/app.ts")?.size ?? 0, "the composition root imports the layers").toBeGreaterThan(5);
    expect(
      loopIn(edges),
      "a loop of imports between parts (each line: the first import found)",
    ).toBeUndefined();
  });
});
