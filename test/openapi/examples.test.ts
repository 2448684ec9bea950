import { type DescMethod, fromJson, type JsonObject } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { httpBindings } from "../../src/http/bindings.js";
import { rpcExample } from "../../src/openapi/comments.js";
import { rpcName } from "../../src/openapi/extras.js";
import { validateAgainst } from "../../src/openapi/validate.js";
import { API_SERVICES } from "../../src/rpc/policy.js";
import { doc, operation } from "./support.js";

/**
 * Every RPC declares an example request and response in its proto comment (see
 * scripts/protoc-gen-docs.mjs), and they are real: valid messages of the RPC's types, and valid
 * against the schemas of the REST operation that shows them. A new RPC without examples fails here.
 * test/e2e/examples.test.ts sends them to a running service.
 */

const METHODS = API_SERVICES.flatMap((service) => service.methods);

/** Every `/api/v1` operation of the document, with its verb and the RPC it is the REST form of. */
const OPERATIONS = Object.entries(doc.paths).flatMap(([path, item]) =>
  Object.entries(item)
    .filter(([, op]) => typeof (op as JsonObject)["x-rpc"] === "string")
    .map(([verb, op]) => ({ path, verb, op: op as JsonObject })),
);

describe("examples of every RPC", () => {
  it.each(METHODS.map((m) => [rpcName(m), m] as const))("%s declares a request and a response", (_, m) => {
    const example = rpcExample(m);
    expect(example.request, "an `Example request:` in the RPC's proto comment").toBeDefined();
    expect(example.response, "an `Example response:` in the RPC's proto comment").toBeDefined();
  });

  it.each(METHODS.map((m) => [rpcName(m), m] as const))(
    "%s: the examples are messages of its types",
    (_, m) => {
      const example = rpcExample(m);
      // fromJson refuses unknown fields and values of the wrong type.
      expect(() => fromJson(m.input, example.request ?? null)).not.toThrow();
      expect(() => fromJson(m.output, example.response ?? null)).not.toThrow();
    },
  );

  it("shows each REST operation's example, valid against its own schemas", () => {
    // Every RPC with a REST binding has an operation (WatchEvents streams over gRPC and Connect only).
    const rest = new Set<DescMethod>(httpBindings(API_SERVICES).map((b) => b.method));
    expect(OPERATIONS.length).toBeGreaterThanOrEqual(METHODS.filter((m) => rest.has(m)).length);
    for (const { path, verb, op } of OPERATIONS) {
      const where = `${verb} ${path}`;
      const ok = ((op.responses as JsonObject)["200"] as JsonObject).content as JsonObject;
      const response = ok["application/json"] as JsonObject;
      expect(response.example, `${where}: response example`).toBeDefined();
      const pointer = `#/paths/${path.replaceAll("~", "~0").replaceAll("/", "~1")}/${verb}`;
      expect(
        validateAgainst(doc, `${pointer}/responses/200/content/application~1json/schema`, response.example),
      ).toEqual([]);
      const body = (op.requestBody as JsonObject | undefined)?.content as JsonObject | undefined;
      if (body !== undefined) {
        const media = body["application/json"] as JsonObject;
        expect(media.example, `${where}: request example`).toBeDefined();
        expect(
          validateAgainst(doc, `${pointer}/requestBody/content/application~1json/schema`, media.example),
        ).toEqual([]);
      }
      (op.parameters as JsonObject[]).forEach((parameter, i) => {
        if (parameter.in === "header") return;
        if (parameter.in === "path")
          expect(parameter.example, `${where}: ${parameter.name as string}`).toBeDefined();
        if (parameter.example === undefined) return;
        expect(validateAgainst(doc, `${pointer}/parameters/${i}/schema`, parameter.example), where).toEqual(
          [],
        );
      });
    }
  });

  it("splits the request by the binding: path values in the URL, the rest in the query or the body", () => {
    const list = operation("/api/v1/receipts/{userId}", "get");
    const parameters = list.parameters as JsonObject[];
    expect(parameters.find((p) => p.name === "userId")?.example).toBe("usr_OiIWtaNKLlelXAD2");
    expect(parameters.find((p) => p.name === "pageSize")?.example).toBe(1);
    const create = operation("/api/v1/payments/{gateway}/create", "post");
    expect((create.parameters as JsonObject[]).find((p) => p.name === "gateway")?.example).toBe("gateway_a");
    const body = ((create.requestBody as JsonObject).content as JsonObject)["application/json"] as JsonObject;
    // body: "receipt": the body is the receipt itself, not {"receipt": ...}.
    expect((body.example as JsonObject).receiptId).toBe("r-1002");
    const encrypt = operation("/api/v1/receipts/encrypt", "post");
    const ok = ((encrypt.responses as JsonObject)["200"] as JsonObject).content as JsonObject;
    // response_body: "receipt": data is the receipt.
    expect(((ok["application/json"] as JsonObject).example as JsonObject).data).toMatchObject({
      receiptId: "r-1001",
      isEscrowed: false,
    });
  });
});
