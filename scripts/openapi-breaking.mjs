// The versioning gate of the REST surface: compares two OpenAPI documents and names every change that
// breaks a v1 client (adding optional fields, endpoints or error codes keeps v1,
// anything else needs v2). `buf breaking` guards the protos but not the REST mapping: a changed
// `google.api.http` path passes it. Breaking here:
//   - a path, or a method of a path, that is gone;
//   - a response (by status) or a field of a response body that is gone, at any depth;
//   - a request field, parameter or body that is required now and was not before (a new required
//     field included).
// Types may change under the same name without this gate noticing; the protos' own gate covers them.
//
//   node scripts/openapi-breaking.mjs                  committed openapi/openapi.json against HEAD~1's
//   node scripts/openapi-breaking.mjs --against REF    ... against REF's
//   node scripts/openapi-breaking.mjs OLD.json NEW.json
// Exit status 1 with one line per breaking change, 0 when there is none (or nothing to compare with).
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const METHODS = ["get", "put", "post", "delete", "patch", "options", "head", "trace"];
const DOCUMENT = "openapi/openapi.json";

/**
 * Every change from `before` to `after` that breaks a client of `before`, one sentence each.
 * @param {object} before the previous OpenAPI document
 * @param {object} after the new one
 * @returns {string[]}
 */
export function breakingChanges(before, after) {
  const problems = [];
  for (const [path, item] of Object.entries(before.paths ?? {})) {
    const next = after.paths?.[path];
    for (const method of METHODS) {
      const old = item?.[method];
      if (old === undefined) continue;
      const operation = next?.[method];
      const where = `${method.toUpperCase()} ${path}`;
      if (operation === undefined) {
        problems.push(`${where}: removed`);
        continue;
      }
      compareResponses(before, after, old, operation, where, problems);
      compareRequests(before, after, old, operation, where, problems);
    }
  }
  return problems;
}

function compareResponses(before, after, old, operation, where, problems) {
  for (const [status, response] of Object.entries(old.responses ?? {})) {
    const next = operation.responses?.[status];
    if (next === undefined) {
      problems.push(`${where}: response ${status} removed`);
      continue;
    }
    const oldFields = responseFields(before, response);
    const newFields = responseFields(after, next);
    for (const field of oldFields.keys()) {
      if (!newFields.has(field)) problems.push(`${where}: response ${status} field ${field} removed`);
    }
  }
}

function compareRequests(before, after, old, operation, where, problems) {
  const oldBody = resolve(before, old.requestBody);
  const newBody = resolve(after, operation.requestBody);
  if (newBody?.required === true && oldBody?.required !== true) {
    problems.push(`${where}: request body newly required`);
  }
  const oldFields = bodyFields(before, oldBody);
  for (const [field, required] of bodyFields(after, newBody)) {
    if (required && oldFields.get(field) !== true) {
      problems.push(`${where}: request field ${field} newly required`);
    }
  }
  const oldParameters = parameters(before, old);
  for (const [key, required] of parameters(after, operation)) {
    if (required && oldParameters.get(key) !== true) {
      problems.push(`${where}: ${key} parameter newly required`);
    }
  }
}

/** `in:name` of each parameter of an operation, with whether it is required. */
function parameters(document, operation) {
  const found = new Map();
  for (const entry of operation.parameters ?? []) {
    const parameter = resolve(document, entry);
    if (parameter?.name !== undefined)
      found.set(`${parameter.in} ${parameter.name}`, parameter.required === true);
  }
  return found;
}

/** The fields of a response's JSON bodies, by dotted path (`data.receipt.total`, `items[].name`). */
function responseFields(document, response) {
  const fields = new Map();
  for (const media of Object.values(resolve(document, response)?.content ?? {})) {
    walk(document, media?.schema, "", fields, new Set());
  }
  return fields;
}

/** The fields of a request body's JSON schemas, by dotted path, with whether each is required. */
function bodyFields(document, body) {
  const fields = new Map();
  for (const media of Object.values(body?.content ?? {}))
    walk(document, media?.schema, "", fields, new Set());
  return fields;
}

/** Records every property below `schema` in `fields` (path -> required in its parent object). */
function walk(document, schema, prefix, fields, refs) {
  if (schema === undefined || schema === null || typeof schema !== "object") return;
  if (typeof schema.$ref === "string") {
    if (refs.has(schema.$ref)) return; // a recursive schema: its fields are already recorded
    walk(document, resolve(document, schema), prefix, fields, new Set([...refs, schema.$ref]));
    return;
  }
  for (const key of ["allOf", "anyOf", "oneOf"]) {
    for (const part of schema[key] ?? []) walk(document, part, prefix, fields, refs);
  }
  const required = new Set(schema.required ?? []);
  for (const [name, property] of Object.entries(schema.properties ?? {})) {
    const path = prefix === "" ? name : `${prefix}.${name}`;
    fields.set(path, (fields.get(path) ?? false) || required.has(name));
    walk(document, property, path, fields, refs);
  }
  if (schema.items !== undefined) walk(document, schema.items, `${prefix}[]`, fields, refs);
  if (typeof schema.additionalProperties === "object") {
    walk(document, schema.additionalProperties, `${prefix}{}`, fields, refs);
  }
}

/** Follows a local `$ref` (`#/components/...`) to what it names; anything else as it is. */
function resolve(document, value) {
  let current = value;
  for (let hops = 0; typeof current?.$ref === "string" && hops < 32; hops++) {
    const ref = current.$ref;
    if (!ref.startsWith("#/")) return undefined;
    current = ref
      .slice(2)
      .split("/")
      .map((part) => part.replaceAll("~1", "/").replaceAll("~0", "~"))
      .reduce((node, part) => node?.[part], document);
  }
  return current;
}

function main(argv) {
  let before;
  let after;
  let label;
  if (argv.length === 2 && !argv[0].startsWith("--")) {
    before = JSON.parse(readFileSync(argv[0], "utf8"));
    after = JSON.parse(readFileSync(argv[1], "utf8"));
    label = argv[0];
  } else {
    const ref = argv[0] === "--against" && argv[1] !== undefined ? argv[1] : "HEAD~1";
    let previous;
    try {
      previous = execFileSync("git", ["show", `${ref}:${DOCUMENT}`], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
        maxBuffer: 64 * 1024 * 1024,
      });
    } catch {
      console.log(`no ${DOCUMENT} at ${ref}: nothing to compare with, skipped`);
      return 0;
    }
    before = JSON.parse(previous);
    after = JSON.parse(readFileSync(new URL(`../${DOCUMENT}`, import.meta.url), "utf8"));
    label = `${ref}:${DOCUMENT}`;
  }
  const problems = breakingChanges(before, after);
  for (const problem of problems) console.error(`breaking: ${problem}`);
  if (problems.length > 0) {
    console.error(
      `${problems.length} breaking change(s) to the REST surface against ${label}: keep v1 compatible or add v2 beside it.`,
    );
    return 1;
  }
  console.log(`REST surface compatible with ${label}`);
  return 0;
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1]) {
  process.exitCode = main(process.argv.slice(2));
}
