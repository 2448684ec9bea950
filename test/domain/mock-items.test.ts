import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import {
  MAX_MOCK_ITEMS,
  MOCK_CATEGORY,
  mockItems,
  needsMockItems,
  withMockItems,
} from "../../src/domain/mock-items.js";
import { type ReceiptLineItem, type ValidReceipt, validateReceipt } from "../../src/domain/receipt-rules.js";

const AMOUNTS = [0, 1, 2, 3, 4, 5, 99, 100, 12_345, 2 ** 40, Number.MAX_SAFE_INTEGER];
const RECEIPT_IDS = Array.from({ length: 40 }, (_, i) => `rcpt-${i}`);

const sum = (items: ReceiptLineItem[]) => items.reduce((total, item) => total + item.totalPrice, 0);

function expectWellFormed(items: ReceiptLineItem[]): void {
  expect(items.length).toBeGreaterThanOrEqual(1);
  expect(items.length).toBeLessThanOrEqual(MAX_MOCK_ITEMS);
  expect(new Set(items.map((i) => i.lineItemId)).size).toBe(items.length);
  for (const item of items) {
    expect(item.category).toBe(MOCK_CATEGORY);
    expect(item.taxes).toEqual([]);
    expect(item.name).not.toBe("");
    for (const n of [item.quantity, item.unitPrice, item.totalPrice])
      expect(Number.isSafeInteger(n)).toBe(true);
    expect(item.quantity).toBeGreaterThanOrEqual(1);
    expect(item.unitPrice * item.quantity).toBe(item.totalPrice);
  }
}

describe("mockItems", () => {
  it("is deterministic for the same receiptId, with and without an amount", () => {
    expect(mockItems("rcpt-0001")).toEqual(mockItems("rcpt-0001"));
    expect(mockItems("rcpt-0001", 12_345)).toEqual(mockItems("rcpt-0001", 12_345));
  });

  it("differs between receiptIds", () => {
    const a = JSON.stringify(mockItems("rcpt-0001"));
    expect(JSON.stringify(mockItems("rcpt-0002"))).not.toBe(a);
    const distinct = new Set(RECEIPT_IDS.map((id) => JSON.stringify(mockItems(id, 10_000))));
    expect(distinct.size).toBeGreaterThan(RECEIPT_IDS.length / 2);
  });

  it("generates between 1 and 4 items, and every count occurs", () => {
    const counts = new Set(RECEIPT_IDS.map((id) => mockItems(id).length));
    expect([...counts].sort()).toEqual([1, 2, 3, 4]);
  });

  it("adds up exactly to the amount, with unitPrice * quantity = totalPrice", () => {
    for (const receiptId of RECEIPT_IDS) {
      for (const amount of AMOUNTS) {
        const items = mockItems(receiptId, amount);
        expectWellFormed(items);
        expect(sum(items)).toBe(amount);
      }
    }
  });

  it("never makes an item of 0 when the amount is positive, so small amounts get fewer items", () => {
    for (const receiptId of RECEIPT_IDS) {
      for (const amount of [1, 2, 3]) {
        const items = mockItems(receiptId, amount);
        expect(items.length).toBeLessThanOrEqual(amount);
        for (const item of items) expect(item.totalPrice).toBeGreaterThanOrEqual(1);
      }
    }
  });

  it("makes one free item for amount 0", () => {
    const items = mockItems("rcpt-0001", 0);
    expect(items).toHaveLength(1);
    expect(items[0]).toMatchObject({ unitPrice: 0, totalPrice: 0 });
  });

  it("uses positive, plausible prices without an amount", () => {
    for (const receiptId of RECEIPT_IDS) {
      const items = mockItems(receiptId);
      expectWellFormed(items);
      for (const item of items) {
        expect(item.unitPrice).toBeGreaterThanOrEqual(100);
        expect(item.unitPrice).toBeLessThanOrEqual(2000);
      }
    }
  });

  it("rejects an amount that is not a non-negative safe integer", () => {
    for (const amount of [-1, 1.5, Number.NaN, 2 ** 53])
      expect(() => mockItems("r", amount)).toThrow(RangeError);
  });

  it("produces items that pass the receipt rules themselves", () => {
    const items = mockItems("rcpt-0001", 98_765);
    const input = create(ReceiptSchema, {
      receiptId: "rcpt-0001",
      merchantId: "m-1",
      merchantName: "Shop",
      transactionId: "t-1",
      transactionDate: timestampFromDate(new Date("2025-06-01T00:00:00Z")),
      currency: "USD",
      recipientHashedPan: "0".repeat(64),
      items: items.map((i) => ({
        ...i,
        quantity: BigInt(i.quantity),
        unitPrice: BigInt(i.unitPrice),
        totalPrice: BigInt(i.totalPrice),
        taxes: [],
      })),
    });
    expect(validateReceipt(input, { mode: "encrypt", now: new Date("2026-01-01T00:00:00Z") }).items).toEqual(
      items,
    );
  });
});

describe("withMockItems", () => {
  const base: ValidReceipt = {
    version: "1.0",
    receiptId: "rcpt-0001",
    merchantId: "m-1",
    merchantName: "Shop",
    transactionId: "t-1",
    transactionDate: "2025-06-01T00:00:00Z",
    currency: "USD",
    recipientHashedPan: "0".repeat(64),
    items: [],
    mockItems: true,
  };

  it("fills in items adding up to the payment amount", () => {
    const filled = withMockItems({ ...base, amount: 4_321, totalAmount: 1 });
    expect(filled.items).toEqual(mockItems("rcpt-0001", 4_321));
    expect(sum(filled.items)).toBe(4_321);
  });

  it("uses totalAmount when there is no payment amount (encrypt)", () => {
    expect(sum(withMockItems({ ...base, totalAmount: 999 }).items)).toBe(999);
  });

  it("uses free prices when no amount is known", () => {
    expect(withMockItems(base).items).toEqual(mockItems("rcpt-0001"));
  });

  it("leaves a receipt alone when mockItems is false or it has items", () => {
    const own: ReceiptLineItem = {
      lineItemId: "a",
      name: "A",
      quantity: 1,
      unitPrice: 5,
      totalPrice: 5,
      taxes: [],
    };
    expect(withMockItems({ ...base, mockItems: false }).items).toEqual([]);
    expect(withMockItems({ ...base, items: [own] }).items).toEqual([own]);
    expect(needsMockItems({ mockItems: true, items: [] })).toBe(true);
    expect(needsMockItems({ mockItems: true, items: [own] })).toBe(false);
    expect(needsMockItems({ mockItems: false, items: [] })).toBe(false);
  });
});
