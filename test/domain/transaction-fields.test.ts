import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { type Receipt, ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { gatewayByName } from "../../src/domain/gateways/index.js";
import { withMockItems } from "../../src/domain/mock-items.js";
import { sealedPlaintextOf, type ValidateOptions, validateReceipt } from "../../src/domain/receipt-rules.js";
import { luhnValid } from "../../src/domain/transaction-fields.js";
import { AppError, type FieldViolation } from "../../src/errors.js";

/**
 * The receipt fields on plaintext intake: every rule named in one error, every field
 * sealed exactly as sent. ARNs here were given their check digit by hand (Luhn, mod 10), not by the
 * code under test.
 */

type ReceiptInit = Exclude<MessageInitShape<typeof ReceiptSchema>, Receipt>;

const NOW = new Date("2026-01-01T12:00:00Z");
const ARN = "74001236123000000001236";
const OTHER_ARN = "24445006325000000123453";

function receipt(overrides: Partial<ReceiptInit> = {}): Receipt {
  return create(ReceiptSchema, {
    receiptId: "rcpt-2",
    merchantId: "m-42",
    merchantName: "Corner Coffee",
    transactionId: "t-2",
    transactionDate: timestampFromDate(new Date("2025-12-31T10:00:00Z")),
    currency: "EUR",
    recipientHashedPan: "ab".repeat(32),
    ...overrides,
  });
}

function violations(input: Receipt, options: Partial<ValidateOptions> = {}): FieldViolation[] {
  try {
    validateReceipt(input, { mode: "encrypt", now: NOW, ...options } as ValidateOptions);
  } catch (err) {
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe("invalid_request");
    return (err as AppError).violations;
  }
  throw new Error("expected the receipt to be rejected");
}

const fields = (list: FieldViolation[]) => list.map((v) => v.field).sort();

describe("card-transaction receipt fields", () => {
  it("seals every field exactly as sent", () => {
    const valid = validateReceipt(
      receipt({
        receiptType: "refund",
        originalReceiptId: "rcpt-1",
        authorizationCode: "A1b2C3",
        retrievalReferenceNumber: "633112345678",
        acquirerReferenceNumber: ARN,
        terminalId: "TID-0042",
        merchantCategoryCode: "5814",
        cardAcceptorName: "SQ *CORNER COFFEE",
        subtotal: 1000n,
        taxAmount: 190n,
        tipAmount: 200n,
        totalAmount: 1390n,
        tenders: [
          { method: "gift_card", amount: 500n },
          { method: "card", cardBrand: "visa", cardLast4: "4242", amount: 890n },
        ],
        taxBreakdown: [
          { rate: 0.19, taxableAmount: 800n, taxAmount: 152n },
          { rate: 0.07, taxableAmount: 200n, taxAmount: 38n },
        ],
      }),
      { mode: "encrypt", now: NOW, original: "found" },
    );
    expect(sealedPlaintextOf(valid)).toMatchObject({
      receiptType: "refund",
      originalReceiptId: "rcpt-1",
      authorizationCode: "A1b2C3",
      retrievalReferenceNumber: "633112345678",
      acquirerReferenceNumber: ARN,
      terminalId: "TID-0042",
      merchantCategoryCode: "5814",
      cardAcceptorName: "SQ *CORNER COFFEE",
      tipAmount: 200,
      tenders: [
        { method: "gift_card", amount: 500 },
        { method: "card", cardBrand: "visa", cardLast4: "4242", amount: 890 },
      ],
      taxBreakdown: [
        { rate: 0.19, taxableAmount: 800, taxAmount: 152 },
        { rate: 0.07, taxableAmount: 200, taxAmount: 38 },
      ],
    });
  });

  it("leaves every card-transaction field out of a receipt that does not use them", () => {
    const sealed = sealedPlaintextOf(validateReceipt(receipt(), { mode: "encrypt", now: NOW }));
    for (const name of ["receiptType", "tenders", "taxBreakdown", "tipAmount", "authorizationCode"]) {
      expect(sealed, name).not.toHaveProperty(name);
    }
  });

  it("names every broken identifier at once", () => {
    const found = violations(
      receipt({
        authorizationCode: "12345",
        retrievalReferenceNumber: "63311234567-",
        acquirerReferenceNumber: "7400123612300000000123",
        terminalId: "TID 0042",
        merchantCategoryCode: "581",
        cardAcceptorName: "A NAME FAR LONGER THAN TWENTY-FIVE",
      }),
    );
    expect(found).toEqual([
      { field: "authorizationCode", description: "must be 6 letters or digits (ISO 8583 field 38)" },
      { field: "retrievalReferenceNumber", description: "must be 12 letters or digits (ISO 8583 field 37)" },
      {
        field: "terminalId",
        description: "must be 1 to 8 ASCII letters, digits or symbols, without spaces (ISO 8583 field 41)",
      },
      { field: "merchantCategoryCode", description: "must be 4 digits (ISO 18245)" },
      { field: "acquirerReferenceNumber", description: "must be 23 digits" },
      { field: "cardAcceptorName", description: "must be at most 25 characters" },
    ]);
  });

  it("refuses an ARN whose check digit is wrong, and any other digit changed", () => {
    expect(luhnValid(ARN)).toBe(true);
    expect(luhnValid(OTHER_ARN)).toBe(true);
    const wrongCheck = `${ARN.slice(0, 22)}${(Number(ARN[22]) + 1) % 10}`;
    const typo = `${ARN.slice(0, 5)}9${ARN.slice(6)}`;
    for (const arn of [wrongCheck, typo]) {
      expect(violations(receipt({ acquirerReferenceNumber: arn }))).toEqual([
        {
          field: "acquirerReferenceNumber",
          description: "has a wrong check digit: the last digit is the Luhn digit of the 22 before it",
        },
      ]);
    }
    expect(violations(receipt({ acquirerReferenceNumber: `${ARN.slice(0, 22)}X` }))[0]?.description).toBe(
      "must be 23 digits",
    );
  });

  it("requires an original for a refund or void, and refuses one on a sale", () => {
    expect(violations(receipt({ receiptType: "refund" }))).toEqual([
      {
        field: "originalReceiptId",
        description: "is required for a refund receipt: the receiptId of the sale it undoes",
      },
    ]);
    expect(fields(violations(receipt({ receiptType: "void" })))).toEqual(["originalReceiptId"]);
    expect(violations(receipt({ originalReceiptId: "rcpt-1" }))).toEqual([
      { field: "originalReceiptId", description: "is only for a receiptType of refund or void" },
    ]);
    expect(violations(receipt({ receiptType: "sale", originalReceiptId: "rcpt-1" }))).toHaveLength(1);
    expect(violations(receipt({ receiptType: "return", originalReceiptId: "rcpt-1" }))).toEqual([
      { field: "receiptType", description: "must be sale, refund or void" },
      { field: "originalReceiptId", description: "is only for a receiptType of refund or void" },
    ]);
  });

  it("refuses an original that was looked up and not found, or that is the receipt itself", () => {
    const refund = receipt({ receiptType: "refund", originalReceiptId: "rcpt-1" });
    expect(violations(refund, { original: "missing" })).toEqual([
      {
        field: "originalReceiptId",
        description:
          "must name a receipt of this merchantId that the service stored: there is none with this receiptId",
      },
    ]);
    expect(validateReceipt(refund, { mode: "encrypt", now: NOW, original: "found" }).originalReceiptId).toBe(
      "rcpt-1",
    );
    expect(violations(receipt({ receiptType: "void", originalReceiptId: "rcpt-2" }))).toEqual([
      { field: "originalReceiptId", description: "must name another receipt than this one" },
    ]);
    expect(violations(receipt({ receiptType: "void", originalReceiptId: "bad id" }))[0]?.field).toBe(
      "originalReceiptId",
    );
  });

  it("wants tenders that add up to totalAmount, and says both sums", () => {
    const tenders = [
      { method: "cash", amount: 400n },
      { method: "card", amount: 500n },
    ];
    expect(violations(receipt({ totalAmount: 950n, tenders }))).toEqual([
      { field: "tenders", description: "must add up to totalAmount (950); their amounts add up to 900" },
    ]);
    expect(violations(receipt({ tenders }))).toEqual([
      { field: "totalAmount", description: "is required with tenders: they must add up to it" },
    ]);
    expect(
      validateReceipt(receipt({ totalAmount: 900n, tenders }), { mode: "encrypt", now: NOW }).tenders,
    ).toEqual([
      { method: "cash", amount: 400 },
      { method: "card", amount: 500 },
    ]);
    // On a payment without a totalAmount, the tenders add up to the amount charged.
    const payment = receipt({ amount: 900n, tenders });
    expect(validateReceipt(payment, { mode: "payment", now: NOW }).tenders).toHaveLength(2);
    expect(violations(receipt({ amount: 901n, tenders }), { mode: "payment" })).toEqual([
      { field: "tenders", description: "must add up to amount (901); their amounts add up to 900" },
    ]);
  });

  it("names a broken tender by its place, and skips the sum until the tenders are right", () => {
    const found = violations(
      receipt({
        totalAmount: 1n,
        tenders: [
          { method: "", amount: 5n },
          { method: "card", cardLast4: "42", cardBrand: "v\u0000isa", amount: -1n },
        ],
      }),
    );
    expect(fields(found)).toEqual([
      "tenders[0].method",
      "tenders[1].amount",
      "tenders[1].cardBrand",
      "tenders[1].cardLast4",
    ]);
    const many = Array.from({ length: 21 }, () => ({ method: "card", amount: 1n }));
    expect(violations(receipt({ totalAmount: 21n, tenders: many }))).toEqual([
      { field: "tenders", description: "must have at most 20 entries" },
    ]);
  });

  it("wants a tax breakdown whose tax adds up to taxAmount, with rates as fractions", () => {
    const taxBreakdown = [
      { rate: 0.19, taxableAmount: 800n, taxAmount: 152n },
      { rate: 0.07, taxableAmount: 200n, taxAmount: 14n },
    ];
    expect(violations(receipt({ taxAmount: 190n, taxBreakdown }))).toEqual([
      {
        field: "taxBreakdown",
        description: "tax amounts must add up to taxAmount (190); they add up to 166",
      },
    ]);
    expect(
      validateReceipt(receipt({ taxAmount: 166n, taxBreakdown }), { mode: "encrypt", now: NOW }).taxBreakdown,
    ).toHaveLength(2);
    // Without a taxAmount there is nothing to add up to.
    expect(
      validateReceipt(receipt({ taxBreakdown }), { mode: "encrypt", now: NOW }).taxBreakdown,
    ).toHaveLength(2);
    expect(
      fields(violations(receipt({ taxBreakdown: [{ rate: 19, taxableAmount: -800n, taxAmount: 152n }] }))),
    ).toEqual(["taxBreakdown[0].rate", "taxBreakdown[0].taxableAmount"]);
  });

  it("keeps a tip within the total, and mock items add up to the total without the tip", () => {
    expect(violations(receipt({ totalAmount: 100n, tipAmount: 101n }))).toEqual([
      { field: "tipAmount", description: "must not be more than totalAmount, which includes it" },
    ]);
    expect(violations(receipt({ tipAmount: -1n }))[0]?.field).toBe("tipAmount");
    // On a payment without a totalAmount, the tip is within the amount charged, as tenders are.
    expect(violations(receipt({ amount: 950n, tipAmount: 951n }), { mode: "payment" })).toEqual([
      { field: "tipAmount", description: "must not be more than amount, which includes it" },
    ]);
    const valid = withMockItems(
      validateReceipt(receipt({ totalAmount: 1200n, tipAmount: 200n }), { mode: "encrypt", now: NOW }),
    );
    expect(valid.items.reduce((sum, item) => sum + item.totalPrice, 0)).toBe(1000);
  });

  it("lets gateway_b charge the items plus the tip", () => {
    const gateway = gatewayByName("gateway_b");
    const items = [{ lineItemId: "1", name: "Dinner", quantity: 1n, unitPrice: 5000n, totalPrice: 5000n }];
    const tipped = validateReceipt(receipt({ items, tipAmount: 750n }), {
      mode: "payment",
      now: NOW,
      gateway,
    });
    expect(gateway.resolveAmount(tipped)).toBe(5750);
    expect(
      violations(receipt({ items, tipAmount: 750n, amount: 5000n }), { mode: "payment", gateway }),
    ).toEqual([
      {
        field: "amount",
        description: "must be 5750, the sum of the items' totalPrice and tax amounts plus tipAmount",
      },
    ]);
    const mocked = withMockItems(
      validateReceipt(receipt({ tipAmount: 300n, amount: 1300n }), { mode: "payment", now: NOW, gateway }),
    );
    expect(gateway.resolveAmount(mocked)).toBe(1300);
  });
});
