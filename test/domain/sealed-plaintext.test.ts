import { clone, create, equals, isFieldSet } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { withMockItems } from "../../src/domain/mock-items.js";
import {
  INPUT_ONLY_FIELDS,
  sealedPlaintextOf,
  toReceiptMessage,
  validateReceipt,
} from "../../src/domain/receipt-rules.js";

const NOW = new Date("2026-01-01T12:00:00Z");

/** A payment receipt with every input field set, already in normalised form. */
const full = create(ReceiptSchema, {
  version: "1.0",
  receiptId: "rcpt-0001",
  merchantId: "merchant_42",
  merchantName: "Corner Café",
  transactionId: "txn:2026:0001",
  transactionDate: timestampFromDate(new Date("2025-12-31T10:00:00Z")),
  currency: "EUR",
  recipientHashedPan: "ab".repeat(32),
  merchantStreet: "Hauptstraße 1",
  merchantCity: "Berlin",
  merchantState: "BE",
  merchantPostalCode: "10115",
  merchantCountry: "DE",
  merchantTaxId: "DE123456789",
  merchantContactEmail: "billing@example.com",
  transactionTimezone: "Europe/Berlin",
  paymentMethod: "card",
  cardLast4: "4242",
  cardBrand: "visa",
  subtotal: 700n,
  taxAmount: 133n,
  totalAmount: 833n,
  items: [
    {
      lineItemId: "li-1",
      name: "Coffee",
      quantity: 2n,
      unitPrice: 350n,
      totalPrice: 700n,
      category: "drinks",
      taxes: [{ name: "VAT", rate: 0.19, amount: 133n }],
    },
  ],
  mockItems: false,
  amount: 833n,
  cardNonce: "cnon:card-nonce-ok",
  cardBin: "41111111",
  receiptType: "void",
  originalReceiptId: "rcpt-0000",
  authorizationCode: "A1B2C3",
  retrievalReferenceNumber: "633112345678",
  acquirerReferenceNumber: "74001236123000000001236",
  terminalId: "TID00042",
  merchantCategoryCode: "5814",
  cardAcceptorName: "CORNER CAFE BERLIN",
  tipAmount: 0n,
  tenders: [{ method: "card", cardBrand: "visa", cardLast4: "4242", amount: 833n }],
  taxBreakdown: [{ rate: 0.19, taxableAmount: 700n, taxAmount: 133n }],
});

/**
 * Receipt fields a request never sets: the service's own answers (`keyId`, `decryptedAt`) and its
 * sealed additions (`merchantSignature`, `merchantKeyId`), and `sealedReceipt`, which
 * stands instead of the plaintext fields.
 */
const NOT_FROM_INPUT = ["keyId", "decryptedAt", "merchantSignature", "merchantKeyId", "sealedReceipt"];

describe("sealedPlaintextOf", () => {
  it("is tested with a receipt that sets every field of the proto a request may set", () => {
    // A field added to receipt.proto must be added here, and then to the rules that seal it.
    const unset = ReceiptSchema.fields.filter((f) => !isFieldSet(full, f)).map((f) => f.localName);
    // recipientPar names the card instead of recipientHashedPan, never beside it (the next test).
    expect(unset).toEqual([...NOT_FROM_INPUT, "recipientPar"]);
  });

  it("holds every receipt field of the proto except the input-only ones", () => {
    const sealed = sealedPlaintextOf(validateReceipt(full, { mode: "payment", now: NOW, original: "found" }));
    expect(INPUT_ONLY_FIELDS).toEqual([
      "recipientHashedPan",
      "recipientPar",
      "mockItems",
      "cardNonce",
      "cardBin",
    ]);
    const expected = ReceiptSchema.fields
      .map((f) => f.jsonName)
      .filter(
        (name) => !NOT_FROM_INPUT.includes(name) && !(INPUT_ONLY_FIELDS as readonly string[]).includes(name),
      );
    expect(Object.keys(sealed).sort()).toEqual(expected.sort());
  });

  it("seals a receipt routed by PAR exactly as the same receipt routed by hashed PAN", () => {
    const byPar = clone(ReceiptSchema, full);
    byPar.recipientHashedPan = undefined;
    byPar.recipientPar = "5001A9ZXCVBNMASDFGHJKLQWERTY1";
    const options = { mode: "payment", now: NOW, original: "found" } as const;
    const sealed = sealedPlaintextOf(validateReceipt(byPar, options));
    expect(sealed).toEqual(sealedPlaintextOf(validateReceipt(full, options)));
    expect(JSON.stringify(sealed)).not.toContain("5001A9ZXCVBNMASDFGHJKLQWERTY1");
  });

  it("serialises money as JSON numbers and dates as RFC 3339", () => {
    const json = JSON.stringify(
      sealedPlaintextOf(validateReceipt(full, { mode: "payment", now: NOW, original: "found" })),
    );
    expect(json).toContain('"subtotal":700');
    expect(json).toContain('"amount":833');
    expect(json).toContain('"quantity":2');
    expect(json).toContain('"transactionDate":"2025-12-31T10:00:00Z"');
    expect(json).not.toMatch(/"(subtotal|taxAmount|totalAmount|amount|quantity|unitPrice|totalPrice)":"/);
  });

  it("round-trips through JSON to the same Receipt message, minus the input-only fields", () => {
    const json = JSON.stringify(
      sealedPlaintextOf(validateReceipt(full, { mode: "payment", now: NOW, original: "found" })),
    );
    const expected = clone(ReceiptSchema, full);
    expected.recipientHashedPan = undefined;
    expected.mockItems = undefined;
    expected.cardNonce = undefined;
    expected.cardBin = undefined;
    expect(equals(ReceiptSchema, toReceiptMessage(JSON.parse(json)), expected)).toBe(true);
  });

  it("seals generated mock items once they are filled in", () => {
    const bare = clone(ReceiptSchema, full);
    bare.items = [];
    bare.mockItems = undefined;
    const sealed = sealedPlaintextOf(withMockItems(validateReceipt(bare, { mode: "payment", now: NOW })));
    expect(sealed.items.length).toBeGreaterThan(0);
    expect(sealed.items.reduce((sum, item) => sum + item.totalPrice, 0)).toBe(833);
    expect(toReceiptMessage(sealed).items.every((item) => item.category === "mock")).toBe(true);
  });
});
