import { clone, create, createFileRegistry, type JsonObject } from "@bufbuild/protobuf";
import {
  FileDescriptorProtoSchema,
  file_google_protobuf_timestamp,
  SourceCodeInfo_LocationSchema,
  SourceCodeInfoSchema,
} from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { file_google_api_annotations } from "../../gen/google/api/annotations_pb.js";
import { file_receipts_v1_keys } from "../../gen/receipts/v1/keys_pb.js";
import { file_receipts_v1_kt } from "../../gen/receipts/v1/kt_pb.js";
import { file_receipts_v1_options } from "../../gen/receipts/v1/options_pb.js";
import { leadingComment } from "../../src/openapi/comments.js";
import { buildOpenApi } from "../../src/openapi/openapi.js";
import { doc, operation } from "./support.js";

/**
 * The generated code carries no source info; the comments reach the served document through
 * `gen/receipts/v1/docs.ts`, written by `buf generate` with scripts/protoc-gen-docs.mjs. Descriptors
 * that carry source info themselves (e.g. from a `buf build` image) are read directly.
 */
function keysServiceWithComments() {
  const proto = clone(FileDescriptorProtoSchema, file_receipts_v1_keys.proto);
  const location = (path: number[], text: string) =>
    create(SourceCodeInfo_LocationSchema, { path, span: [0, 0, 0], leadingComments: text });
  proto.sourceCodeInfo = create(SourceCodeInfoSchema, {
    location: [
      location([6, 0], " Short-lived decrypt grants, for card issuers.\n"),
      location(
        [6, 0, 2, 0],
        " Grants a 2-3 minute token. The user consented on the device.\n Second line.\n",
      ),
      location([4, 1, 2, 0], ' "tok_..." with at least 128 bits of randomness.\n'),
    ],
  });
  const deps = new Map([
    [`${file_google_api_annotations.name}.proto`, file_google_api_annotations],
    [`${file_google_protobuf_timestamp.name}.proto`, file_google_protobuf_timestamp],
    [`${file_receipts_v1_kt.name}.proto`, file_receipts_v1_kt],
    [`${file_receipts_v1_options.name}.proto`, file_receipts_v1_options],
  ]);
  const registry = createFileRegistry(proto, (name) => deps.get(name));
  const service = registry.getService("receipts.v1.KeysService");
  if (service === undefined) throw new Error("KeysService not in the registry");
  return service;
}

describe("proto comments", () => {
  it("reach the served document from the generated table: summary, description, fields, services", () => {
    const op = operation("/api/v1/keys/grant-access", "post");
    expect(op.summary).toBe(
      "Grants a 2-3 minute token to decrypt a user's receipts, after the user consented on the device.",
    );
    expect(op.description).toBe(
      "Grants a 2-3 minute token to decrypt a user's receipts, after the user consented on the device." +
        "\n\nNeeds an API key of role `issuer`.",
    );
    // The examples are taken out of the comment: they are examples, not description.
    expect(op.description).not.toContain("Example");
    expect(doc.components.schemas.GrantAccessResponse?.properties).toMatchObject({
      tokenId: { type: "string", description: '"tok_..." with at least 128 bits of randomness.' },
    });
    expect(doc.tags).toContainEqual({
      name: "KeysService",
      description:
        "Short-lived decrypt grants and escrow keys (card issuers); recipient key look-up (merchants).",
    });
  });

  it("become summary, description and field descriptions when the descriptors carry source info", () => {
    const service = keysServiceWithComments();
    const method = service.methods[0];
    if (method === undefined) throw new Error("no method");
    expect(leadingComment(method)).toBe(
      "Grants a 2-3 minute token. The user consented on the device.\nSecond line.",
    );

    const withComments = buildOpenApi([service]);
    const op = withComments.paths["/api/v1/keys/grant-access"]?.post as JsonObject;
    expect(op.summary).toBe("Grants a 2-3 minute token.");
    expect(op.description).toMatch(
      /^Grants a 2-3 minute token\. The user consented on the device\.\nSecond line\.\n\n/,
    );
    expect(withComments.tags).toContainEqual({
      name: "KeysService",
      description: "Short-lived decrypt grants, for card issuers.",
    });
    const response = withComments.components.schemas.GrantAccessResponse?.properties as JsonObject;
    expect(response.tokenId).toEqual({
      type: "string",
      description: '"tok_..." with at least 128 bits of randomness.',
    });
  });
});
