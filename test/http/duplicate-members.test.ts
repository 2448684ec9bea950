import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  assertNoDuplicateMembers,
  duplicateMemberPath,
  hasNoDuplicateByCount,
} from "../../src/rpc/json-duplicates.js";
import { fillPath, fuzzSettings, REST_ROUTES, send } from "../hardening/support.js";
import { type Envelope, receiptBody, startService, type TestService } from "../support/harness.js";

/**
 * I-JSON (RFC 7493): a member name twice in one object is refused, never read as its last value:
 * `{"amount":5,"amount":999999}` must charge neither 5 nor 999999.
 */

/** `body` as JSON text with `extra` spliced in right after the opening brace of the object. */
function withExtraMember(body: Record<string, unknown>, extra: string): string {
  return `{${extra},${JSON.stringify(body).slice(1)}`;
}

describe("duplicateMemberPath", () => {
  it("finds a duplicate at any depth and names its path", () => {
    expect(duplicateMemberPath('{"amount":5,"amount":999999}')).toBe("amount");
    expect(duplicateMemberPath('{"a":{"b":1,"c":[1,{"d":2}],"b":3}}')).toBe("a.b");
    expect(duplicateMemberPath('{"items":[{"x":1},{"name":"a","q":1,"name":"b"}]}')).toBe("items[1].name");
    expect(duplicateMemberPath('[{"a":1},[0,{"t":1,"t":2}]]')).toBe("[1][1].t");
    // Escapes name the same member: "\u0061" is "a".
    expect(duplicateMemberPath('{"a":1,"\\u0061":2}')).toBe("a");
  });

  it("accepts what has no duplicate: same names in different objects, names inside strings", () => {
    expect(duplicateMemberPath('{"a":{"a":1},"b":[{"a":1},{"a":2}]}')).toBeUndefined();
    expect(duplicateMemberPath('{"a":"\\"a\\":1","b":"a"}')).toBeUndefined();
    expect(duplicateMemberPath('{"a" : 1 , "b\\"" : {"a":2}}')).toBeUndefined();
    expect(duplicateMemberPath("[1,2,3]")).toBeUndefined();
    expect(duplicateMemberPath('"x"')).toBeUndefined();
  });

  it("never throws or hangs on text that is not JSON", () => {
    for (const text of ['{"a', '{"a":1,"a', '"\\', "}}]]", '{"a":1,"a"', "{{{{", '"a":"b"']) {
      expect(() => duplicateMemberPath(text)).not.toThrow();
    }
  });
});

/**
 * JSON text with duplicate names likely: few names, colons in names and strings (what the count must
 * not mistake for members), escapes now and then (where counting cannot tell and must say so).
 */
const duplicateProne = fc.letrec<{ value: string; object: string; array: string }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    fc.constantFrom("1", "-2.5e3", "true", "null", '"x:y"', '"::"', '"z"', '"\\u003a"', '"a\\"b"'),
    tie("object"),
    tie("array"),
  ),
  object: fc
    .array(fc.tuple(fc.constantFrom("a", "b", "a:b", ":", "\\u0061", ""), fc.boolean(), tie("value")), {
      maxLength: 4,
    })
    .map((members) => `{${members.map(([k, spaced, v]) => `"${k}"${spaced ? " : " : ":"}${v}`).join(",")}}`),
  array: fc.array(tie("value"), { maxLength: 4 }).map((items) => `[${items.join(", ")}]`),
})).object;

describe("hasNoDuplicateByCount", () => {
  it("says no duplicate only when the scan finds none, and always knows without escapes", () => {
    fc.assert(
      fc.property(duplicateProne, (text) => {
        const parsed: unknown = JSON.parse(text);
        const duplicate = duplicateMemberPath(text) !== undefined;
        const clear = hasNoDuplicateByCount(text, parsed);
        if (clear) expect(duplicate, text).toBe(false);
        if (!text.includes("\\")) expect(clear, text).toBe(!duplicate);
      }),
      fuzzSettings(2000),
    );
  });

  it("is not fooled by an escaped colon standing in for a dropped member", () => {
    // One dropped member, one colon spelled as an escape: equal counts if escapes were not refused.
    const text = '{"a":1,"a":"\\u003a"}';
    expect(hasNoDuplicateByCount(text, JSON.parse(text))).toBe(false);
    expect(() => assertNoDuplicateMembers(text, JSON.parse(text))).toThrow(/"a" twice/);
  });

  it("names the duplicate when given the parsed body too", () => {
    const text = '{"items":[{"name":"a:b","name":"c"}]}';
    expect(() => assertNoDuplicateMembers(text, JSON.parse(text))).toThrow(/"items\[0\]\.name" twice/);
    expect(() =>
      assertNoDuplicateMembers('{"t":"09:30","u":{"v":[":"]}}', { t: "09:30", u: { v: [":"] } }),
    ).not.toThrow();
  });
});

describe("duplicate members over the wire", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService();
  });
  afterAll(async () => {
    await svc.close();
  });

  it('refuses {"amount":5,"amount":999999} on create, naming the field, and creates no payment', async () => {
    const body = receiptBody();
    const text = withExtraMember({ ...body, amount: 999_999 }, '"amount":5');
    const answer = await send(svc, "POST", "/api/v1/payments/gateway_a/create", {
      body: text,
      headers: { "content-type": "application/json", "x-api-key": svc.merchantKey },
    });
    expect(answer.status, answer.text).toBe(400);
    const envelope = JSON.parse(answer.text) as Envelope;
    expect(envelope.error?.code).toBe("invalid_request");
    expect(envelope.error?.details).toMatch(/^amount: /);
    // The same receipt without the duplicate is created: nothing of the refused one was kept.
    const again = await send(svc, "POST", "/api/v1/payments/gateway_a/create", {
      body: JSON.stringify({ ...body, amount: 5 }),
      headers: { "content-type": "application/json", "x-api-key": svc.merchantKey },
    });
    expect(again.status, again.text).toBe(200);
  });

  it("refuses a duplicate nested in a line item, naming its path", async () => {
    const body = receiptBody();
    const text = JSON.stringify(body).replace('"name":"Croissant"', '"name":"Croissant","name":"Caviar"');
    const answer = await send(svc, "POST", "/api/v1/receipts/encrypt", {
      body: text,
      headers: { "content-type": "application/json", "x-api-key": svc.merchantKey },
    });
    expect(answer.status).toBe(400);
    expect((JSON.parse(answer.text) as Envelope).error?.details).toMatch(/^items\[1\]\.name: /);
  });

  it("refuses a duplicate on every REST route that takes a body", async () => {
    const routes = REST_ROUTES.filter((route) => route.verb !== "GET");
    expect(routes.length).toBeGreaterThan(5);
    for (const route of routes) {
      const key = route.role === "issuer" ? svc.issuerKey : svc.merchantKey;
      const answer = await send(svc, route.verb, fillPath(route.template, { gateway: "gateway_a" }), {
        body: '{"receiptId":"a","receiptId":"b"}',
        headers: { "content-type": "application/json", "x-api-key": key },
      });
      const label = `${route.verb} ${route.template}`;
      expect(answer.status, label).toBe(400);
      const error = (JSON.parse(answer.text) as Envelope).error;
      expect(error?.code, label).toBe("invalid_request");
      expect(error?.details, label).toMatch(/^receiptId: appears more than once/);
      expect(answer.headers.get("x-request-id"), label).toBe(error?.request_id);
    }
  });

  it("refuses a duplicate in a Connect JSON request as invalid_argument naming the field", async () => {
    const text = withExtraMember({ ...receiptBody(), gateway: "gateway_a", amount: 999_999 }, '"amount":5');
    const res = await fetch(`${svc.baseUrl}/receipts.v1.PaymentsService/CreatePayment`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "connect-protocol-version": "1",
        "x-api-key": svc.merchantKey,
      },
      body: text,
    });
    expect(res.status).toBe(400);
    const error = (await res.json()) as { code: string; message: string };
    expect(error.code).toBe("invalid_argument");
    expect(error.message).toBe('The JSON body names "amount" twice in one object.');
  });
});
