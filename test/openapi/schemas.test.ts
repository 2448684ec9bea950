import { create, type DescField, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  EncryptedReceiptSchema,
  KeyBundleSchema,
  LineItemSchema,
  ReceiptSchema,
  SealedReceiptSchema,
  TaxSchema,
} from "../../gen/receipts/v1/receipt_pb.js";
import { EncryptReceiptRequestSchema } from "../../gen/receipts/v1/receipts_pb.js";
import { decodeHttpRequest, encodeHttpResponse, httpBindings } from "../../src/http/bindings.js";
import { openApiPath, pathParameterName } from "../../src/openapi/openapi.js";
import { SchemaBuilder } from "../../src/openapi/schema.js";
import { responseSchemaRef, validateAgainst } from "../../src/openapi/validate.js";
import { messageToJson } from "../../src/rpc/json.js";
import { API_SERVICES } from "../../src/rpc/policy.js";
import { component, deref, doc, filled } from "./support.js";

const MONEY = ["subtotal", "taxAmount", "totalAmount", "amount", "tipAmount"];
const TIMESTAMPS = ["transactionDate", "decryptedAt"];

function property(schemaName: string, name: string): JsonObject {
  const found = (component(schemaName).properties as JsonObject)[name];
  if (found === undefined) throw new Error(`${schemaName} has no property ${name}`);
  return deref(found);
}

describe("component schemas from the message descriptors", () => {
  it("has one schema per message of the API, both forms for messages sent in both directions", () => {
    const names = Object.keys(doc.components.schemas);
    expect(names).toEqual(
      expect.arrayContaining([
        "Receipt",
        "ReceiptInput",
        "LineItem",
        "LineItemInput",
        "Tax",
        "TaxInput",
        "EncryptedReceipt",
        "KeyBundle",
        "ServiceMetadata",
        "google.protobuf.Timestamp",
        // Every message of a REST endpoint (WatchEvents streams over gRPC and Connect only).
        ...httpBindings(API_SERVICES).flatMap((b) => [b.method.input.name, b.method.output.name]),
      ]),
    );
    expect(names).toEqual([...names].sort());
  });

  it("gives the Receipt every proto field under its JSON name, with the REST JSON type", () => {
    const receipt = component("Receipt");
    expect(Object.keys(receipt.properties as JsonObject)).toEqual(
      ReceiptSchema.fields.map((f) => f.jsonName),
    );
    for (const field of ReceiptSchema.fields) {
      const schema = property("Receipt", field.jsonName);
      if (MONEY.includes(field.jsonName)) {
        expect(schema).toMatchObject({ type: "integer", format: "int64", maximum: Number.MAX_SAFE_INTEGER });
      } else if (TIMESTAMPS.includes(field.jsonName)) {
        expect(schema).toMatchObject({ type: "string", format: "date-time" });
      } else if (field.fieldKind === "list") {
        const item = { items: "LineItem", tenders: "Tender", taxBreakdown: "TaxBreakdownLine" }[
          field.jsonName as "items" | "tenders" | "taxBreakdown"
        ];
        expect(schema).toMatchObject({ type: "array", items: { $ref: `#/components/schemas/${item}` } });
      } else if (field.jsonName === "mockItems") {
        expect(schema).toMatchObject({ type: "boolean" });
      } else if (field.jsonName === "sealedReceipt") {
        expect(schema).toMatchObject({ type: "object", additionalProperties: false });
        expect(Object.keys((schema as JsonObject).properties as JsonObject)).toEqual(
          SealedReceiptSchema.fields.map((f) => f.jsonName),
        );
      } else {
        // A proto comment, when the field has one, is its description; nothing else is added.
        const { description: _comment, ...rest } = schema as JsonObject;
        expect(rest).toEqual({ type: "string" });
      }
    }
    for (const name of ["quantity", "unitPrice", "totalPrice"]) {
      expect(property("LineItem", name)).toMatchObject({ type: "integer", format: "int64" });
    }
    expect(property("Tax", "rate")).toEqual({
      type: "number",
      format: "double",
      description: "Rate as a fraction, e.g. 0.19 for 19%.",
    });
    expect(property("Tax", "amount")).toMatchObject({ type: "integer", format: "int64" });
    expect(property("Tender", "amount")).toMatchObject({ type: "integer", format: "int64" });
    for (const name of ["taxableAmount", "taxAmount"]) {
      expect(property("TaxBreakdownLine", name)).toMatchObject({ type: "integer", format: "int64" });
    }
    expect(property("TaxBreakdownLine", "rate")).toMatchObject({ type: "number", format: "double" });
  });

  it("renders bytes as base64 strings and timestamps as date-time strings", () => {
    for (const name of ["ciphertext", "iv", "authTag"]) {
      expect(property("EncryptedReceipt", name)).toMatchObject({
        type: "string",
        format: "byte",
        contentEncoding: "base64",
      });
    }
    expect(property("KeyBundle", "encryptedAesKey")).toMatchObject({
      type: "string",
      contentEncoding: "base64",
    });
    expect(property("EncryptedReceipt", "createdAt")).toMatchObject({ type: "string", format: "date-time" });
  });

  it("requires implicit-presence fields in responses only; optional and message fields may be absent", () => {
    const implicit = (fields: readonly DescField[]) =>
      fields.filter((f) => !f.proto.proto3Optional && f.fieldKind !== "message").map((f) => f.jsonName);
    for (const desc of [ReceiptSchema, LineItemSchema, TaxSchema, KeyBundleSchema, EncryptedReceiptSchema]) {
      expect(component(desc.name).required).toEqual(implicit(desc.fields));
    }
    expect(component("Receipt").required).toContain("items");
    expect(component("Receipt").required).not.toContain("subtotal");
    expect(component("EncryptedReceipt").required).not.toContain("escrowKeyId");
    expect(component("ReceiptInput").required).toBeUndefined();
    expect(component("GrantAccessRequest").required).toBeUndefined();
  });

  it("splits a message whose own fields agree in both directions but whose nested messages differ", () => {
    const schemas = new SchemaBuilder();
    schemas.use(EncryptReceiptRequestSchema, "input");
    schemas.use(EncryptReceiptRequestSchema, "output");
    expect(schemas.ref(EncryptReceiptRequestSchema, "input")).toEqual({
      $ref: "#/components/schemas/EncryptReceiptRequestInput",
    });
    expect(schemas.ref(EncryptReceiptRequestSchema, "output")).toEqual({
      $ref: "#/components/schemas/EncryptReceiptRequest",
    });
    const inputForm = schemas.components().EncryptReceiptRequestInput?.properties as JsonObject;
    expect(inputForm.receipt).toEqual({ $ref: "#/components/schemas/ReceiptInput" });
    expect(() => schemas.ref(EncryptedReceiptSchema, "output")).toThrow(/not registered/);
  });

  it("closes every message schema (additionalProperties: false), so request schemas reject unknown fields", () => {
    for (const [name, schema] of Object.entries(doc.components.schemas)) {
      if (schema.type === "object" && schema.properties !== undefined) {
        expect(schema.additionalProperties, name).toBe(false);
      }
    }
    for (const name of ["ReceiptInput", "RegisterRequest", "GrantAccessRequest", "DecryptPaymentRequest"]) {
      expect(validateAgainst(doc, name, { recipientHashedPn: "typo" })).toEqual([
        "$.recipientHashedPn: is not a known property",
      ]);
    }
  });
});

describe("the schemas agree with what the transcoder sends and accepts", () => {
  const bindings = httpBindings(API_SERVICES);

  it("validates a fully populated response of every binding, as the transcoder renders it", () => {
    expect(bindings).toHaveLength(36);
    for (const binding of bindings) {
      const data = encodeHttpResponse(binding, filled(binding.method.output));
      const pointer = responseSchemaRef(openApiPath(binding), binding.verb);
      expect(validateAgainst(doc, pointer, { success: true, data }), binding.method.name).toEqual([]);
    }
  });

  it("validates a response with only defaults set: implicit fields rendered, optional ones absent", () => {
    for (const binding of bindings) {
      const message = create(binding.method.output);
      const field = binding.responseField;
      if (field?.fieldKind === "message") {
        (message as Record<string, unknown>)[field.localName] = create(field.message);
      }
      const data = encodeHttpResponse(binding, message);
      const pointer = responseSchemaRef(openApiPath(binding), binding.verb);
      expect(validateAgainst(doc, pointer, { success: true, data }), binding.method.name).toEqual([]);
    }
  });

  it("validates fully populated request bodies the transcoder accepts, and both reject an unknown field", () => {
    for (const binding of bindings.filter((b) => b.body.kind !== "none")) {
      const request = messageToJson(binding.method.input, filled(binding.method.input)) as JsonObject;
      const params: Record<string, string> = {};
      for (const variable of binding.variables) {
        const top = variable.fields[0] as DescField;
        params[variable.param] = String(request[top.jsonName]);
        delete request[top.jsonName];
      }
      const body: JsonValue =
        binding.body.kind === "field" ? (request[binding.body.field.jsonName] as JsonValue) : request;
      const op = doc.paths[openApiPath(binding)]?.[binding.verb.toLowerCase()] as JsonObject;
      const schema = ((op.requestBody as JsonObject).content as JsonObject)["application/json"] as JsonObject;
      const pointer = `${responseSchemaRef(openApiPath(binding), binding.verb).split("/responses/")[0]}/requestBody/content/application~1json/schema`;
      expect(schema.schema).toBeDefined();
      expect(validateAgainst(doc, pointer, body), binding.method.name).toEqual([]);
      expect(() => decodeHttpRequest(binding, { params, query: {}, body })).not.toThrow();

      const typo = { ...(body as JsonObject), unknownField: 1 };
      expect(validateAgainst(doc, pointer, typo)).toEqual(["$.unknownField: is not a known property"]);
      expect(() => decodeHttpRequest(binding, { params, query: {}, body: typo })).toThrow();
    }
  });

  it("names path parameters so a client can fill them from the request's JSON field names", () => {
    const names = bindings.flatMap((b) => b.variables.map(pathParameterName));
    expect(names).toEqual([
      "userId",
      "escrowKeyId",
      "signingKeyId",
      "userId",
      "transactionId",
      "merchantId",
      "merchantId",
      "merchantKeyId",
      "gateway",
      "paymentId",
      "paymentId",
      "endpointId",
      "endpointId",
      "endpointId",
    ]);
  });
});
