import { join } from "node:path";
import type { DescMessage } from "@bufbuild/protobuf";
import ts from "typescript";
import { describe, expect, it } from "vitest";
import {
  LineItemSchema,
  ReceiptSchema,
  TaxBreakdownLineSchema,
  TaxSchema,
  TenderSchema,
} from "../../gen/receipts/v1/receipt_pb.js";

/**
 * The client library's receipt JSON types (`ReceiptJson` and its parts in src/client/webcrypto.ts)
 * are made from the generated messages (`ReceiptInputJsonOf`, src/receipt-fields.ts), not written by
 * hand. This test resolves them with the TypeScript compiler and holds them to the proto's
 * descriptors, so a field of receipt.proto the client's types lost (or one they invented) fails here.
 * The service side is held to the proto by test/domain/sealed-plaintext.test.ts, the OpenAPI
 * document by test/openapi/schemas.test.ts, and the fast JSON paths are compiled from the descriptors.
 */

const SOURCE = join(import.meta.dirname, "..", "..", "src", "client", "webcrypto.ts");

/** Each exported type's members, resolved by the compiler: name and whether it is optional. */
function interfaces(): Map<string, Map<string, boolean>> {
  const program = ts.createProgram([SOURCE], {
    strict: true,
    exactOptionalPropertyTypes: true,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const file = program.getSourceFile(SOURCE) as ts.SourceFile;
  const found = new Map<string, Map<string, boolean>>();
  for (const statement of file.statements) {
    if (!ts.isTypeAliasDeclaration(statement) && !ts.isInterfaceDeclaration(statement)) continue;
    const type = checker.getTypeAtLocation(statement.name);
    const members = new Map<string, boolean>();
    for (const property of checker.getPropertiesOfType(type)) {
      members.set(property.name, (property.flags & ts.SymbolFlags.Optional) !== 0);
    }
    found.set(statement.name.text, members);
  }
  return found;
}

/**
 * The JSON members of a message as a receipt's JSON carries them: optional exactly when the receipt
 * rules let a request leave them out (explicit presence, lists); the rest are required, the
 * transaction date (a Timestamp message) among them.
 */
function jsonMembers(desc: DescMessage, leaveOut: readonly string[] = []): Map<string, boolean> {
  const members = new Map<string, boolean>();
  for (const field of desc.fields) {
    if (leaveOut.includes(field.jsonName)) continue;
    members.set(field.jsonName, field.proto.proto3Optional || field.fieldKind === "list");
  }
  return members;
}

const sorted = (members: Map<string, boolean> | undefined) => [...(members ?? new Map())].sort();

describe("the client library's receipt JSON types", () => {
  const found = interfaces();

  it("name every field of the proto's Receipt a receipt's JSON carries", () => {
    // Not in ReceiptJson: what only the service answers (keyId, decryptedAt), the sealed form that
    // replaces the fields (sealedReceipt), and cardBin, which MerchantReceipt adds for routing.
    const expected = jsonMembers(ReceiptSchema, ["keyId", "decryptedAt", "sealedReceipt", "cardBin"]);
    // The client defaults the version ("1.0"), as the service does.
    expected.set("version", true);
    expect(sorted(found.get("ReceiptJson"))).toEqual(sorted(expected));
  });

  it.each([
    ["ReceiptLineItemJson", LineItemSchema],
    ["ReceiptTaxJson", TaxSchema],
    ["ReceiptTenderJson", TenderSchema],
    ["ReceiptTaxLineJson", TaxBreakdownLineSchema],
  ] as const)("%s has the members of the proto's message", (name, desc) => {
    expect(found.has(name), name).toBe(true);
    expect(sorted(found.get(name))).toEqual(sorted(jsonMembers(desc)));
  });
});
