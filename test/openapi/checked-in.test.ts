import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { formatJson } from "../../src/openapi/format.js";
import { serviceOpenApi } from "../../src/openapi/openapi.js";
import { openApiText } from "../../src/openapi/write.js";

/**
 * The checked-in `openapi/openapi.json` must be exactly what the protos produce, so CI proves the copy
 * readers see matches the server. `UPDATE_OPENAPI=1 npx vitest run test/openapi` rewrites it.
 */
const FILE = fileURLToPath(new URL("../../openapi/openapi.json", import.meta.url));

describe("openapi/openapi.json", () => {
  it("matches the document generated from the proto descriptors", async () => {
    if (process.env.UPDATE_OPENAPI === "1") await writeFile(FILE, openApiText());
    const committed = await readFile(FILE, "utf8").catch(() => "(missing)");
    expect(
      committed === openApiText(),
      "openapi/openapi.json is stale: run UPDATE_OPENAPI=1 npx vitest run test/openapi",
    ).toBe(true);
    expect(JSON.parse(committed)).toEqual(serviceOpenApi());
  });

  it("is the same document every time it is built", () => {
    expect(openApiText()).toBe(openApiText());
  });
});

describe("formatJson", () => {
  it("round-trips the document", () => {
    const doc = serviceOpenApi();
    expect(JSON.parse(formatJson(doc))).toEqual(doc);
  });

  it("lays JSON out like the project's formatter: objects expanded, short scalar arrays on one line", () => {
    expect(formatJson({ a: { required: ["x", "y"], empty: {}, none: [] }, b: [{ c: 1 }] })).toBe(
      [
        "{",
        '  "a": {',
        '    "required": ["x", "y"],',
        '    "empty": {},',
        '    "none": []',
        "  },",
        '  "b": [',
        "    {",
        '      "c": 1',
        "    }",
        "  ]",
        "}",
        "",
      ].join("\n"),
    );
  });

  it("breaks a scalar array whose line, trailing comma included, passes the width", () => {
    const fits = formatJson({ k: ["abc"], z: 1 }, 15);
    expect(fits).toContain('  "k": ["abc"],\n');
    const breaks = formatJson({ k: ["abcd"], z: 1 }, 15);
    expect(breaks).toContain('  "k": [\n    "abcd"\n  ],\n');
    expect(formatJson({ k: ["abcd"] }, 15)).toContain('  "k": ["abcd"]\n');
  });
});
