import { Binary } from "mongodb";
import type {
  KtCheckpointRecord,
  KtCosignature,
  KtLeafRecord,
  KtPendingInput,
  KtPendingRecord,
  KtSequenceState,
  KtWitnessState,
} from "../kt-types.js";

/**
 * The key log's documents (one collection per concern, all unsharded: their declarations in `kt-log.ts`
 * say why). Bytes are BSON binary.
 */

/** A pending record: `_id` its id; `state` "waiting" until the sequencer refuses it ("refused"). */
export type PendingDoc = Omit<KtPendingRecord, "id"> & { _id: string; state: "waiting" | "refused" };

/** A sequence: `_id` its name; the intake and logged states. */
export interface SequenceDoc {
  _id: string;
  intake?: KtSequenceState;
  logged?: KtSequenceState;
}

/** A tile: `_id` `<level>/<index>`, its width and its hashes. */
export interface TileDoc {
  _id: string;
  level: number;
  index: number;
  width: number;
  hashes: Binary;
}

/** The tree's head: one document, `_id` "head". */
export interface HeadDoc {
  _id: "head";
  size: number;
  root: Binary;
  fence: number;
}

/** A leaf record: `_id` its index. */
export type LeafDoc = Omit<KtLeafRecord, "index" | "leaf"> & { _id: number; leaf?: Binary };

/** A checkpoint: `_id` its size; cosignatures as a list (witness names hold dots, field names may not). */
export interface CheckpointDoc {
  _id: number;
  root: Binary;
  note: string;
  signedAt: Date;
  cosignatures: Array<KtCosignature & { witness: string }>;
}

/** A witness's state: `_id` its key name. */
export type WitnessDoc = Omit<KtWitnessState, "name" | "root"> & { _id: string; root: Binary };

/** Bytes as BSON binary. */
export function toBinary(bytes: Uint8Array): Binary {
  return new Binary(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
}

/** Bytes of BSON binary (a copy). */
export function fromBinary(binary: Binary): Uint8Array {
  return new Uint8Array(binary.read(0, binary.length()));
}

export function pendingDoc(record: KtPendingInput): PendingDoc {
  const { id, ...rest } = record;
  return { ...rest, _id: id, state: "waiting" } as PendingDoc;
}

export function pendingRecord(doc: PendingDoc): KtPendingRecord {
  const { _id, state: _state, ...rest } = doc;
  return { ...rest, id: _id } as KtPendingRecord;
}

export function leafDoc(record: KtLeafRecord): LeafDoc {
  const { index, leaf, ...rest } = record;
  return { ...rest, _id: index, ...(leaf === undefined ? {} : { leaf: toBinary(leaf) }) };
}

export function leafRecord(doc: LeafDoc): KtLeafRecord {
  const { _id, leaf, ...rest } = doc;
  return { ...rest, index: _id, ...(leaf === undefined ? {} : { leaf: fromBinary(leaf) }) };
}

export function checkpointDoc(record: KtCheckpointRecord): CheckpointDoc {
  return {
    _id: record.size,
    root: toBinary(record.root),
    note: record.note,
    signedAt: record.signedAt,
    cosignatures: Object.entries(record.cosignatures).map(([witness, c]) => ({ witness, ...c })),
  };
}

export function checkpointRecord(doc: CheckpointDoc): KtCheckpointRecord {
  const cosignatures: Record<string, KtCosignature> = {};
  for (const { witness, line, timestamp } of doc.cosignatures) cosignatures[witness] = { line, timestamp };
  return { size: doc._id, root: fromBinary(doc.root), note: doc.note, signedAt: doc.signedAt, cosignatures };
}
