import { getOption, type JsonObject } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { http } from "../../gen/google/api/annotations_pb.js";
import { ERRORS } from "../../src/errors.js";
import { httpBindings } from "../../src/http/bindings.js";
import { openApiPath } from "../../src/openapi/openapi.js";
import { API_SERVICES } from "../../src/rpc/policy.js";
import { component, deref, doc, operation } from "./support.js";

/** Every annotated method, read straight from the descriptors (not through the generator's code). */
const annotated = API_SERVICES.flatMap((service) =>
  service.methods.flatMap((method) => {
    const rule = getOption(method, http);
    const pattern = rule.pattern;
    if (pattern.case === undefined || pattern.case === "custom") return [];
    return [{ method, verb: pattern.case, template: pattern.value, body: rule.body }];
  }),
);

/** The proto template with `{snake_case}` variables renamed to their lowerCamelCase JSON names. */
function expectedPath(template: string): string {
  return template.replace(
    /\{([a-z0-9_]+)\}/g,
    (_m, name: string) => `{${name.replace(/_([a-z0-9])/g, (_u, c: string) => c.toUpperCase())}}`,
  );
}

function parameters(op: JsonObject): JsonObject[] {
  return (op.parameters as JsonObject[]).map((p) => deref(p));
}

const API_OPERATIONS = Object.entries(doc.paths)
  .filter(([path]) => path.startsWith("/api/v1/"))
  .flatMap(([path, item]) =>
    Object.entries(item).map(([verb, op]) => ({ path, verb, op: op as JsonObject })),
  );

describe("paths from the google.api.http annotations", () => {
  it("documents every annotated method of the API services, with its verb, path and operationId", () => {
    expect(annotated).toHaveLength(36);
    for (const { method, verb, template } of annotated) {
      const op = operation(expectedPath(template), verb);
      expect(op.operationId).toBe(`${method.parent.name}_${method.name}`);
      expect(op.tags).toEqual([method.parent.name]);
      expect(op["x-rpc"]).toBe(`${method.parent.typeName}/${method.name}`);
      expect(op.summary).toEqual(expect.any(String));
    }
    expect(API_OPERATIONS).toHaveLength(annotated.length);
  });

  it("names path parameters by JSON name, at the position of the Fastify route's parameter", () => {
    expect(Object.keys(doc.paths)).toContain("/api/v1/receipts/{userId}");
    expect(Object.keys(doc.paths)).toContain("/api/v1/transactions/{transactionId}/receipt");
    expect(Object.keys(doc.paths)).toContain("/api/v1/payments/{gateway}/create");
    for (const binding of httpBindings(API_SERVICES)) {
      let n = 0;
      const asRoute = openApiPath(binding).replace(/\{[^}]+\}/g, () => `:p${n++}`);
      expect(asRoute).toBe(binding.routePath);
    }
  });

  it("declares each path variable as a required, typed path parameter", () => {
    const list = parameters(operation("/api/v1/receipts/{userId}", "get")).filter((p) => p.in === "path");
    expect(list).toEqual([
      expect.objectContaining({ name: "userId", required: true, schema: { type: "string" } }),
    ]);
    const create = parameters(operation("/api/v1/payments/{gateway}/create", "post"));
    expect(create.filter((p) => p.in === "path").map((p) => p.name)).toEqual(["gateway"]);
  });

  it("declares the request fields outside path and body as typed query parameters of GET methods", () => {
    const query = (path: string) =>
      parameters(operation(path, "get"))
        .filter((p) => p.in === "query")
        .map((p) => {
          const { description: _comment, ...schema } = p.schema as JsonObject;
          return [p.name, schema];
        });
    expect(query("/api/v1/receipts/{userId}")).toEqual([
      ["pageSize", { type: "integer", format: "int32" }],
      ["pageToken", { type: "string" }],
    ]);
    expect(query("/api/v1/transactions/{transactionId}/receipt")).toEqual([
      ["merchantId", { type: "string" }],
    ]);
    for (const { op } of API_OPERATIONS.filter((o) => o.verb === "post")) {
      expect(parameters(op).filter((p) => p.in === "query")).toEqual([]);
    }
  });

  it("takes the request body from `body`: the request message for *, the Receipt for body: receipt", () => {
    const bodyRef = (path: string) => {
      const media = ((operation(path, "post").requestBody as JsonObject).content as JsonObject)[
        "application/json"
      ] as JsonObject;
      return { schema: media.schema };
    };
    expect(bodyRef("/api/v1/keys/grant-access")).toEqual({
      schema: { $ref: "#/components/schemas/GrantAccessRequest" },
    });
    expect(bodyRef("/api/v1/onboarding/register")).toEqual({
      schema: { $ref: "#/components/schemas/RegisterRequest" },
    });
    expect(bodyRef("/api/v1/receipts/encrypt")).toEqual({
      schema: { $ref: "#/components/schemas/ReceiptInput" },
    });
    expect(bodyRef("/api/v1/payments/{gateway}/create")).toEqual({
      schema: { $ref: "#/components/schemas/ReceiptInput" },
    });
    for (const { op } of API_OPERATIONS.filter((o) => o.verb === "get"))
      expect(op.requestBody).toBeUndefined();
  });

  it("wraps the response, or its response_body field, in the success envelope", () => {
    const data = (path: string, verb = "post") => {
      const ok = deref(operation(path, verb).responses as JsonObject);
      const schema = ((ok["200"] as JsonObject).content as JsonObject)["application/json"] as JsonObject;
      const envelope = schema.schema as JsonObject;
      expect(envelope.required).toEqual(["success", "data"]);
      expect((envelope.properties as JsonObject).success).toEqual({ type: "boolean", const: true });
      return (envelope.properties as JsonObject).data;
    };
    expect(data("/api/v1/receipts/encrypt")).toEqual({ $ref: "#/components/schemas/EncryptedReceipt" });
    expect(data("/api/v1/receipts/decrypt")).toEqual({ $ref: "#/components/schemas/Receipt" });
    expect(data("/api/v1/payments/decrypt")).toEqual({ $ref: "#/components/schemas/Receipt" });
    expect(data("/api/v1/receipts/{userId}", "get")).toEqual({
      $ref: "#/components/schemas/ListReceiptsResponse",
    });
    expect(data("/api/v1/payments/{gateway}/create")).toEqual({
      $ref: "#/components/schemas/CreatePaymentResponse",
    });
  });
});

describe("errors, headers and security", () => {
  const statusesOf = (op: JsonObject) => Object.keys(op.responses as JsonObject).map(Number);

  it("gives every error response the envelope, whose code enum is the error registry", () => {
    expect(deref(deref(component("ErrorEnvelope").properties as JsonObject).error).properties).toMatchObject({
      code: { $ref: "#/components/schemas/ErrorCode" },
    });
    expect(component("ErrorCode").enum).toEqual(Object.keys(ERRORS));
    for (const { op } of API_OPERATIONS) {
      for (const [status, raw] of Object.entries(op.responses as JsonObject)) {
        if (status === "200") continue;
        const response = deref(raw);
        const schema = ((response.content as JsonObject)["application/json"] as JsonObject).schema;
        expect(schema).toEqual({ $ref: "#/components/schemas/ErrorEnvelope" });
        for (const code of response["x-error-codes"] as (keyof typeof ERRORS)[]) {
          expect(ERRORS[code].http).toBe(Number(status));
          expect(response.description).toContain(ERRORS[code].description);
        }
      }
    }
  });

  it("lists the statuses a method can return: 402 only for payments create, 413/415 only with a body", () => {
    const always = [400, 401, 403, 404, 409, 429, 500, 503];
    for (const { path, verb, op } of API_OPERATIONS) {
      const statuses = statusesOf(op);
      expect(statuses).toEqual(expect.arrayContaining([200, ...always]));
      expect(statuses.includes(402)).toBe(path === "/api/v1/payments/{gateway}/create");
      const hasBody = op.requestBody !== undefined;
      // DeleteUser's DELETE takes an optional body (the erased card's signed revocations).
      expect(hasBody).toBe(verb === "post" || path === "/api/v1/users/{userId}");
      if (verb === "delete" && hasBody) expect((op.requestBody as JsonObject).required).toBe(false);
      expect(statuses.includes(413)).toBe(hasBody);
      expect(statuses.includes(415)).toBe(hasBody);
    }
    const create = deref(
      (operation("/api/v1/payments/{gateway}/create", "post").responses as JsonObject)["402"],
    );
    expect(create["x-error-codes"]).toEqual(["payment_declined"]);
  });

  it("puts X-Request-Id and the rate-limit headers on every response, Retry-After on 429", () => {
    for (const { op } of API_OPERATIONS) {
      for (const [status, raw] of Object.entries(op.responses as JsonObject)) {
        const headers = Object.keys(deref(raw).headers as JsonObject);
        expect(headers).toEqual(
          expect.arrayContaining([
            "X-Request-Id",
            "X-RateLimit-Limit",
            "X-RateLimit-Remaining",
            "X-RateLimit-Reset",
          ]),
        );
        expect(headers.includes("Retry-After")).toBe(status === "429");
      }
    }
    for (const name of [
      "X-Request-Id",
      "X-RateLimit-Limit",
      "X-RateLimit-Remaining",
      "X-RateLimit-Reset",
      "Retry-After",
    ]) {
      expect((doc.components.headers as JsonObject)[name]).toMatchObject({ required: true });
    }
  });

  it("documents Idempotency-Key on the creates and X-Receipt-Signature on encrypt and create", () => {
    const headerNames = (path: string) =>
      parameters(operation(path, "post"))
        .filter((p) => p.in === "header")
        .map((p) => p.name);
    expect(headerNames("/api/v1/payments/{gateway}/create")).toEqual([
      "X-Request-Id",
      "Idempotency-Key",
      "X-Receipt-Signature",
    ]);
    expect(headerNames("/api/v1/receipts/encrypt")).toEqual([
      "X-Request-Id",
      "Idempotency-Key",
      "X-Receipt-Signature",
    ]);
    expect(headerNames("/api/v1/receipts/sealed")).toEqual(["X-Request-Id", "Idempotency-Key"]);
    expect(headerNames("/api/v1/keys/grant-access")).toEqual(["X-Request-Id"]);
  });

  it("requires the X-API-Key scheme on every /api/v1 operation, with the roles the protos declare", () => {
    expect((doc.components.securitySchemes as JsonObject).apiKey).toEqual(
      expect.objectContaining({ type: "apiKey", in: "header", name: "X-API-Key" }),
    );
    expect(doc.security).toBeUndefined();
    for (const { op } of API_OPERATIONS) {
      expect(op.security).toEqual([{ apiKey: [] }]);
      expect(["issuer", "merchant"]).toEqual(expect.arrayContaining(op["x-roles"] as string[]));
    }
    expect(operation("/api/v1/receipts/encrypt", "post")["x-roles"]).toEqual(["merchant"]);
    expect(operation("/api/v1/receipts/{userId}", "get")["x-roles"]).toEqual(["issuer"]);
  });

  it("documents /healthz, /readyz, /metrics and /openapi.json without security", () => {
    for (const path of ["/healthz", "/readyz", "/metrics", "/openapi.json"]) {
      const op = operation(path, "get");
      expect(op.security).toEqual([]);
      expect(op.tags).toEqual(["Operations"]);
      expect(Object.keys(deref((op.responses as JsonObject)["200"]).headers as JsonObject)).toEqual([
        "X-Request-Id",
      ]);
    }
    expect(statusesOf(operation("/readyz", "get"))).toEqual([200, 503]);
    expect(
      Object.keys(deref((operation("/metrics", "get").responses as JsonObject)["200"]).content as JsonObject),
    ).toEqual(["text/plain"]);
  });
});
