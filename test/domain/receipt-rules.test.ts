import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { type Receipt, ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { gatewayByName } from "../../src/domain/gateways/index.js";
import * as limits from "../../src/domain/limits.js";
import { type ReceiptMode, validateReceipt } from "../../src/domain/receipt-rules.js";
import { AppError, type FieldViolation } from "../../src/errors.js";

type ReceiptInit = Exclude<MessageInitShape<typeof ReceiptSchema>, Receipt>;
type TaxInit = { name: string; rate: number; amount: bigint };
type ItemInit = {
  lineItemId: string;
  name: string;
  quantity: bigint;
  unitPrice: bigint;
  totalPrice: bigint;
  category?: string;
  taxes: TaxInit[];
};

const NOW = new Date("2026-01-01T12:00:00Z");
const HASH_UPPER = "AB".repeat(32);

function item(overrides: Partial<ItemInit> = {}): ItemInit {
  return {
    lineItemId: "li-1",
    name: "Coffee",
    quantity: 2n,
    unitPrice: 350n,
    totalPrice: 700n,
    taxes: [{ name: "VAT", rate: 0.19, amount: 133n }],
    ...overrides,
  };
}

function receipt(overrides: Partial<ReceiptInit> = {}): Receipt {
  return create(ReceiptSchema, {
    receiptId: "rcpt-0001",
    merchantId: "merchant_42",
    merchantName: "Corner Café",
    transactionId: "txn:2026:0001",
    transactionDate: timestampFromDate(new Date("2025-12-31T10:00:00Z")),
    currency: "eur",
    recipientHashedPan: HASH_UPPER,
    ...overrides,
  });
}

/** The violations of a receipt that must fail; fails the test when it passes. */
function violations(input: Receipt, mode: ReceiptMode = "encrypt"): FieldViolation[] {
  try {
    validateReceipt(input, { mode, now: NOW });
  } catch (err) {
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).code).toBe("invalid_request");
    return (err as AppError).violations;
  }
  throw new Error("expected the receipt to be rejected");
}

/** The violations of a receipt, or none when it is valid. */
function problems(input: Receipt): FieldViolation[] {
  try {
    validateReceipt(input, { mode: "encrypt", now: NOW });
    return [];
  } catch (err) {
    return (err as AppError).violations;
  }
}

const at = (iso: string) => timestampFromDate(new Date(iso));
const repeat = (n: number) => "x".repeat(n);

describe("validateReceipt: a valid receipt", () => {
  it("is normalised: default version, upper-case currency, lower-case hash, mockItems true", () => {
    const valid = validateReceipt(receipt(), { mode: "encrypt", now: NOW });
    expect(valid).toEqual({
      version: "1.0",
      receiptId: "rcpt-0001",
      merchantId: "merchant_42",
      merchantName: "Corner Café",
      transactionId: "txn:2026:0001",
      transactionDate: "2025-12-31T10:00:00Z",
      currency: "EUR",
      recipientHashedPan: "ab".repeat(32),
      items: [],
      mockItems: true,
    });
  });

  it("keeps an explicit version, mockItems false, and sub-second precision of the date", () => {
    const valid = validateReceipt(
      receipt({
        version: "1.1",
        mockItems: false,
        transactionDate: { seconds: 1767175200n, nanos: 123_000_000 },
      }),
      { mode: "encrypt", now: NOW },
    );
    expect(valid.version).toBe("1.1");
    expect(valid.mockItems).toBe(false);
    expect(valid.transactionDate).toBe("2025-12-31T10:00:00.123Z");
  });

  it("accepts boundary and international values", () => {
    const valid = validateReceipt(
      receipt({
        transactionDate: at("2000-01-01T00:00:00Z"),
        merchantName: "😀".repeat(limits.MAX_MERCHANT_NAME_LENGTH),
        merchantContactEmail: "müller+receipts@beispiel.example.de",
        transactionTimezone: "Asia/Calcutta",
        cardLast4: "0042",
        subtotal: BigInt(Number.MAX_SAFE_INTEGER),
        receiptId: "A".repeat(limits.MAX_ID_LENGTH),
        items: [
          item({ quantity: BigInt(limits.MAX_QUANTITY), taxes: [{ name: "none", rate: 0, amount: 0n }] }),
        ],
      }),
      { mode: "encrypt", now: NOW },
    );
    expect(valid.subtotal).toBe(Number.MAX_SAFE_INTEGER);
    expect(valid.items[0]?.quantity).toBe(limits.MAX_QUANTITY);
    for (const zone of ["UTC", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Etc/GMT+1"]) {
      expect(
        validateReceipt(receipt({ transactionTimezone: zone }), { mode: "encrypt", now: NOW }),
      ).toBeTruthy();
    }
  });

  it("accepts exactly the maximum number of items and of taxes per item", () => {
    const taxes = Array.from({ length: limits.MAX_TAXES_PER_ITEM }, () => ({
      name: "t",
      rate: 0.01,
      amount: 1n,
    }));
    const items = Array.from({ length: limits.MAX_ITEMS }, (_, i) => item({ lineItemId: `li-${i}`, taxes }));
    expect(validateReceipt(receipt({ items }), { mode: "encrypt", now: NOW }).items).toHaveLength(
      limits.MAX_ITEMS,
    );
  });

  it("accepts a transaction date up to 24 hours ahead of the clock", () => {
    const ahead = new Date(NOW.getTime() + limits.MAX_TRANSACTION_DATE_SKEW_MS);
    expect(
      validateReceipt(receipt({ transactionDate: timestampFromDate(ahead) }), { mode: "encrypt", now: NOW }),
    ).toBeTruthy();
  });

  it("accepts amount and cardNonce in payment mode, as numbers", () => {
    const valid = validateReceipt(receipt({ amount: 1_500n, cardNonce: "cnon:card-nonce-ok" }), {
      mode: "payment",
      now: NOW,
    });
    expect(valid.amount).toBe(1_500);
    expect(valid.cardNonce).toBe("cnon:card-nonce-ok");
  });
});

type Case = [name: string, overrides: Partial<ReceiptInit>, field: string, description: string];

const ID_RULE = "must start with a letter or digit";
const CASES: Case[] = [
  ["missing receiptId", { receiptId: "" }, "receiptId", "is required"],
  ["missing merchantId", { merchantId: "" }, "merchantId", "is required"],
  ["missing merchantName", { merchantName: "" }, "merchantName", "is required"],
  ["blank merchantName", { merchantName: "   " }, "merchantName", "is required"],
  ["missing transactionId", { transactionId: "" }, "transactionId", "is required"],
  ["missing transactionDate", { transactionDate: undefined }, "transactionDate", "is required"],
  ["missing currency", { currency: "" }, "currency", "is required"],
  ["missing recipientHashedPan", { recipientHashedPan: "" }, "recipientHashedPan", "is required"],
  ["id with a slash", { receiptId: "a/b" }, "receiptId", ID_RULE],
  ["id with a space", { merchantId: "m 1" }, "merchantId", ID_RULE],
  ["id that is a path step", { transactionId: ".." }, "transactionId", ID_RULE],
  ["id with non-ASCII", { receiptId: "rcpt-ü" }, "receiptId", ID_RULE],
  ["id too long", { receiptId: "a".repeat(129) }, "receiptId", "must be at most 128 characters"],
  ["version not a number", { version: "v1" }, "version", "must be a version number such as 1.0"],
  ["version with a newline (AAD separator)", { version: "1.0\nx" }, "version", "control characters"],
  [
    "date before 2000",
    { transactionDate: at("1999-12-31T23:59:59Z") },
    "transactionDate",
    "must not be before",
  ],
  ["date in the future", { transactionDate: at("2026-01-02T12:00:01Z") }, "transactionDate", "24 hours"],
  [
    "date with bad nanos",
    { transactionDate: { seconds: 1767175200n, nanos: -1 } },
    "transactionDate",
    "RFC 3339",
  ],
  ["unknown currency", { currency: "XYZ" }, "currency", "must be an ISO 4217 code"],
  ["withdrawn currency", { currency: "DEM" }, "currency", "must be an ISO 4217 code"],
  ["currency of two letters", { currency: "US" }, "currency", "must be an ISO 4217 code"],
  ["currency with spaces", { currency: " usd" }, "currency", "must be an ISO 4217 code"],
  ["testing currency", { currency: "XTS" }, "currency", "must be an ISO 4217 code"],
  ["hash too short", { recipientHashedPan: "ab".repeat(31) }, "recipientHashedPan", "must be 64 hexadecimal"],
  [
    "hash not hex",
    { recipientHashedPan: `${"a".repeat(63)}g` },
    "recipientHashedPan",
    "must be 64 hexadecimal",
  ],
  ["email without @", { merchantContactEmail: "billing.example.com" }, "merchantContactEmail", "email"],
  [
    "email without domain dot",
    { merchantContactEmail: "billing@localhost" },
    "merchantContactEmail",
    "email",
  ],
  ["email with two @", { merchantContactEmail: "a@b@example.com" }, "merchantContactEmail", "email"],
  ["email with double dot", { merchantContactEmail: "a..b@example.com" }, "merchantContactEmail", "email"],
  ["email with space", { merchantContactEmail: "a b@example.com" }, "merchantContactEmail", "email"],
  [
    "email local part > 64",
    { merchantContactEmail: `${"a".repeat(65)}@x.com` },
    "merchantContactEmail",
    "email",
  ],
  ["unknown time zone", { transactionTimezone: "Mars/Olympus_Mons" }, "transactionTimezone", "IANA"],
  ["offset as time zone", { transactionTimezone: "+01:00" }, "transactionTimezone", "IANA"],
  ["empty time zone", { transactionTimezone: "" }, "transactionTimezone", "IANA"],
  ["cardLast4 of 3 digits", { cardLast4: "123" }, "cardLast4", "must be exactly 4 digits"],
  ["cardLast4 of 5 digits", { cardLast4: "12345" }, "cardLast4", "must be at most 4 characters"],
  ["cardLast4 with a letter", { cardLast4: "12a4" }, "cardLast4", "must be exactly 4 digits"],
  ["cardLast4 in other digits", { cardLast4: "١٢٣٤" }, "cardLast4", "must be exactly 4 digits"],
  ["negative subtotal", { subtotal: -1n }, "subtotal", "must be an integer between 0 and 9007199254740991"],
  ["unsafe taxAmount", { taxAmount: 2n ** 53n }, "taxAmount", "must be an integer between 0 and"],
  ["negative totalAmount", { totalAmount: -5n }, "totalAmount", "must be an integer between 0 and"],
  ["keyId on input", { keyId: "k-1" }, "keyId", "is output only"],
  ["decryptedAt on input", { decryptedAt: at("2025-12-31T10:00:00Z") }, "decryptedAt", "is output only"],
  [
    "merchantSignature on input",
    { merchantSignature: "c2ln" },
    "merchantSignature",
    "X-Receipt-Signature header",
  ],
  ["merchantKeyId on input", { merchantKeyId: "mk_1" }, "merchantKeyId", "is output only"],
  ["amount on encrypt", { amount: 100n }, "amount", "only accepted by payments"],
  ["cardNonce on encrypt", { cardNonce: "cnon:card-nonce-ok" }, "cardNonce", "only accepted by payments"],
  ["control char in a required field", { merchantName: "Café\u0007" }, "merchantName", "control characters"],
  ["C1 control char", { merchantCity: "Berlin\u0085" }, "merchantCity", "control characters"],
  ["unpaired surrogate", { merchantName: "Caf\uD800" }, "merchantName", "unpaired surrogate"],
  ["unpaired low surrogate", { merchantStreet: "\uDC00 Main St" }, "merchantStreet", "unpaired surrogate"],
  [
    "too many items",
    { items: Array.from({ length: 501 }, (_, i) => item({ lineItemId: `li-${i}` })) },
    "items",
    "at most 500",
  ],
  ["item without id", { items: [item({ lineItemId: "" })] }, "items[0].lineItemId", "is required"],
  ["item id with slash", { items: [item({ lineItemId: "a/b" })] }, "items[0].lineItemId", ID_RULE],
  ["duplicate item id", { items: [item(), item()] }, "items[1].lineItemId", "must be unique"],
  ["item without name", { items: [item({ name: "" })] }, "items[0].name", "is required"],
  ["item name too long", { items: [item({ name: repeat(201) })] }, "items[0].name", "at most 200 characters"],
  [
    "item name of 201 emoji",
    { items: [item({ name: "😀".repeat(201) })] },
    "items[0].name",
    "at most 200 characters",
  ],
  ["item name with a tab", { items: [item({ name: "a\tb" })] }, "items[0].name", "control characters"],
  ["item quantity 0", { items: [item({ quantity: 0n })] }, "items[0].quantity", "between 1 and 1000000"],
  ["item quantity negative", { items: [item({ quantity: -2n })] }, "items[0].quantity", "between 1 and"],
  [
    "item quantity too big",
    { items: [item({ quantity: 1_000_001n })] },
    "items[0].quantity",
    "between 1 and",
  ],
  ["negative unitPrice", { items: [item({ unitPrice: -1n })] }, "items[0].unitPrice", "between 0 and"],
  ["unsafe totalPrice", { items: [item({ totalPrice: 2n ** 60n })] }, "items[0].totalPrice", "between 0 and"],
  ["category too long", { items: [item({ category: repeat(101) })] }, "items[0].category", "at most 100"],
  [
    "too many taxes",
    { items: [item({ taxes: Array(21).fill({ name: "t", rate: 0.01, amount: 1n }) })] },
    "items[0].taxes",
    "at most 20",
  ],
  [
    "tax rate above 1",
    { items: [item({ taxes: [{ name: "VAT", rate: 19, amount: 1n }] })] },
    "items[0].taxes[0].rate",
    "between 0 and 1",
  ],
  [
    "tax rate negative",
    { items: [item({ taxes: [{ name: "VAT", rate: -0.1, amount: 1n }] })] },
    "items[0].taxes[0].rate",
    "between 0 and 1",
  ],
  [
    "tax rate NaN",
    { items: [item({ taxes: [{ name: "VAT", rate: Number.NaN, amount: 1n }] })] },
    "items[0].taxes[0].rate",
    "between 0 and 1",
  ],
  [
    "tax rate infinite",
    { items: [item({ taxes: [{ name: "VAT", rate: Number.POSITIVE_INFINITY, amount: 1n }] })] },
    "items[0].taxes[0].rate",
    "between 0 and 1",
  ],
  [
    "tax without name",
    { items: [item({ taxes: [{ name: "", rate: 0.1, amount: 1n }] })] },
    "items[0].taxes[0].name",
    "is required",
  ],
  [
    "negative tax amount",
    { items: [item({ taxes: [{ name: "VAT", rate: 0.1, amount: -1n }] })] },
    "items[0].taxes[0].amount",
    "between 0 and",
  ],
];

const LENGTH_CASES: [keyof ReceiptInit & string, number][] = [
  ["merchantName", limits.MAX_MERCHANT_NAME_LENGTH],
  ["merchantStreet", limits.MAX_STREET_LENGTH],
  ["merchantCity", limits.MAX_PLACE_LENGTH],
  ["merchantState", limits.MAX_PLACE_LENGTH],
  ["merchantPostalCode", limits.MAX_POSTAL_CODE_LENGTH],
  ["merchantCountry", limits.MAX_PLACE_LENGTH],
  ["merchantTaxId", limits.MAX_TAX_ID_LENGTH],
  ["paymentMethod", limits.MAX_LABEL_LENGTH],
  ["cardBrand", limits.MAX_LABEL_LENGTH],
  ["merchantContactEmail", limits.MAX_EMAIL_LENGTH],
  ["transactionTimezone", limits.MAX_TIMEZONE_LENGTH],
];

describe("validateReceipt: each rule on its own", () => {
  it.each(CASES)("%s", (_name, overrides, field, description) => {
    const found = violations(receipt(overrides));
    expect(found).toHaveLength(1);
    expect(found[0]?.field).toBe(field);
    expect(found[0]?.description).toContain(description);
  });

  it.each(LENGTH_CASES)("%s longer than %i characters", (field, max) => {
    const value = (length: number) => (field === "merchantContactEmail" ? emailOf(length) : repeat(length));
    const atMax = problems(receipt({ [field]: value(max) }));
    expect(atMax.filter((v) => v.description.startsWith("must be at most"))).toEqual([]);
    expect(violations(receipt({ [field]: value(max + 1) }))).toEqual([
      { field, description: `must be at most ${max} characters` },
    ]);
  });

  it("rejects a too long cardNonce in payment mode", () => {
    expect(violations(receipt({ cardNonce: repeat(limits.MAX_CARD_NONCE_LENGTH + 1) }), "payment")).toEqual([
      { field: "cardNonce", description: `must be at most ${limits.MAX_CARD_NONCE_LENGTH} characters` },
    ]);
  });

  it("rejects a negative amount in payment mode", () => {
    expect(violations(receipt({ amount: -1n }), "payment")[0]?.field).toBe("amount");
  });
});

/** A plausible address of exactly `length` characters (at least 254). */
function emailOf(length: number): string {
  const domain = `${"d".repeat(60)}.${"e".repeat(60)}.${"f".repeat(60)}.${"g".repeat(60)}.com`;
  return `${"l".repeat(length - domain.length - 1)}@${domain}`;
}

describe("validateReceipt: one error names every problem", () => {
  it("lists three problems in one invalid_request with a details string", () => {
    const input = receipt({
      currency: "XX",
      recipientHashedPan: "abc",
      items: [item({ taxes: [{ name: "VAT", rate: 19, amount: 1n }] })],
    });
    let error: AppError | undefined;
    try {
      validateReceipt(input, { mode: "encrypt", now: NOW });
    } catch (err) {
      error = err as AppError;
    }
    expect(error?.code).toBe("invalid_request");
    expect(error?.violations.map((v) => v.field)).toEqual([
      "currency",
      "recipientHashedPan",
      "items[0].taxes[0].rate",
    ]);
    expect(error?.details).toBe(
      "currency: must be an ISO 4217 code; recipientHashedPan: must be 64 hexadecimal characters; " +
        "items[0].taxes[0].rate: must be a fraction between 0 and 1, e.g. 0.19 for 19%",
    );
  });

  it("lists every missing required field of an empty receipt", () => {
    expect(violations(create(ReceiptSchema)).map((v) => `${v.field}: ${v.description}`)).toEqual([
      "receiptId: is required",
      "merchantId: is required",
      "merchantName: is required",
      "transactionId: is required",
      "transactionDate: is required",
      "currency: is required",
      "recipientHashedPan: is required (or recipientPar, the card's PAR)",
    ]);
  });

  it("lists problems in several items and taxes with their paths", () => {
    const found = violations(
      receipt({
        items: [
          item(),
          item({ lineItemId: "li-2", quantity: 0n }),
          item({
            lineItemId: "li-3",
            taxes: [
              { name: "a", rate: 0.1, amount: 1n },
              { name: "", rate: 2, amount: 1n },
            ],
          }),
        ],
      }),
    );
    expect(found.map((v) => v.field)).toEqual([
      "items[1].quantity",
      "items[2].taxes[1].name",
      "items[2].taxes[1].rate",
    ]);
  });

  it("includes the gateway's rules in the same error when a gateway is given", () => {
    let error: AppError | undefined;
    try {
      validateReceipt(receipt({ currency: "XX", cardNonce: "cnon:other" }), {
        mode: "payment",
        now: NOW,
        gateway: gatewayByName("gateway_a"),
      });
    } catch (err) {
      error = err as AppError;
    }
    expect(error?.details).toBe(
      "currency: must be an ISO 4217 code; amount: is required by gateway_a; cardNonce: only accepted by gateway_b",
    );
  });

  it("skips the gateway's amount comparison when the items are already broken", () => {
    const found = violations(receipt({ amount: 5n, items: [item({ unitPrice: -1n })] }), "payment");
    expect(found.map((v) => v.field)).toEqual(["items[0].unitPrice"]);
  });
});
