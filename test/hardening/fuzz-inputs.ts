import { create, type DescMethod, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { MAX_MONEY } from "../../src/domain/limits.js";
import { hashPan } from "../support/harness.js";
import {
  HOSTILE_PRIVATE_KEYS,
  HOSTILE_PUBLIC_KEYS,
  HOSTILE_SIGNING_KEYS,
  VALID_KEYS,
} from "../support/hostile-keys.js";

/**
 * The generators of the fuzz run (fuzz.test.ts): hostile JSON, receipts made of valid and invalid
 * parts, protobuf payloads, operator API requests, and keys drawn from the hostile key corpus or
 * made by damaging valid and hostile keys at random.
 */

/** Any JSON value, nested a few levels: the raw material of hostile bodies and fields. */
export const anyJson = fc.jsonValue({ maxDepth: 3 });

/** Strings of any code points, including control characters and astral ones. */
export const anyText = fc.oneof(fc.string({ unit: "binary", maxLength: 40 }), fc.string({ maxLength: 40 }));

/** `good` nine times in ten, `bad` otherwise: enough valid input to reach the code behind the validator. */
export function mostly<T>(good: fc.Arbitrary<T>, bad: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> {
  return fc.oneof({ arbitrary: good, weight: 9 }, { arbitrary: bad, weight: 1 });
}

/** Money as a client might send it: valid, negative, huge, fractional or not a number at all. */
const money = mostly(
  fc.integer({ min: 1, max: 100_000 }),
  fc.oneof(
    fc.integer({ min: -1_000, max: 0 }),
    fc.constant(MAX_MONEY),
    fc.constant(MAX_MONEY + 2),
    fc.double({ noDefaultInfinity: true, noNaN: true }),
    fc.string({ maxLength: 6 }),
  ),
);

/** A line item, mostly valid; any field may be wrong. */
const itemArb = fc.record(
  {
    lineItemId: mostly(fc.uuid(), anyText),
    name: mostly(fc.constantFrom("Tea", "Bread", "Ümlaut Ünits", "寿司"), anyText),
    quantity: mostly(fc.integer({ min: 1, max: 20 }), money),
    unitPrice: money,
    totalPrice: money,
    category: anyText,
    taxes: fc.array(
      fc.record({
        name: mostly(fc.constant("VAT"), anyText),
        rate: mostly(fc.double({ min: 0, max: 1, noNaN: true }), fc.double()),
        amount: money,
      }),
      { maxLength: 2 },
    ),
  },
  { requiredKeys: ["lineItemId", "name", "quantity"] },
);

/** A receipt whose every field may be valid, missing, or wrong: sums may overflow, dates may not exist. */
export const receiptArb = fc
  .tuple(
    fc.record({
      receiptId: mostly(fc.uuid(), anyText),
      merchantId: mostly(fc.constant("merchant-001"), anyText),
      merchantName: mostly(fc.constantFrom("Fuzz Café", "Zeichen & Söhne"), anyText),
      transactionId: mostly(fc.uuid(), anyText),
      transactionDate: mostly(
        fc
          .date({ min: new Date("2000-01-01"), max: new Date("2026-01-01"), noInvalidDate: true })
          .map((d) => d.toISOString()),
        anyText,
      ),
      currency: mostly(fc.constantFrom("EUR", "usd", "JPY"), fc.constantFrom("XXX", "", "EURO")),
      recipientHashedPan: mostly(
        fc.constant(hashPan("4111111111111111")),
        fc.oneof(fc.stringMatching(/^[0-9a-f]{64}$/), anyText),
      ),
    }),
    fc.record(
      {
        items: fc.array(itemArb, { maxLength: 6 }),
        totalAmount: money,
        subtotal: money,
        amount: money,
        mockItems: fc.boolean(),
        cardNonce: fc.constantFrom("cnon:card-nonce-ok", "cnon:card-nonce-declined", "nonce"),
        transactionTimezone: fc.constantFrom("Europe/Berlin", "Etc/GMT+14", "Mars/Base", "+05:00"),
      },
      { requiredKeys: [] },
    ),
    // Now and then a wallet tap's PAR instead of the hashed PAN, or (refused) beside it.
    fc.oneof(
      { arbitrary: fc.constant(null), weight: 7 },
      {
        arbitrary: fc.record({
          par: mostly(fc.stringMatching(/^[0-9A-Z]{29}$/), anyText),
          beside: fc.boolean(),
        }),
        weight: 3,
      },
    ),
  )
  .map(([required, optional, tap]) => {
    if (tap === null) return { ...required, ...optional };
    const { recipientHashedPan, ...rest } = required;
    const card = tap.beside ? { recipientHashedPan, recipientPar: tap.par } : { recipientPar: tap.par };
    return { ...rest, ...card, ...optional };
  });

/** Which kind of key a field takes. */
export type KeyKind = "public" | "private" | "signing";

const CORPUS: Record<KeyKind, string[]> = {
  public: HOSTILE_PUBLIC_KEYS.map((k) => k.text),
  private: HOSTILE_PRIVATE_KEYS.map((k) => k.text),
  signing: HOSTILE_SIGNING_KEYS.map((k) => k.text),
};
const VALID: Record<KeyKind, string[]> = {
  public: [VALID_KEYS.p256Spki, VALID_KEYS.p256CompressedSpki, VALID_KEYS.rsaSpki],
  private: [VALID_KEYS.p256Pkcs8, VALID_KEYS.p256Pkcs8WithoutPoint, VALID_KEYS.rsaPkcs8],
  signing: [VALID_KEYS.ed25519Raw, VALID_KEYS.ed25519Spki],
};

/** The DER bytes of key text (PEM armour and whitespace dropped). */
function derOf(text: string): Buffer {
  return Buffer.from(text.includes("-----") ? text.replace(/-----[^-]+-----|\s/g, "") : text, "base64");
}

/** `der` with a few random bytes flipped, set, cut or inserted, as base64 or PEM. */
const damagedKey = (texts: string[]) =>
  fc
    .tuple(
      fc.constantFrom(...texts),
      fc.array(
        fc.record({ at: fc.nat(), kind: fc.constantFrom("flip", "set", "cut", "insert"), byte: fc.nat(255) }),
        { minLength: 1, maxLength: 3 },
      ),
      fc.boolean(),
    )
    .map(([text, edits, asPem]) => {
      let der = derOf(text);
      for (const { at, kind, byte } of edits) {
        const i = at % Math.max(1, der.length);
        if (kind === "flip") der[i] = (der[i] ?? 0) ^ (1 << (byte % 8));
        else if (kind === "set") der[i] = byte;
        else if (kind === "cut") der = Buffer.concat([der.subarray(0, i), der.subarray(i + 1)]);
        else der = Buffer.concat([der.subarray(0, i), Buffer.from([byte]), der.subarray(i)]);
      }
      const base64 = der.toString("base64");
      return asPem ? `-----BEGIN PUBLIC KEY-----\n${base64}\n-----END PUBLIC KEY-----` : base64;
    });

/**
 * A hostile key for a field of `kind`: an entry of the corpus, a valid or hostile key with random
 * damage, or random bytes. A damaged key may still be a valid key (a bit flipped inside an RSA
 * modulus), which the service may then accept: the property is never a server error.
 */
export function hostileKeyArb(kind: KeyKind): fc.Arbitrary<string> {
  return fc.oneof(
    { arbitrary: fc.constantFrom(...CORPUS[kind]), weight: 3 },
    { arbitrary: damagedKey([...VALID[kind], ...CORPUS[kind].filter((t) => t.length < 4_000)]), weight: 3 },
    { arbitrary: fc.uint8Array({ maxLength: 120 }).map((b) => Buffer.from(b).toString("base64")), weight: 1 },
  );
}

/** The key field of each RPC that takes one, and its kind. */
export const KEY_FIELDS: Readonly<Record<string, { field: "publicKey" | "privateKey"; kind: KeyKind }>> = {
  Register: { field: "publicKey", kind: "public" },
  RegisterEscrowKey: { field: "publicKey", kind: "public" },
  RegisterSigningKey: { field: "publicKey", kind: "signing" },
  DecryptPayment: { field: "privateKey", kind: "private" },
  DecryptReceipt: { field: "privateKey", kind: "private" },
};

/**
 * A request payload for `method` as protobuf bytes: random bytes mostly, and for an RPC that takes
 * a key, a well-formed request (`valid`, its other fields) whose key is hostile, one time in three.
 */
export function rpcPayloadArb(
  method: DescMethod,
  valid: Record<string, unknown> | undefined,
): fc.Arbitrary<Uint8Array> {
  const random = fc.uint8Array({ maxLength: 300 });
  const key = KEY_FIELDS[method.name];
  if (key === undefined || valid === undefined) return random;
  const typed = hostileKeyArb(key.kind).map((text) =>
    toBinary(method.input, create(method.input, { ...valid, [key.field]: text } as never)),
  );
  return fc.oneof({ arbitrary: random, weight: 2 }, { arbitrary: typed, weight: 1 });
}

/** A gRPC method path no service has. */
const inventedMethodPath = fc
  .tuple(fc.stringMatching(/^[a-z][a-z0-9]{0,11}$/), fc.stringMatching(/^[A-Z][A-Za-z0-9]{0,11}$/))
  .map(([pkg, name]) => `/fuzz${pkg}.v1.Svc${name}/Call${name}`);

/** One gRPC or gRPC-Web call of the fuzz run. */
export interface RpcCall {
  path: string;
  role: "issuer" | "merchant";
  bytes: Uint8Array;
  /** The path names no method of the service: UNIMPLEMENTED is its right answer. */
  invented: boolean;
}

/**
 * A call: one of `rpcs` with the role that may call it and a payload for it ({@link rpcPayloadArb}),
 * or, one time in ten, a method path no service has (which must never become a metric label).
 */
export function rpcCallArb(
  rpcs: ReadonlyArray<readonly [DescMethod, "issuer" | "merchant"]>,
  validByRpc: Record<string, Record<string, unknown>>,
): fc.Arbitrary<RpcCall> {
  const known = fc.constantFrom(...rpcs).chain(([method, role]) =>
    rpcPayloadArb(method, validByRpc[method.name]).map((bytes) => ({
      path: `/${method.parent.typeName}/${method.name}`,
      role,
      bytes,
      invented: false,
    })),
  );
  const invented = fc
    .tuple(inventedMethodPath, fc.uint8Array({ maxLength: 50 }))
    .map(([path, bytes]) => ({ path, role: "issuer" as const, bytes, invented: true }));
  return fc.oneof({ arbitrary: known, weight: 9 }, { arbitrary: invented, weight: 1 });
}

/** The same as JSON text, for Connect: anything at all, or a hostile key in an otherwise valid request. */
export function connectBodyArb(
  method: DescMethod,
  valid: Record<string, unknown> | undefined,
): fc.Arbitrary<string> {
  const anything = fc.oneof(
    anyJson.map((v) => JSON.stringify(v)),
    anyText,
  );
  const key = KEY_FIELDS[method.name];
  if (key === undefined || valid === undefined) return anything;
  const typed = hostileKeyArb(key.kind).map((text) => JSON.stringify({ ...valid, [key.field]: text }));
  return fc.oneof({ arbitrary: anything, weight: 2 }, { arbitrary: typed, weight: 1 });
}

/** One request to the operator API: method, path, headers and body, each of them possibly hostile. */
export interface AdminRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string | undefined;
}

const segment = fc.oneof(
  fc.constantFrom(
    "bank-a",
    "shop-1",
    "merchant-001",
    "key_x",
    "%E0%A4%A",
    "..",
    "a b",
    "$ne",
    "x".repeat(200),
  ),
  fc.string({ unit: "binary", minLength: 1, maxLength: 20 }).map(encodeURIComponent),
);

const adminPath = fc.oneof(
  fc.constant("/admin/v1/api-keys"),
  segment.map((s) => `/admin/v1/api-keys/${s}`),
  segment.map((s) => `/admin/v1/issuers/${s}/bins`),
  segment.map((s) => `/admin/v1/merchants/${s}`),
  fc
    .dictionary(fc.constantFrom("tenant", "after", "limit", "pageToken", "x"), fc.string({ maxLength: 30 }), {
      maxKeys: 3,
    })
    .map((q) => `/admin/v1/audit?${new URLSearchParams(q)}`),
  fc.constant("/admin/v1/escrow"),
  segment.map((s) => `/admin/v1/${s}`),
);

const adminBody = fc.oneof(
  fc
    .record(
      {
        tenant: mostly(fc.constantFrom("bank-a", "shop-1", "bank-fuzz"), anyJson),
        role: mostly(fc.constantFrom("issuer", "merchant"), anyJson),
        tier: mostly(fc.constantFrom("sandbox", "standard", "enterprise"), anyJson),
        merchantIds: mostly(fc.array(fc.constantFrom("m-1", "m-2"), { maxLength: 3 }), anyJson),
        bins: mostly(fc.array(fc.stringMatching(/^[0-9]{6}([0-9]{2})?$/), { maxLength: 3 }), anyJson),
        name: anyText,
      },
      { requiredKeys: [] },
    )
    .map((body) => JSON.stringify(body)),
  anyJson.map((v) => JSON.stringify(v)),
  anyText,
  fc.constantFrom(
    '{"tenant":"a","tenant":"b","role":"issuer"}',
    "{",
    "[".repeat(5_000),
    "x".repeat(1_100_000),
  ),
);

/** An operator API request: the right token four times in five, else none, a wrong one or another scheme. */
export function adminRequestArb(token: string): fc.Arbitrary<AdminRequest> {
  return fc
    .record({
      method: fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH"),
      path: adminPath,
      type: fc.constantFrom(
        "application/json",
        "application/json; charset=utf-8",
        "text/plain",
        "",
        "application/x-www-form-urlencoded",
      ),
      auth: fc.oneof(
        { arbitrary: fc.constant(`Bearer ${token}`), weight: 8 },
        { arbitrary: fc.constantFrom("", `Bearer ${token}x`, `Basic ${token}`, "Bearer "), weight: 2 },
      ),
      body: adminBody,
    })
    .map(({ method, path, type, auth, body }) => ({
      method,
      path,
      headers: {
        ...(auth === "" ? {} : { authorization: auth }),
        ...(type === "" ? {} : { "content-type": type }),
      },
      body: method === "GET" ? undefined : body,
    }));
}

/** One change to a request body, as the REST mutation property draws it. */
export interface BodyChange {
  kind: "set" | "add" | "drop" | "replace" | "key";
  field: number | string;
  value: unknown;
}

/**
 * `body` (a copy of the route's `valid` body, changed in place) with one change applied: a field
 * (by index into `valid`'s fields, or by name) set, added or dropped, the whole body replaced, or
 * the route's key field, if it has one (`keyKind`), set to a hostile key of its kind.
 */
export function mutatedBody(
  valid: Record<string, unknown>,
  keyKind: KeyKind | undefined,
  body: unknown,
  change: BodyChange,
): unknown {
  if (change.kind === "replace") return change.value;
  if (typeof body !== "object" || body === null || Array.isArray(body)) return body;
  const record = body as Record<string, unknown>;
  if (change.kind === "key") {
    if (keyKind !== undefined)
      record[keyKind === "private" ? "privateKey" : "publicKey"] = (change.value as Record<KeyKind, string>)[
        keyKind
      ];
    return body;
  }
  const fields = Object.keys(valid);
  const field =
    typeof change.field === "number"
      ? (fields[change.field % Math.max(1, fields.length)] ?? "x")
      : change.field;
  if (change.kind === "drop") delete record[field];
  else record[field] = change.value;
  return body;
}
