import { randomBytes, randomUUID } from "node:crypto";
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ADMIN_ROUTES } from "../../src/http/admin.js";
import { ADMIN_OPERATIONS } from "../../src/openapi/admin.js";
import { EXAMPLE_ROOT } from "../../src/openapi/admin-kt.js";
import { serviceOpenApi } from "../../src/openapi/openapi.js";
import { validateAgainst } from "../../src/openapi/validate.js";
import { post, startService, type TestService } from "../support/harness.js";

/**
 * The operator API as the reference documents it (only when ADMIN_TOKEN is set): every route is
 * documented, nothing else is, and each example, sent to a running server as shown, succeeds with an
 * answer that matches the documented schema.
 */

const TOKEN = "admin-docs-test-token-0123456789abcdef";
const doc = serviceOpenApi({ admin: true });

/** `VERB /path` of each registered route, Fastify's `:name` as OpenAPI's `{name}`. */
const registered = ADMIN_ROUTES.map((r) => `${r.method} ${r.url.replace(/:(\w+)/g, "{$1}")}`);

describe("operator API documentation", () => {
  it("documents exactly the routes the server registers", () => {
    expect(Object.keys(ADMIN_OPERATIONS).sort()).toEqual([...registered].sort());
  });

  it("is absent from the default document and its security schemes", () => {
    const plain = serviceOpenApi();
    expect(Object.keys(plain.paths).filter((p) => p.startsWith("/admin"))).toEqual([]);
    expect((plain.components.securitySchemes as JsonObject).adminToken).toBeUndefined();
    expect(Object.keys(doc.paths).filter((p) => p.startsWith("/admin")).length).toBeGreaterThan(4);
  });

  it("shows examples valid against their own schemas", () => {
    for (const [key, op] of Object.entries(ADMIN_OPERATIONS)) {
      const [verb = "", path = ""] = key.split(" ");
      const pointer = `#/paths/${path.replaceAll("/", "~1")}/${verb.toLowerCase()}`;
      const ok = `${pointer}/responses/200/content/application~1json/schema`;
      expect(validateAgainst(doc, ok, { success: true, data: op.example }), key).toEqual([]);
      if (op.body !== undefined) {
        const body = `${pointer}/requestBody/content/application~1json/schema`;
        expect(validateAgainst(doc, body, op.body.example), key).toEqual([]);
      }
    }
  });
});

describe("operator API examples against a running server", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService({ env: { ADMIN_TOKEN: TOKEN } });
    // The merchant tenant the assignment example names must exist with a merchant key.
    await svc.newKey({ role: "merchant", tier: "standard", tenantId: "corner-coffee-ltd" });
    // The root the confirmation example names, registered by its issuer (pending until confirmed).
    const bank = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "acme-bank" });
    const added = await post(svc, "/api/v1/issuers/signing-keys", bank, {
      publicKey: EXAMPLE_ROOT.publicKey,
    });
    expect(added.status).toBe(200);
    // The card transfer example moves the card of this user, of another issuer.
    const now = new Date();
    await svc.store.users.register({
      panHash: randomBytes(32).toString("hex"),
      tenantId: "other-bank",
      newUserId: "usr_OiIWtaNKLlelXAD2",
      key: {
        keyId: randomUUID(),
        tenantId: "other-bank",
        publicKey: "MCowBQYDK2VwAyEA",
        algorithm: "RSA-OAEP-256",
        status: "pending",
        createdAt: now,
      },
      now,
    });
  });
  afterAll(async () => {
    await svc?.close();
  });

  /** The order an operator would try them in: create before list, revoke last. */
  const ORDER = [
    "POST /admin/v1/api-keys",
    "GET /admin/v1/api-keys",
    "PUT /admin/v1/issuers/{tenant}/bins",
    "GET /admin/v1/issuers/{tenant}/bins",
    "PUT /admin/v1/merchants/{merchantId}",
    "POST /admin/v1/cards/transfer",
    "GET /admin/v1/audit",
    "GET /admin/v1/escrow",
    "POST /admin/v1/kt/auditors",
    "GET /admin/v1/kt/auditors",
    "DELETE /admin/v1/kt/auditors/{auditorId}",
    // Before the root is confirmed: the operator's word sets it.
    "PUT /admin/v1/issuers/{tenant}/require-bindings",
    "PUT /admin/v1/issuers/{tenant}/plaintext-intake",
    "POST /admin/v1/issuers/{tenant}/signing-keys/{signingKeyId}/confirm",
    "DELETE /admin/v1/api-keys/{apiKeyId}",
  ];

  it("runs every example as shown", async () => {
    expect([...ORDER].sort()).toEqual(Object.keys(ADMIN_OPERATIONS).sort());
    const ids = new Map<string, string>();
    for (const key of ORDER) {
      const op = ADMIN_OPERATIONS[key];
      if (op === undefined) throw new Error(key);
      const [verb = "", template = ""] = key.split(" ");
      let url = template;
      const query = new URLSearchParams();
      for (const p of op.parameters ?? []) {
        const value = String(ids.get(String(p.example)) ?? p.example);
        if (p.in === "path") url = url.replace(`{${String(p.name)}}`, encodeURIComponent(value));
        else query.set(String(p.name), value);
      }
      const init: RequestInit = { method: verb, headers: { authorization: `Bearer ${TOKEN}` } };
      if (op.body !== undefined) {
        init.body = JSON.stringify(op.body.example);
        init.headers = { ...init.headers, "content-type": "application/json" };
      }
      const res = await fetch(`${svc.baseUrl}${url}${query.size > 0 ? `?${query}` : ""}`, init);
      const answer = (await res.json()) as { data?: JsonValue };
      expect(res.status, `${key}: ${JSON.stringify(answer)}`).toBe(200);
      const pointer = `#/paths/${template.replaceAll("/", "~1")}/${verb.toLowerCase()}/responses/200/content/application~1json/schema`;
      expect(validateAgainst(doc, pointer, answer), key).toEqual([]);
      const created = answer.data as JsonObject;
      if (key === "POST /admin/v1/api-keys")
        ids.set(String((op.example as JsonObject).apiKeyId), String(created.apiKeyId));
      if (key === "POST /admin/v1/kt/auditors")
        ids.set(String((op.example as JsonObject).auditorId), String(created.auditorId));
    }
  });
});
