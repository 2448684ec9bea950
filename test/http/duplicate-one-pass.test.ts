import type { DescField, JsonValue } from "@bufbuild/protobuf";
import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { decodeHttpRequest, type HttpBinding, httpBindings } from "../../src/http/bindings.js";
import { messageToJson } from "../../src/rpc/json.js";
import * as duplicates from "../../src/rpc/json-duplicates.js";
import { API_SERVICES } from "../../src/rpc/policy.js";
import { fuzzSettings } from "../hardening/support.js";
import { receiptBody } from "../support/harness.js";
import { message } from "../support/messages.js";
import { bindingNamed, outcome } from "./decode-outcome.js";

// The duplicate-member check as the decode calls it, counted: a body the one-pass read settles by
// its own count should not reach it.
vi.mock("../../src/rpc/json-duplicates.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../src/rpc/json-duplicates.js")>();
  return { ...original, assertNoDuplicateMembers: vi.fn(original.assertNoDuplicateMembers) };
});
const checks = vi.mocked(duplicates.assertNoDuplicateMembers);

const bindings = httpBindings(API_SERVICES).filter((b) => b.body.kind !== "none");
const binding = (name: string): HttpBinding => bindingNamed(bindings, name);

type Url = { params: Record<string, string>; query: Record<string, string> };

/** What the body parser did before: the check on the parsed text, then the decode. */
function checkedFirst(b: HttpBinding, url: Url, text: string): unknown {
  return outcome(() => {
    const body: unknown = JSON.parse(text);
    duplicates.assertNoDuplicateMembers(text, body);
    return decodeHttpRequest(b, { ...url, body });
  });
}

/** What the transcoder does now: the text handed to the decode with the parsed body. */
function leftToDecode(b: HttpBinding, url: Url, text: string): unknown {
  return outcome(() => decodeHttpRequest(b, { ...url, body: JSON.parse(text), bodyText: text }));
}

/** Values a duplicate member may carry: colons in strings, nesting, escapes now and then. */
const OTHER_VALUES = [
  "1",
  "null",
  '"x:y"',
  '"::"',
  "{}",
  "[]",
  '{"a:b":":"}',
  '"2026-01-01T09:30:00Z"',
  '"\\u003a"',
];

/**
 * `value` as JSON text with, now and then (by `next`, a random number source), a member written twice
 * (the same value or another, its name sometimes spelled with an escape), an unknown member or a
 * `__proto__` member, and spaces around colons: at every depth, in line items and nested messages.
 */
function textOf(value: unknown, next: () => number, rate = 0.06): string {
  if (Array.isArray(value)) return `[${value.map((v) => textOf(v, next, rate)).join(",")}]`;
  if (value === null || typeof value !== "object") return JSON.stringify(value);
  const members: string[] = [];
  const colon = () => (next() < 0.2 ? " : " : ":");
  for (const [key, v] of Object.entries(value)) {
    members.push(`${JSON.stringify(key)}${colon()}${textOf(v, next, rate)}`);
    const roll = next();
    if (roll < rate) {
      const name =
        next() < 0.15 ? `\\u${key.charCodeAt(0).toString(16).padStart(4, "0")}${key.slice(1)}` : key;
      const again =
        next() < 0.5
          ? textOf(v, next, rate)
          : (OTHER_VALUES[Math.floor(next() * OTHER_VALUES.length)] as string);
      const member = `"${name}"${colon()}${again}`;
      if (next() < 0.5) members.push(member);
      else members.splice(Math.floor(next() * members.length), 0, member);
    } else if (roll < rate + 0.01) members.push(`"zz:z"${colon()}1`);
    else if (roll < rate + 0.02) members.push(`"__proto__"${colon()}{"receiptId":"r"}`);
  }
  return `{${members.join(",")}}`;
}

/** A small deterministic random source from a seed (mulberry32). */
function randomFrom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A request of `b` from a random message: its URL values from the message, its body as `b` takes it. */
function requestOf(
  b: HttpBinding,
  whole: Record<string, JsonValue>,
  urlValue: string | undefined,
): [Url, unknown] {
  const bound = new Set<DescField>(b.variables.map((v) => v.fields[0] as DescField));
  const params: Record<string, string> = {};
  for (const v of b.variables) {
    params[v.param] = urlValue ?? String(whole[(v.fields[0] as DescField).jsonName] ?? "");
  }
  const body =
    b.body.kind === "field"
      ? (whole[b.body.field.jsonName] ?? {})
      : Object.fromEntries(
          Object.entries(whole).filter(([key]) => ![...bound].some((f) => f.jsonName === key)),
        );
  return [{ params, query: {} }, body];
}

describe("the duplicate-member check left to the one-pass read", () => {
  afterEach(() => checks.mockClear());

  it("refuses exactly the bodies the check refused, with the same error, and reads the rest alike", () => {
    let refused = 0;
    let settledByCount = 0;
    for (const b of bindings) {
      fc.assert(
        fc.property(
          message(b.method.input),
          fc.integer(),
          fc.constantFrom(undefined, "gateway_a", "a:b"),
          (msg, seed, urlValue) => {
            const whole = messageToJson(b.method.input, msg) as Record<string, JsonValue>;
            const [url, body] = requestOf(b, whole, urlValue);
            const text = textOf(body, randomFrom(seed));
            const expected = checkedFirst(b, url, text);
            checks.mockClear();
            const actual = leftToDecode(b, url, text);
            expect(actual, `${b.method.name} ${JSON.stringify(url)} ${text}`).toEqual(expected);
            if (
              (expected as { violations?: { description: string }[] }).violations?.[0]?.description.includes(
                "RFC 7493",
              )
            ) {
              refused++;
            }
            if (checks.mock.calls.length === 0) settledByCount++;
          },
        ),
        fuzzSettings(150),
      );
    }
    // Not vacuous: many bodies carry a duplicate, and many are settled by the read's count alone.
    expect(refused).toBeGreaterThan(100);
    expect(settledByCount).toBeGreaterThan(200);
  });

  it("does the same on receipts the read takes, a member now and then twice, on encrypt and create payment", () => {
    // The hot routes' bodies, valid but for the duplicates: where a count that is off would let one
    // through, for the read succeeds on what JSON.parse kept.
    let readableRefused = 0;
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 6 }),
        fc.integer(),
        fc.constantFrom("EncryptReceipt", "CreatePayment"),
        fc.constantFrom("gateway_a", "a:b"),
        fc.constantFrom("Corner Coffee", "Caf\u00e9 : 24/7"),
        (count, seed, name, urlValue, merchantName) => {
          const items = Array.from({ length: count }, (_, i) => ({
            lineItemId: `li-${i}`,
            name: i % 2 === 0 ? "Flat white" : "a:b:c",
            quantity: 1,
            unitPrice: 100,
            totalPrice: 100,
          }));
          const receipt = receiptBody({ items, totalAmount: 100 * count, merchantName });
          const b = binding(name);
          const url = { params: Object.fromEntries(b.variables.map((v) => [v.param, urlValue])), query: {} };
          const text = textOf(receipt, randomFrom(seed), 0.02);
          const expected = checkedFirst(b, url, text);
          expect(leftToDecode(b, url, text), `${name} ${urlValue} ${text}`).toEqual(expected);
          const unchecked = outcome(() => decodeHttpRequest(b, { ...url, body: JSON.parse(text) }));
          if ("code" in (expected as object) && !("code" in (unchecked as object))) readableRefused++;
        },
      ),
      fuzzSettings(1000),
    );
    expect(readableRefused).toBeGreaterThan(100);
  });

  it("settles a clean receipt by the read's count, on encrypt and on create payment", () => {
    const receipt = receiptBody({
      merchantName: "Caf\u00e9 : 24/7",
      transactionDate: "2026-01-01T09:30:00+01:00",
    });
    const text = JSON.stringify(receipt);
    for (const [name, params] of [
      ["EncryptReceipt", {}],
      ["CreatePayment", { p0: "gate:way" }],
    ] as const) {
      const b = binding(name);
      const url = {
        params: Object.fromEntries(b.variables.map((v) => [v.param, params.p0 ?? ""])),
        query: {},
      };
      expect(leftToDecode(b, url, text)).toEqual(checkedFirst(b, url, text));
      checks.mockClear();
      leftToDecode(b, url, text);
      expect(checks, name).not.toHaveBeenCalled();
    }
  });

  it("names a duplicate in a line item with the check's own error", () => {
    const b = binding("EncryptReceipt");
    const url = { params: {}, query: {} };
    const text = JSON.stringify(receiptBody()).replace('"quantity":1', '"quantity":1,"quantity":100');
    expect(leftToDecode(b, url, text)).toEqual({
      code: "invalid_request",
      message: 'The JSON body names "items[1].quantity" twice in one object.',
      violations: [
        {
          field: "items[1].quantity",
          description: "appears more than once in the same JSON object (names must be unique, RFC 7493)",
        },
      ],
    });
  });
});
