import {
  type DescField,
  type DescMessage,
  type MessageShape,
  ScalarType,
  toBinary,
} from "@bufbuild/protobuf";
import { WireType } from "@bufbuild/protobuf/wire";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { perMessageType } from "./per-message-type.js";

/**
 * Protobuf binary of the messages the gRPC fast path answers with, from a writer compiled once per
 * message type. `toBinary` looks every field up through reflection and builds the output from a chunk
 * per string and a fork per nested message; on a receipt answer that was the largest single cost of a
 * gRPC call after the cryptography. The compiled writer writes into one reused buffer, in the same
 * order (field number) and with the same presence rules, so the bytes are `toBinary`'s.
 *
 * It compiles the field kinds the service's messages use: strings, bytes, bools, int32, int64,
 * doubles, enums, nested and repeated messages. A message type with anything else (maps, oneofs,
 * packed or unpacked scalar lists, other integer types, proto2 groups and required fields) is left to
 * `toBinary`, and so is a message carrying unknown fields or a value of an unexpected JavaScript type
 * (`toBinary` then also gives the error such a value deserves).
 */
export function messageToBinary<Desc extends DescMessage>(
  schema: Desc,
  message: MessageShape<Desc>,
): Uint8Array {
  const write = writerFor(schema);
  if (write !== undefined) {
    out.pos = 0;
    try {
      write(message as unknown as Fields);
      return Uint8Array.prototype.slice.call(out.buf, 0, out.pos);
    } catch (err) {
      if (err !== FALL_BACK) throw err;
    } finally {
      // A buffer grown for one large answer is not kept.
      if (out.buf.length > MAX_KEPT_BYTES) out.buf = Buffer.allocUnsafeSlow(INITIAL_BYTES);
    }
  }
  return toBinary(schema, message);
}

/** Whether `desc` has a compiled writer (tests: no message type of ours should silently fall back). */
export function hasCompiledWriter(desc: DescMessage): boolean {
  return writerFor(desc) !== undefined;
}

/** A message's own properties, read by field `localName`. */
type Fields = Record<string, unknown>;
type Writer = (message: Fields) => void;

/** Thrown by a compiled writer that meets something it was not compiled for. */
const FALL_BACK = Symbol("fall back to toBinary");

const INITIAL_BYTES = 16 * 1024;
const MAX_KEPT_BYTES = 1024 * 1024;

/** The output buffer all writers share (calls are synchronous); it grows and is reused. */
const out = { buf: Buffer.allocUnsafeSlow(INITIAL_BYTES), pos: 0 };

/** The compiled writer of a message type, or undefined when `toBinary` handles the type. */
const writerFor = perMessageType(compile);

const MIN_INT64 = -(2n ** 63n);
const MAX_INT64 = 2n ** 63n - 1n;
const MAX_UINT32 = 0xffff_ffffn;

function compile(desc: DescMessage): Writer | undefined {
  if (desc.oneofs.length > 0) return undefined;
  const fields: ((m: Fields) => void)[] = [];
  for (const field of [...desc.fields].sort((a, b) => a.number - b.number)) {
    const write = fieldWriter(field);
    if (write === undefined) return undefined;
    fields.push(write);
  }
  return (message) => {
    if (message.$unknown !== undefined && (message.$unknown as unknown[]).length > 0) throw FALL_BACK;
    for (const write of fields) write(message);
  };
}

function fieldWriter(field: DescField): ((m: Fields) => void) | undefined {
  const { localName, number } = field;
  if (field.presence === FeatureSet_FieldPresence.LEGACY_REQUIRED) return undefined;
  const explicit = field.presence !== FeatureSet_FieldPresence.IMPLICIT;
  switch (field.fieldKind) {
    case "scalar":
    case "enum": {
      // An enum is written as its int32 number; its zero is its first value.
      const value = scalarWriter(field.fieldKind === "scalar" ? field.scalar : ScalarType.INT32, number);
      const isZero =
        field.fieldKind === "scalar" ? zeroTest(field.scalar) : enumZeroTest(field.enum.values[0]?.number);
      if (value === undefined || isZero === undefined) return undefined;
      if (explicit) {
        return (m) => {
          const v = m[localName];
          if (v !== undefined && Object.hasOwn(m, localName)) value(v);
        };
      }
      return (m) => {
        const v = m[localName];
        if (!isZero(v)) value(v);
      };
    }
    case "message": {
      if (field.delimitedEncoding) return undefined;
      const nested = field.message;
      return (m) => {
        const v = m[localName];
        if (v !== undefined && Object.hasOwn(m, localName)) messageField(number, nested, v);
      };
    }
    case "list": {
      if (field.listKind !== "message" || field.delimitedEncoding) return undefined;
      const nested = field.message;
      return (m) => {
        const list = m[localName];
        if (!Array.isArray(list)) throw FALL_BACK;
        for (const item of list) messageField(number, nested, item);
      };
    }
    case "map":
      return undefined;
  }
}

/** Writes `value` as the length-delimited field `number` holding a `desc` message. */
function messageField(number: number, desc: DescMessage, value: unknown): void {
  const write = writerFor(desc);
  if (write === undefined || typeof value !== "object" || value === null) throw FALL_BACK;
  tag(number, WireType.LengthDelimited);
  const start = reserveLength();
  write(value as Fields);
  endLength(start);
}

function enumZeroTest(zero: number | undefined): ((value: unknown) => boolean) | undefined {
  return zero === undefined ? undefined : (v) => v === zero;
}

function zeroTest(type: ScalarType): (value: unknown) => boolean {
  switch (type) {
    case ScalarType.BOOL:
      return (v) => v === false;
    case ScalarType.STRING:
      return (v) => v === "";
    case ScalarType.BYTES:
      return (v) => v instanceof Uint8Array && v.byteLength === 0;
    case ScalarType.DOUBLE:
      return (v) => Object.is(v, 0);
    default:
      return (v) => v === 0 || v === 0n;
  }
}

function scalarWriter(type: ScalarType, number: number): ((value: unknown) => void) | undefined {
  switch (type) {
    case ScalarType.STRING:
      return (v) => {
        if (typeof v !== "string") throw FALL_BACK;
        tag(number, WireType.LengthDelimited);
        const start = reserveLength();
        ensure(v.length * 3);
        out.pos += out.buf.write(v, out.pos, "utf8");
        endLength(start);
      };
    case ScalarType.BYTES:
      return (v) => {
        if (!(v instanceof Uint8Array)) throw FALL_BACK;
        tag(number, WireType.LengthDelimited);
        varint32(v.byteLength);
        ensure(v.byteLength);
        out.buf.set(v, out.pos);
        out.pos += v.byteLength;
      };
    case ScalarType.BOOL:
      return (v) => {
        if (typeof v !== "boolean") throw FALL_BACK;
        tag(number, WireType.Varint);
        ensure(1);
        out.buf[out.pos++] = v ? 1 : 0;
      };
    case ScalarType.INT32:
      return (v) => {
        if (typeof v !== "number" || !Number.isInteger(v) || v < -0x80000000 || v > 0x7fffffff)
          throw FALL_BACK;
        tag(number, WireType.Varint);
        if (v >= 0) varint32(v);
        else varint64(BigInt(v));
      };
    case ScalarType.INT64:
      return (v) => {
        if (typeof v !== "bigint" || v < MIN_INT64 || v > MAX_INT64) throw FALL_BACK;
        tag(number, WireType.Varint);
        if (v >= 0n && v <= MAX_UINT32) varint32(Number(v));
        else varint64(v);
      };
    case ScalarType.DOUBLE:
      return (v) => {
        if (typeof v !== "number") throw FALL_BACK;
        tag(number, WireType.Bit64);
        ensure(8);
        out.pos = out.buf.writeDoubleLE(v, out.pos);
      };
    default:
      return undefined;
  }
}

function ensure(bytes: number): void {
  if (out.pos + bytes <= out.buf.length) return;
  const bigger = Buffer.allocUnsafeSlow(Math.max(out.buf.length * 2, out.pos + bytes));
  out.buf.copy(bigger, 0, 0, out.pos);
  out.buf = bigger;
}

function tag(number: number, wire: WireType): void {
  varint32((number << 3) | wire);
}

/** An unsigned integer below 2^32 as a varint. */
function varint32(value: number): void {
  ensure(5);
  let v = value >>> 0;
  while (v > 0x7f) {
    out.buf[out.pos++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  out.buf[out.pos++] = v;
}

/** A 64-bit integer as a varint of its two's complement (negative values take ten bytes). */
function varint64(value: bigint): void {
  ensure(10);
  let v = BigInt.asUintN(64, value);
  while (v > 0x7fn) {
    out.buf[out.pos++] = Number(v & 0x7fn) | 0x80;
    v >>= 7n;
  }
  out.buf[out.pos++] = Number(v);
}

/** Leaves one byte for the length of what follows (most nested values are under 128 bytes). */
function reserveLength(): number {
  ensure(1);
  return out.pos++;
}

/** Writes the length of everything after `start`, moving it along when the varint needs more than a byte. */
function endLength(start: number): void {
  const length = out.pos - start - 1;
  if (length < 0x80) {
    out.buf[start] = length;
    return;
  }
  let extra = 0;
  for (let v = length >>> 7; v > 0; v >>>= 7) extra++;
  ensure(extra);
  out.buf.copy(out.buf, start + 1 + extra, start + 1, out.pos);
  const end = out.pos + extra;
  out.pos = start;
  varint32(length);
  out.pos = end;
}
