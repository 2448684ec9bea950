import { generateKeyPairSync, type KeyObject } from "node:crypto";
import { HOSTILE_PRIVATE_KEYS, HOSTILE_PUBLIC_KEYS, VALID_KEYS } from "../support/hostile-keys.js";

/**
 * Hostile inputs, as data: whole bodies that are not what a route expects, values of the wrong type
 * or shape for a field, and keys that are not RSA-2048 public or private keys. The REST and Connect
 * tests apply them to every route and field; each must be refused with a 4xx, never a 5xx or a hang.
 */

/** A JSON value or a raw body (bytes or text sent exactly as given). */
export type Hostile = { label: string; value: unknown } | { label: string; raw: string | Uint8Array };

/** Nested arrays `depth` levels deep, as JSON text (JSON.stringify of the value would recurse). */
export function deepArrays(depth: number): string {
  return `${"[".repeat(depth)}${"]".repeat(depth)}`;
}

/** Nested objects `{"a":{"a":...}}` `depth` levels deep, as JSON text. */
export function deepObjects(depth: number): string {
  return `${'{"a":'.repeat(depth)}1${"}".repeat(depth)}`;
}

/** Whole request bodies that no route accepts. `valid` is the route's valid body (JSON text). */
export function hostileBodies(valid: string): Hostile[] {
  const utf8 = (bytes: number[]) => {
    // The valid body with invalid UTF-8 bytes at the start of its first string value.
    const text = valid.includes('":"') ? valid : '{"field":"value"}';
    const at = text.indexOf('":"') + 3;
    return new Uint8Array([...Buffer.from(text.slice(0, at)), ...bytes, ...Buffer.from(text.slice(at))]);
  };
  const merged = (extra: string) => `${valid.slice(0, -1)}${valid.length > 2 ? "," : ""}${extra}}`;
  return [
    { label: "truncated JSON", raw: valid.slice(0, -1) },
    { label: "not JSON", raw: "receiptId=1&merchantId=2" },
    { label: "JSON then garbage", raw: `${valid}garbage` },
    { label: "NaN", raw: "NaN" },
    { label: "single quotes", raw: "{'a': 1}" },
    { label: "NUL byte", raw: "\u0000" },
    { label: "null", value: null },
    { label: "array", value: [] },
    { label: "array of the body", raw: `[${valid}]` },
    { label: "string", value: "body" },
    { label: "number", value: 42 },
    { label: "boolean", value: true },
    { label: "1e400", raw: "1e400" },
    { label: "invalid UTF-8 (C3 28)", raw: utf8([0xc3, 0x28]) },
    { label: "invalid UTF-8 (FF)", raw: utf8([0xff, 0xfe]) },
    { label: "overlong UTF-8 '/'", raw: utf8([0xc0, 0xaf]) },
    { label: "UTF-8 encoded surrogate", raw: utf8([0xed, 0xa0, 0x80]) },
    { label: "__proto__ key", raw: merged('"__proto__":{"role":"admin"}') },
    { label: "constructor key", raw: merged('"constructor":{"prototype":{"role":"admin"}}') },
    { label: "prototype key", raw: merged('"prototype":1') },
    { label: "unknown field", raw: merged('"unknownField":1') },
    { label: "Mongo operator field", raw: merged('"$where":"sleep(1000)"') },
    { label: "deeply nested arrays", raw: merged(`"nested":${deepArrays(50_000)}`) },
    { label: "deeply nested objects", raw: merged(`"nested":${deepObjects(20_000)}`) },
    { label: "huge array", raw: merged(`"list":[${"0,".repeat(200_000)}0]`) },
  ];
}

/** Values of the wrong type or shape for a field whose valid value is `valid`. */
export function hostileValues(valid: unknown): Hostile[] {
  const ops: Hostile[] = [
    { label: "$ne null", value: { $ne: null } },
    { label: "$gt empty", value: { $gt: "" } },
    { label: "$regex", value: { $regex: ".*" } },
    { label: "$in", value: { $in: ["a", "b"] } },
  ];
  const shapes: Hostile[] = [
    { label: "array", value: [valid] },
    { label: "object", value: { value: valid } },
    { label: "__proto__ object", raw: '{"__proto__":{"x":1}}' },
    { label: "deep arrays", raw: deepArrays(10_000) },
  ];
  if (typeof valid === "string") {
    return [
      ...ops,
      ...shapes,
      { label: "number", value: 123 },
      { label: "boolean", value: true },
      { label: "huge string", value: "x".repeat(900_000) },
      { label: "control characters", value: `${valid}\u0000\u001b` },
      { label: "lone surrogate", value: `${valid}\ud800` },
    ];
  }
  if (typeof valid === "number") {
    return [
      ...ops,
      ...shapes,
      { label: "numeric string", value: String(valid) },
      { label: "boolean", value: false },
      { label: "fraction", value: valid + 0.5 },
      { label: "negative", value: -1 },
      { label: "unsafe integer", value: 2 ** 53 + 2 },
      { label: "huge exponent", raw: "1e400" },
      { label: "huge digit string", value: "9".repeat(40) },
    ];
  }
  if (Array.isArray(valid)) {
    return [
      ...ops,
      { label: "string", value: "x" },
      { label: "object", value: { 0: valid[0] } },
      { label: "array of nulls", value: [null] },
      { label: "array of numbers", value: [1, 2] },
      { label: "10,000 entries", value: Array.from({ length: 10_000 }, () => valid[0]) },
    ];
  }
  return [...ops, { label: "string", value: "x" }, { label: "number", value: 1 }];
}

/** Receipt field values that are well-typed JSON but break a receipt rule (src/domain/receipt-rules.ts). */
export const RECEIPT_RULE_BREAKERS: ReadonlyArray<readonly [string, unknown]> = [
  ["receiptId", "a/b"],
  ["receiptId", "../etc"],
  ["receiptId", "r".repeat(129)],
  ["receiptId", "\u202e"],
  ["merchantId", "m\nx"],
  ["merchantName", "   "],
  ["merchantName", "n".repeat(201)],
  ["transactionId", ""],
  ["transactionDate", "2026-13-01T00:00:00Z"],
  ["transactionDate", "2026-02-30T00:00:00Z"],
  ["transactionDate", "0000-01-01T00:00:00Z"],
  ["transactionDate", "1999-12-31T23:59:59Z"],
  ["transactionDate", "9999-12-31T23:59:59Z"],
  ["transactionDate", "+275760-09-13T00:00:00Z"],
  ["transactionDate", "2026-01-01T24:00:00Z"],
  ["transactionDate", "2026-01-01T00:00:60Z"],
  ["transactionDate", "2026-01-01T00:00:00+24:00"],
  ["transactionDate", "2026-01-01"],
  ["transactionDate", 1_767_225_600],
  ["currency", "EURO"],
  ["currency", "XXX"],
  ["currency", "€"],
  ["recipientHashedPan", "g".repeat(64)],
  ["recipientHashedPan", "a".repeat(63)],
  ["recipientHashedPan", `${"a".repeat(64)}\n`],
  ["totalAmount", -1],
  ["totalAmount", 2 ** 53],
  ["items", [{}]],
  ["items", [{ lineItemId: "1", name: "x", quantity: 0, unitPrice: 1, totalPrice: 1 }]],
  ["items", [{ lineItemId: "1", name: "x", quantity: 1_000_001, unitPrice: 1, totalPrice: 1 }]],
  [
    "items",
    [{ lineItemId: "1", name: "x", quantity: 1, unitPrice: 1, totalPrice: 1, taxes: [{ rate: 1.5 }] }],
  ],
  ["items", Array.from({ length: 501 }, (_, i) => ({ lineItemId: `${i}`, name: "x", quantity: 1 }))],
  ["items", [1, 2]],
  ["merchantContactEmail", "not-an-address"],
  ["merchantContactEmail", `${"l".repeat(65)}@example.com`],
  ["transactionTimezone", "Mars/Olympus_Mons"],
  ["transactionTimezone", "../../etc/passwd"],
  ["cardLast4", "12a4"],
  ["version", "1.0.0.0"],
  ["mockItems", "true"],
  ["keyId", "00000000-0000-4000-8000-000000000000"],
  ["decryptedAt", "2026-01-01T00:00:00Z"],
];

/**
 * Strings that are not a public key of a suite (RSA-2048+ with e = 65537, or EC P-256): the hostile
 * key corpus (test/support/hostile-keys.ts), as `[label, key]`.
 */
export function hostileKeys(): Array<readonly [string, string]> {
  return HOSTILE_PUBLIC_KEYS.map((key) => [key.label, key.text] as const);
}

/**
 * Private keys that must be refused on decrypt: the corpus's (each `invalid_request`), and two valid
 * keys that are not the grant's (`forbidden`).
 */
export function hostilePrivateKeys(): Array<readonly [string, string]> {
  const der = (key: KeyObject) => key.export({ type: "pkcs8", format: "der" }).toString("base64");
  return [
    ...HOSTILE_PRIVATE_KEYS.map((key) => [key.label, key.text] as const),
    [
      "a valid EC P-256 key that is not the grant's",
      der(generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey),
    ],
    ["a valid RSA-2048 key that is not the grant's", VALID_KEYS.rsaPkcs8],
  ];
}
