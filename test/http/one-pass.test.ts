import type { JsonValue, MessageShape } from "@bufbuild/protobuf";
import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { SERVICES } from "../../src/app.js";
import { AppError, invalidRequest } from "../../src/errors.js";
import { decodeHttpRequest, type HttpBinding, httpBindings } from "../../src/http/bindings.js";
import * as json from "../../src/rpc/json.js";
import { messageToJson } from "../../src/rpc/json-output.js";
import { fuzzSettings } from "../hardening/support.js";
import { message } from "../support/messages.js";

// The field-by-field check, counted: REST should run it only for a request with a problem to name.
vi.mock("../../src/rpc/json.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../src/rpc/json.js")>();
  return { ...original, validateJson: vi.fn(original.validateJson) };
});
const checks = vi.mocked(json.validateJson);

const bindings = httpBindings(SERVICES);
const binding = (name: string): HttpBinding => {
  const found = bindings.find((b) => b.method.name === name);
  if (found === undefined) throw new Error(`no binding ${name}`);
  return found;
};
/** Bindings with nothing in the URL: their requests are read in one pass when they have no problem. */
const bodyOnly = bindings.filter((b) => b.variables.length === 0);

/**
 * The request as REST read it before the one-pass read: check the body field by field, then decode.
 * The reference the one-pass read must agree with, for every body, valid or not.
 */
function checkedThenDecoded(b: HttpBinding, body: unknown): MessageShape<typeof b.method.input> {
  const input = b.method.input;
  if (b.body.kind === "none") return json.decodeJson(input, {});
  if (b.body.kind === "all") {
    const whole = body === undefined ? {} : body;
    const violations = json.validateJson(input, whole);
    if (violations.length > 0) throw invalidRequest(violations);
    return json.decodeJson(input, { ...(whole as Record<string, JsonValue>) });
  }
  const field = b.body.field;
  const value = body === undefined && field.fieldKind === "message" ? {} : body;
  const violations =
    field.fieldKind === "message"
      ? json.validateJson(field.message, value)
      : json.validateJson(input, { [field.jsonName]: value });
  if (violations.length > 0) throw invalidRequest(violations);
  return json.decodeJson(input, value === undefined ? {} : { [field.jsonName]: value as JsonValue });
}

function outcome(read: () => unknown): unknown {
  try {
    return { message: read() };
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    return { code: err.code, message: err.message, violations: err.violations };
  }
}

const receipt = {
  receiptId: "r-1",
  merchantId: "m-bench",
  merchantName: "Corner Coffee",
  transactionId: "t-1",
  transactionDate: "2026-01-01T09:30:00Z",
  currency: "EUR",
  recipientHashedPan: "ab".repeat(32),
  items: [{ lineItemId: "1", name: "Flat white", quantity: 2, unitPrice: 350, totalPrice: 700 }],
  totalAmount: 700,
};

describe("REST request bodies read in one pass", () => {
  afterEach(() => checks.mockClear());

  it("reads a valid encrypt request without the field-by-field check", () => {
    const encrypt = binding("EncryptReceipt");
    const read = decodeHttpRequest(encrypt, { params: {}, query: {}, body: receipt });
    expect(checks).not.toHaveBeenCalled();
    expect(read).toStrictEqual(checkedThenDecoded(encrypt, receipt));
  });

  it("checks a request it cannot read, and names every problem", () => {
    const encrypt = binding("EncryptReceipt");
    const body = { ...receipt, totalAmount: "700", items: [{ ...receipt.items[0], quantity: 1.5 }], typo: 1 };
    const result = outcome(() => decodeHttpRequest(encrypt, { params: {}, query: {}, body }));
    expect(checks).toHaveBeenCalled();
    expect(result).toEqual(outcome(() => checkedThenDecoded(encrypt, body)));
    expect((result as { violations: { field: string }[] }).violations.map((v) => v.field)).toEqual([
      "items[0].quantity",
      "totalAmount",
      "typo",
    ]);
  });

  it("gives the same answer as checking first, for bodies with and without problems", () => {
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
    ];
    for (const b of bodyOnly) {
      for (const body of bodies) {
        const parts = { params: {}, query: {}, body };
        expect(
          outcome(() => decodeHttpRequest(b, parts)),
          `${b.method.name} ${JSON.stringify(body)}`,
        ).toEqual(outcome(() => checkedThenDecoded(b, body)));
      }
    }
  });

  it("reads every valid request of every body-only endpoint without the check", () => {
    for (const b of bodyOnly) {
      fc.assert(
        fc.property(message(b.method.input), (msg) => {
          const whole = messageToJson(b.method.input, msg) as Record<string, JsonValue>;
          const body = b.body.kind === "field" ? whole[b.body.field.jsonName] : whole;
          const expected = outcome(() => checkedThenDecoded(b, body));
          checks.mockClear();
          const result = outcome(() => decodeHttpRequest(b, { params: {}, query: {}, body }));
          expect(result).toEqual(expected);
          if (!("code" in (expected as object))) expect(checks).not.toHaveBeenCalled();
        }),
        fuzzSettings(50),
      );
    }
  });

  it("leaves requests with a query or path variables to the check", () => {
    const encrypt = binding("EncryptReceipt");
    const result = outcome(() =>
      decodeHttpRequest(encrypt, { params: {}, query: { x: "1" }, body: receipt }),
    );
    expect(checks).toHaveBeenCalled();
    expect(result).toMatchObject({ code: "invalid_request" });
  });
});
