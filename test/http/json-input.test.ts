import {
  create,
  type DescField,
  type DescMessage,
  type JsonValue,
  ScalarType,
  toJson,
} from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { HttpRuleSchema } from "../../gen/google/api/http_pb.js";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import {
  HealthCheckResponseSchema,
  HealthListResponseSchema,
  type HealthCheckResponse_ServingStatus as ServingStatus,
} from "../../gen/grpc/health/v1/health_pb.js";
import { EncryptedReceiptSchema, ReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { EncryptReceiptRequestSchema } from "../../gen/receipts/v1/receipts_pb.js";
import { is64BitInteger } from "../../src/proto-scalars.js";
import { decodeJson, validateJson } from "../../src/rpc/json.js";
import { compiledJsonReader, compiledMessageFromJson as messageFromJson } from "../../src/rpc/json-input.js";
import { compiledMessageToJson as messageToJson } from "../../src/rpc/json-output.js";
import { messageFromJsonReflective } from "../../src/rpc/json-reflective.js";
import { fuzzSettings } from "../hardening/support.js";
import { message, reachableMessages } from "../support/messages.js";

/**
 * The compiled JSON readers must build exactly the message the reflective path (protobuf-es
 * `fromJson`, unknown fields rejected) builds, for every message the REST surface reads and every
 * message it contains, and must not give up on any body `validateJson` accepts: same `$typeName`,
 * same values and defaults, bigint for 64-bit integers, the same error where `fromJson` throws. And
 * they must give up on every body `validateJson` refuses: REST reads a body the reader accepts without
 * checking it.
 */

type JsonObject = { [key: string]: JsonValue };

function isObject(json: JsonValue | undefined): json is JsonObject {
  return typeof json === "object" && json !== null && !Array.isArray(json);
}

function errorOf(read: () => unknown): string | undefined {
  try {
    read();
    return undefined;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

/**
 * `messageFromJson` returns what `fromJson` returns or throws what it throws; when `validateJson`
 * accepts the body, the compiled reader itself (no fallback), if the type has one, returns it; and
 * the compiled reader reads no body that `validateJson` refuses.
 */
function expectSameAsReflective(desc: DescMessage, json: JsonValue): void {
  expectNoneReadThatCheckRefuses(desc, json);
  const problem = errorOf(() => messageFromJsonReflective(desc, json));
  if (problem !== undefined) {
    expect(errorOf(() => messageFromJson(desc, json))).toBe(problem);
    return;
  }
  const reference = messageFromJsonReflective(desc, json);
  const decoded = messageFromJson(desc, json);
  expect(decoded.$typeName).toBe(desc.typeName);
  expect(decoded).toStrictEqual(reference);
  const compiled = compiledJsonReader(desc);
  if (compiled !== undefined && validateJson(desc, json).length === 0) {
    expect(compiled(json)).toStrictEqual(reference);
  }
}

/**
 * A body the compiled reader of `desc` reads is one `validateJson` finds nothing wrong with. (Not for
 * a bare Timestamp, which is never a request: `validateJson` wants every body to be an object.)
 */
function expectNoneReadThatCheckRefuses(desc: DescMessage, json: JsonValue): void {
  if (desc.typeName === "google.protobuf.Timestamp") return;
  const compiled = compiledJsonReader(desc);
  if (compiled !== undefined && errorOf(() => compiled(json)) === undefined) {
    expect(validateJson(desc, json)).toEqual([]);
  }
}

/** Rewrites a message's JSON field by field: keys through `key`, scalar values through `scalar`. */
function rewrite(
  desc: DescMessage,
  json: JsonValue,
  key: (field: DescField) => string,
  scalar: (type: ScalarType, value: JsonValue) => JsonValue,
): JsonValue {
  if (!isObject(json) || desc.typeName.startsWith("google.protobuf.")) return json;
  const out: JsonObject = {};
  for (const field of desc.fields) {
    const value = json[field.jsonName] ?? json[field.name];
    if (value === undefined) continue;
    const item = (v: JsonValue): JsonValue => {
      if (field.scalar !== undefined) return scalar(field.scalar, v);
      return field.message === undefined ? v : rewrite(field.message, v, key, scalar);
    };
    if (field.fieldKind === "list" && Array.isArray(value)) out[key(field)] = value.map(item);
    else if (field.fieldKind === "map" && isObject(value)) {
      out[key(field)] = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, item(v)]));
    } else out[key(field)] = value === null ? null : item(value);
  }
  return out;
}

const jsonNames = (field: DescField) => field.jsonName;
const protoNames = (field: DescField) => field.name;
const asIs = (_type: ScalarType, value: JsonValue) => value;

/** What the REST rules allow: 64-bit integers as safe JSON integers, finite doubles. */
function validatable(type: ScalarType, value: JsonValue): JsonValue {
  if (is64BitInteger(type) && typeof value === "string") {
    const unsigned = type === ScalarType.UINT64 || type === ScalarType.FIXED64;
    return Number(unsigned ? BigInt.asUintN(52, BigInt(value)) : BigInt.asIntN(53, BigInt(value)));
  }
  const floating = type === ScalarType.DOUBLE || type === ScalarType.FLOAT;
  return floating && typeof value === "string" ? 0.5 : value;
}

/** Every JSON form of one message that a client may send, and some the REST rules reject. */
function renderings(desc: DescMessage, msg: Parameters<typeof messageToJson>[1]): JsonValue[] {
  const service = messageToJson(desc, msg);
  const tamed = rewrite(desc, service, jsonNames, validatable);
  return [
    tamed,
    rewrite(desc, tamed, protoNames, asIs),
    service,
    toJson(desc, msg),
    toJson(desc, msg, { useProtoFieldName: true, enumAsInteger: true, alwaysEmitImplicit: true }),
  ];
}

describe("compiled REST JSON readers", () => {
  const messages = reachableMessages("input");

  it("compile every request message, receipts.v1.EncryptReceiptRequest included", () => {
    expect(messages.length).toBeGreaterThan(10);
    expect(messages.map((m) => m.typeName)).toContain("receipts.v1.EncryptReceiptRequest");
    for (const desc of messages) expect(compiledJsonReader(desc), desc.typeName).toBeDefined();
  });

  for (const desc of messages) {
    it(`read ${desc.typeName} exactly as the reflective path`, () => {
      fc.assert(
        fc.property(message(desc), (msg) => {
          const [tamed = null, ...others] = renderings(desc, msg);
          if (desc.typeName !== "google.protobuf.Timestamp") expect(validateJson(desc, tamed)).toEqual([]);
          for (const json of [tamed, ...others]) expectSameAsReflective(desc, json);
        }),
        fuzzSettings(200),
      );
    });
  }

  const others = [EncryptedReceiptSchema, HealthCheckResponseSchema, ErrorInfoSchema];
  for (const desc of others) {
    it(`read ${desc.typeName} (bytes, enums, maps) exactly as the reflective path`, () => {
      expect(compiledJsonReader(desc)).toBeDefined();
      fc.assert(
        fc.property(message(desc), (msg) => {
          for (const json of renderings(desc, msg)) expectSameAsReflective(desc, json);
        }),
        fuzzSettings(100),
      );
    });
  }

  it("read maps of messages with enums, known and unknown, as the reflective path", () => {
    const statuses = fc.dictionary(fc.string(), fc.constantFrom(0, 1, 2, 3, 7), { maxKeys: 4 });
    expect(compiledJsonReader(HealthListResponseSchema)).toBeDefined();
    fc.assert(
      fc.property(statuses, (init) => {
        const entries = Object.entries(init).map(([k, status]) => [k, { status: status as ServingStatus }]);
        const msg = create(HealthListResponseSchema, { statuses: Object.fromEntries(entries) });
        for (const json of renderings(HealthListResponseSchema, msg)) {
          expectSameAsReflective(HealthListResponseSchema, json);
        }
      }),
      fuzzSettings(100),
    );
  });
});

const body = {
  receipt: {
    receiptId: "r-1",
    merchantId: "m-bench",
    merchantName: "Corner Coffee",
    transactionId: "t-1",
    transactionDate: "2026-01-01T09:30:00Z",
    currency: "EUR",
    recipientHashedPan: "ab".repeat(32),
    merchantCity: "Lisbon",
    paymentMethod: "card",
    cardLast4: "4242",
    cardBrand: "visa",
    items: [
      { lineItemId: "1", name: "Flat white", quantity: 2, unitPrice: 350, totalPrice: 700 },
      {
        lineItemId: "2",
        name: "Croissant",
        quantity: 1,
        unitPrice: 250,
        totalPrice: 250,
        taxes: [{ name: "VAT", rate: 0.23, amount: 47 }],
      },
    ],
    totalAmount: 950,
  },
};

function receiptWith(fields: JsonObject): JsonValue {
  return { receipt: { ...body.receipt, ...fields } };
}

describe("compiled REST JSON readers on hand-written bodies", () => {
  it("read a typical receipt through the compiled reader, 64-bit values as bigint", () => {
    const compiled = compiledJsonReader(EncryptReceiptRequestSchema);
    const decoded = compiled?.(body);
    expect(decoded).toStrictEqual(messageFromJsonReflective(EncryptReceiptRequestSchema, body));
    expect(decoded?.$typeName).toBe("receipts.v1.EncryptReceiptRequest");
    expect(decoded?.receipt?.$typeName).toBe("receipts.v1.Receipt");
    expect(decoded?.receipt?.totalAmount).toBe(950n);
    expect(decoded?.receipt?.subtotal).toBeUndefined();
    expect("subtotal" in (decoded?.receipt ?? {})).toBe(false);
    expect(decoded?.receipt?.version).toBe("");
    expect(decoded?.receipt?.items[1]?.taxes[0]).toStrictEqual({
      $typeName: "receipts.v1.Tax",
      name: "VAT",
      rate: 0.23,
      amount: 47n,
    });
    expect(decodeJson(EncryptReceiptRequestSchema, body)).toStrictEqual(decoded);
  });

  it("read timestamps with offsets and fractional seconds as fromJson does", () => {
    const stamps = [
      "2026-01-01T09:30:00Z",
      "2026-01-01T09:30:00.5Z",
      "2026-01-01T09:30:00.123456789Z",
      "2026-01-01T09:30:00.000001+05:30",
      "2026-01-01T00:30:00-08:00",
      "2026-01-01T00:30:00-00:00",
      "2026-01-01T00:30:00+23:59",
      "2024-02-29T12:00:00Z",
      "1970-01-01T00:00:00Z",
      "1969-12-31T23:59:59.9-01:00",
      "0001-01-01T00:00:00Z",
      "0001-01-01T00:59:00+00:59",
      "9999-12-31T23:59:59.999999999Z",
      "0001-01-01T00:00:00+00:01",
      "9999-12-31T23:59:59-00:01",
      "0000-06-01T00:00:00Z",
      "2026-02-30T00:00:00Z",
      "2025-02-29T00:00:00Z",
      "2026-01-01T24:00:00Z",
      "2026-01-01T23:60:00Z",
      "2026-01-01T00:00:00+24:00",
      "2026-13-01T00:00:00Z",
      "2026-01-01T09:30:00.Z",
      "2026-01-01T09:30:00.1234567890Z",
      "2026-01-01 09:30:00Z",
      "2026-01-01T09:30:00",
      // Year 0000 at an offset that puts the instant inside the Timestamp range: REST refuses year 0.
      "0000-12-31T01:00:00-23:00",
    ];
    for (const stamp of stamps)
      expectSameAsReflective(EncryptReceiptRequestSchema, receiptWith({ transactionDate: stamp }));
    const decoded = messageFromJson(
      EncryptReceiptRequestSchema,
      receiptWith({ transactionDate: stamps[3] ?? "" }),
    );
    expect(decoded.receipt?.transactionDate).toStrictEqual({
      $typeName: "google.protobuf.Timestamp",
      seconds: 1767240000n,
      nanos: 1000,
    });
  });

  it("read any RFC 3339 shaped timestamp as fromJson does", () => {
    const two = (max: number) => fc.integer({ min: 0, max }).map((n) => String(n).padStart(2, "0"));
    const stamp = fc
      .tuple(
        fc.integer({ min: 0, max: 9999 }).map((n) => String(n).padStart(4, "0")),
        two(13),
        two(32),
        two(24),
        two(60),
        two(60),
        fc.option(fc.stringMatching(/^[0-9]{1,9}$/), { nil: undefined }),
        fc.option(fc.tuple(fc.constantFrom("+", "-"), two(24), two(60)), { nil: undefined }),
      )
      .map(([y, mo, d, h, mi, s, fraction, offset]) => {
        const zone = offset === undefined ? "Z" : `${offset[0]}${offset[1]}:${offset[2]}`;
        return `${y}-${mo}-${d}T${h}:${mi}:${s}${fraction === undefined ? "" : `.${fraction}`}${zone}`;
      });
    fc.assert(
      fc.property(stamp, (transactionDate) => {
        expectSameAsReflective(EncryptReceiptRequestSchema, receiptWith({ transactionDate }));
      }),
      fuzzSettings(500),
    );
  });

  it("leave fields given as null unset or at their default", () => {
    const json = receiptWith({
      version: null,
      transactionDate: null,
      merchantCity: null,
      totalAmount: null,
      items: [{ lineItemId: "1", quantity: null, category: null, taxes: null }],
    });
    expectSameAsReflective(EncryptReceiptRequestSchema, json);
    const receipt = messageFromJson(EncryptReceiptRequestSchema, json).receipt;
    expect(receipt?.version).toBe("");
    expect(receipt !== undefined && "transactionDate" in receipt).toBe(false);
    expect(receipt !== undefined && "merchantCity" in receipt).toBe(false);
    expect(receipt?.items[0]?.quantity).toBe(0n);
    expect(receipt?.items[0]?.taxes).toEqual([]);
    expectSameAsReflective(EncryptReceiptRequestSchema, { receipt: null });
    expectSameAsReflective(EncryptReceiptRequestSchema, {});
  });

  it("read empty lists and nested items with taxes", () => {
    expectSameAsReflective(EncryptReceiptRequestSchema, receiptWith({ items: [] }));
    expectSameAsReflective(EncryptReceiptRequestSchema, receiptWith({ items: [{ taxes: [] }, {}] }));
    const taxes = [
      { name: "VAT", rate: 0.19, amount: 56 },
      { name: "city", rate: 0, amount: -3 },
    ];
    const json = receiptWith({ items: [{ lineItemId: "a", unitPrice: 350, taxes }, { taxes: [{}] }] });
    expectSameAsReflective(EncryptReceiptRequestSchema, json);
    const items = messageFromJson(EncryptReceiptRequestSchema, json).receipt?.items;
    expect(items?.[0]?.taxes.map((t) => t.amount)).toEqual([56n, -3n]);
    expect(items?.[1]?.taxes[0]).toStrictEqual({
      $typeName: "receipts.v1.Tax",
      name: "",
      rate: 0,
      amount: 0n,
    });
  });

  it("accept proto names as fromJson does, and reject a field set under both names", () => {
    const json = {
      receipt: { receipt_id: "r", transaction_date: "2026-01-01T09:30:00Z", items: [{ unit_price: 1 }] },
    };
    expectSameAsReflective(EncryptReceiptRequestSchema, json);
    expect(messageFromJson(EncryptReceiptRequestSchema, json).receipt?.items[0]?.unitPrice).toBe(1n);
    expectSameAsReflective(EncryptReceiptRequestSchema, receiptWith({ receipt_id: "again" }));
    expectSameAsReflective(EncryptReceiptRequestSchema, receiptWith({ card_last4: null }));
    expect(
      errorOf(() => messageFromJson(EncryptReceiptRequestSchema, receiptWith({ receipt_id: "x" }))),
    ).toMatch(/set multiple times/);
  });

  it("throw what fromJson throws for bodies the REST rules reject", () => {
    const bodies: JsonValue[] = [
      [],
      "receipt",
      { receipt: [] },
      { unknown: 1 },
      receiptWith({ unknown: 1 }),
      receiptWith({ totalAmount: "950" }),
      receiptWith({ totalAmount: Number.MAX_SAFE_INTEGER + 2 }),
      receiptWith({ totalAmount: 1.5 }),
      receiptWith({ currency: 7 }),
      receiptWith({ currency: "\ud800" }),
      receiptWith({ mockItems: "true" }),
      receiptWith({ items: [null] }),
      receiptWith({ items: {} }),
      receiptWith({ transactionDate: 1767259800 }),
      JSON.parse('{"receipt":{"__proto__":{"receiptId":"r"}}}'),
    ];
    for (const json of bodies) expectSameAsReflective(EncryptReceiptRequestSchema, json);
  });

  it("read enums by name and number, and string-keyed maps", () => {
    for (const status of ["SERVING", 2, 7, null, "serving", 1.5, 2 ** 31]) {
      expectSameAsReflective(HealthCheckResponseSchema, { status });
    }
    expect(compiledJsonReader(HealthCheckResponseSchema)?.({ status: "NOT_SERVING" })?.status).toBe(2);
    const info = { reason: "r", domain: "d", metadata: { a: "1", "": "2" } };
    expectSameAsReflective(ErrorInfoSchema, info);
    expect(compiledJsonReader(ErrorInfoSchema)?.(info)?.metadata).toEqual(info.metadata);
    // fromJson takes any key; the REST check refuses these, so the compiled reader gives up on them.
    for (const key of ["constructor", "prototype", "__proto__"]) {
      const risky = JSON.parse(`{"metadata":{"${key}":"3"}}`) as JsonValue;
      expectSameAsReflective(ErrorInfoSchema, risky);
      expect(errorOf(() => compiledJsonReader(ErrorInfoSchema)?.(risky))).toBeDefined();
    }
    for (const metadata of [{ a: null }, { a: 1 }, [], ["a"], "ab", null]) {
      expectSameAsReflective(ErrorInfoSchema, { metadata });
    }
    expectSameAsReflective(HealthListResponseSchema, { statuses: { a: { status: "SERVING" }, b: {} } });
  });

  it("give up on bytes that are not base64 and enum numbers the enum does not name", () => {
    for (const ciphertext of ["not base64!", "ab$=", "YWJj", "YWJ", "YW-_", ""]) {
      expectSameAsReflective(EncryptedReceiptSchema, { ciphertext });
    }
    expect(errorOf(() => compiledJsonReader(EncryptedReceiptSchema)?.({ ciphertext: "ab$=" }))).toBeDefined();
    expect(errorOf(() => compiledJsonReader(HealthCheckResponseSchema)?.({ status: 7 }))).toBeDefined();
    expect(compiledJsonReader(HealthCheckResponseSchema)?.({ status: 2 })?.status).toBe(2);
  });

  it("read own members only: an inherited enumerable key is not a field, as in fromJson", () => {
    const json = { version: "2" };
    Object.defineProperty(Object.prototype, "receiptId", {
      value: "inherited",
      enumerable: true,
      configurable: true,
      writable: true,
    });
    try {
      expect(errorOf(() => compiledJsonReader(ReceiptSchema)?.(json))).toBeDefined();
      expect(messageFromJson(ReceiptSchema, json)).toStrictEqual(
        messageFromJsonReflective(ReceiptSchema, json),
      );
      expect(Object.hasOwn(messageFromJson(ReceiptSchema, json), "receiptId")).toBe(true);
      expect(messageFromJson(ReceiptSchema, json).receiptId).toBe("");
    } finally {
      delete (Object.prototype as Record<string, unknown>).receiptId;
    }
  });

  it("leave messages with oneofs to the reflective path", () => {
    expect(compiledJsonReader(HttpRuleSchema)).toBeUndefined();
    expectSameAsReflective(HttpRuleSchema, { selector: "a", get: "/v1/x", body: "*" });
    expectSameAsReflective(HttpRuleSchema, { get: "/v1/x", post: "/v1/y" });
  });
});
