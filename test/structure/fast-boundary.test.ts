import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * The hand-written fast paths live beside their owners and are switched in one place each: the
 * module of a fast path is imported (outside its own group of files) only by the module that asks
 * `FAST_PATHS` whether it is on. A file that imported one directly would bypass the switch. And the
 * switch itself, src/fast-paths.ts, imports nothing.
 */

const SRC = join(import.meta.dirname, "../../src");

/**
 * Each fast path's files, and the modules outside them that may import them: each asks the switch.
 * The JSON writer is switched in the codec and, for a page of receipts written from its records, in
 * the list handler.
 */
const FAST_PATHS: { files: string[]; switchedIn: string[] }[] = [
  {
    files: ["http/grpc-unary.ts", "http/grpc-call.ts", "http/grpc-envelope.ts", "http/grpc-headers.ts"],
    switchedIn: ["http/server.ts"],
  },
  {
    files: [
      "rpc/json-input.ts",
      "rpc/json-output.ts",
      "rpc/json-text.ts",
      "rpc/per-descriptor.ts",
      "rpc/receipt-page.ts",
    ],
    switchedIn: ["rpc/json-codec.ts", "rpc/services/receipts.ts"],
  },
  { files: ["crypto/der.ts"], switchedIn: ["crypto/keys.ts"] },
];

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sourceFiles(join(dir, entry.name))
      : entry.name.endsWith(".ts")
        ? [join(dir, entry.name)]
        : [],
  );
}

/** The src-relative paths `file` imports (values and types alike), `.js` specifiers read as `.ts`. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, "utf8");
  return [...text.matchAll(/from\s+"(\.[^"]+)"/g)].map(([, spec]) =>
    relative(SRC, resolve(dirname(file), (spec ?? "").replace(/\.js$/, ".ts"))),
  );
}

describe("fast paths", () => {
  it("are imported only by the module that switches them", () => {
    const offenders: string[] = [];
    for (const file of sourceFiles(SRC)) {
      const path = relative(SRC, file);
      for (const target of importsOf(file)) {
        const fast = FAST_PATHS.find((f) => f.files.includes(target));
        if (fast === undefined || fast.files.includes(path) || fast.switchedIn.includes(path)) continue;
        offenders.push(`${path} -> ${target}`);
      }
    }
    expect(offenders).toEqual([]);
  });

  it("are switched where they are imported", () => {
    for (const { switchedIn } of FAST_PATHS) {
      for (const path of switchedIn) expect(readFileSync(join(SRC, path), "utf8"), path).toMatch(/\bisOn\(/);
    }
  });

  it("have one switch, which imports nothing", () => {
    const text = readFileSync(join(SRC, "fast-paths.ts"), "utf8");
    expect(text).not.toMatch(/^\s*(import|export .* from)\b/m);
    expect(text).toContain("export function isOn(");
  });
});
