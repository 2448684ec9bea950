/* Over 400 lines on purpose: the operator API's OpenAPI document is data (its schemas and one entry
 * per operation, most of the file); kept whole so that one file lists every /admin/v1 operation. */
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import type { ErrorCode } from "../errors.js";
import { ADMIN_KT_OPERATIONS } from "./admin-kt.js";
import {
  codesByStatus,
  type ErrorSchemaRefs,
  errorResponse,
  JSON_MEDIA,
  responseHeaders,
  successEnvelope,
} from "./responses.js";
import type { JsonSchema } from "./schema.js";

/**
 * The operator API (`/admin/v1`, on only when the server has `ADMIN_TOKEN`) in the OpenAPI document.
 * Its routes are plain Fastify routes over `domain/admin.ts`, not RPCs, so their documentation is
 * written here, one entry per route of `ADMIN_ROUTES` (src/http/admin.ts): a test fails when the two
 * lists differ, and another sends each example to a running server and checks the answer against
 * the schema given here.
 */

/** The name of the operator's bearer-token security scheme. */
export const ADMIN_SCHEME = "adminToken";

/** The tag of the operator operations. */
export const ADMIN_TAG = "Operator";

const ID = { type: "string", pattern: "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$" };
const TIME = { type: "string", format: "date-time" };
const BINS = {
  type: "array",
  items: { type: "string", pattern: "^([0-9]{6}|[0-9]{8})$" },
  maxItems: 1000,
  description: "BIN prefixes: the first 6 or 8 digits of the tenant's cards.",
};

const TOKEN_BINS = {
  type: "array",
  items: { type: "string", pattern: "^([0-9]{6}|[0-9]{8})$" },
  maxItems: 1000,
  description:
    "Token BIN prefixes: the first 6 or 8 digits of the wallet tokens (Apple Pay, Google Pay) of the " +
    "tenant's cards, which a tap gives as `cardBin`. One numbering space with `bins`: a prefix has one " +
    "owner and one kind. In the key directory's snapshots with kind `token-bin`.",
};

/** Component schemas of the operator API, added to the document beside the proto messages. */
export const ADMIN_SCHEMAS: Readonly<Record<string, JsonSchema>> = {
  AdminApiKey: {
    type: "object",
    description: "An API key as an operator sees it: never its hash; the key itself only once, on creation.",
    required: [
      "apiKeyId",
      "prefix",
      "tenant",
      "role",
      "tier",
      "environment",
      "merchantIds",
      "name",
      "createdAt",
    ],
    properties: {
      apiKeyId: { type: "string", description: "The id to revoke it by." },
      apiKey: {
        type: "string",
        description:
          "`rk_<env>_<random>`: in the answer to its creation only. Store it; it is never shown again.",
      },
      prefix: { type: "string", description: "The first characters of the key, to recognise it in lists." },
      tenant: ID,
      role: { type: "string", enum: ["issuer", "merchant"] },
      tier: { type: "string", enum: ["sandbox", "standard", "enterprise"] },
      environment: { type: "string", enum: ["live", "test", "dev"] },
      merchantIds: {
        type: "array",
        items: { type: "string" },
        description: "The merchantIds a merchant key may use; empty: any its tenant owns.",
      },
      name: { type: "string" },
      createdAt: TIME,
      revokedAt: TIME,
    },
    additionalProperties: false,
  },
  AdminKtAuditor: {
    type: "object",
    description: "An auditor of the key log, who may read its leaf data; the token only once, on creation.",
    required: ["auditorId", "name", "createdAt"],
    properties: {
      auditorId: { type: "string", description: "The id to revoke it by." },
      name: { type: "string" },
      token: {
        type: "string",
        description: "`kta_<random>`: in the answer to its creation only, for `Authorization: Bearer`.",
      },
      createdAt: TIME,
      revokedAt: TIME,
    },
    additionalProperties: false,
  },
  AdminAuditEvent: {
    type: "object",
    description: "One entry of the audit log. Never a secret.",
    required: ["at", "action", "tenantId", "requestId", "sourceIp"],
    properties: {
      at: TIME,
      action: { type: "string", description: "E.g. `grant.created`, `receipt.decrypted`, `admin.bins.set`." },
      tenantId: { type: "string" },
      requestId: { type: "string" },
      sourceIp: { type: "string" },
      userId: { type: "string" },
      keyId: {
        type: "string",
        description: "The key the event is about; for a key change, the key after it.",
      },
      previousKeyId: { type: "string", description: "For a key change, the key current before it." },
      subject: { type: "string", description: "A non-secret reference: a receiptId, a paymentId, a key id." },
      actorTenantId: { type: "string", description: "Set when another tenant's call caused the event." },
      byOperator: { type: "boolean", description: "Set when the operator caused the event." },
    },
    additionalProperties: false,
  },
};

/** One operator operation's documentation. */
export interface AdminOperation {
  summary: string;
  description: string;
  /** Path and query parameters. */
  parameters?: JsonObject[];
  body?: { schema: JsonSchema; example: JsonValue };
  /** The schema of `data` in the success envelope, and an example of it. */
  data: JsonSchema;
  example: JsonValue;
  /** The error codes it can answer besides those of every operator call. */
  errors: ErrorCode[];
}

/** Codes every operator call can get: a bad token, the rate limit, a body that is not JSON. */
const COMMON_ERRORS: ErrorCode[] = ["unauthorized", "rate_limit_exceeded", "internal_server_error"];

const KEY_REF = { $ref: "#/components/schemas/AdminApiKey" };
const TENANT_PARAM = (where: "path" | "query", example: string) => ({
  name: "tenant",
  in: where,
  required: where === "path",
  description: "A tenant id, as given to its API keys.",
  schema: ID,
  example,
});
const KEY_EXAMPLE = {
  apiKeyId: "key_Wm3dQ0bY8nT2",
  prefix: "rk_live_Q9x",
  tenant: "acme-bank",
  role: "issuer",
  tier: "standard",
  environment: "live",
  merchantIds: [],
  name: "Acme Bank production",
  createdAt: "2026-11-25T09:00:00.000Z",
};

const AUDITOR_REF = { $ref: "#/components/schemas/AdminKtAuditor" };
const AUDITOR_EXAMPLE = {
  auditorId: "aud_4kPz0q9WmX1d",
  name: "Payments regulator",
  createdAt: "2026-11-25T09:00:00.000Z",
};

/** The operator operations by `VERB /path` (OpenAPI path templates). */
export const ADMIN_OPERATIONS: Readonly<Record<string, AdminOperation>> = {
  "POST /admin/v1/api-keys": {
    summary: "Creates an API key.",
    description:
      "Creates an API key of a tenant and role. The key is in this answer only: hand it over and " +
      "forget it (the service keeps a hash). A merchant key may be limited to some merchantIds.",
    body: {
      schema: {
        type: "object",
        required: ["tenant", "role"],
        properties: {
          tenant: ID,
          role: { type: "string", enum: ["issuer", "merchant"] },
          tier: { type: "string", enum: ["sandbox", "standard", "enterprise"], default: "standard" },
          merchantIds: { type: "array", items: ID, maxItems: 1000 },
          name: { type: "string", maxLength: 200 },
        },
        additionalProperties: false,
      },
      example: { tenant: "acme-bank", role: "issuer", tier: "standard", name: "Acme Bank production" },
    },
    data: KEY_REF,
    example: { ...KEY_EXAMPLE, apiKey: "rk_live_Q9xV3mJc0s8e2KqLr7WzT1uYb5NdHf4aGp6" },
    errors: ["invalid_request"],
  },
  "GET /admin/v1/api-keys": {
    summary: "Lists API keys.",
    description: "Every API key, or those of one tenant, oldest first; revoked keys too. Never the keys.",
    parameters: [TENANT_PARAM("query", "acme-bank")],
    data: {
      type: "object",
      required: ["apiKeys"],
      properties: { apiKeys: { type: "array", items: KEY_REF } },
      additionalProperties: false,
    },
    example: { apiKeys: [KEY_EXAMPLE] },
    errors: ["invalid_request"],
  },
  "DELETE /admin/v1/api-keys/{apiKeyId}": {
    summary: "Revokes an API key.",
    description: "From now on the key is `unauthorized`. Revoking cannot be undone: create a new key.",
    parameters: [
      {
        name: "apiKeyId",
        in: "path",
        required: true,
        description: "The `apiKeyId` of the key, from the list.",
        schema: { type: "string" },
        example: "key_Wm3dQ0bY8nT2",
      },
    ],
    data: {
      type: "object",
      required: ["apiKeyId"],
      properties: { apiKeyId: { type: "string" } },
      additionalProperties: false,
    },
    example: { apiKeyId: "key_Wm3dQ0bY8nT2" },
    errors: ["not_found"],
  },
  "PUT /admin/v1/issuers/{tenant}/bins": {
    summary: "Sets an issuer tenant's BIN prefixes.",
    description:
      "Replaces the tenant's list. A receipt that carries a `cardBin` inside one of them goes only to a " +
      "cardholder this tenant registered, or to the tenant's escrow. A prefix belongs to one tenant: " +
      "one another tenant owns, or one overlapping it, is `conflict`. Once the tenant has a confirmed " +
      "root signing key, `statements` must carry the root's `receipts.v1/bin-claim` of every prefix " +
      "added and `receipts.v1/bin-release` of every prefix removed (versions following the tenant's " +
      "statements), else `invalid_signature`. A prefix that a tenant with a confirmed root owns moves " +
      "at once only with that root's `receipts.v1/bin-release` naming this tenant (in `releases`); " +
      "without it the move is announced in the key log and takes effect 7 days after the first " +
      "directory snapshot that shows it (until then receipts keep going to the old owner, and `bins` " +
      "in the answer and in `GET` lists the prefix only once it has moved). `tokenBins`, when given, " +
      "replaces the tenant's token BINs by the same rules (claims, releases and moves of kind " +
      "`token-bin`); absent, they stay as they are. A tenant whose root revoked itself and whose " +
      "recovery root is not confirmed yet is `forbidden` any change (the operator's word does not " +
      "stand again), and its prefixes move away only by announcement.",
    parameters: [TENANT_PARAM("path", "acme-bank")],
    body: {
      schema: {
        type: "object",
        required: ["bins"],
        properties: {
          bins: BINS,
          tokenBins: TOKEN_BINS,
          statements: {
            type: "array",
            description: "The root's signed statements (base64), one per prefix added or removed.",
            items: {
              type: "object",
              required: ["statement", "signature"],
              properties: { statement: { type: "string" }, signature: { type: "string" } },
              additionalProperties: false,
            },
          },
          releases: {
            type: "array",
            description: "Releases (base64) by the previous owners' roots of prefixes this change takes.",
            items: {
              type: "object",
              required: ["statement", "signature"],
              properties: { statement: { type: "string" }, signature: { type: "string" } },
              additionalProperties: false,
            },
          },
        },
        additionalProperties: false,
      },
      example: { bins: ["411111", "45671234"] },
    },
    data: binsData(),
    example: { tenant: "acme-bank", bins: ["411111", "45671234"], tokenBins: ["48951234"] },
    errors: ["invalid_request", "invalid_signature", "forbidden", "conflict"],
  },
  "GET /admin/v1/issuers/{tenant}/bins": {
    summary: "Reads an issuer tenant's BIN prefixes.",
    description: "The tenant's BIN and token BIN prefixes, each list sorted.",
    parameters: [TENANT_PARAM("path", "acme-bank")],
    data: binsData(),
    example: { tenant: "acme-bank", bins: ["411111", "45671234"], tokenBins: ["48951234"] },
    errors: ["invalid_request"],
  },
  "PUT /admin/v1/merchants/{merchantId}": {
    summary: "Assigns a merchantId to a merchant tenant.",
    description:
      "A merchantId belongs to one merchant tenant: the first that uses it, or the one assigned here. " +
      "The operator's word is final: a signing key the previous owner registered for it is removed.",
    parameters: [
      {
        name: "merchantId",
        in: "path",
        required: true,
        description: "The merchantId, as in receipts.",
        schema: ID,
        example: "corner-coffee",
      },
    ],
    body: {
      schema: {
        type: "object",
        required: ["tenant"],
        properties: { tenant: ID },
        additionalProperties: false,
      },
      example: { tenant: "corner-coffee-ltd" },
    },
    data: {
      type: "object",
      required: ["merchantId", "tenant", "assignedAt", "signingKeyRemoved"],
      properties: {
        merchantId: ID,
        tenant: ID,
        assignedAt: TIME,
        signingKeyRemoved: {
          type: "boolean",
          description: "Whether another tenant's signing key for the merchantId was removed.",
        },
      },
      additionalProperties: false,
    },
    example: {
      merchantId: "corner-coffee",
      tenant: "corner-coffee-ltd",
      assignedAt: "2026-11-25T09:05:00.000Z",
      signingKeyRemoved: false,
    },
    errors: ["invalid_request"],
  },
  "POST /admin/v1/cards/transfer": {
    summary: "Moves a card to another issuer tenant.",
    description:
      "The card a user holds (both references, for a card registered by hashed PAN and PAR) moves to " +
      "`toTenant`; the cardholder's keys and receipts do not. The user keeps its keys, grants and receipts " +
      "and no longer holds the card; a new user of `toTenant` holds it without a key, the card's receipts " +
      "wait in escrow for `toTenant`, and its registration of the card activates its key and releases them. " +
      "The previous issuer's registration of the card is refused from then on. Audited under both tenants.",
    body: {
      schema: {
        type: "object",
        required: ["userId", "toTenant"],
        properties: { userId: ID, toTenant: ID },
        additionalProperties: false,
      },
      example: { userId: "usr_OiIWtaNKLlelXAD2", toTenant: "acme-bank" },
    },
    data: {
      type: "object",
      required: ["transferId", "previousUserId", "fromTenant", "userId", "toTenant", "transferredAt"],
      properties: {
        transferId: {
          type: "string",
          pattern: "^trf_[0-9a-f]{32}$",
          description:
            "The transfer's id, as the card's key-log entries, the issuers' monitor alerts and both audits name it.",
        },
        previousUserId: ID,
        fromTenant: ID,
        userId: { ...ID, description: "The card's new user, of toTenant, with no key until it registers." },
        toTenant: ID,
        transferredAt: TIME,
      },
      additionalProperties: false,
    },
    example: {
      transferId: "trf_5f0c2a9e7b1d4c3a8e6f0b2d4a6c8e01",
      previousUserId: "usr_OiIWtaNKLlelXAD2",
      fromTenant: "other-bank",
      userId: "usr_r2Vd9QxWk0pLmA7e",
      toTenant: "acme-bank",
      transferredAt: "2026-11-25T09:05:00.000Z",
    },
    errors: ["invalid_request", "not_found", "conflict"],
  },
  "GET /admin/v1/audit": {
    summary: "Reads the audit log.",
    description:
      "Audit events in the order they were written: key changes (with the key ids before and after), " +
      "grants, decrypts, operator changes, failed operator logins. No secrets. Pages never skip an " +
      "event: pass `nextPageToken` as `pageToken` to read what came after, also later, when polling.",
    parameters: [
      TENANT_PARAM("query", "acme-bank"),
      {
        name: "after",
        in: "query",
        required: false,
        description: "The first page starts with the first event written after this time (RFC 3339).",
        schema: TIME,
        example: "2026-11-25T00:00:00Z",
      },
      {
        name: "limit",
        in: "query",
        required: false,
        description: "At most this many events, 1 to 1000; default 100.",
        schema: { type: "integer", minimum: 1, maximum: 1000 },
        example: 50,
      },
      {
        name: "pageToken",
        in: "query",
        required: false,
        description: "The `nextPageToken` of the previous answer.",
        schema: { type: "string" },
        example: "a1024",
      },
    ],
    data: {
      type: "object",
      required: ["events", "nextPageToken"],
      properties: {
        events: { type: "array", items: { $ref: "#/components/schemas/AdminAuditEvent" } },
        nextPageToken: { type: "string", description: "Always set: where the next page starts." },
      },
      additionalProperties: false,
    },
    example: {
      events: [
        {
          at: "2026-11-25T09:00:00.000Z",
          action: "admin.api_key.created",
          tenantId: "acme-bank",
          requestId: "4b1f0c8e-6a5e-4f0e-9d7c-2f1b8f0a9e31",
          sourceIp: "203.0.113.9",
          subject: "key_Wm3dQ0bY8nT2",
          byOperator: true,
        },
      ],
      nextPageToken: "a1025",
    },
    errors: ["invalid_request"],
  },
  "GET /admin/v1/escrow": {
    summary: "Counts escrowed receipts.",
    description:
      "Unexpired escrowed receipts by owner tenant (absent: escrowed without an owner) and escrow key: " +
      "what waits for a card to be registered.",
    data: {
      type: "object",
      required: ["escrow"],
      properties: {
        escrow: {
          type: "array",
          items: {
            type: "object",
            required: ["escrowKeyId", "count"],
            properties: {
              ownerTenantId: { type: "string" },
              escrowKeyId: { type: "string" },
              count: { type: "integer", minimum: 0 },
            },
            additionalProperties: false,
          },
        },
      },
      additionalProperties: false,
    },
    example: { escrow: [{ ownerTenantId: "acme-bank", escrowKeyId: "iek_QOsuElGgQg4OoV-R", count: 3 }] },
    errors: [],
  },
  "POST /admin/v1/kt/auditors": {
    summary: "Registers an auditor of the key log.",
    description:
      "An auditor (a regulator, a researcher, a bank's second line) may read the key log's leaf data, " +
      "`GET /kt/v1/entries` with `Authorization: Bearer <token>`; each read is audited. The token is in " +
      "this answer only (the service keeps its SHA-256).",
    body: {
      schema: {
        type: "object",
        required: ["name"],
        properties: { name: { type: "string", minLength: 1, maxLength: 200 } },
        additionalProperties: false,
      },
      example: { name: "Payments regulator" },
    },
    data: AUDITOR_REF,
    example: { ...AUDITOR_EXAMPLE, token: "kta_Zr8pVn2qLw5sXc7bKd0fHj3mTy6uGa9eRq1oWi4nEk8" },
    errors: ["invalid_request"],
  },
  "GET /admin/v1/kt/auditors": {
    summary: "Lists the key log's auditors.",
    description: "Every auditor, revoked ones too. Never a token.",
    data: {
      type: "object",
      required: ["auditors"],
      properties: { auditors: { type: "array", items: AUDITOR_REF } },
      additionalProperties: false,
    },
    example: { auditors: [AUDITOR_EXAMPLE] },
    errors: [],
  },
  "DELETE /admin/v1/kt/auditors/{auditorId}": {
    summary: "Revokes an auditor of the key log.",
    description: "From now on its token is `unauthorized` at `GET /kt/v1/entries`.",
    parameters: [
      {
        name: "auditorId",
        in: "path",
        required: true,
        description: "The `auditorId`, from the list.",
        schema: { type: "string" },
        example: AUDITOR_EXAMPLE.auditorId,
      },
    ],
    data: AUDITOR_REF,
    example: { ...AUDITOR_EXAMPLE, revokedAt: "2026-11-25T10:00:00.000Z" },
    errors: ["not_found"],
  },
  ...ADMIN_KT_OPERATIONS,
};

function binsData(): JsonSchema {
  return {
    type: "object",
    required: ["tenant", "bins"],
    properties: { tenant: ID, bins: BINS, tokenBins: TOKEN_BINS },
    additionalProperties: false,
  };
}

/** The operator API's paths, for a document whose error schemas are `errors`. */
export function adminPaths(errors: ErrorSchemaRefs): Record<string, JsonObject> {
  const paths: Record<string, JsonObject> = {};
  for (const [key, doc] of Object.entries(ADMIN_OPERATIONS)) {
    const [verb = "", path = ""] = key.split(" ");
    const op: JsonObject = {
      operationId: `Operator_${operationName(verb, path)}`,
      summary: doc.summary,
      description: `${doc.description}\n\nNeeds \`Authorization: Bearer <ADMIN_TOKEN>\`.`,
      tags: [ADMIN_TAG],
      security: [{ [ADMIN_SCHEME]: [] }],
      parameters: doc.parameters ?? [],
    };
    if (doc.body !== undefined) {
      op.requestBody = {
        required: true,
        content: { [JSON_MEDIA]: { schema: doc.body.schema, example: doc.body.example } },
      };
    }
    op.responses = responsesOf(errors, doc);
    paths[path] = { ...paths[path], [verb.toLowerCase()]: op };
  }
  return paths;
}

function responsesOf(errors: ErrorSchemaRefs, doc: AdminOperation): JsonObject {
  const responses: JsonObject = {
    "200": {
      description: "Success.",
      headers: responseHeaders(200, true),
      content: {
        [JSON_MEDIA]: { schema: successEnvelope(doc.data), example: { success: true, data: doc.example } },
      },
    },
  };
  for (const [status, group] of codesByStatus([...doc.errors, ...COMMON_ERRORS])) {
    responses[String(status)] = errorResponse(errors, status, group, true);
  }
  return responses;
}

/** `PUT /admin/v1/issuers/{tenant}/bins` as `PutIssuersBins`. */
function operationName(verb: string, path: string): string {
  const words = path
    .replace("/admin/v1/", "")
    .split("/")
    .filter((part) => !part.startsWith("{"))
    .flatMap((part) => part.split("-"))
    .map((w) => w.charAt(0).toUpperCase() + w.slice(1));
  return `${verb.charAt(0)}${verb.slice(1).toLowerCase()}${words.join("")}`;
}

/** The operator's security scheme. */
export const ADMIN_SECURITY_SCHEME: JsonObject = {
  type: "http",
  scheme: "bearer",
  description:
    "The operator API's token: `Authorization: Bearer <ADMIN_TOKEN>`, the server's `ADMIN_TOKEN` (at " +
    "least 32 characters). Without `ADMIN_TOKEN` the operator API is off and every `/admin/v1` path is 404.",
};
