import { writeFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { renderReceiptSvg } from "../../src/client/receipt-image.js";
import type { ReceiptJson } from "../../src/client/webcrypto.js";

const receipt: ReceiptJson = {
  version: "1.0",
  receiptId: "r-1001",
  merchantId: "m-42",
  merchantName: "Corner Coffee",
  merchantStreet: "1 Market Street",
  merchantCity: "Dublin",
  merchantPostalCode: "D01",
  transactionId: "t-1001",
  transactionDate: "2026-11-21T09:30:00Z",
  currency: "EUR",
  cardBrand: "VISA",
  cardLast4: "1111",
  items: [
    { lineItemId: "1", name: "Flat white", quantity: 2, unitPrice: 350, totalPrice: 700 },
    { lineItemId: "2", name: "Croissant", quantity: 1, unitPrice: 250, totalPrice: 250 },
  ],
  totalAmount: 950,
};

/** The text a person reads in the image: receiptline draws each line as SVG text. */
function textOf(svg: string): string {
  return decoded(svg.replace(/<\/text>/g, "\n"));
}

/** The characters of an SVG fragment, without its tags. */
function decoded(svg: string): string {
  return svg
    .replace(/<[^>]+>/g, "")
    .replace(/&amp;/g, "&")
    .replace(/&lt;/g, "<")
    .replace(/&gt;/g, ">")
    .replace(/&quot;/g, '"')
    .replace(/&#x([0-9a-f]+);/gi, (_m, n: string) => String.fromCodePoint(Number.parseInt(n, 16)))
    .replace(/&#(\d+);/g, (_m, n: string) => String.fromCodePoint(Number(n)))
    .replace(/\u00a0/g, " ");
}

/** The lines a person reads: receiptline draws each line as a group of texts, one per column. */
function linesOf(svg: string): string[] {
  return decoded(svg.replace(/<\/text>/g, " ").replace(/<\/g>/g, "\n"))
    .split("\n")
    .map((line) => line.replace(/\s+/g, " ").trim())
    .filter((line) => line !== "");
}

describe("renderReceiptSvg", () => {
  it("draws the merchant, the items, the total and the date as an SVG image", () => {
    const svg = renderReceiptSvg(receipt);
    if (process.env.RECEIPT_SVG_OUT) writeFileSync(process.env.RECEIPT_SVG_OUT, svg);
    expect(svg).toMatch(/^<svg [^>]*xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    const text = textOf(svg).replace(/\s+/g, " ");
    for (const shown of [
      "Corner Coffee",
      "1 Market Street",
      "D01 Dublin",
      "Flat white x2",
      "7.00",
      "Croissant",
      "2.50",
    ]) {
      expect(text, shown).toContain(shown);
    }
    expect(text).toContain("2 @ 3.50");
    expect(text).toMatch(/TOTAL.*EUR 9\.50/);
    expect(text).toContain("21 Nov 2026, 09:30 UTC");
    // Nothing in the image loads from another host (receiptline imports a web font by default).
    expect(svg.replace('xmlns="http://www.w3.org/2000/svg"', "")).not.toMatch(/https?:/);
    expect(text).toContain("VISA **** 1111");
  });

  it("shows amounts with the currency's own decimals and sums the items when no total is given", () => {
    const { totalAmount: _total, ...noTotal } = receipt;
    expect(textOf(renderReceiptSvg(noTotal))).toMatch(/EUR 9\.50/);
    const yen = textOf(renderReceiptSvg({ ...receipt, currency: "JPY", totalAmount: 950 }));
    expect(yen).toMatch(/JPY 950(?!\.)/);
  });

  it("draws a refund: the banner with its original, the tip, each tender and the tax per rate", () => {
    const refund: ReceiptJson = {
      ...receipt,
      receiptId: "r-1002",
      receiptType: "refund",
      originalReceiptId: "r-1001",
      subtotal: 950,
      taxAmount: 219,
      tipAmount: 150,
      totalAmount: 1319,
      tenders: [
        { method: "gift_card", amount: 319 },
        { method: "card", cardBrand: "VISA", cardLast4: "4242", amount: 1000 },
      ],
      taxBreakdown: [
        { rate: 0.23, taxableAmount: 700, taxAmount: 161 },
        { rate: 0.135, taxableAmount: 250, taxAmount: 58 },
      ],
      cardAcceptorName: "CORNER COFFEE DUBLIN",
      authorizationCode: "A1B2C3",
      acquirerReferenceNumber: "74001236123000000001236",
    };
    const lines = linesOf(renderReceiptSvg(refund));
    const startingAt = (first: string) => lines.slice(lines.indexOf(first));
    expect(startingAt("REFUND").slice(0, 2)).toEqual(["REFUND", "of receipt r-1001"]);
    expect(lines).toEqual(expect.arrayContaining(["Tip 1.50", "TOTAL EUR -13.19"]));
    expect(startingAt("Paid with").slice(0, 3)).toEqual([
      "Paid with",
      "gift card 3.19",
      "VISA **** 4242 10.00",
    ]);
    expect(startingAt("Tax rate Net Tax").slice(0, 3)).toEqual([
      "Tax rate Net Tax",
      "23% 7.00 1.61",
      "13.5% 2.50 0.58",
    ]);
    expect(lines).toEqual(
      expect.arrayContaining([
        "Statement CORNER COFFEE DUBLIN",
        "Auth code A1B2C3",
        "ARN 74001236123000000001236",
      ]),
    );
    // A sale has no banner, a positive total, and its card line instead of tenders.
    const sale = textOf(renderReceiptSvg(receipt));
    expect(sale).not.toContain("REFUND");
    expect(sale).not.toContain("Paid with");
    expect(sale.replace(/\s+/g, " ")).toContain("EUR 9.50");
    expect(textOf(renderReceiptSvg({ ...refund, receiptType: "void" }))).toContain("VOID");
  });

  it("escapes what the receipt says: no markup and no receiptline syntax gets through", () => {
    const svg = renderReceiptSvg({
      ...receipt,
      merchantName: '<script>alert(1)</script> | {code:x} "A" ^B',
      items: [{ lineItemId: "1", name: "<image href=x>&amp;", quantity: 1, unitPrice: 1, totalPrice: 1 }],
    });
    expect(svg).not.toContain("<script");
    expect(svg).not.toContain("<image");
    const text = textOf(svg).replace(/\s+/g, " ");
    // Shown as written (the 2x-size name wraps across lines, hence the pieces).
    for (const piece of ["<script>alert(1)</scr", "| {code:x}", '"A" ^']) expect(text).toContain(piece);
    expect(text).toContain("<image href=x>&amp;");
  });

  // A receipt the merchant sealed on its side reaches the device unchecked by the service: a number
  // that is not one (a quantity drawn raw once let receiptline lines, a QR code of any URL among them,
  // into the image), a list that is not one, a missing currency are named, not drawn or thrown deep.
  const odd: [string, Record<string, unknown>, RegExp][] = [
    [
      "a quantity carrying receiptline lines and a QR code",
      {
        items: [
          {
            lineItemId: "1",
            name: "Tea",
            quantity: "2 |\n{code:https://pay.example; option:qrcode,6,m}\n^^^SCAN TO CLAIM|",
            unitPrice: 475,
            totalPrice: 950,
          },
        ],
      },
      /receipt\.items\[0\]\.quantity: must be an integer/,
    ],
    ["an item that is null", { items: [null] }, /receipt\.items\[0\]: must be a JSON object/],
    ["tenders that are not a list", { tenders: "cash" }, /receipt\.tenders: must be an array/],
    [
      "a tax rate as text",
      { taxBreakdown: [{ rate: "20% | {code:x}", taxableAmount: 1, taxAmount: 1 }] },
      /receipt\.taxBreakdown\[0\]\.rate: must be a number/,
    ],
    ["no currency", { currency: undefined }, /receipt\.currency: is required/],
  ];

  it.each(odd)("refuses to draw %s, naming the field", (_name, overrides, reason) => {
    const draw = () => renderReceiptSvg({ ...receipt, ...overrides } as unknown as ReceiptJson);
    expect(draw).toThrow(TypeError);
    expect(draw).toThrow(reason);
  });

  it("names what is not a receipt at all", () => {
    expect(() => renderReceiptSvg(null as unknown as ReceiptJson)).toThrow(/receipt: must be an object/);
  });

  it("draws at most 200 characters of a text and 500 items, 20 tenders and 20 tax lines of a hostile receipt", () => {
    const count = (text: string, c: string) => text.split(c).length - 1;
    const item = (i: number) => ({
      lineItemId: String(i),
      name: "Ж",
      quantity: 1,
      unitPrice: 1,
      totalPrice: 1,
    });
    const svg = renderReceiptSvg({
      ...receipt,
      merchantName: "Щ".repeat(5_000),
      merchantStreet: "😀".repeat(300),
      items: Array.from({ length: 600 }, (_, i) => item(i)),
      tenders: Array.from({ length: 30 }, () => ({ method: "voucher", amount: 1 })),
      taxBreakdown: Array.from({ length: 30 }, () => ({ rate: 0.5, taxableAmount: 1, taxAmount: 1 })),
    });
    const text = textOf(svg);
    expect({ name: count(text, "Щ"), street: count(text, "😀") }).toEqual({ name: 200, street: 200 });
    expect(text).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])/);
    expect(count(text, "Ж")).toBe(500);
    expect(text.replace(/\s+/g, " ")).toContain("and 100 more items not shown");
    expect(count(text, "voucher")).toBe(20);
    expect(count(text, "50%")).toBe(20);
  });
});
