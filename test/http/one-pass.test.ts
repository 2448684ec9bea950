import type { DescField, JsonValue } from "@bufbuild/protobuf";
import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  decodeHttpRequest,
  decodeHttpRequestChecked,
  type HttpBinding,
  type HttpRequestParts,
  httpBindings,
} from "../../src/http/bindings.js";
import * as json from "../../src/rpc/json.js";
import { messageToJson } from "../../src/rpc/json.js";
import { API_SERVICES } from "../../src/rpc/policy.js";
import { fuzzSettings } from "../hardening/support.js";
import { receiptBody } from "../support/harness.js";
import { message } from "../support/messages.js";
import { bindingNamed, outcome } from "./decode-outcome.js";

// The field-by-field check, counted: REST should run it only for a request with a problem to name.
vi.mock("../../src/rpc/json.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../src/rpc/json.js")>();
  return { ...original, validateJson: vi.fn(original.validateJson) };
});
const checks = vi.mocked(json.validateJson);

const bindings = httpBindings(API_SERVICES);
const binding = (name: string): HttpBinding => bindingNamed(bindings, name);

/** `decodeHttpRequest` gives what checking every part first gives: the same message or the same error. */
function expectSameAsChecked(b: HttpBinding, parts: HttpRequestParts): void {
  const expected = outcome(() => decodeHttpRequestChecked(b, parts));
  const label = `${b.method.name} ${JSON.stringify(parts)}`;
  expect(
    outcome(() => decodeHttpRequest(b, parts)),
    label,
  ).toEqual(expected);
}

/** Path parameters for every variable of `b`: `value` for each. */
function paramsOf(b: HttpBinding, value: string): Record<string, string> {
  return Object.fromEntries(b.variables.map((v) => [v.param, value]));
}

const receipt = receiptBody();

describe("REST requests read in one pass", () => {
  afterEach(() => checks.mockClear());

  it("reads a valid encrypt request and a valid create-payment request without the check", () => {
    const encrypt = { params: {}, query: {}, body: receipt };
    const read = decodeHttpRequest(binding("EncryptReceipt"), encrypt);
    const create = { params: paramsOf(binding("CreatePayment"), "gateway_a"), query: {}, body: receipt };
    const created = decodeHttpRequest(binding("CreatePayment"), create) as { gateway?: string };
    expect(checks).not.toHaveBeenCalled();
    expect(read).toStrictEqual(decodeHttpRequestChecked(binding("EncryptReceipt"), encrypt));
    expect(created).toStrictEqual(decodeHttpRequestChecked(binding("CreatePayment"), create));
    expect(created.gateway).toBe("gateway_a");
  });

  it("checks a request it cannot read, and names every problem", () => {
    const encrypt = binding("EncryptReceipt");
    const body = {
      ...receipt,
      totalAmount: "700",
      items: [{ ...(receipt.items as object[])[0], quantity: 1.5 }],
      typo: 1,
    };
    const result = outcome(() => decodeHttpRequest(encrypt, { params: {}, query: {}, body }));
    expect(checks).toHaveBeenCalled();
    expect((result as { violations: { field: string }[] }).violations.map((v) => v.field)).toEqual([
      "items[0].quantity",
      "totalAmount",
      "typo",
    ]);
  });

  it("gives the same answer as checking first, for requests with and without problems", () => {
    const bodies: unknown[] = [
      undefined,
      null,
      {},
      [],
      "receipt",
      7,
      receipt,
      { ...receipt, currency: null },
      { ...receipt, unknown: 1 },
      { ...receipt, receipt_id: "again" },
      { ...receipt, totalAmount: Number.MAX_SAFE_INTEGER + 2 },
      { ...receipt, transactionDate: "2026-02-30T00:00:00Z" },
      { ...receipt, merchantName: "\ud800" },
      { ...receipt, items: [null] },
      JSON.parse('{"__proto__":{"receiptId":"r"}}'),
      { receipt },
      { paymentId: "p-1", privateKey: "k", accessToken: "t" },
      { gateway: "gateway_a", receipt: { ...receipt, amount: 700 } },
      { userId: "usr_1", pageSize: 5 },
      { transactionId: "t-1", user_id: "usr_1" },
    ];
    const urls: Omit<HttpRequestParts, "body">[] = [
      { params: {}, query: {} },
      { params: {}, query: { pageSize: "5" } },
      { params: {}, query: { pageSize: "x" } },
      { params: {}, query: { page_size: "5", pageSize: "6" } },
      { params: {}, query: { unknown: "1" } },
    ];
    for (const b of bindings) {
      for (const value of ["usr_1", "gateway_a", "", "\ud800", "a b"]) {
        for (const url of urls) {
          for (const body of bodies) {
            expectSameAsChecked(b, { ...url, params: { ...url.params, ...paramsOf(b, value) }, body });
          }
        }
      }
    }
  });

  it("reads every valid request of every endpoint without the check", () => {
    for (const b of bindings) {
      let readUnchecked = 0;
      fc.assert(
        fc.property(message(b.method.input), (msg) => {
          const whole = messageToJson(b.method.input, msg) as Record<string, JsonValue>;
          const bound = new Set<DescField>(b.variables.map((v) => v.fields[0] as DescField));
          const params: Record<string, string> = {};
          for (const v of b.variables) {
            const field = v.fields[0] as DescField;
            params[v.param] = String(whole[field.jsonName] ?? "");
          }
          const body =
            b.body.kind === "field"
              ? whole[b.body.field.jsonName]
              : Object.fromEntries(
                  Object.entries(whole).filter(([key]) => ![...bound].some((f) => f.jsonName === key)),
                );
          const parts = { params, query: {}, body: b.body.kind === "none" ? undefined : body };
          const expected = outcome(() => decodeHttpRequestChecked(b, parts));
          checks.mockClear();
          expect(outcome(() => decodeHttpRequest(b, parts))).toEqual(expected);
          if (!("code" in (expected as object))) {
            expect(checks).not.toHaveBeenCalled();
            readUnchecked++;
          }
        }),
        fuzzSettings(200),
      );
      // Not vacuous: all random requests of most endpoints are valid, and about one receipt in seven
      // (the others draw values the REST rules refuse, such as unsafe integers or optional fields
      // that break their rules).
      // At 50 runs a random seed fell to 5 or fewer valid receipts in 3 of 12 runs; 200 give 29-37.
      expect(readUnchecked, b.method.name).toBeGreaterThan(5);
    }
  });

  it("checks a request whose URL has a problem", () => {
    const create = binding("CreatePayment");
    const parts = { params: paramsOf(create, "gateway_a"), query: { x: "1" }, body: receipt };
    expect(outcome(() => decodeHttpRequest(create, parts))).toMatchObject({ code: "invalid_request" });
    expect(checks).toHaveBeenCalled();
  });
});
