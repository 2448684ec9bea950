import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { breakingChanges } from "../../scripts/openapi-breaking.mjs";

/**
 * The REST surface's versioning gate (scripts/openapi-breaking.mjs, run by CI against the previous
 * commit): small synthetic documents for each rule, then the script as CI runs it.
 */

const SCRIPT = fileURLToPath(new URL("../../scripts/openapi-breaking.mjs", import.meta.url));
const CHECKED_IN = fileURLToPath(new URL("../../openapi/openapi.json", import.meta.url));

/** A document with one POST operation whose request and 200 response use the given schemas. */
function document(request: object, response: object, extra: Record<string, object> = {}) {
  return {
    openapi: "3.1.0",
    paths: {
      "/api/v1/things": {
        post: {
          requestBody: { content: { "application/json": { schema: { $ref: "#/components/schemas/Req" } } } },
          responses: {
            200: {
              content: {
                "application/json": {
                  schema: {
                    type: "object",
                    required: ["success", "data"],
                    properties: { success: { type: "boolean" }, data: { $ref: "#/components/schemas/Res" } },
                  },
                },
              },
            },
            400: { $ref: "#/components/responses/Error400" },
          },
        },
      },
      ...extra,
    },
    components: {
      schemas: { Req: request, Res: response },
      responses: {
        Error400: {
          content: {
            "application/json": {
              schema: { type: "object", properties: { error: { type: "object", properties: { code: {} } } } },
            },
          },
        },
      },
    },
  };
}

const request = { type: "object", required: ["name"], properties: { name: { type: "string" } } };
const response = {
  type: "object",
  properties: {
    id: { type: "string" },
    items: { type: "array", items: { type: "object", properties: { sku: { type: "string" } } } },
  },
};
const other = { "/api/v1/other/{id}": { get: { responses: { 200: { description: "ok" } } } } };

describe("the REST versioning gate", () => {
  it("passes an unchanged document and additions: an optional request field, a response field, a path", () => {
    const before = document(request, response);
    expect(breakingChanges(before, before)).toEqual([]);
    const after = document(
      { ...request, properties: { ...request.properties, note: { type: "string" } } },
      { ...response, properties: { ...response.properties, createdAt: { type: "string" } } },
      other,
    );
    expect(breakingChanges(before, after)).toEqual([]);
  });

  it("fails on a removed path and on a removed method", () => {
    const before = document(request, response, other);
    expect(breakingChanges(before, document(request, response))).toEqual(["GET /api/v1/other/{id}: removed"]);
    const moved = document(request, response, {
      "/api/v1/other/{id}": { put: { responses: { 200: { description: "ok" } } } },
    });
    expect(breakingChanges(before, moved)).toEqual(["GET /api/v1/other/{id}: removed"]);
  });

  it("fails on a newly required request field, new or formerly optional, and a newly required body", () => {
    const before = document(request, response);
    const added = document(
      { ...request, required: ["name", "amount"], properties: { ...request.properties, amount: {} } },
      response,
    );
    expect(breakingChanges(before, added)).toEqual([
      "POST /api/v1/things: request field amount newly required",
    ]);
    const optional = document({ ...request, properties: { ...request.properties, amount: {} } }, response);
    expect(breakingChanges(optional, added)).toEqual([
      "POST /api/v1/things: request field amount newly required",
    ]);
    // Dropping a requirement is fine.
    expect(breakingChanges(added, optional)).toEqual([]);
    const withBody = structuredClone(before);
    (withBody.paths["/api/v1/things"].post.requestBody as { required?: boolean }).required = true;
    expect(breakingChanges(before, withBody)).toEqual(["POST /api/v1/things: request body newly required"]);
  });

  it("fails on a removed response property, at any depth and in an error response", () => {
    const before = document(request, response);
    const { id: _, ...withoutId } = response.properties;
    expect(breakingChanges(before, document(request, { ...response, properties: withoutId }))).toEqual([
      "POST /api/v1/things: response 200 field data.id removed",
    ]);
    const nested = document(request, {
      ...response,
      properties: {
        ...response.properties,
        items: { type: "array", items: { type: "object", properties: {} } },
      },
    });
    expect(breakingChanges(before, nested)).toEqual([
      "POST /api/v1/things: response 200 field data.items[].sku removed",
    ]);
    const errorless = structuredClone(before);
    const envelope = errorless.components.responses.Error400.content["application/json"].schema;
    (envelope.properties.error as { properties: object }).properties = {};
    expect(breakingChanges(before, errorless)).toEqual([
      "POST /api/v1/things: response 400 field error.code removed",
    ]);
  });

  it("passes the checked-in document against itself and fails it with a path taken out", () => {
    const current = JSON.parse(readFileSync(CHECKED_IN, "utf8"));
    expect(breakingChanges(current, current)).toEqual([]);
    const [first] = Object.keys(current.paths);
    const shrunk = structuredClone(current);
    delete shrunk.paths[first as string];
    const problems = breakingChanges(current, shrunk);
    expect(problems.length).toBeGreaterThan(0);
    expect(problems.every((p) => p.endsWith(`${first}: removed`))).toBe(true);
  });

  it("exits 1 naming each breaking change and 0 for a compatible document, as CI runs it", () => {
    const dir = mkdtempSync(join(tmpdir(), "openapi-breaking-"));
    try {
      const write = (name: string, value: object) => {
        const file = join(dir, name);
        writeFileSync(file, JSON.stringify(value));
        return file;
      };
      const before = write("before.json", document(request, response, other));
      const same = write("same.json", document(request, response, other));
      const removed = write("removed.json", document(request, response));
      expect(execFileSync(process.execPath, [SCRIPT, before, same], { encoding: "utf8" })).toMatch(
        /compatible/,
      );
      let failure: { status?: number; stderr?: string } = {};
      try {
        execFileSync(process.execPath, [SCRIPT, before, removed], { encoding: "utf8", stdio: "pipe" });
      } catch (error) {
        failure = error as typeof failure;
      }
      expect(failure.status).toBe(1);
      expect(String(failure.stderr)).toContain("breaking: GET /api/v1/other/{id}: removed");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
