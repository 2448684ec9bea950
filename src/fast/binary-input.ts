import { isUtf8 } from "node:buffer";
import {
  type DescField,
  type DescMessage,
  fromBinary,
  type MessageShape,
  ScalarType,
} from "@bufbuild/protobuf";
import { WireType } from "@bufbuild/protobuf/wire";
import { Edition, FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { perMessageType } from "./per-message-type.js";

/**
 * Protobuf binary requests of the gRPC fast path read by a reader compiled once per message type.
 * `fromBinary` finds every field by number through reflection and sets it through a reflective
 * wrapper; on a receipt request that was most of the cost of decoding. The compiled reader builds the
 * message `fromBinary` builds (the same zero message, the same values, bytes as views of the input)
 * for what well-formed requests of our messages contain: canonical varints, the wire type each field
 * is declared with, known field numbers, valid UTF-8, each nested message once.
 *
 * Anything else is read again by `fromBinary`, from the start: unknown fields (which it keeps),
 * a field with another wire type, a repeated occurrence of a message field (which it merges),
 * non-canonical varints, invalid UTF-8, truncated or malformed input. So the result, or
 * the error and its message, is always `fromBinary`'s. Message types with kinds the services do not
 * use (maps, oneofs, scalar lists, other integer types, groups) or outside proto3 are not compiled.
 */
export function messageFromBinary<Desc extends DescMessage>(schema: Desc, bytes: Buffer): MessageShape<Desc> {
  const read = readerFor(schema);
  if (read !== undefined) {
    input.buf = bytes;
    input.pos = 0;
    try {
      return read(bytes.length) as MessageShape<Desc>;
    } catch (err) {
      if (err !== FALL_BACK) throw err;
    } finally {
      input.buf = EMPTY;
    }
  }
  return fromBinary(schema, bytes);
}

/** Whether `desc` has a compiled reader (tests: no message type of ours should silently fall back). */
export function hasCompiledReader(desc: DescMessage): boolean {
  return readerFor(desc) !== undefined;
}

type Fields = Record<string, unknown>;
/** Reads a message whose encoding ends at `end` in the input. */
type Reader = (end: number) => Fields;
type FieldReader = (message: Fields, end: number) => void;

/** Thrown by a compiled reader that meets something it leaves to `fromBinary`. */
const FALL_BACK = Symbol("fall back to fromBinary");

const EMPTY: Buffer = Buffer.alloc(0);
/** The input being read (calls are synchronous, so one state serves them all). */
const input: { buf: Buffer; pos: number } = { buf: EMPTY, pos: 0 };

/** The compiled reader of a message type, or undefined when `fromBinary` handles the type. */
const readerFor = perMessageType(compile);

function compile(desc: DescMessage): Reader | undefined {
  // Messages of other editions may have default values kept on a prototype chain by create().
  if (desc.file.edition !== Edition.EDITION_PROTO3 || desc.oneofs.length > 0) return undefined;
  const zero = zeroFactory(desc);
  if (zero === undefined) return undefined;
  // Indexed by tag (field number and wire type).
  const byTag = new Map<number, FieldReader>();
  for (const field of desc.fields) {
    const read = fieldReader(field);
    if (read === undefined) return undefined;
    byTag.set((field.number << 3) | read.wire, read.read);
  }
  return (end) => {
    const message = zero();
    while (input.pos < end) {
      const read = byTag.get(varint32());
      if (read === undefined) throw FALL_BACK;
      read(message, end);
    }
    if (input.pos !== end) throw FALL_BACK;
    return message;
  };
}

/** A function making the zero message `create()` makes: `$typeName` and the implicit fields' zero values. */
function zeroFactory(desc: DescMessage): (() => Fields) | undefined {
  const defaults: [string, () => unknown][] = [];
  for (const field of desc.fields) {
    if (field.presence === FeatureSet_FieldPresence.LEGACY_REQUIRED) return undefined;
    if (field.presence !== FeatureSet_FieldPresence.IMPLICIT) continue;
    const zero = zeroOf(field);
    if (zero === undefined) return undefined;
    defaults.push([field.localName, zero]);
  }
  const typeName = desc.typeName;
  return () => {
    const message: Fields = { $typeName: typeName };
    for (const [name, zero] of defaults) message[name] = zero();
    return message;
  };
}

function zeroOf(field: DescField): (() => unknown) | undefined {
  switch (field.fieldKind) {
    case "list":
      return () => [];
    case "enum": {
      const first = field.enum.values[0]?.number;
      return first === undefined ? undefined : () => first;
    }
    case "scalar":
      switch (field.scalar) {
        case ScalarType.STRING:
          return () => "";
        case ScalarType.BOOL:
          return () => false;
        case ScalarType.BYTES:
          return () => new Uint8Array(0);
        case ScalarType.INT64:
          return () => 0n;
        case ScalarType.INT32:
        case ScalarType.DOUBLE:
          return () => 0;
        default:
          return undefined;
      }
    default:
      return undefined;
  }
}

function fieldReader(field: DescField): { wire: number; read: FieldReader } | undefined {
  const name = field.localName;
  switch (field.fieldKind) {
    case "scalar": {
      const scalar = scalarReader(field.scalar);
      if (scalar === undefined) return undefined;
      const { wire, read } = scalar;
      return {
        wire,
        read: (m, end) => {
          m[name] = read(end);
        },
      };
    }
    case "enum": {
      if (!field.enum.open) return undefined;
      return {
        wire: WireType.Varint,
        read: (m) => {
          m[name] = int32();
        },
      };
    }
    case "message": {
      if (field.delimitedEncoding) return undefined;
      const desc = field.message;
      return {
        wire: WireType.LengthDelimited,
        read: (m, end) => {
          // A second occurrence is merged into the first by fromBinary.
          if (m[name] !== undefined) throw FALL_BACK;
          m[name] = nestedMessage(desc, end);
        },
      };
    }
    case "list": {
      if (field.listKind !== "message" || field.delimitedEncoding) return undefined;
      const desc = field.message;
      return {
        wire: WireType.LengthDelimited,
        read: (m, end) => {
          (m[name] as unknown[]).push(nestedMessage(desc, end));
        },
      };
    }
    case "map":
      return undefined;
  }
}

/** Reads a length-delimited `desc` message that must end within the enclosing one. */
function nestedMessage(desc: DescMessage, end: number): Fields {
  const read = readerFor(desc);
  if (read === undefined) throw FALL_BACK;
  const length = varint32();
  const nestedEnd = input.pos + length;
  if (nestedEnd > end) throw FALL_BACK;
  return read(nestedEnd);
}

function scalarReader(type: ScalarType): { wire: number; read: (end: number) => unknown } | undefined {
  switch (type) {
    case ScalarType.STRING:
      return { wire: WireType.LengthDelimited, read: string };
    case ScalarType.BYTES:
      return {
        wire: WireType.LengthDelimited,
        read: (end) => {
          const start = delimitedStart(end);
          return input.buf.subarray(start, input.pos);
        },
      };
    case ScalarType.BOOL:
      return { wire: WireType.Varint, read: bool };
    case ScalarType.INT32:
      return { wire: WireType.Varint, read: int32 };
    case ScalarType.INT64:
      return { wire: WireType.Varint, read: int64 };
    case ScalarType.DOUBLE:
      return {
        wire: WireType.Bit64,
        read: (end) => {
          if (input.pos + 8 > end) throw FALL_BACK;
          const value = input.buf.readDoubleLE(input.pos);
          input.pos += 8;
          return value;
        },
      };
    default:
      return undefined;
  }
}

/** Reads a length prefix, checks the bytes it announces are there, and returns where they start. */
function delimitedStart(end: number): number {
  const length = varint32();
  const start = input.pos;
  if (start + length > end) throw FALL_BACK;
  input.pos = start + length;
  return start;
}

/**
 * A string field. Invalid UTF-8 goes to `fromBinary`, which refuses it or replaces it as the field's
 * `utf8_validation` says (its decoder's replacement is the one that counts).
 */
function string(end: number): string {
  const start = delimitedStart(end);
  const { buf, pos } = input;
  for (let i = start; i < pos; i++) {
    if ((buf[i] as number) > 0x7f) {
      if (!isUtf8(buf.subarray(start, pos))) throw FALL_BACK;
      return buf.toString("utf8", start, pos);
    }
  }
  return buf.toString("latin1", start, pos);
}

/** A canonical varint whose value fits in 32 bits (a tag or a length), as an unsigned number. */
function varint32(): number {
  const value = varint();
  if (typeof value !== "number" || value > 0xffff_ffff) throw FALL_BACK;
  return value;
}

/** An int32: the low 32 bits of its varint, as two's complement (negative values take ten bytes). */
function int32(): number {
  const value = varint();
  return typeof value === "number" ? value | 0 : Number(BigInt.asIntN(32, value));
}

/** A bool: whether its varint is not zero. */
function bool(): boolean {
  const value = varint();
  return value !== 0 && value !== 0n;
}

/** An int64: its varint as 64-bit two's complement. */
function int64(): bigint {
  const value = varint();
  return typeof value === "number" ? BigInt(value) : BigInt.asIntN(64, value);
}

const MAX_UINT64 = 2n ** 64n - 1n;

/**
 * A canonical varint of at most ten bytes whose value fits in 64 bits: a number when it is below 2^49
 * (seven bytes at most, exact as a JavaScript number), else a bigint.
 */
function varint(): number | bigint {
  const { buf } = input;
  const start = input.pos;
  let value = 0;
  for (let shift = 0; shift < 49; shift += 7) {
    const byte = buf[input.pos++];
    if (byte === undefined) throw FALL_BACK;
    value += (byte & 0x7f) * 2 ** shift;
    if (byte < 0x80) {
      if (byte === 0 && shift > 0) throw FALL_BACK;
      return value;
    }
  }
  input.pos = start;
  let big = 0n;
  for (let shift = 0n; shift < 70n; shift += 7n) {
    const byte = buf[input.pos++];
    if (byte === undefined) throw FALL_BACK;
    big |= BigInt(byte & 0x7f) << shift;
    if (byte < 0x80) {
      if (byte === 0 || big > MAX_UINT64) throw FALL_BACK;
      return big;
    }
  }
  throw FALL_BACK;
}
