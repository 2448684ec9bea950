import type { DescField, DescMessage, DescMethod, DescService, JsonObject } from "@bufbuild/protobuf";
import { isWrapperDesc } from "@bufbuild/protobuf/wkt";
import { ERRORS, type ErrorCode } from "../errors.js";
import { type HttpBinding, httpBindings, type PathVariable } from "../http/bindings.js";
import { API_SERVICES, rolesFor } from "../rpc/policy.js";
import { ADMIN_SCHEMAS, ADMIN_SCHEME, ADMIN_SECURITY_SCHEME, ADMIN_TAG, adminPaths } from "./admin.js";
import { firstSentence, leadingComment } from "./comments.js";
import { restRequestExample, restResponseExample } from "./examples.js";
import {
  DEFAULT_EXTRAS,
  type HeaderParameter,
  IDEMPOTENCY_KEY,
  methodSpecificCodes,
  type OperationExtras,
  REQUEST_ID,
  rpcName,
} from "./extras.js";
import { guide } from "./guide.js";
import {
  codesByStatus,
  type ErrorSchemaRefs,
  errorResponse,
  JSON_MEDIA,
  OPERATIONS_TAG,
  operationalPaths,
  RESPONSE_HEADERS,
  reserveErrorSchemas,
  responseHeaders,
  successEnvelope,
} from "./responses.js";
import { type JsonSchema, SchemaBuilder } from "./schema.js";

/**
 * The OpenAPI 3.1 document of the REST surface, generated from the proto descriptors: the same
 * `google.api.http` bindings the transcoder mounts (`httpBindings`), the same JSON mapping it
 * renders, the error registry, and the roles table. Serve it rather than write it, and it cannot drift.
 *
 * Proto comments become summaries and descriptions when the descriptors carry source info (see
 * `comments.ts`); the code generated into `gen/` does not, so operations get a summary made from the
 * method name and a description naming the RPC and the roles allowed to call it.
 */

/** An OpenAPI 3.1 document as plain JSON. */
export type OpenApiDocument = JsonObject & {
  openapi: string;
  info: JsonObject;
  paths: Record<string, JsonObject>;
  components: JsonObject & { schemas: Record<string, JsonSchema> };
};

/** Options of {@link buildOpenApi}. */
export interface OpenApiOptions {
  /** `info.title`; default "Receipt Encryption Service". */
  title?: string;
  /** `info.version`; default "v1", the version of the API (URL `/api/v1`, package `receipts.v1`). */
  version?: string;
  /** The one entry of `servers`; when left out the document has none (clients use its own origin). */
  serverUrl?: string;
  /** HTTP facts the protos cannot express, by `Service/Method`; default {@link DEFAULT_EXTRAS}. */
  extras?: ReadonlyMap<string, OperationExtras>;
  /** Whether to document the operator API (`/admin/v1`): only when the server serves it. */
  admin?: boolean;
}

/** The name of the API key security scheme. */
export const API_KEY_SCHEME = "apiKey";

/** Codes only requests with a body can get: a body over the limit, or one that is not JSON. */
const BODY_CODES: ReadonlySet<ErrorCode> = new Set(["payload_too_large", "unsupported_media_type"]);

interface Context {
  schemas: SchemaBuilder;
  errors: ErrorSchemaRefs;
  extras: ReadonlyMap<string, OperationExtras>;
  specificCodes: ReadonlySet<ErrorCode>;
  /** The codes of each status that every operation can return, shared as `components.responses`. */
  sharedCodes: ReadonlyMap<number, readonly ErrorCode[]>;
  parameters: Map<string, HeaderParameter>;
  responses: Map<string, JsonObject>;
}

/**
 * Builds the OpenAPI document of every unary method of `services` that has a `google.api.http` rule
 * (and of each additional binding), plus the operational paths. Path parameters are named by the
 * lowerCamelCase JSON name of the field they bind (`/api/v1/receipts/{userId}` for `{user_id}`); the
 * Fastify route's own parameter names are internal. Throws like the transcoder on a rule it cannot serve.
 */
export function buildOpenApi(
  services: readonly DescService[],
  options: OpenApiOptions = {},
): OpenApiDocument {
  const bindings = httpBindings(services);
  const schemas = new SchemaBuilder();
  const errors = reserveErrorSchemas(schemas);
  for (const binding of bindings) {
    schemas.use(binding.method.input, "input");
    schemas.use(binding.method.output, "output");
  }
  const extras = options.extras ?? DEFAULT_EXTRAS;
  const specificCodes = methodSpecificCodes(extras);
  const ctx: Context = {
    schemas,
    errors,
    extras,
    specificCodes,
    sharedCodes: codesByStatus((Object.keys(ERRORS) as ErrorCode[]).filter((c) => !specificCodes.has(c))),
    parameters: new Map([[REQUEST_ID.id, REQUEST_ID]]),
    responses: new Map(),
  };

  const paths: Record<string, JsonObject> = {};
  const perMethod = new Map<DescMethod, number>();
  for (const binding of bindings) {
    const index = perMethod.get(binding.method) ?? 0;
    perMethod.set(binding.method, index + 1);
    const item = paths[openApiPath(binding)] ?? {};
    item[binding.verb.toLowerCase()] = operation(ctx, binding, index);
    paths[openApiPath(binding)] = item;
  }
  Object.assign(paths, operationalPaths(errors));
  if (options.admin === true) {
    for (const [name, schema] of Object.entries(ADMIN_SCHEMAS))
      schemas.reserve(name, structuredClone(schema));
    Object.assign(paths, adminPaths(errors));
  }
  // Every request and response message gets a component, also those a binding only uses a field of.
  for (const binding of bindings) {
    schemas.ref(binding.method.input, "input");
    schemas.ref(binding.method.output, "output");
  }

  const servers = options.serverUrl === undefined ? {} : { servers: [{ url: options.serverUrl }] };
  return {
    openapi: "3.1.0",
    info: {
      title: options.title ?? "Receipt Encryption Service",
      version: options.version ?? "v1",
      description: guide(),
    },
    ...servers,
    tags: tagsOf(services, options.admin === true),
    paths,
    components: {
      schemas: schemas.components(),
      responses: Object.fromEntries([...ctx.responses.entries()].sort(([a], [b]) => (a < b ? -1 : 1))),
      parameters: Object.fromEntries([...ctx.parameters.values()].map((p) => [p.id, headerParameter(p)])),
      headers: structuredClone(RESPONSE_HEADERS),
      securitySchemes: {
        [API_KEY_SCHEME]: {
          type: "apiKey",
          in: "header",
          name: "X-API-Key",
          description:
            "An API key `rk_<env>_<random>` of role `issuer` or `merchant`; its environment must match the server's.",
        },
        ...(options.admin === true ? { [ADMIN_SCHEME]: structuredClone(ADMIN_SECURITY_SCHEME) } : {}),
      },
    },
  };
}

/** One tag per service, then the operational paths' and, when documented, the operator API's. */
function tagsOf(services: readonly DescService[], admin: boolean): JsonObject[] {
  return [
    ...services.map((s) => ({
      name: s.name,
      description: leadingComment(s) ?? `The \`${s.typeName}\` service.`,
    })),
    { name: OPERATIONS_TAG, description: "Health, readiness, metrics and this document; no API key." },
    ...(admin
      ? [{ name: ADMIN_TAG, description: "The operator API: API keys, BIN prefixes, merchantIds, audit." }]
      : []),
  ];
}

/**
 * The document of the service's API services: what `/openapi.json` serves, and without the
 * operator API what `openapi/openapi.json` holds.
 */
export function serviceOpenApi(options: { admin?: boolean } = {}): OpenApiDocument {
  return buildOpenApi(API_SERVICES, options);
}

/** The OpenAPI name of a path variable: the JSON names of its field path, e.g. `userId`. */
export function pathParameterName(variable: PathVariable): string {
  return variable.fields.map((f) => f.jsonName).join(".");
}

/** The OpenAPI path of a binding: its template with each `{field_path}` renamed to JSON names. */
export function openApiPath(binding: HttpBinding): string {
  let next = 0;
  return binding.template.replace(/\{[^}]*\}/g, () => {
    const variable = binding.variables[next++];
    if (variable === undefined) throw new Error(`${binding.template}: more variables than bindings`);
    return `{${pathParameterName(variable)}}`;
  });
}

function operation(ctx: Context, binding: HttpBinding, index: number): JsonObject {
  const method = binding.method;
  const extras = ctx.extras.get(rpcName(method)) ?? {};
  const roles = rolesFor(method);
  const comment = leadingComment(method);
  const op: JsonObject = {
    operationId: `${method.parent.name}_${method.name}${index === 0 ? "" : `_${index}`}`,
    summary: comment === undefined ? humanize(method.name) : firstSentence(comment),
    description: describe(comment, roles),
    tags: [method.parent.name],
    "x-rpc": rpcName(method),
  };
  if (roles !== "public") op["x-roles"] = [...roles];
  if (method.deprecated) op.deprecated = true;
  op.security = roles === "public" ? [] : [{ [API_KEY_SCHEME]: [] }];
  const headers = [REQUEST_ID, ...(extras.headers ?? [])];
  for (const header of headers) ctx.parameters.set(header.id, header);
  op.parameters = [
    ...pathParameters(ctx, binding),
    ...queryParameters(ctx, binding),
    ...headers.map((h) => ({ $ref: `#/components/parameters/${h.id}` })),
  ];
  const body = requestBody(ctx, binding);
  if (body !== undefined) op.requestBody = body;
  op.responses = responses(ctx, binding, extras);
  addExamples(op, binding);
  return op;
}

/**
 * Puts the RPC's example into the operation: path and query values on their parameters, the body
 * on the request body, the response as the `data` of the 200 envelope.
 */
function addExamples(op: JsonObject, binding: HttpBinding): void {
  const request = restRequestExample(binding);
  if (request !== undefined) {
    for (const parameter of op.parameters as JsonObject[]) {
      const values = parameter.in === "path" ? request.path : parameter.in === "query" ? request.query : {};
      const value = values[parameter.name as string];
      if (value !== undefined) parameter.example = value;
    }
    const body = (op.requestBody as JsonObject | undefined)?.content as JsonObject | undefined;
    const media = body?.[JSON_MEDIA] as JsonObject | undefined;
    if (media !== undefined && request.body !== undefined) media.example = request.body;
  }
  const data = restResponseExample(binding);
  const ok = (op.responses as JsonObject)["200"] as JsonObject;
  const media = (ok.content as JsonObject)[JSON_MEDIA] as JsonObject;
  if (data !== undefined) media.example = { success: true, data };
}

function describe(comment: string | undefined, roles: readonly string[] | "public") {
  const parts = comment === undefined ? [] : [comment];
  if (roles === "public") parts.push("Needs no API key.");
  else if (roles.length === 0) parts.push("No API key role may call it.");
  else parts.push(`Needs an API key of role ${roles.map((r) => `\`${r}\``).join(" or ")}.`);
  return parts.join("\n\n");
}

/** `GetTransactionReceipt` as `Get transaction receipt`. */
function humanize(name: string): string {
  const words = name.replace(/([a-z0-9])([A-Z])/g, "$1 $2").toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

function pathParameters(ctx: Context, binding: HttpBinding): JsonObject[] {
  return binding.variables.map((variable) => {
    const leaf = variable.fields.at(-1) as DescField;
    return {
      name: pathParameterName(variable),
      in: "path",
      required: true,
      description: `The request field \`${variable.fields.map((f) => f.name).join(".")}\`.`,
      schema: ctx.schemas.field(leaf, "input"),
    };
  });
}

/** Messages a URL can carry as one value (their JSON form is a string or a scalar). */
function isUrlValue(message: DescMessage): boolean {
  return (
    isWrapperDesc(message) ||
    ["google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask"].includes(
      message.typeName,
    )
  );
}

/**
 * The query parameters of a binding without `body: "*"`: every request field not bound by the path
 * or the body, nested message fields dotted (`a.b`), by JSON name. Repeated scalars repeat the
 * parameter. Maps and repeated messages cannot travel in a query and are left out, as the transcoder does.
 */
function queryParameters(ctx: Context, binding: HttpBinding): JsonObject[] {
  if (binding.body.kind === "all") return [];
  const bound = new Set(binding.variables.map((v) => v.fields[0]));
  if (binding.body.kind === "field") bound.add(binding.body.field);
  const parameters: JsonObject[] = [];
  const walk = (message: DescMessage, prefix: readonly DescField[], visiting: ReadonlySet<DescMessage>) => {
    for (const field of message.fields) {
      if (prefix.length === 0 && bound.has(field)) continue;
      const path = [...prefix, field];
      if (field.fieldKind === "message" && !isUrlValue(field.message)) {
        const nested = field.message;
        const isLibrary = nested.typeName.startsWith("google.protobuf.");
        if (!isLibrary && !visiting.has(nested)) walk(nested, path, new Set([...visiting, nested]));
        continue;
      }
      if (field.fieldKind === "map" || (field.fieldKind === "list" && field.listKind === "message")) continue;
      parameters.push({
        name: path.map((f) => f.jsonName).join("."),
        in: "query",
        required: false,
        schema: ctx.schemas.field(field, "input"),
      });
    }
  };
  walk(binding.method.input, [], new Set([binding.method.input]));
  return parameters;
}

function requestBody(ctx: Context, binding: HttpBinding): JsonObject | undefined {
  const input = binding.method.input;
  switch (binding.body.kind) {
    case "none":
      return undefined;
    case "all": {
      const bound = new Set(binding.variables.flatMap((v) => v.fields.slice(0, 1)));
      const schema =
        bound.size === 0 ? ctx.schemas.ref(input, "input") : ctx.schemas.message(input, "input", bound);
      return {
        description: `The request message \`${input.typeName}\`${bound.size === 0 ? "" : " without the path fields"}.`,
        // A DELETE's body (DeleteUser's revocations) is optional: a DELETE without one stays what it was.
        required: binding.verb !== "DELETE" && input.fields.length > bound.size,
        content: { [JSON_MEDIA]: { schema } },
      };
    }
    case "field":
      return {
        description: `The \`${binding.body.field.name}\` field of \`${input.typeName}\`.`,
        required: true,
        content: { [JSON_MEDIA]: { schema: ctx.schemas.field(binding.body.field, "input") } },
      };
  }
}

function responses(ctx: Context, binding: HttpBinding, extras: OperationExtras): JsonObject {
  const output = binding.method.output;
  const field = binding.responseField;
  const data = field === undefined ? ctx.schemas.ref(output, "output") : ctx.schemas.field(field, "output");
  const result: JsonObject = {
    "200": {
      description:
        field === undefined
          ? `Success; \`data\` is the response message \`${output.typeName}\`.`
          : `Success; \`data\` is the \`${field.name}\` field of \`${output.typeName}\`.`,
      headers: responseHeaders(200, true, (extras.headers ?? []).includes(IDEMPOTENCY_KEY)),
      content: { [JSON_MEDIA]: { schema: successEnvelope(data) } },
    },
  };
  const codes = (Object.keys(ERRORS) as ErrorCode[]).filter(
    (code) =>
      (!ctx.specificCodes.has(code) || (extras.errors ?? []).includes(code)) &&
      (!BODY_CODES.has(code) || binding.body.kind !== "none"),
  );
  for (const [status, group] of codesByStatus(codes)) {
    const response = errorResponse(ctx.errors, status, group, true);
    if (group.join() !== ctx.sharedCodes.get(status)?.join()) {
      result[String(status)] = response;
      continue;
    }
    const name = `Error${status}`;
    ctx.responses.set(name, response);
    result[String(status)] = { $ref: `#/components/responses/${name}` };
  }
  return result;
}

function headerParameter(p: HeaderParameter): JsonObject {
  return {
    name: p.name,
    in: "header",
    required: p.required,
    description: p.description,
    schema: structuredClone(p.schema),
  };
}
