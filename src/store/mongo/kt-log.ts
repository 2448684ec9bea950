/* Over 400 lines on purpose: the MongoDB side of one interface (KtLogStore), one short method per
 * operation of the key log (queue, append, tiles, checkpoints, witnesses, leaves, auditors) over the
 * collections declared at the top, mirroring the memory store's class. */
import type { ClientSession } from "mongodb";
import { emptyRoot, HASH_BYTES } from "../../kt/merkle.js";
import { type TileRequest, tilePath } from "../../kt/tiles.js";
import { erasedStatementSha256, followerReason } from "../kt-sequence.js";
import type {
  KtAppendBatch,
  KtAppendOutcome,
  KtAuditorRecord,
  KtCheckpointRecord,
  KtCosignature,
  KtDirectoryRecord,
  KtEnqueueOutcome,
  KtFence,
  KtHead,
  KtLeafRecord,
  KtLogStore,
  KtPendingInput,
  KtPendingRecord,
  KtSequenceState,
  KtWitnessState,
} from "../kt-types.js";
import type { MongoContext } from "./connection.js";
import { COLLECTIONS } from "./indexes.js";
import {
  type CheckpointDoc,
  checkpointDoc,
  checkpointRecord,
  fromBinary,
  type HeadDoc,
  ktIntakeIn,
  type LeafDoc,
  leafDoc,
  leafRecord,
  type PendingDoc,
  pendingRecord,
  type SequenceDoc,
  type TileDoc,
  toBinary,
  type WitnessDoc,
} from "./kt-docs.js";

/** What erasure unsets in a card's leaf records. */
const ERASED = {
  statement: "",
  signature: "",
  opening: "",
  sequence: "",
  version: "",
  cardKey: "",
  userId: "",
} as const;

/**
 * The key log in MongoDB (collections `kt*`, all unsharded). An append is one transaction ("kt.append")
 * that checks the head (size and fencing token) and writes tiles, leaves, the consumed pending records,
 * the sequences' logged states and the head, all or nothing.
 */
export class MongoKtLog implements KtLogStore {
  constructor(private readonly ctx: MongoContext) {}

  private get pendingDocs() {
    return this.ctx.collection<PendingDoc>(COLLECTIONS.ktPending);
  }
  private get sequenceDocs() {
    return this.ctx.collection<SequenceDoc>(COLLECTIONS.ktSequences);
  }
  private get tileDocs() {
    return this.ctx.collection<TileDoc>(COLLECTIONS.ktTiles);
  }
  private get headDocs() {
    return this.ctx.collection<HeadDoc>(COLLECTIONS.ktHead);
  }
  private get leafDocs() {
    return this.ctx.collection<LeafDoc>(COLLECTIONS.ktLeaves);
  }
  private get checkpointDocs() {
    return this.ctx.collection<CheckpointDoc>(COLLECTIONS.ktCheckpoints);
  }
  private get witnessDocs() {
    return this.ctx.collection<WitnessDoc>(COLLECTIONS.ktWitnesses);
  }
  private get directoryDocs() {
    return this.ctx.collection<KtDirectoryRecord & { _id: string }>(COLLECTIONS.ktDirectories);
  }
  private get auditorDocs() {
    return this.ctx.collection<KtAuditorRecord & { _id: string }>(COLLECTIONS.ktAuditors);
  }

  /** Reads with `_id` kept (the documents' ids are the records' keys). */
  private get read() {
    return { maxTimeMS: this.ctx.timeoutMs };
  }

  enqueue(pending: readonly KtPendingInput[]): Promise<KtEnqueueOutcome> {
    return this.ctx.run(() =>
      this.ctx.transaction("kt.enqueue", async (session): Promise<KtEnqueueOutcome> => {
        const intake = await ktIntakeIn(this.ctx, session, pending);
        if ("kind" in intake) return intake;
        await intake.write();
        return { kind: "enqueued" };
      }),
    );
  }

  sequenceState(sequence: string): Promise<KtSequenceState | undefined> {
    return this.ctx.run(async () => (await this.sequenceDocs.findOne({ _id: sequence }, this.read))?.intake);
  }

  pending(limit: number): Promise<KtPendingRecord[]> {
    return this.ctx.run(async () =>
      (
        await this.pendingDocs
          .find({ state: "waiting" }, this.read)
          .sort({ state: 1, createdAt: 1, _id: 1 })
          .limit(limit)
          .toArray()
      ).map(pendingRecord),
    );
  }

  findPending(id: string): Promise<KtPendingRecord | undefined> {
    return this.ctx.run(async () => {
      const doc = await this.pendingDocs.findOne({ _id: id }, this.read);
      return doc === null ? undefined : pendingRecord(doc);
    });
  }

  head(): Promise<KtHead> {
    return this.ctx.run(async () => headOf(await this.headDocs.findOne({ _id: "head" }, this.read)));
  }

  loggedStates(sequences: readonly string[]): Promise<Map<string, KtSequenceState>> {
    return this.ctx.run(async () => {
      const out = new Map<string, KtSequenceState>();
      if (sequences.length === 0) return out;
      const docs = await this.sequenceDocs.find({ _id: { $in: [...sequences] } }, this.read).toArray();
      for (const doc of docs) if (doc.logged !== undefined) out.set(doc._id, doc.logged);
      return out;
    });
  }

  append(fence: KtFence, batch: KtAppendBatch): Promise<KtAppendOutcome> {
    return this.ctx.run(() =>
      this.ctx.transaction("kt.append", async (session): Promise<KtAppendOutcome> => {
        const head = headOf(
          await this.headDocs.findOne({ _id: "head" }, { ...this.ctx.readIn(session), projection: {} }),
        );
        if (fence.token < head.fence) return { kind: "fenced_out" };
        if (batch.oldSize !== head.size) return { kind: "moved" };
        if (batch.newSize !== batch.oldSize + batch.leaves.length)
          throw new Error("size does not match the leaves");
        await this.writeTiles(session, batch);
        await this.writeLeaves(session, batch);
        await this.settlePending(session, batch);
        await this.writeSequences(session, batch);
        const followers = await this.resetRefusedSequences(session, batch);
        const write = this.ctx.writeIn(session);
        const next = { size: batch.newSize, root: toBinary(batch.root), fence: fence.token };
        await this.headDocs.updateOne({ _id: "head" }, { $set: next }, { ...write, upsert: true });
        return followers.length > 0 ? { kind: "appended", followers } : { kind: "appended" };
      }),
    );
  }

  /** Writes each tile whole, after checking that it extends what is stored. */
  private async writeTiles(session: ClientSession, batch: KtAppendBatch): Promise<void> {
    if (batch.tiles.length === 0) return;
    const ids = batch.tiles.map((t) => `${t.level}/${t.index}`);
    const stored = await this.tileDocs
      .find({ _id: { $in: ids } }, { ...this.ctx.readIn(session), projection: {} })
      .toArray();
    const old = new Map(stored.map((doc) => [doc._id, fromBinary(doc.hashes)]));
    const write = { ...this.ctx.writeIn(session), upsert: true };
    for (const tile of batch.tiles) {
      const id = `${tile.level}/${tile.index}`;
      const before = old.get(id);
      if (before !== undefined && !isPrefix(before, tile.hashes)) {
        throw new Error(`refused append: tile ${tilePath(tile.level, tile.index)} would be rewritten`);
      }
      const width = tile.hashes.length / HASH_BYTES;
      const doc = { level: tile.level, index: tile.index, width, hashes: toBinary(tile.hashes) };
      await this.tileDocs.updateOne({ _id: id }, { $set: doc }, write);
    }
  }

  private async writeLeaves(session: ClientSession, batch: KtAppendBatch): Promise<void> {
    const write = this.ctx.writeIn(session);
    if (batch.leaves.some((leaf, i) => leaf.index !== batch.oldSize + i))
      throw new Error("leaf indexes out of order");
    // Unique indexes refuse a second leaf at an index, of a pending record, or of a sequence's version.
    if (batch.leaves.length > 0) await this.leafDocs.insertMany(batch.leaves.map(leafDoc), write);
    if (batch.directory !== undefined) {
      await this.directoryDocs.insertOne({ ...batch.directory, _id: batch.directory.sha256 }, write);
    }
  }

  private async settlePending(session: ClientSession, batch: KtAppendBatch): Promise<void> {
    const write = this.ctx.writeIn(session);
    if (batch.consumed.length > 0) {
      const { deletedCount } = await this.pendingDocs.deleteMany(
        { _id: { $in: batch.consumed }, state: "waiting" },
        write,
      );
      if (deletedCount !== batch.consumed.length) throw new Error("refused append: a pending record is gone");
    }
    for (const { id, reason } of batch.refused) {
      await this.pendingDocs.updateOne({ _id: id }, { $set: { state: "refused", refused: reason } }, write);
    }
  }

  /** Advances each sequence's logged state, only from the version the batch was built on. */
  private async writeSequences(session: ClientSession, batch: KtAppendBatch): Promise<void> {
    const write = { ...this.ctx.writeIn(session), upsert: true };
    for (const { sequence, before, after } of batch.sequences) {
      const filter =
        before === 0
          ? { _id: sequence, logged: { $exists: false } }
          : { _id: sequence, "logged.version": before };
      // No match means another logged state: the upsert then collides on `_id` and the append fails.
      await this.sequenceDocs.updateOne(filter, { $set: { logged: after } }, write);
    }
  }

  /**
   * After a refusal: the sequence's intake state back to its logged state (as this batch leaves it),
   * and the sequence's records still waiting refused too (see {@link KtLogStore.append}).
   */
  private async resetRefusedSequences(
    session: ClientSession,
    batch: KtAppendBatch,
  ): Promise<Array<{ id: string; reason: string }>> {
    const followers: Array<{ id: string; reason: string }> = [];
    const read = this.ctx.readIn(session);
    const write = this.ctx.writeIn(session);
    for (const { id } of batch.refused) {
      const doc = await this.pendingDocs.findOne({ _id: id }, read);
      const record = doc === null ? undefined : pendingRecord(doc);
      if (record === undefined || record.kind === "directory") continue;
      const sequence = record.order.sequence;
      const state = await this.sequenceDocs.findOne({ _id: sequence }, read);
      if (state?.logged === undefined) await this.sequenceDocs.deleteOne({ _id: sequence }, write);
      else await this.sequenceDocs.updateOne({ _id: sequence }, { $set: { intake: state.logged } }, write);
      const waiting = await this.pendingDocs
        .find({ "order.sequence": sequence, state: "waiting" }, { ...read, projection: { _id: 1 } })
        .toArray();
      if (waiting.length === 0) continue;
      const reason = followerReason(id);
      const ids = waiting.map((w) => w._id);
      await this.pendingDocs.updateMany(
        { _id: { $in: ids } },
        { $set: { state: "refused", refused: reason } },
        write,
      );
      for (const other of ids) followers.push({ id: other, reason });
    }
    return followers;
  }

  readTiles(requests: TileRequest[]): Promise<Uint8Array[]> {
    return this.ctx.run(async () => {
      const ids = requests.map((r) => `${r.level}/${r.index}`);
      const docs = await this.tileDocs.find({ _id: { $in: ids } }, this.read).toArray();
      const byId = new Map(docs.map((doc) => [doc._id, doc.hashes]));
      return requests.map((r, i) => {
        const hashes = byId.get(ids[i] as string);
        if (hashes === undefined || hashes.length() < r.width * HASH_BYTES) {
          throw new Error(`tile ${tilePath(r.level, r.index, r.width)} is missing or short`);
        }
        return new Uint8Array(hashes.read(0, r.width * HASH_BYTES));
      });
    });
  }

  putCheckpoint(fence: KtFence, checkpoint: KtCheckpointRecord): Promise<"stored" | "fenced_out"> {
    return this.ctx.run(async () => {
      const head = headOf(await this.headDocs.findOne({ _id: "head" }, this.read));
      if (fence.token < head.fence) return "fenced_out";
      const doc = checkpointDoc(checkpoint);
      const { _id, ...fields } = doc;
      await this.checkpointDocs.updateOne(
        { _id },
        { $setOnInsert: fields },
        { ...this.ctx.limit, upsert: true },
      );
      return "stored";
    });
  }

  latestCheckpoint(): Promise<KtCheckpointRecord | undefined> {
    return this.ctx.run(async () => {
      const [doc] = await this.checkpointDocs.find({}, this.read).sort({ _id: -1 }).limit(1).toArray();
      return doc === undefined ? undefined : checkpointRecord(doc);
    });
  }

  checkpointAt(size: number): Promise<KtCheckpointRecord | undefined> {
    return this.ctx.run(async () => {
      const doc = await this.checkpointDocs.findOne({ _id: size }, this.read);
      return doc === null ? undefined : checkpointRecord(doc);
    });
  }

  /** One pipeline update: drops the witness's older cosignature of this checkpoint and adds the new one. */
  addCosignature(size: number, witness: string, cosignature: KtCosignature): Promise<void> {
    return this.ctx.run(async () => {
      const others = { $filter: { input: "$cosignatures", cond: { $ne: ["$$this.witness", witness] } } };
      await this.checkpointDocs.updateOne(
        { _id: size },
        [{ $set: { cosignatures: { $concatArrays: [others, [{ witness, ...cosignature }]] } } }],
        this.ctx.limit,
      );
    });
  }

  witnessStates(): Promise<KtWitnessState[]> {
    return this.ctx.run(async () =>
      (await this.witnessDocs.find({}, this.read).toArray()).map(({ _id, root, ...rest }) => ({
        ...rest,
        name: _id,
        root: fromBinary(root),
      })),
    );
  }

  putWitnessState(state: KtWitnessState): Promise<void> {
    return this.ctx.run(async () => {
      const { name, root, ...rest } = state;
      await this.witnessDocs.replaceOne(
        { _id: name },
        { ...rest, root: toBinary(root) },
        { ...this.ctx.limit, upsert: true },
      );
    });
  }

  leaf(index: number): Promise<KtLeafRecord | undefined> {
    return this.ctx.run(async () => {
      const doc = await this.leafDocs.findOne({ _id: index }, this.read);
      return doc === null ? undefined : leafRecord(doc);
    });
  }

  leaves(start: number, end: number): Promise<KtLeafRecord[]> {
    return this.ctx.run(async () =>
      (
        await this.leafDocs
          .find({ _id: { $gte: start, $lt: end } }, this.read)
          .sort({ _id: 1 })
          .toArray()
      ).map(leafRecord),
    );
  }

  leafByPending(pendingId: string): Promise<KtLeafRecord | undefined> {
    return this.ctx.run(async () => {
      const doc = await this.leafDocs.findOne({ pendingId }, this.read);
      return doc === null ? undefined : leafRecord(doc);
    });
  }

  lastOfSequence(sequence: string): Promise<KtLeafRecord | undefined> {
    return this.ctx.run(async () => {
      const [doc] = await this.leafDocs
        .find({ sequence }, this.read)
        .sort({ sequence: 1, version: -1 })
        .limit(1)
        .toArray();
      return doc === undefined ? undefined : leafRecord(doc);
    });
  }

  leavesOfTenant(tenantId: string, afterIndex: number, limit: number): Promise<KtLeafRecord[]> {
    return this.ctx.run(async () =>
      (
        await this.leafDocs
          .find({ tenantId, kind: "statement", _id: { $gt: afterIndex } }, this.read)
          .sort({ tenantId: 1, _id: 1 })
          .limit(limit)
          .toArray()
      ).map(leafRecord),
    );
  }

  eraseCard(cardKey: string, at: Date): Promise<number> {
    return this.ctx.run(async () => {
      // One leaf at a time, each keeping the SHA-256 of its own statement (a card has a few leaves).
      const found = await this.leafDocs
        .find<Pick<LeafDoc, "_id" | "statement">>(
          { cardKey },
          { ...this.ctx.limit, projection: { _id: 1, statement: 1 } },
        )
        .toArray();
      let modifiedCount = 0;
      for (const { _id, statement } of found) {
        const erased =
          statement === undefined ? {} : { erasedStatementSha256: erasedStatementSha256(statement) };
        const update = { $unset: ERASED, $set: { erasedAt: at, ...erased } };
        modifiedCount += (await this.leafDocs.updateOne({ _id, cardKey }, update, this.ctx.limit))
          .modifiedCount;
      }
      await this.sequenceDocs.deleteOne({ _id: `card:${cardKey}` }, this.ctx.limit);
      await this.pendingDocs.deleteMany({ "card.key": cardKey, state: "refused" }, this.ctx.limit);
      return modifiedCount;
    });
  }

  statementErased(sha256: string): Promise<boolean> {
    return this.ctx.run(
      async () => (await this.leafDocs.findOne({ erasedStatementSha256: sha256 }, this.read)) !== null,
    );
  }

  directory(sha256: string): Promise<KtDirectoryRecord | undefined> {
    return this.ctx.run(async () => withoutId(await this.directoryDocs.findOne({ _id: sha256 }, this.read)));
  }

  directoryBefore(size: number): Promise<KtDirectoryRecord | undefined> {
    return this.ctx.run(async () => {
      const [doc] = await this.directoryDocs
        .find({ index: { $lt: size } }, this.read)
        .sort({ index: -1 })
        .limit(1)
        .toArray();
      return withoutId(doc ?? null);
    });
  }

  insertAuditor(auditor: KtAuditorRecord): Promise<void> {
    return this.ctx.run(async () => {
      await this.auditorDocs.insertOne({ ...auditor, _id: auditor.id }, this.ctx.limit);
    });
  }

  findAuditorByTokenHash(tokenHash: string): Promise<KtAuditorRecord | undefined> {
    return this.ctx.run(async () => withoutId(await this.auditorDocs.findOne({ tokenHash }, this.read)));
  }

  listAuditors(): Promise<KtAuditorRecord[]> {
    return this.ctx.run(async () =>
      (await this.auditorDocs.find({}, this.read).sort({ createdAt: 1, _id: 1 }).toArray()).map(
        (doc) => withoutId(doc) as KtAuditorRecord,
      ),
    );
  }

  revokeAuditor(id: string, at: Date): Promise<boolean> {
    return this.ctx.run(async () => {
      const found = await this.auditorDocs.findOne({ _id: id }, this.read);
      if (found === null) return false;
      await this.auditorDocs.updateOne(
        { _id: id, revokedAt: { $exists: false } },
        { $set: { revokedAt: at } },
        this.ctx.limit,
      );
      return true;
    });
  }
}

function headOf(doc: HeadDoc | null): KtHead {
  if (doc === null) return { size: 0, root: emptyRoot(), fence: 0 };
  return { size: doc.size, root: fromBinary(doc.root), fence: doc.fence };
}

function withoutId<T extends { _id: unknown }>(doc: T | null): Omit<T, "_id"> | undefined {
  if (doc === null) return undefined;
  const { _id, ...rest } = doc;
  return rest;
}

function isPrefix(prefix: Uint8Array, bytes: Uint8Array): boolean {
  if (prefix.length > bytes.length) return false;
  for (let i = 0; i < prefix.length; i++) if (prefix[i] !== bytes[i]) return false;
  return true;
}
