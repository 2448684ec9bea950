import { create, type DescField, type DescMessage, type MessageShape, ScalarType } from "@bufbuild/protobuf";
import fc from "fast-check";
import { API_SERVICES as SERVICES } from "../../src/rpc/policy.js";

/**
 * Random messages of any descriptor, for tests that compare two ways of converting them: a random
 * subset of fields set to random values of their type (64-bit values beyond JavaScript's safe range,
 * NaN and infinities included), nested messages a few levels deep.
 */

const int64 = fc.oneof(
  fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }),
  fc.bigInt({ min: -(2n ** 53n), max: 2n ** 53n }),
);

/** What a message's string and bytes fields take their values from. */
interface Values {
  strings: fc.Arbitrary<string>;
  bytes: fc.Arbitrary<Uint8Array>;
}

function scalar(type: ScalarType, values: Values): fc.Arbitrary<unknown> {
  switch (type) {
    case ScalarType.STRING:
      return values.strings;
    case ScalarType.BOOL:
      return fc.boolean();
    case ScalarType.BYTES:
      return values.bytes;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return fc.oneof(
        fc.double(),
        fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY),
      );
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return int64;
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return fc.bigInt({ min: 0n, max: 2n ** 64n - 1n });
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return fc.integer({ min: 0, max: 4_294_967_295 });
    default:
      return fc.integer({ min: -2_147_483_648, max: 2_147_483_647 });
  }
}

/**
 * Strings for codec tests: short ASCII, any Unicode (unpaired surrogates included), long enough for
 * 2-byte lengths, and starting with U+FEFF (which a default `TextDecoder` would drop as a byte order mark).
 */
export const richStrings: fc.Arbitrary<string> = fc.oneof(
  fc.string(),
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.string({ minLength: 100, maxLength: 400 }),
  fc.string({ unit: "binary", maxLength: 20 }).map((text) => `\ufeff${text}`),
);

/**
 * A message of `desc` with a random subset of its fields set to random values; string fields take
 * their values from `strings` (default: short ASCII strings), bytes fields from `bytes` (default:
 * random arrays of up to 40 bytes).
 */
export function message(
  desc: DescMessage,
  depth = 0,
  strings: fc.Arbitrary<string> = fc.string(),
  bytes: fc.Arbitrary<Uint8Array> = fc.uint8Array({ maxLength: 40 }),
): fc.Arbitrary<MessageShape<DescMessage>> {
  return messageOf(desc, depth, { strings, bytes });
}

function messageOf(
  desc: DescMessage,
  depth: number,
  values: Values,
): fc.Arbitrary<MessageShape<DescMessage>> {
  if (desc.typeName === "google.protobuf.Timestamp") {
    return fc
      .record({
        seconds: fc.bigInt({ min: -62_135_596_800n, max: 253_402_300_799n }),
        nanos: fc.oneof(
          fc.constant(0),
          fc.integer({ min: 0, max: 999 }).map((n) => n * 1_000_000),
          fc.integer({ min: 0, max: 999_999_999 }),
        ),
      })
      .map((init) => create(desc, init));
  }
  const entries = desc.fields.map((field) => [field.localName, value(field, depth, values)] as const);
  return fc
    .record(Object.fromEntries(entries), { requiredKeys: [] })
    .map((init) => create(desc, init as never));
}

function value(field: DescField, depth: number, values: Values): fc.Arbitrary<unknown> {
  switch (field.fieldKind) {
    case "scalar":
      return scalar(field.scalar, values);
    case "enum":
      return fc.constantFrom(...field.enum.values.map((v) => v.number));
    case "message":
      return depth > 3 ? fc.constant(undefined) : messageOf(field.message, depth + 1, values);
    case "list": {
      const item =
        field.listKind === "scalar"
          ? scalar(field.scalar, values)
          : field.listKind === "enum"
            ? fc.constantFrom(...field.enum.values.map((v) => v.number))
            : messageOf(field.message, depth + 1, values);
      return depth > 3 ? fc.constant([]) : fc.array(item, { maxLength: 3 });
    }
    case "map":
      return fc.constant({});
  }
}

/** Every message reachable from the requests (`"input"`) or responses (`"output"`) of the services. */
export function reachableMessages(side: "input" | "output"): DescMessage[] {
  const seen = new Set<DescMessage>();
  const visit = (desc: DescMessage) => {
    if (seen.has(desc)) return;
    seen.add(desc);
    for (const f of desc.fields) {
      if (f.fieldKind === "message" || (f.fieldKind === "list" && f.listKind === "message")) visit(f.message);
    }
  };
  for (const service of SERVICES) for (const method of service.methods) visit(method[side]);
  return [...seen];
}
