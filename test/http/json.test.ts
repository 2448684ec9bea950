import { create } from "@bufbuild/protobuf";
import { StructSchema, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { HealthListResponseSchema } from "../../gen/grpc/health/v1/health_pb.js";
import { EncryptedReceiptSchema, ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { EncryptReceiptRequestSchema } from "../../gen/receipts/v1/receipts_pb.js";
import { AppError } from "../../src/errors.js";
import { messageToJson, parseJsonBody, validateJson } from "../../src/rpc/json.js";

function details(schema: Parameters<typeof validateJson>[0], json: unknown): string[] {
  return validateJson(schema, json).map((v) => `${v.field}: ${v.description}`);
}

describe("parseJsonBody", () => {
  it("converts a valid body, accepting proto names and null for unset", () => {
    const receipt = parseJsonBody(ReceiptSchema, {
      receipt_id: "r1",
      amount: 950,
      merchantStreet: null,
      transactionDate: "2026-01-31T12:00:00.5+01:00",
      items: [{ unitPrice: 350, taxes: [{ rate: 0.19, amount: 56 }] }],
    });
    expect(receipt.receiptId).toBe("r1");
    expect(receipt.amount).toBe(950n);
    expect(receipt.merchantStreet).toBeUndefined();
    expect(receipt.items[0]?.taxes[0]?.amount).toBe(56n);
  });

  it("throws one invalid_request naming every problem", () => {
    let thrown: unknown;
    try {
      parseJsonBody(ReceiptSchema, { receiptId: 1, nope: true, items: {} });
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(AppError);
    expect((thrown as AppError).code).toBe("invalid_request");
    expect((thrown as AppError).details).toBe(
      "receiptId: must be a string; nope: unknown field; items: must be a JSON array",
    );
  });
});

describe("validateJson", () => {
  it("checks timestamps as real RFC 3339 instants", () => {
    for (const bad of [
      "2026-02-30T00:00:00Z",
      "2026-01-01 00:00:00Z",
      "2026-01-01T24:00:00Z",
      "0000-01-01T00:00:00Z",
    ]) {
      expect(details(ReceiptSchema, { transactionDate: bad }), bad).toHaveLength(1);
    }
    expect(details(ReceiptSchema, { transactionDate: "2024-02-29T23:59:59.123456789Z" })).toEqual([]);
  });

  it("checks bytes as base64 and booleans strictly", () => {
    expect(
      details(EncryptedReceiptSchema, { ciphertext: "AQID", iv: "not base64!", isEscrowed: "false" }),
    ).toEqual(["iv: must be a base64 string", "isEscrowed: must be true or false"]);
    // A lone last character holds no whole byte, in either alphabet: named here, not left to the library.
    for (const iv of ["AAAAA", "QUJD_", "QUJDRA-", "QUJDRAxyz"]) {
      expect(details(EncryptedReceiptSchema, { ciphertext: "AQID", iv }), iv).toEqual(
        iv.length % 4 === 1 ? ["iv: must be a base64 string"] : [],
      );
    }
  });

  it("rejects a field given under both of its names", () => {
    expect(details(ReceiptSchema, { receiptId: "a", receipt_id: "b" })).toEqual([
      "receipt_id: is the same field as receiptId; set it once",
    ]);
  });

  it("checks map keys and values and enum names", () => {
    expect(
      details(HealthListResponseSchema, {
        statuses: { a: { status: "SERVING" }, b: { status: "BROKEN" }, c: { status: 7 }, __proto__x: null },
      }),
    ).toEqual([
      "statuses.b.status: must be one of UNKNOWN, SERVING, NOT_SERVING, SERVICE_UNKNOWN",
      "statuses.c.status: must be one of UNKNOWN, SERVING, NOT_SERVING, SERVICE_UNKNOWN",
      "statuses.__proto__x: must not be null",
    ]);
  });

  it("names a string field holding an unpaired surrogate", () => {
    const problems = validateJson(EncryptReceiptRequestSchema, {
      receipt: { merchantName: "Caf\ud800", items: [{ name: "ok\udc00x" }] },
    });
    expect(problems).toEqual([
      {
        field: "receipt.merchantName",
        description: "must be valid Unicode text (it has an unpaired surrogate)",
      },
      {
        field: "receipt.items[0].name",
        description: "must be valid Unicode text (it has an unpaired surrogate)",
      },
    ]);
    expect(
      validateJson(EncryptReceiptRequestSchema, { receipt: { merchantName: "Caf\u00e9 \ud83d\ude00" } }),
    ).toEqual([]);
  });

  it("bounds nesting depth", () => {
    let deep: unknown = 1;
    for (let i = 0; i < 100; i++) deep = { x: deep };
    expect(details(StructSchema, { fields: {} })).toEqual([]);
    expect(validateJson(StructSchema, deep as object)).toEqual([
      { field: "body", description: "nesting is deeper than 32 levels" },
    ]);
  });

  it("caps the number of violations it reports", () => {
    const items = Array.from({ length: 500 }, () => ({ unitPrice: "1" }));
    const violations = validateJson(ReceiptSchema, { items });
    expect(violations).toHaveLength(101);
    expect(violations.at(-1)).toEqual({ field: "(more)", description: "400 more problems" });
  });
});

describe("messageToJson", () => {
  it("renders implicit defaults, omits unset optionals and renders 64-bit integers as numbers", () => {
    const json = messageToJson(
      ReceiptSchema,
      create(ReceiptSchema, {
        receiptId: "r1",
        subtotal: 0n,
        transactionDate: timestampFromDate(new Date("2026-01-01T00:00:00Z")),
        items: [
          { quantity: 2n, unitPrice: 350n, totalPrice: 700n, taxes: [{ amount: 9_007_199_254_740_991n }] },
        ],
      }),
    );
    expect(json).toMatchObject({
      version: "",
      receiptId: "r1",
      subtotal: 0,
      transactionDate: "2026-01-01T00:00:00Z",
      items: [
        {
          quantity: 2,
          unitPrice: 350,
          totalPrice: 700,
          taxes: [{ name: "", rate: 0, amount: 9_007_199_254_740_991 }],
        },
      ],
    });
    expect(json).not.toHaveProperty("totalAmount");
    expect(json).not.toHaveProperty("keyId");
  });

  it("keeps a value beyond the safe range as a string rather than round it", () => {
    const json = messageToJson(ReceiptSchema, create(ReceiptSchema, { amount: 2n ** 60n })) as {
      amount: unknown;
    };
    expect(json.amount).toBe("1152921504606846976");
  });
});
