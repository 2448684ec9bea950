import type { JsonObject } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { responseSchemaRef, validateAgainst } from "../../src/openapi/validate.js";
import { doc } from "./support.js";

const ENCRYPT = responseSchemaRef("/api/v1/receipts/encrypt", "post");

/** A success envelope of EncryptReceipt as a client would receive it, written by hand. */
function encryptResponse(): { success: boolean; data: JsonObject } {
  return {
    success: true,
    data: {
      version: "1.0",
      receiptId: "rcpt-1001",
      keyId: "0d8f3f5e-5a43-4a8e-9d0b-8d3c9e1c2a47",
      keyBundle: {
        encryptedAesKey: "q83vEjRWeJA=",
        keyId: "0d8f3f5e-5a43-4a8e-9d0b-8d3c9e1c2a47",
        algorithm: "RSA-OAEP-256",
        aadBound: false,
      },
      ciphertext: "c2VhbGVkIHJlY2VpcHQ=",
      iv: "AAECAwQFBgcICQoL",
      authTag: "AAECAwQFBgcICQoLDA0ODw==",
      merchantId: "m-42",
      transactionId: "txn-9",
      createdAt: "2026-01-31T12:00:00Z",
      isEscrowed: false,
    },
  };
}

describe("validateAgainst", () => {
  it("accepts a valid EncryptReceipt success envelope, and one held in escrow", () => {
    expect(validateAgainst(doc, ENCRYPT, encryptResponse())).toEqual([]);
    const escrowed = encryptResponse();
    Object.assign(escrowed.data, {
      isEscrowed: true,
      escrowKeyId: "escrow-1",
      expiresAt: "2026-03-02T12:00:00.123Z",
    });
    expect(validateAgainst(doc, ENCRYPT, escrowed)).toEqual([]);
  });

  it("reports a value of the wrong type, naming its path", () => {
    const wrong = encryptResponse();
    wrong.data.isEscrowed = "no";
    (wrong.data.keyBundle as JsonObject).keyId = 7;
    expect(validateAgainst(doc, ENCRYPT, wrong)).toEqual([
      "$.data.keyBundle.keyId: must be string, not integer",
      "$.data.isEscrowed: must be boolean, not string",
    ]);
  });

  it("reports a missing required field", () => {
    const missing = encryptResponse();
    delete missing.data.ciphertext;
    expect(validateAgainst(doc, ENCRYPT, missing)).toEqual(["$.data: missing required property ciphertext"]);
  });

  it("reports an extra field, in the data and in the envelope", () => {
    const extra = { ...encryptResponse(), note: "hi" };
    extra.data.ciphertextBase64 = "AA==";
    expect(validateAgainst(doc, ENCRYPT, extra)).toEqual([
      "$.data.ciphertextBase64: is not a known property",
      "$.note: is not a known property",
    ]);
  });

  it("checks the envelope's success flag, date-times and base64", () => {
    const bad = encryptResponse();
    bad.success = false;
    bad.data.createdAt = "31/01/2026";
    bad.data.iv = "not base64!";
    expect(validateAgainst(doc, ENCRYPT, bad)).toEqual([
      "$.success: must be true",
      "$.data.iv: must be base64",
      "$.data.createdAt: must be an RFC 3339 date-time",
    ]);
  });

  it("tells integers from numbers and money from strings", () => {
    const item = { lineItemId: "1", name: "Tea", quantity: 1, unitPrice: 350, totalPrice: 350, taxes: [] };
    expect(validateAgainst(doc, "LineItem", item)).toEqual([]);
    expect(validateAgainst(doc, "LineItem", { ...item, quantity: 1.5, unitPrice: "350" })).toEqual([
      "$.quantity: must be integer, not number",
      "$.unitPrice: must be integer, not string",
    ]);
    const tax = { name: "VAT", rate: 0.19, amount: 2 ** 60 };
    expect(validateAgainst(doc, "LineItem", { ...item, taxes: [tax] })).toEqual([
      "$.taxes[0].amount: must be at most 9007199254740991",
    ]);
  });

  it("validates error envelopes against the registry's codes, through a shared response", () => {
    const error = {
      success: false,
      error: {
        code: "invalid_request",
        message: "The request is invalid.",
        details: "currency: must be an ISO 4217 code",
        timestamp: "2026-01-31T12:00:00.000Z",
        request_id: "req-1",
        doc_url: "/docs/errors#invalid_request",
      },
    };
    const pointer = responseSchemaRef("/api/v1/keys/grant-access", "post", "400");
    expect(validateAgainst(doc, pointer, error)).toEqual([]);
    const unknown = { ...error, error: { ...error.error, code: "teapot" } };
    expect(validateAgainst(doc, pointer, unknown)[0]).toMatch(
      /^\$\.error\.code: must be one of "invalid_request"/,
    );
  });

  it("refuses a pointer that does not resolve", () => {
    expect(() => validateAgainst(doc, "NoSuchSchema", {})).toThrow(/does not resolve/);
  });
});
