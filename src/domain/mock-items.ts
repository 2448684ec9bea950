import { createHash } from "node:crypto";
import type { ReceiptLineItem, ValidReceipt } from "./receipt-rules.js";

/**
 * Mock line items: when a receipt's `mockItems` is true (the default) and it has no
 * items, the service fills in 1 to 4 plausible items so the cardholder's app has something to show.
 * They are deterministic, seeded by the receiptId, so a retried request seals the same receipt, and
 * a payment gateway can derive the amount before or after they are generated with the same result.
 */

/** The `category` of every generated item, so an app can tell them from real ones. */
export const MOCK_CATEGORY = "mock";

/** The most items {@link mockItems} generates; the fewest is 1. */
export const MAX_MOCK_ITEMS = 4;

const CATALOG = [
  "Coffee",
  "Croissant",
  "Sandwich",
  "Orange juice",
  "Notebook",
  "Batteries",
  "Water bottle",
  "Chocolate bar",
  "Umbrella",
  "Phone charger",
  "Sunglasses",
  "Newspaper",
] as const;

/** Unit prices of items generated without a known amount: 1.00 to 20.00 in a two-decimal currency. */
const MIN_UNIT_PRICE = 100;
const MAX_UNIT_PRICE = 2000;
/** Quantities tried per item (an item keeps quantity 1 when its total is not divisible). */
const MAX_MOCK_QUANTITY = 3;

/**
 * Deterministic mock line items for a receipt: 1 to 4 items, `category: "mock"`, no taxes, each with
 * `unitPrice * quantity === totalPrice`. With `amount` (a non-negative safe integer, smallest currency
 * unit), the totals add up to exactly `amount`; every item costs at least 1 unless `amount` is 0 (one
 * free item), so a small amount gets fewer items. Without it, prices are plausible and positive.
 * The same receiptId (and amount) always gives the same items.
 */
export function mockItems(receiptId: string, amount?: number): ReceiptLineItem[] {
  if (amount !== undefined && !(Number.isSafeInteger(amount) && amount >= 0)) {
    throw new RangeError(`mock item amount must be a non-negative safe integer, got ${amount}`);
  }
  const random = new SeededRandom(receiptId);
  const wanted = 1 + random.below(MAX_MOCK_ITEMS);
  const count = amount === undefined ? wanted : Math.max(1, Math.min(wanted, amount));
  const totals = amount === undefined ? undefined : split(amount, count, random);
  const firstName = random.below(CATALOG.length);
  const items: ReceiptLineItem[] = [];
  for (let i = 0; i < count; i++) {
    let quantity = 1 + random.below(MAX_MOCK_QUANTITY);
    let unitPrice = MIN_UNIT_PRICE + random.below(MAX_UNIT_PRICE - MIN_UNIT_PRICE + 1);
    const total = totals?.[i];
    if (total !== undefined) {
      if (total % quantity !== 0) quantity = 1;
      unitPrice = total / quantity;
    }
    items.push({
      lineItemId: `mock-${i + 1}`,
      name: CATALOG[(firstName + i) % CATALOG.length] ?? "Item",
      quantity,
      unitPrice,
      totalPrice: unitPrice * quantity,
      category: MOCK_CATEGORY,
      taxes: [],
    });
  }
  return items;
}

/**
 * The amount mock items must add up to, when one is known: the payment `amount`, else the receipt's
 * `totalAmount` (items plus their taxes make the total paid; mock items carry no taxes), less the
 * `tipAmount` that total includes (a tip is not an item).
 */
export function mockTargetAmount(
  receipt: Pick<ValidReceipt, "amount" | "totalAmount" | "tipAmount">,
): number | undefined {
  const total = receipt.amount ?? receipt.totalAmount;
  if (total === undefined || receipt.tipAmount === undefined) return total;
  return Math.max(0, total - receipt.tipAmount);
}

/** Whether the service generates mock items for this receipt: `mockItems` is true and `items` is empty. */
export function needsMockItems(receipt: Pick<ValidReceipt, "mockItems" | "items">): boolean {
  return receipt.mockItems && receipt.items.length === 0;
}

/**
 * The receipt with its mock items filled in when {@link needsMockItems}, otherwise unchanged. Call it
 * after `validateReceipt` and before sealing; a gateway's `resolveAmount` gives the same result
 * before and after.
 */
export function withMockItems(receipt: ValidReceipt): ValidReceipt {
  if (!needsMockItems(receipt)) return receipt;
  return { ...receipt, items: mockItems(receipt.receiptId, mockTargetAmount(receipt)) };
}

/**
 * Splits `amount` into `count` parts of at least 1 each (one part of 0 when `amount` is 0) with random
 * weights. BigInt arithmetic keeps `rest * weight` exact for amounts up to 2^53.
 */
function split(amount: number, count: number, random: SeededRandom): number[] {
  if (amount === 0) return [0];
  const weights = Array.from({ length: count }, () => BigInt(1 + random.below(100)));
  const weightSum = weights.reduce((a, b) => a + b, 0n);
  const rest = BigInt(amount - count);
  const parts = weights.map((w) => 1n + (rest * w) / weightSum);
  const remainder = BigInt(amount) - parts.reduce((a, b) => a + b, 0n);
  parts[0] = (parts[0] ?? 0n) + remainder;
  return parts.map(Number);
}

/**
 * A deterministic random stream: SHA-256 in counter mode over the seed. Not for secrets, only for
 * reproducible mock data; a hash keeps it free of hand-rolled PRNG constants.
 */
class SeededRandom {
  private readonly seed: Buffer;
  private block = Buffer.alloc(0);
  private offset = 0;
  private counter = 0;

  constructor(seed: string) {
    this.seed = createHash("sha256").update(seed, "utf8").digest();
  }

  /** A uniformly distributed integer in [0, bound), bound at most 2^32. */
  below(bound: number): number {
    // Rejection sampling avoids the modulo bias; with bound <= 100 it almost never loops.
    const limit = 2 ** 32 - (2 ** 32 % bound);
    for (;;) {
      const value = this.next32();
      if (value < limit) return value % bound;
    }
  }

  private next32(): number {
    if (this.offset + 4 > this.block.length) {
      const counter = Buffer.alloc(4);
      counter.writeUInt32BE(this.counter++);
      this.block = createHash("sha256").update(this.seed).update(counter).digest();
      this.offset = 0;
    }
    const value = this.block.readUInt32BE(this.offset);
    this.offset += 4;
    return value;
  }
}
