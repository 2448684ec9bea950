/* Over 400 lines on purpose: the MongoDB side of one interface (KtLogStore), one short method per
 * operation of the key log (queue, append, tiles, checkpoints, witnesses, leaves, auditors) over the
 * collections declared at the top (with their indexes and shard keys), mirroring the memory store's
 * class; and the intake step other repositories run in their own transactions. */
import type { ClientSession } from "mongodb";
import { emptyRoot, HASH_BYTES } from "../../kt/merkle.js";
import { type TileRequest, tilePath } from "../../kt/tiles.js";
import { erasedStatementSha256, followerReason, planIntake, sequencesOf } from "../kt-sequence.js";
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
  KtIntakeRefusal,
  KtLeafRecord,
  KtLogStore,
  KtPendingInput,
  KtPendingRecord,
  KtSequenceState,
  KtWitnessState,
} from "../kt-types.js";
import { declareCollection } from "./collection.js";
import type { MongoContext } from "./connection.js";
import {
  type CheckpointDoc,
  checkpointDoc,
  checkpointRecord,
  fromBinary,
  type HeadDoc,
  type LeafDoc,
  leafDoc,
  leafRecord,
  type PendingDoc,
  pendingDoc,
  pendingRecord,
  type SequenceDoc,
  type TileDoc,
  toBinary,
  type WitnessDoc,
} from "./kt-docs.js";

/** The key log's statements waiting for the sequencer, by id (docs/key-transparency.md). */
export const KT_PENDING = declareCollection({
  name: "ktPending",
  indexes: [
    // The sequencer's read: waiting records, oldest first.
    { key: { state: 1, createdAt: 1, _id: 1 }, name: "waiting" },
    // An append that refuses a statement: the records waiting behind it in its sequence.
    {
      key: { "order.sequence": 1, state: 1 },
      name: "bySequence",
      partialFilterExpression: { "order.sequence": { $exists: true } },
    },
    // Erasure of a card: its refused records.
    {
      key: { "card.key": 1, state: 1 },
      name: "byCard",
      partialFilterExpression: { "card.key": { $exists: true } },
    },
  ],
  shardKey: {
    key: "unsharded",
    why:
      "Statements waiting for the sequencer (seconds each), written in the transaction of the change they " +
      "record, beside users and keys on the primary shard: registration stays a one-shard transaction.",
  },
});

/** The key log's sequences (a card's, an issuer's): intake and logged states, `_id` the name. */
export const KT_SEQUENCES = declareCollection({
  name: "ktSequences",
  indexes: [],
  shardKey: {
    key: "unsharded",
    why: "One small document per card with a statement and per issuer, written with pending statements.",
  },
});

/** The key log's tree as C2SP tiles, `_id` `<level>/<index>`. */
export const KT_TILES = declareCollection({
  name: "ktTiles",
  indexes: [],
  shardKey: {
    key: "unsharded",
    why:
      "The tree: about 32 bytes a leaf in one document per 256 leaves (3.2 GB at 10^8 leaves); read by " +
      "proofs, written by the one sequencer in its append transaction.",
  },
});

/** The key log's head: one document. */
export const KT_HEAD = declareCollection({
  name: "ktHead",
  indexes: [],
  shardKey: { key: "unsharded", why: "One document, written by every append." },
});

/** The key log's leaves, `_id` the leaf index. */
export const KT_LEAVES = declareCollection({
  name: "ktLeaves",
  indexes: [
    // A pending record becomes one leaf; a sequence's version one leaf (a replayed statement is refused).
    {
      key: { pendingId: 1 },
      name: "uniq_pendingId",
      unique: true,
      partialFilterExpression: { pendingId: { $exists: true } },
    },
    {
      key: { sequence: 1, version: -1 },
      name: "uniq_sequence_version",
      unique: true,
      partialFilterExpression: { sequence: { $exists: true } },
    },
    // An issuer's feed, and erasure's update of a card's leaves.
    { key: { tenantId: 1, _id: 1 }, name: "byTenant", partialFilterExpression: { kind: "statement" } },
    { key: { cardKey: 1 }, name: "byCard", partialFilterExpression: { cardKey: { $exists: true } } },
    // Intake's refusal of a statement an erasure removed (sent again after the card's sequence restarted).
    {
      key: { erasedStatementSha256: 1 },
      name: "byErasedStatement",
      partialFilterExpression: { erasedStatementSha256: { $exists: true } },
    },
  ],
  shardKey: {
    key: "unsharded",
    why:
      "One document per leaf (about 600 B with its statement), appended in order by the one sequencer in " +
      "the same transaction as the tiles and the head; read by card, by tenant and by index. A log read in " +
      "order by one sequencer stays whole while its size allows (tens of GB at 10^8 leaves).",
  },
});

/** Checkpoints the log signed, `_id` the tree size, with their cosignatures. */
export const KT_CHECKPOINTS = declareCollection({
  name: "ktCheckpoints",
  indexes: [],
  shardKey: { key: "unsharded", why: "One small document per checkpoint (at most one every round)." },
});

/** What each witness last cosigned, `_id` its key name. */
export const KT_WITNESSES = declareCollection({
  name: "ktWitnesses",
  indexes: [],
  shardKey: { key: "unsharded", why: "One document per witness." },
});

/** Directory snapshots' bodies, `_id` their SHA-256. */
export const KT_DIRECTORIES = declareCollection({
  name: "ktDirectories",
  indexes: [{ key: { index: -1 }, name: "byIndex" }],
  shardKey: { key: "unsharded", why: "One document per directory snapshot (about one a day)." },
});

/** Auditors allowed to read leaf data, `_id` their id. */
export const KT_AUDITORS = declareCollection({
  name: "ktAuditors",
  indexes: [{ key: { tokenHash: 1 }, name: "uniq_tokenHash", unique: true }],
  shardKey: { key: "unsharded", why: "The auditors an operator registered: a handful." },
});

/** A change's statements, checked against their sequences inside the change's transaction. */
export interface MongoIntake {
  /** Writes the pending records and advances their sequences, in the same transaction. */
  write(): Promise<void>;
}

/**
 * The intake step of a change's transaction (`users.register`, `bins.set`, ...): reads the
 * statements' sequences in `session`, checks the statements against them (`planIntake`), and answers
 * the refusal or the step that writes them. Call it before the change writes anything, so that a
 * refusal leaves the transaction without writes; then write the change and `write()` the intake. Two
 * transactions advancing one sequence conflict on its document, and the loser re-reads on retry.
 */
export async function ktIntakeIn(
  ctx: MongoContext,
  session: ClientSession,
  pending: readonly KtPendingInput[] | undefined,
): Promise<KtIntakeRefusal | MongoIntake> {
  const records = pending ?? [];
  const sequences = ctx.collection<SequenceDoc>(KT_SEQUENCES.name);
  const names = sequencesOf(records);
  const found =
    names.length === 0
      ? []
      : await sequences.find({ _id: { $in: names } }, { ...ctx.readIn(session), projection: {} }).toArray();
  const byName = new Map(found.map((doc) => [doc._id, doc.intake]));
  const plan = planIntake(records, (sequence) => byName.get(sequence));
  if (!plan.ok) return { kind: "log_refused", pendingId: plan.pendingId, reason: plan.reason };
  return {
    write: async () => {
      const write = ctx.writeIn(session);
      for (const [sequence, state] of plan.states) {
        await sequences.updateOne({ _id: sequence }, { $set: { intake: state } }, { ...write, upsert: true });
      }
      if (records.length > 0) {
        await ctx.collection<PendingDoc>(KT_PENDING.name).insertMany(records.map(pendingDoc), write);
      }
    },
  };
}

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
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [
    KT_PENDING,
    KT_SEQUENCES,
    KT_TILES,
    KT_HEAD,
    KT_LEAVES,
    KT_CHECKPOINTS,
    KT_WITNESSES,
    KT_DIRECTORIES,
    KT_AUDITORS,
  ] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get pendingDocs() {
    return this.ctx.collection<PendingDoc>(KT_PENDING.name);
  }
  private get sequenceDocs() {
    return this.ctx.collection<SequenceDoc>(KT_SEQUENCES.name);
  }
  private get tileDocs() {
    return this.ctx.collection<TileDoc>(KT_TILES.name);
  }
  private get headDocs() {
    return this.ctx.collection<HeadDoc>(KT_HEAD.name);
  }
  private get leafDocs() {
    return this.ctx.collection<LeafDoc>(KT_LEAVES.name);
  }
  private get checkpointDocs() {
    return this.ctx.collection<CheckpointDoc>(KT_CHECKPOINTS.name);
  }
  private get witnessDocs() {
    return this.ctx.collection<WitnessDoc>(KT_WITNESSES.name);
  }
  private get directoryDocs() {
    return this.ctx.collection<KtDirectoryRecord & { _id: string }>(KT_DIRECTORIES.name);
  }
  private get auditorDocs() {
    return this.ctx.collection<KtAuditorRecord & { _id: string }>(KT_AUDITORS.name);
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
