import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { ERROR_DOCS_PATH, ERRORS, type ErrorCode } from "../../errors.js";
import type { OpenApiDocument } from "../openapi.js";
import { escapeHtml as esc, inline, markdown } from "./markdown.js";
import { REFERENCE_CSS } from "./styles.js";

/**
 * The API reference page (`/docs`), rendered on the server from the OpenAPI document the service
 * serves, so the page and `/openapi.json` cannot disagree. Plain HTML and one inline stylesheet: no
 * script, nothing loaded from anywhere, readable with scripts off and searchable with the browser's
 * find. Per operation: its description, who may call it, parameters and body fields (required ones
 * marked), an example request as a `curl` command, the response's fields and an example response, and
 * every error code it can answer, linked to the error page.
 */

const VERBS = ["get", "post", "put", "patch", "delete"];

/** One operation of the document, with where it lives. */
interface Operation {
  path: string;
  verb: string;
  op: JsonObject;
}

/** The page for `doc`. */
export function referencePage(doc: OpenApiDocument): string {
  const info = doc.info as JsonObject;
  const title = String(info.title ?? "API");
  const tags = (doc.tags as JsonObject[] | undefined) ?? [];
  const byTag = operationsByTag(doc);
  const sections = tags
    .filter((tag) => (byTag.get(String(tag.name)) ?? []).length > 0)
    .map((tag) => tagSection(doc, tag, byTag.get(String(tag.name)) ?? []));
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>API reference - ${esc(title)}</title>
<style>${REFERENCE_CSS}</style>
</head>
<body>
<header class="top"><span class="product">${esc(title)}</span><span class="subtitle">API reference, ${esc(String(info.version ?? ""))}</span>
<nav><a href="#introduction">Guide</a><a href="${ERROR_DOCS_PATH}">Error codes</a><a href="/openapi.json">OpenAPI document</a></nav></header>
<div class="layout">
${sidebar(tags, byTag)}
<main>
<section id="introduction" class="guide">
<h1>${esc(title)} API</h1>
${markdown(String(info.description ?? ""))}
${TRYING}
</section>
${sections.join("\n")}
${schemasSection(doc)}
</main>
</div>
</body>
</html>
`;
}

const TRYING = `<h2>Trying the examples</h2>
<p>Each example is a <code>curl</code> command. Set the address and your keys once (a development
server started with <code>npm start</code> prints a key of each role):</p>
<pre><code>export BASE_URL=http://127.0.0.1:8080
export ISSUER_KEY=rk_dev_...  MERCHANT_KEY=rk_dev_...  ADMIN_TOKEN=...</code></pre>`;

function operationsByTag(doc: OpenApiDocument): Map<string, Operation[]> {
  const byTag = new Map<string, Operation[]>();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const verb of VERBS) {
      const op = item[verb] as JsonObject | undefined;
      if (op === undefined) continue;
      const tag = String((op.tags as string[] | undefined)?.[0] ?? "Other");
      byTag.set(tag, [...(byTag.get(tag) ?? []), { path, verb, op }]);
    }
  }
  return byTag;
}

function anchorOf(op: JsonObject): string {
  return `op-${String(op.operationId)}`;
}

function sidebar(tags: JsonObject[], byTag: ReadonlyMap<string, Operation[]>): string {
  const groups = tags
    .filter((tag) => (byTag.get(String(tag.name)) ?? []).length > 0)
    .map((tag) => {
      const items = (byTag.get(String(tag.name)) ?? []).map(
        ({ verb, op }) =>
          `<li><a href="#${anchorOf(op)}"><span class="verb verb-${verb}">${verb.toUpperCase()}</span>${esc(shortName(op))}</a></li>`,
      );
      return `<h2><a href="#tag-${esc(String(tag.name))}">${esc(String(tag.name))}</a></h2><ul>${items.join("")}</ul>`;
    });
  return `<nav class="sidebar" aria-label="Operations">
<ul><li><a href="#introduction">Guide</a></li></ul>
${groups.join("\n")}
<h2><a href="#schemas">Schemas</a></h2>
</nav>`;
}

/** What the sidebar calls an operation: its RPC's name in words (`Generate keys`), else its summary. */
function shortName(op: JsonObject): string {
  const rpc = op["x-rpc"];
  if (typeof rpc !== "string") return String(op.summary ?? "").replace(/\.$/, "");
  const name = rpc.split("/").at(-1) ?? rpc;
  const words = name.replace(/([a-z0-9])([A-Z])/g, "$1 $2").toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

function tagSection(doc: OpenApiDocument, tag: JsonObject, operations: Operation[]): string {
  const name = String(tag.name);
  return `<section class="tag" id="tag-${esc(name)}">
<h2>${esc(name)}</h2>
${markdown(String(tag.description ?? ""))}
${operations.map((o) => operationArticle(doc, o)).join("\n")}
</section>`;
}

function operationArticle(doc: OpenApiDocument, { path, verb, op }: Operation): string {
  const parameters = ((op.parameters as JsonObject[] | undefined) ?? []).map((p) => deref(doc, p) ?? {});
  const body = mediaOf(deref(doc, op.requestBody));
  const ok = deref(doc, (op.responses as JsonObject)["200"]);
  const okMedia = mediaOf(ok);
  return `<article class="operation" id="${anchorOf(op)}" data-operation-id="${esc(String(op.operationId))}">
<h3><span class="verb verb-${verb}">${verb.toUpperCase()}</span><code class="path">${esc(path)}</code></h3>
<div class="description">${markdown(String(op.description ?? ""))}</div>
${facts(op, parameters)}
${parameterTable(
  doc,
  parameters.filter((p) => p.in !== "header"),
)}
${body === undefined ? "" : `<h4>Request body</h4>${fieldsOf(doc, body.schema, "input")}`}
<h4>Example request</h4>
<pre class="example example-request"><code>${esc(curlOf(op, path, verb, parameters, body?.example))}</code></pre>
<h4>Response</h4>
${okMedia === undefined ? `<p>${inline(String(ok?.description ?? ""))}</p>` : dataFields(doc, okMedia.schema)}
<h4>Example response</h4>
<pre class="example example-response"><code>${esc(exampleText(okMedia?.example))}</code></pre>
${errorList(doc, op)}
</article>`;
}

/** The first media type of a request body or response, with its schema and example. */
function mediaOf(container: JsonObject | undefined): { schema: JsonObject; example: JsonValue } | undefined {
  const content = container?.content as JsonObject | undefined;
  const first = content === undefined ? undefined : (Object.values(content)[0] as JsonObject | undefined);
  if (first === undefined) return undefined;
  return { schema: (first.schema as JsonObject | undefined) ?? {}, example: first.example ?? null };
}

function exampleText(example: JsonValue | undefined): string {
  if (example === undefined || example === null) return "";
  return typeof example === "string" ? example : JSON.stringify(example, null, 2);
}

/** The RPC an operation is the REST form of, and the request headers that matter, as a definition list. */
function facts(op: JsonObject, parameters: JsonObject[]): string {
  const rows: [string, string][] = [];
  if (typeof op["x-rpc"] === "string") {
    rows.push(["RPC", `<code>${esc(op["x-rpc"])}</code> (gRPC, gRPC-Web, Connect)`]);
  }
  for (const p of parameters.filter((p) => p.in === "header" && p.name !== "X-Request-Id")) {
    rows.push([`<code>${esc(String(p.name))}</code>`, inline(String(p.description ?? ""))]);
  }
  if (rows.length === 0) return "";
  return `<dl class="facts">${rows.map(([k, v]) => `<dt>${k}</dt><dd>${v}</dd>`).join("")}</dl>`;
}

function parameterTable(doc: OpenApiDocument, parameters: JsonObject[]): string {
  if (parameters.length === 0) return "";
  const rows = parameters.map((p) => {
    const required = p.required === true ? `<span class="badge">required</span>` : "";
    return `<tr><td><code>${esc(String(p.name))}</code>${required}</td><td>${esc(String(p.in))}</td><td>${typeOf(doc, p.schema as JsonObject)}</td><td>${inline(String(p.description ?? (p.schema as JsonObject)?.description ?? ""))}</td></tr>`;
  });
  return `<h4>Parameters</h4><table><thead><tr><th>name</th><th>in</th><th>type</th><th>description</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

/** The fields of the `data` member of a success envelope. */
function dataFields(doc: OpenApiDocument, envelope: JsonObject): string {
  const data = ((envelope.properties as JsonObject | undefined)?.data as JsonObject | undefined) ?? envelope;
  return fieldsOf(doc, data, "output");
}

/**
 * A table of an object schema's fields, or a line naming its type. `input` marks the fields the
 * service refuses empty (`x-required`), `output` those always present (`required`).
 */
function fieldsOf(doc: OpenApiDocument, schema: JsonObject, side: "input" | "output"): string {
  const ref = typeof schema.$ref === "string" ? schema.$ref : undefined;
  const resolved = deref(doc, schema) ?? {};
  const properties = resolved.properties as JsonObject | undefined;
  const lead =
    ref === undefined
      ? ""
      : `<p>${side === "input" ? "The body is" : "<code>data</code> is"} ${typeOf(doc, schema)}.</p>`;
  if (properties === undefined) return lead === "" ? `<p>${typeOf(doc, schema)}</p>` : lead;
  return `${lead}${propertyTable(doc, resolved, side)}`;
}

/**
 * The rows of an object schema's fields. A request field the service refuses empty is marked
 * "required" (`x-required`); a response field that is always present is marked "always" (`required`).
 */
function propertyTable(doc: OpenApiDocument, schema: JsonObject, side: "input" | "output" | "both"): string {
  const always = new Set(side === "input" ? [] : ((schema.required as string[] | undefined) ?? []));
  const rows = Object.entries((schema.properties as JsonObject | undefined) ?? {}).map(([name, value]) => {
    const property = value as JsonObject;
    const required = side !== "output" && property["x-required"] === true;
    const badge = required
      ? `<span class="badge">required</span>`
      : always.has(name)
        ? `<span class="badge">always</span>`
        : "";
    return `<tr><td><code>${esc(name)}</code>${badge}</td><td>${typeOf(doc, property)}</td><td>${markdown(String(property.description ?? ""))}</td></tr>`;
  });
  return `<table><thead><tr><th>field</th><th>type</th><th>description</th></tr></thead><tbody>${rows.join("")}</tbody></table>`;
}

/** A short description of a schema's type, with a link for a component. */
function typeOf(doc: OpenApiDocument, schema: JsonObject | undefined): string {
  if (schema === undefined) return "";
  if (typeof schema.$ref === "string") {
    const name = schema.$ref.split("/").at(-1) ?? "";
    return `<a href="#schema-${esc(name)}">${esc(name)}</a>`;
  }
  if (schema.type === "array") return `array of ${typeOf(doc, schema.items as JsonObject)}`;
  if (schema.type === "object" && typeof schema.additionalProperties === "object") {
    return `map of ${typeOf(doc, schema.additionalProperties as JsonObject)}`;
  }
  if (Array.isArray(schema.enum))
    return `one of ${schema.enum.map((v) => `<code>${esc(String(v))}</code>`).join(", ")}`;
  if (schema.const !== undefined) return `<code>${esc(JSON.stringify(schema.const))}</code>`;
  const format = schema.contentEncoding ?? schema.format;
  return `${esc(String(schema.type ?? "any"))}${format === undefined ? "" : ` (${esc(String(format))})`}`;
}

function errorList(doc: OpenApiDocument, op: JsonObject): string {
  const items: string[] = [];
  for (const [status, value] of Object.entries(op.responses as JsonObject)) {
    if (status === "200") continue;
    const response = deref(doc, value) ?? {};
    for (const code of (response["x-error-codes"] as ErrorCode[] | undefined) ?? []) {
      const meaning = ERRORS[code]?.description ?? "";
      items.push(
        `<li><span class="status">${esc(status)}</span><a href="${ERROR_DOCS_PATH}#${esc(code)}"><code>${esc(code)}</code></a> ${inline(meaning)}</li>`,
      );
    }
  }
  if (items.length === 0) return "";
  return `<h4>Errors</h4><ul class="errors">${items.join("")}</ul>`;
}

/** The curl command of an operation's example. */
function curlOf(
  op: JsonObject,
  path: string,
  verb: string,
  parameters: JsonObject[],
  body: JsonValue | undefined,
): string {
  let url = path;
  const query = new URLSearchParams();
  for (const p of parameters) {
    if (p.example === undefined) continue;
    if (p.in === "path") url = url.replace(`{${String(p.name)}}`, encodeURIComponent(String(p.example)));
    if (p.in === "query") query.set(String(p.name), String(p.example));
  }
  const target = `"$BASE_URL${url}${query.size > 0 ? `?${query}` : ""}"`;
  const lines = [verb === "get" ? `curl ${target}` : `curl -X ${verb.toUpperCase()} ${target}`];
  const security = (op.security as JsonObject[] | undefined) ?? [];
  if (security.length > 0 && Object.keys(security[0] ?? {}).includes("apiKey")) {
    const role = String((op["x-roles"] as string[] | undefined)?.[0] ?? "issuer");
    lines.push(`-H "X-API-Key: $${role.toUpperCase()}_KEY"`);
  } else if (security.length > 0) lines.push(`-H "Authorization: Bearer $ADMIN_TOKEN"`);
  if (parameters.some((p) => p.name === "Idempotency-Key")) lines.push(`-H "Idempotency-Key: $(uuidgen)"`);
  if (body !== undefined && body !== null) {
    lines.push(`-H "Content-Type: application/json"`);
    lines.push(`-d '${JSON.stringify(body, null, 2).replaceAll("'", "'\\''")}'`);
  }
  return lines.join(" \\\n  ");
}

/** Every component schema, with its fields. */
function schemasSection(doc: OpenApiDocument): string {
  const items = Object.entries(doc.components.schemas).map(([name, schema]) => {
    const description = markdown(String(schema.description ?? ""));
    const body =
      schema.properties !== undefined ? propertyTable(doc, schema, "both") : `<p>${typeOf(doc, schema)}</p>`;
    return `<div class="schema" id="schema-${esc(name)}"><h3>${esc(name)}</h3>${description}${body}</div>`;
  });
  return `<section id="schemas"><h2>Schemas</h2>${items.join("\n")}</section>`;
}

/** Follows local `$ref`s to what they name. */
function deref(doc: OpenApiDocument, value: unknown): JsonObject | undefined {
  let current = value as JsonObject | undefined;
  for (let hops = 0; typeof current?.$ref === "string" && hops < 16; hops++) {
    let node: unknown = doc;
    for (const part of current.$ref.replace(/^#\//, "").split("/")) {
      node = (node as Record<string, unknown> | undefined)?.[
        part.replaceAll("~1", "/").replaceAll("~0", "~")
      ];
    }
    current = node as JsonObject | undefined;
  }
  return current;
}
