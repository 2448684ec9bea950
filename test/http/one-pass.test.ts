import type { DescField, JsonValue } from "@bufbuild/protobuf";
import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { FAST_PATHS, fastPathsOn, useFastPaths } from "../../src/fast-paths.js";
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
import { FIXED_SEED, fuzzSettings } from "../hardening/support.js";
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

/** A JSON text under construction: members keep their key's exact text, so a name may repeat. */
type Node =
  | { kind: "object"; members: [string, Node][] }
  | { kind: "array"; items: Node[] }
  | { kind: "raw"; text: string };

function nodeOf(value: unknown): Node {
  if (Array.isArray(value)) return { kind: "array", items: value.map(nodeOf) };
  if (value !== null && typeof value === "object") {
    return { kind: "object", members: Object.entries(value).map(([k, v]) => [JSON.stringify(k), nodeOf(v)]) };
  }
  return { kind: "raw", text: JSON.stringify(value) ?? "null" };
}

function textOf(node: Node): string {
  if (node.kind === "raw") return node.text;
  if (node.kind === "array") return `[${node.items.map(textOf).join(",")}]`;
  return `{${node.members.map(([key, value]) => `${key}:${textOf(value)}`).join(",")}}`;
}

/** Every member and item of `node`, depth first, as a way to set it; `node` itself is not one. */
function slots(node: Node, into: ((value: Node) => void)[] = []): ((value: Node) => void)[] {
  if (node.kind === "array") {
    node.items.forEach((item, i) => {
      into.push((value) => {
        node.items[i] = value;
      });
      slots(item, into);
    });
  } else if (node.kind === "object") {
    for (const member of node.members) {
      into.push((value) => {
        member[1] = value;
      });
      slots(member[1], into);
    }
  }
  return into;
}

/** Every object and array of `node`, `node` first. */
function containers(node: Node, into: Node[] = []): Node[] {
  if (node.kind === "raw") return into;
  into.push(node);
  for (const child of node.kind === "array" ? node.items : node.members.map(([, v]) => v))
    containers(child, into);
  return into;
}

/** Values the JSON mapping and the REST rules treat with care: numbers at the edges, strings for numbers, odd base64, broken text. */
const HOSTILE_VALUES = [
  "-0",
  "0",
  "1e400",
  "-1e400",
  "1e2",
  "1.0",
  "1.5",
  "-1",
  "4294967296",
  "9007199254740993",
  "9223372036854775807",
  "9223372036854775808",
  "-9223372036854775809",
  "18446744073709551616",
  '"1"',
  '"-0"',
  '"1e2"',
  '"1.0"',
  '" 1"',
  '"0x10"',
  '"9223372036854775808"',
  '"NaN"',
  '"Infinity"',
  "null",
  "true",
  "false",
  "[]",
  "{}",
  "[null]",
  '[1,"a",null]',
  '""',
  '"\\ud800"',
  '"a\\udc00"',
  '"\\u0000"',
  '"AAAA"',
  '"AA=="',
  '"AA"',
  '"A"',
  '"-_-_"',
  '"+/+/"',
  '"AA AA"',
  '"AA\\nAA"',
  '"AAA="',
  '"2026-01-01T00:00:00Z"',
  '"2026-02-30T00:00:00Z"',
  '"2026-01-01T00:00:00+25:00"',
  '"1s"',
  '"x"',
  `"${"x".repeat(5000)}"`,
  `${"[".repeat(100)}${"]".repeat(100)}`,
  '{"a":{"b":[{}]}}',
].map((text) => ({ kind: "raw", text }) as Node);

/** A name written another way that JSON reads the same, or the field's proto name. */
function otherSpelling(key: string, how: number): string {
  const name = JSON.parse(key) as string;
  if (name === "") return key;
  if (how === 0) return key;
  if (how === 1)
    return `"\\u${(name.codePointAt(0) ?? 0).toString(16).padStart(4, "0")}${JSON.stringify(name).slice(2)}`;
  return JSON.stringify(name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`));
}

/** One change to a JSON text: a value replaced, a name repeated (however spelled), a member added or dropped. */
const mutation = fc.record({
  at: fc.nat(),
  // Mostly values: an added unknown member or a repeated name is refused before anything else is read.
  what: fc.oneof(
    { arbitrary: fc.constant("value"), weight: 8 },
    { arbitrary: fc.constantFrom("repeat", "add", "drop"), weight: 1 },
  ),
  pick: fc.nat(),
  how: fc.nat({ max: 2 }),
});

function mutate(root: Node, change: { at: number; what: string; pick: number; how: number }): Node {
  const all = containers(root);
  const target = all[change.at % all.length] as Node;
  const value = HOSTILE_VALUES[change.pick % HOSTILE_VALUES.length] as Node;
  if (target.kind === "array") {
    if (target.items.length === 0 || change.what === "add") target.items.push(value);
    else target.items[change.pick % target.items.length] = value;
    return root;
  }
  if (target.kind !== "object") return root;
  const members = target.members;
  const member = members[change.pick % Math.max(members.length, 1)];
  if (member === undefined || change.what === "add") members.push(['"unknownField"', value]);
  else if (change.what === "value") member[1] = value;
  else if (change.what === "repeat") members.push([otherSpelling(member[0], change.how), value]);
  else members.splice(members.indexOf(member), 1);
  return root;
}

/**
 * The JSON fast paths (the compiled reader, the one-pass read) promise the library's answer for every
 * input: a hostile body, as text, is read with them on and with them off to the same message or the
 * same error (code, message and every field violation).
 */
describe("REST requests with the fast paths on and off", () => {
  const before = fastPathsOn();
  afterEach(() => useFastPaths(before));

  /** What `decodeHttpRequest` makes of `text` with the fast paths `on`, as the transcoder calls it. */
  function decodedWith(on: boolean, b: HttpBinding, params: Record<string, string>, text: string): unknown {
    useFastPaths(on ? FAST_PATHS : []);
    const parts = { params, query: {}, body: JSON.parse(text) as unknown, bodyText: text };
    return outcome(() => decodeHttpRequest(b, parts));
  }

  it("read any hostile body of every endpoint to the same message or the same error", () => {
    for (const b of bindings.filter((binding) => binding.body.kind !== "none")) {
      let refused = 0;
      fc.assert(
        fc.property(
          message(b.method.input),
          fc.array(mutation, { minLength: 1, maxLength: 3 }),
          (msg, changes) => {
            const whole = messageToJson(b.method.input, msg) as Record<string, JsonValue>;
            const params = paramsOf(b, "usr_1");
            const body = b.body.kind === "field" ? (whole[b.body.field.jsonName] ?? {}) : whole;
            const text = textOf(changes.reduce(mutate, nodeOf(body)));
            const on = decodedWith(true, b, params, text);
            expect(decodedWith(false, b, params, text), `${b.method.name} ${text.slice(0, 500)}`).toEqual(on);
            if ("code" in (on as object)) refused++;
          },
        ),
        fuzzSettings(150),
      );
      // Not vacuous: most hostile bodies are refused, and the refusals are what is compared.
      expect(refused, b.method.name).toBeGreaterThan(50);
    }
  });

  it("read every member of a valid body of every endpoint set to each hostile value, or repeated, alike", () => {
    let compared = 0;
    for (const b of bindings.filter((binding) => binding.body.kind !== "none")) {
      const params = paramsOf(b, "usr_1");
      const bodyOf = (msg: Parameters<typeof messageToJson>[1]) => {
        const whole = messageToJson(b.method.input, msg) as Record<string, JsonValue>;
        return b.body.kind === "field" ? (whole[b.body.field.jsonName] ?? {}) : whole;
      };
      // The valid body with the most members among a fixed sample: every member of it is attacked.
      const valid = fc
        .sample(message(b.method.input), { seed: FIXED_SEED, numRuns: 60 })
        .map((msg) => JSON.stringify(bodyOf(msg)))
        .filter((text) => !("code" in (decodedWith(false, b, params, text) as object)));
      const base = valid.reduce(
        (a, t) => (slots(nodeOf(JSON.parse(t))).length > slots(nodeOf(JSON.parse(a))).length ? t : a),
        "{}",
      );
      const count = slots(nodeOf(JSON.parse(base))).length;
      for (let at = 0; at < count; at++) {
        for (const value of HOSTILE_VALUES) {
          const root = nodeOf(JSON.parse(base));
          slots(root)[at]?.(value);
          const text = textOf(root);
          expect(decodedWith(false, b, params, text), `${b.method.name} ${text.slice(0, 300)}`).toEqual(
            decodedWith(true, b, params, text),
          );
          compared++;
        }
      }
      // Each name of each object repeated, spelled as it is, with an escape, or as its proto name.
      containers(nodeOf(JSON.parse(base))).forEach((object, index) => {
        if (object.kind !== "object") return;
        for (const [key] of object.members) {
          for (const how of [0, 1, 2]) {
            const root = nodeOf(JSON.parse(base));
            const copy = containers(root)[index];
            if (copy?.kind === "object")
              copy.members.push([otherSpelling(key, how), { kind: "raw", text: '"x"' }]);
            const text = textOf(root);
            expect(decodedWith(false, b, params, text), `${b.method.name} ${text.slice(0, 300)}`).toEqual(
              decodedWith(true, b, params, text),
            );
            compared++;
          }
        }
      });
    }
    // Not vacuous: thousands of bodies, each one value away from a valid one.
    expect(compared).toBeGreaterThan(5_000);
  });
});
