import { describe, expect, it } from "vitest";
import {
  type CardTransaction,
  MATCH_THRESHOLD,
  matchStatement,
  matchTransaction,
} from "../../src/client/match.js";
import type { ReceiptJson } from "../../src/client/webcrypto.js";

/**
 * `matchTransaction` on a table of statement lines as issuer feeds give them: the receipt's own line
 * (with network ids, without, posted later, billed abroad), and its near misses (the same merchant
 * and amount on the same day, the same amount elsewhere, the coffee of next week, a refund, a tip
 * added after the authorization or after the receipt, another card).
 */

/** A flat white and a croissant at 09:30 in Dublin, paid by Visa 4242, with the network's ids. */
const coffee: ReceiptJson = {
  version: "1.0",
  receiptId: "r-1001",
  merchantId: "m-42",
  merchantName: "Corner Coffee",
  transactionId: "t-1001",
  transactionDate: "2026-11-21T09:30:00Z",
  transactionTimezone: "Europe/Dublin",
  currency: "EUR",
  cardLast4: "4242",
  totalAmount: 950,
  cardAcceptorName: "CORNER COFFEE DUBLIN",
  merchantCategoryCode: "5814",
  authorizationCode: "A1B2C3",
  terminalId: "TID00042",
  retrievalReferenceNumber: "633112345678",
};

/** The same receipt as a merchant without network ids writes it. */
const { authorizationCode: _a, terminalId: _t, retrievalReferenceNumber: _r, ...plainCoffee } = coffee;

/** Its refund the next morning: the croissant. */
const croissantRefund: ReceiptJson = {
  ...plainCoffee,
  receiptId: "r-1002",
  transactionId: "t-1002",
  transactionDate: "2026-11-22T08:05:00Z",
  receiptType: "refund",
  originalReceiptId: "r-1001",
  totalAmount: 250,
};

/** Dinner with a 7.50 tip on the receipt: authorised at 50.00 before the tip, cleared at 57.50. */
const dinner: ReceiptJson = {
  version: "1.0",
  receiptId: "r-2001",
  merchantId: "m-7",
  merchantName: "Luigi's Trattoria",
  transactionId: "t-2001",
  transactionDate: "2026-11-20T20:45:00Z",
  currency: "EUR",
  merchantCategoryCode: "5812",
  cardAcceptorName: "LUIGIS TRATTORIA",
  tipAmount: 750,
  totalAmount: 5750,
};

/** Lunch whose receipt was printed before the diner wrote a tip on the slip. */
const { tipAmount: _tip, ...untipped } = dinner;
const lunch: ReceiptJson = {
  ...untipped,
  receiptId: "r-2002",
  transactionId: "t-2002",
  transactionDate: "2026-11-19T13:10:00Z",
  totalAmount: 4000,
};

const line = (overrides: Partial<CardTransaction>): CardTransaction => ({
  amount: 950,
  currency: "EUR",
  transactionDate: "2026-11-21T09:30:41Z",
  descriptor: "SQ *CORNER COFFEE DUBLIN IE",
  ...overrides,
});

type Row = [string, ReceiptJson, CardTransaction, boolean, RegExp];

const TABLE: Row[] = [
  // Network identifiers decide.
  [
    "its line, with the RRN and the authorization code",
    coffee,
    line({ retrievalReferenceNumber: "633112345678", authorizationCode: "A1B2C3" }),
    true,
    /retrieval reference number agrees/,
  ],
  [
    "the same merchant, amount and day: the afternoon coffee, its own RRN",
    coffee,
    line({ transactionDate: "2026-11-21T15:10:02Z", retrievalReferenceNumber: "633115999999" }),
    false,
    /retrieval reference number differs/,
  ],
  [
    "the same merchant, amount and day: another authorization code",
    coffee,
    line({ transactionDate: "2026-11-21T15:10:02Z", authorizationCode: "Z9Y8X7" }),
    false,
    /authorization code differs/,
  ],
  [
    "its line by authorization code and terminal, the feed having no RRN",
    coffee,
    line({ authorizationCode: "a1b2c3", terminalId: "TID00042" }),
    true,
    /authorization code and the terminal agree/,
  ],
  [
    "its line once cleared, by the ARN, whatever the descriptor says",
    { ...plainCoffee, acquirerReferenceNumber: "74001236123000000001236" },
    line({ acquirerReferenceNumber: "74001236123000000001236", descriptor: "CORNERCOFFEE LTD" }),
    true,
    /acquirer reference number agrees/,
  ],
  // Amount, date and descriptor.
  ["its line, by amount, time and descriptor", plainCoffee, line({}), true, /time agrees/],
  [
    "its line, dated by its posting three days later",
    plainCoffee,
    line({ transactionDate: "2026-11-24" }),
    true,
    /posting date/,
  ],
  [
    "the same amount the same morning at another merchant",
    plainCoffee,
    line({ descriptor: "TESCO STORES 3301 DUBLIN" }),
    false,
    /another merchant/,
  ],
  [
    "the same coffee a week later",
    plainCoffee,
    line({ transactionDate: "2026-11-28T09:29:00Z" }),
    false,
    /another date/,
  ],
  [
    "another amount at the same merchant that morning",
    plainCoffee,
    line({ amount: 1200 }),
    false,
    /amount differs/,
  ],
  [
    "another card of the account",
    plainCoffee,
    line({ cardLast4: "1111" }),
    false,
    /card 4242, the line is card 1111/,
  ],
  // Refunds.
  [
    "a refund line is not the sale's",
    plainCoffee,
    line({ amount: -250, kind: "refund", transactionDate: "2026-11-22" }),
    false,
    /sale receipt, and the line is a refund/,
  ],
  [
    "the refund receipt and its refund line, posted the next day",
    croissantRefund,
    line({ amount: -250, kind: "refund", transactionDate: "2026-11-23" }),
    true,
    /amount agrees/,
  ],
  [
    "the refund receipt is not the purchase",
    croissantRefund,
    line({ amount: 250, transactionDate: "2026-11-22T08:05:10Z" }),
    false,
    /refund receipt, and the line is a purchase/,
  ],
  // A refund and its sale share the sale's network ids on many receipts: the direction decides first.
  [
    "the refund receipt that repeats the sale's authorization code is not the purchase",
    { ...croissantRefund, authorizationCode: "A1B2C3", terminalId: "TID00042" },
    line({ authorizationCode: "A1B2C3", terminalId: "TID00042" }),
    false,
    /refund receipt, and the line is a purchase/,
  ],
  [
    "the void receipt that repeats the sale's ARN is not the purchase",
    {
      ...plainCoffee,
      receiptType: "void",
      originalReceiptId: "r-1001",
      acquirerReferenceNumber: "74001236123000000001236",
    },
    line({ acquirerReferenceNumber: "74001236123000000001236" }),
    false,
    /void receipt, and the line is a purchase/,
  ],
  [
    "the sale receipt is not the refund line that repeats its RRN",
    coffee,
    line({ amount: -950, kind: "refund", retrievalReferenceNumber: "633112345678" }),
    false,
    /sale receipt, and the line is a refund/,
  ],
  [
    "an authorization code that agrees on another card of the account",
    coffee,
    line({ authorizationCode: "A1B2C3", cardLast4: "1111" }),
    false,
    /card 4242, the line is card 1111/,
  ],
  // Tips.
  [
    "dinner's authorization, taken before the tip",
    dinner,
    line({ amount: 5000, transactionDate: "2026-11-20T20:44:30Z", descriptor: "LUIGIS TRATTORIA" }),
    true,
    /before the tip/,
  ],
  [
    "dinner's cleared line, with the tip",
    dinner,
    line({ amount: 5750, transactionDate: "2026-11-21", descriptor: "LUIGIS TRATTORIA" }),
    true,
    /amount agrees/,
  ],
  [
    "lunch with a tip written on the slip after the receipt was printed",
    lunch,
    line({ amount: 4600, transactionDate: "2026-11-19T13:10:20Z", descriptor: "LUIGIS TRATTORIA" }),
    true,
    /tip added after the receipt/,
  ],
  [
    "lunch against a line half as much again: no tip is that large",
    lunch,
    line({ amount: 6000, transactionDate: "2026-11-19T13:10:20Z", descriptor: "LUIGIS TRATTORIA" }),
    false,
    /amount differs/,
  ],
  // Split tenders: the card statement holds the card's part only, never a gift card's.
  [
    "a gift card and a card: the line is the card's part",
    {
      ...plainCoffee,
      totalAmount: 1295,
      tenders: [
        { method: "gift_card", amount: 295 },
        { method: "card", cardBrand: "VISA", cardLast4: "4242", amount: 1000 },
      ],
    },
    line({ amount: 1000 }),
    true,
    /amount agrees/,
  ],
  [
    "a gift card and a card without its digits: the line is the card's part",
    {
      ...plainCoffee,
      totalAmount: 1295,
      tenders: [
        { method: "gift_card", amount: 295 },
        { method: "card", amount: 1000 },
      ],
    },
    line({ amount: 1000 }),
    true,
    /amount agrees/,
  ],
  // Currencies.
  [
    "billed in dollars, with the euro amount the merchant charged",
    plainCoffee,
    line({ amount: 1043, currency: "USD", originalAmount: 950, originalCurrency: "EUR" }),
    true,
    /compared in EUR/,
  ],
  [
    "billed in dollars without the original amount: not sure enough",
    plainCoffee,
    line({ amount: 1043, currency: "USD" }),
    false,
    /cannot be compared/,
  ],
];

describe("matchTransaction on statement lines", () => {
  it.each(TABLE)("%s", (_name, receipt, transaction, matches, reason) => {
    const found = matchTransaction(receipt, transaction);
    expect(found.matches).toBe(matches);
    expect(found.confidence >= MATCH_THRESHOLD).toBe(matches);
    expect(found.reasons.join("; ")).toMatch(reason);
  });

  it("is surer with a network identifier than with amount, date and descriptor alone", () => {
    const byIds = matchTransaction(coffee, line({ retrievalReferenceNumber: "633112345678" }));
    const byDetails = matchTransaction(plainCoffee, line({}));
    expect(byIds.confidence).toBeGreaterThanOrEqual(0.95);
    expect(byDetails.confidence).toBeLessThanOrEqual(0.9);
    expect(byDetails.confidence).toBeGreaterThan(byIds.confidence - 0.2);
  });
});

describe("matchTransaction on what a feed or a receipt should not hold", () => {
  // Issuer feeds and receipts from older devices arrive as JSON: a field missing, of another type,
  // or a date that is not one is named in the answer, never a TypeError from deep inside.
  const odd: [string, unknown, unknown, RegExp][] = [
    ["a receipt that is not an object", null, line({}), /receipt: must be an object/],
    ["a line that is not an object", coffee, "950 EUR", /transaction: must be an object/],
    ["a receipt without a currency", { ...plainCoffee, currency: undefined }, line({}), /receipt\.currency/],
    [
      "a line without a currency",
      plainCoffee,
      line({ currency: undefined as never }),
      /transaction\.currency/,
    ],
    [
      "a receipt without a merchant name",
      { ...plainCoffee, merchantName: undefined },
      line({}),
      /receipt\.merchantName/,
    ],
    [
      "a line without a date",
      plainCoffee,
      line({ transactionDate: undefined as never }),
      /transaction\.transactionDate/,
    ],
    [
      "a line dated yesterday, in words",
      plainCoffee,
      line({ transactionDate: "yesterday" }),
      /transaction\.transactionDate/,
    ],
    [
      "a receipt dated in words",
      { ...plainCoffee, transactionDate: "this morning" },
      line({}),
      /receipt\.transactionDate/,
    ],
    ["an amount as a string", plainCoffee, line({ amount: "9.50" as never }), /transaction\.amount: must be/],
    [
      "a total as a string",
      { ...plainCoffee, totalAmount: "950" },
      line({}),
      /receipt\.totalAmount: must be/,
    ],
    [
      "an amount that is not a number",
      plainCoffee,
      line({ amount: Number.NaN }),
      /transaction\.amount: must be/,
    ],
    [
      "a descriptor that is a number",
      plainCoffee,
      line({ descriptor: 12345 as never }),
      /transaction\.descriptor/,
    ],
    [
      "authorization codes as numbers",
      { ...coffee, authorizationCode: 123456 },
      line({ authorizationCode: 123456 as never }),
      /authorizationCode/,
    ],
    [
      "an item that is null",
      { ...plainCoffee, totalAmount: undefined, items: [null] },
      line({}),
      /receipt\.items/,
    ],
    ["tenders that are not a list", { ...plainCoffee, tenders: "cash" }, line({}), /receipt\.tenders/],
  ];

  it.each(odd)("%s: no match, the field named", (_name, receipt, transaction, reason) => {
    const found = matchTransaction(receipt as ReceiptJson, transaction as CardTransaction);
    expect(found).toMatchObject({ matches: false, confidence: 0 });
    expect(found.reasons.join("; ")).toMatch(reason);
  });

  it("matches a descriptor in any script, and a statement with one broken line", () => {
    const { cardAcceptorName: _name, ...unnamed } = plainCoffee;
    const cafe = { ...unnamed, merchantName: "Café Zoë 東京" };
    expect(matchTransaction(cafe, line({ descriptor: "CAFE ZOE 東京" })).matches).toBe(true);
    const found = matchStatement(plainCoffee, [line({ currency: undefined as never }), line({})]);
    expect(found).toMatchObject({ index: 1, match: { matches: true } });
  });

  it("says what is wrong with a statement that is not a list", () => {
    expect(() => matchStatement(plainCoffee, null as never)).toThrow(/transactions: must be a list/);
  });
});

describe("matchStatement", () => {
  const morning = line({ transactionDate: "2026-11-21T09:30:41Z" });
  const afternoon = line({ transactionDate: "2026-11-21T15:10:02Z" });

  it("picks the line at the receipt's time among two of the same merchant, amount and day", () => {
    const found = matchStatement(plainCoffee, [afternoon, morning]);
    expect(found).toMatchObject({ index: 1, ambiguous: false });
  });

  it("says when two lines cannot be told apart: the same amount the same day, dates only", () => {
    const day = line({ transactionDate: "2026-11-21" });
    const found = matchStatement(plainCoffee, [day, { ...day }]);
    expect(found.ambiguous).toBe(true);
    expect(found.match.matches).toBe(true);
  });

  it("finds none in a statement without the receipt's line", () => {
    const found = matchStatement(plainCoffee, [
      line({ amount: 1200 }),
      line({ descriptor: "TESCO STORES 3301" }),
    ]);
    expect(found).toMatchObject({ index: -1, ambiguous: false, match: { matches: false } });
  });
});
