import { emptyRoot, HASH_BYTES } from "../../kt/merkle.js";
import { type TileRequest, tilePath } from "../../kt/tiles.js";
import { erasedStatementSha256, followerReason, planIntake } from "../kt-sequence.js";
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
import { copy } from "./copy.js";

/** A change's statements, checked against their sequences and ready to be written with the change. */
export interface MemoryIntake {
  /** Writes the pending records and advances their sequences; call in the change's synchronous step. */
  commit(): void;
}

/**
 * The key log held in memory. Every method reads, decides and writes in one synchronous step, which
 * makes it atomic on Node's single thread; a change written by another memory repository takes its
 * statements through {@link MemoryKtLog.intake} in its own synchronous step.
 */
export class MemoryKtLog implements KtLogStore {
  private readonly pendingById = new Map<string, KtPendingRecord>();
  private readonly sequences = new Map<string, { intake?: KtSequenceState; logged?: KtSequenceState }>();
  private readonly tiles = new Map<string, Uint8Array>();
  private current: KtHead = { size: 0, root: emptyRoot(), fence: 0 };
  private readonly leafRecords: KtLeafRecord[] = [];
  private readonly leafByPendingId = new Map<string, number>();
  private readonly lastBySequence = new Map<string, number>();
  private readonly byTenant = new Map<string, number[]>();
  private readonly checkpoints = new Map<number, KtCheckpointRecord>();
  private latestSize = -1;
  private readonly witnesses = new Map<string, KtWitnessState>();
  private readonly directories = new Map<string, KtDirectoryRecord>();
  /** Directory snapshots' SHA-256 in leaf order. */
  private readonly directoryOrder: string[] = [];
  private readonly auditors = new Map<string, KtAuditorRecord>();
  /** The `erasedStatementSha256` of every erased leaf record. */
  private readonly erasedStatements = new Set<string>();

  /**
   * Checks a change's pending records against their sequences, without writing: a refusal, or the
   * step that writes them. The caller checks, then writes its change and commits, with no `await`
   * between.
   */
  intake(pending: readonly KtPendingInput[] | undefined): KtIntakeRefusal | MemoryIntake {
    const records = pending ?? [];
    const plan = planIntake(records, (sequence) => this.sequences.get(sequence)?.intake);
    if (!plan.ok) return { kind: "log_refused", pendingId: plan.pendingId, reason: plan.reason };
    return {
      commit: () => {
        for (const [sequence, state] of plan.states) {
          this.sequences.set(sequence, { ...this.sequences.get(sequence), intake: copy(state) });
        }
        for (const record of records) this.pendingById.set(record.id, copy(record));
      },
    };
  }

  async enqueue(pending: readonly KtPendingInput[]): Promise<KtEnqueueOutcome> {
    const intake = this.intake(pending);
    if ("kind" in intake) return intake;
    intake.commit();
    return { kind: "enqueued" };
  }

  async sequenceState(sequence: string): Promise<KtSequenceState | undefined> {
    return copy(this.sequences.get(sequence)?.intake);
  }

  async pending(limit: number): Promise<KtPendingRecord[]> {
    const waiting = [...this.pendingById.values()].filter((p) => p.refused === undefined);
    waiting.sort(
      (a, b) => a.createdAt.getTime() - b.createdAt.getTime() || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
    );
    return copy(waiting.slice(0, limit));
  }

  async findPending(id: string): Promise<KtPendingRecord | undefined> {
    return copy(this.pendingById.get(id));
  }

  async head(): Promise<KtHead> {
    return copy(this.current);
  }

  async loggedStates(sequences: readonly string[]): Promise<Map<string, KtSequenceState>> {
    const out = new Map<string, KtSequenceState>();
    for (const sequence of sequences) {
      const logged = this.sequences.get(sequence)?.logged;
      if (logged !== undefined) out.set(sequence, copy(logged));
    }
    return out;
  }

  async append(fence: KtFence, batch: KtAppendBatch): Promise<KtAppendOutcome> {
    if (fence.token < this.current.fence) return { kind: "fenced_out" };
    if (batch.oldSize !== this.current.size) return { kind: "moved" };
    const problem = this.appendProblem(batch);
    if (problem !== undefined) throw new Error(`refused append: ${problem}`);
    for (const tile of batch.tiles) this.tiles.set(`${tile.level}/${tile.index}`, tile.hashes.slice());
    for (const leaf of batch.leaves) this.addLeaf(copy(leaf));
    if (batch.directory !== undefined) {
      this.directories.set(batch.directory.sha256, copy(batch.directory));
      this.directoryOrder.push(batch.directory.sha256);
    }
    for (const id of batch.consumed) this.pendingById.delete(id);
    for (const { id, reason } of batch.refused) {
      const record = this.pendingById.get(id);
      if (record !== undefined) record.refused = reason;
    }
    for (const { sequence, after } of batch.sequences) {
      this.sequences.set(sequence, { ...this.sequences.get(sequence), logged: copy(after) });
    }
    const followers = this.resetRefusedSequences(batch.refused);
    this.current = { size: batch.newSize, root: batch.root.slice(), fence: fence.token };
    return followers.length > 0 ? { kind: "appended", followers } : { kind: "appended" };
  }

  /**
   * After a refusal: the sequence's intake state back to what the log holds, and every record of the
   * sequence still waiting (queued on top of the refused one) refused too; see {@link KtLogStore.append}.
   */
  private resetRefusedSequences(refused: KtAppendBatch["refused"]): Array<{ id: string; reason: string }> {
    const followers: Array<{ id: string; reason: string }> = [];
    for (const { id } of refused) {
      const record = this.pendingById.get(id);
      if (record === undefined || record.kind === "directory") continue;
      const sequence = record.order.sequence;
      const logged = this.sequences.get(sequence)?.logged;
      if (logged === undefined) this.sequences.delete(sequence);
      else this.sequences.set(sequence, { intake: copy(logged), logged });
      for (const other of this.pendingById.values()) {
        if (other.refused !== undefined || other.kind === "directory") continue;
        if (other.order.sequence !== sequence) continue;
        other.refused = followerReason(id);
        followers.push({ id: other.id, reason: other.refused });
      }
    }
    return followers;
  }

  /** What makes a batch unwritable as a whole (checked before anything is written). */
  private appendProblem(batch: KtAppendBatch): string | undefined {
    if (batch.newSize !== batch.oldSize + batch.leaves.length) return "size does not match the leaves";
    if (batch.leaves.some((leaf, i) => leaf.index !== batch.oldSize + i)) return "leaf indexes out of order";
    for (const tile of batch.tiles) {
      const old = this.tiles.get(`${tile.level}/${tile.index}`);
      if (old !== undefined && !extends_(old, tile.hashes)) {
        return `tile ${tilePath(tile.level, tile.index)} would be rewritten, not extended`;
      }
    }
    for (const id of batch.consumed) if (!this.pendingById.has(id)) return `pending ${id} is gone`;
    for (const { sequence, before } of batch.sequences) {
      if ((this.sequences.get(sequence)?.logged?.version ?? 0) !== before)
        return `sequence ${sequence} moved`;
    }
    for (const leaf of batch.leaves) {
      if (leaf.sequence !== undefined && leaf.version !== undefined) {
        const last = this.lastBySequence.get(leaf.sequence);
        const lastVersion = last === undefined ? 0 : (this.leafRecords[last]?.version ?? 0);
        if (leaf.version <= lastVersion) return `${leaf.sequence} already has version ${leaf.version}`;
      }
    }
    return undefined;
  }

  private addLeaf(leaf: KtLeafRecord): void {
    this.leafRecords[leaf.index] = leaf;
    if (leaf.pendingId !== undefined) this.leafByPendingId.set(leaf.pendingId, leaf.index);
    if (leaf.sequence !== undefined) this.lastBySequence.set(leaf.sequence, leaf.index);
    if (leaf.tenantId !== undefined && leaf.kind === "statement") {
      const list = this.byTenant.get(leaf.tenantId) ?? [];
      list.push(leaf.index);
      this.byTenant.set(leaf.tenantId, list);
    }
  }

  async readTiles(requests: TileRequest[]): Promise<Uint8Array[]> {
    return requests.map((r) => {
      const tile = this.tiles.get(`${r.level}/${r.index}`);
      if (tile === undefined || tile.length < r.width * HASH_BYTES) {
        throw new Error(`tile ${tilePath(r.level, r.index, r.width)} is missing or short`);
      }
      return tile.slice(0, r.width * HASH_BYTES);
    });
  }

  async putCheckpoint(fence: KtFence, checkpoint: KtCheckpointRecord): Promise<"stored" | "fenced_out"> {
    if (fence.token < this.current.fence) return "fenced_out";
    if (!this.checkpoints.has(checkpoint.size)) {
      this.checkpoints.set(checkpoint.size, copy(checkpoint));
      this.latestSize = Math.max(this.latestSize, checkpoint.size);
    }
    return "stored";
  }

  async latestCheckpoint(): Promise<KtCheckpointRecord | undefined> {
    const checkpoint = this.checkpoints.get(this.latestSize);
    return checkpoint === undefined ? undefined : checkpointCopy(checkpoint);
  }

  async checkpointAt(size: number): Promise<KtCheckpointRecord | undefined> {
    const checkpoint = this.checkpoints.get(size);
    return checkpoint === undefined ? undefined : checkpointCopy(checkpoint);
  }

  async addCosignature(size: number, witness: string, cosignature: KtCosignature): Promise<void> {
    const checkpoint = this.checkpoints.get(size);
    if (checkpoint !== undefined) checkpoint.cosignatures[witness] = copy(cosignature);
  }

  async witnessStates(): Promise<KtWitnessState[]> {
    return copy([...this.witnesses.values()]);
  }

  async putWitnessState(state: KtWitnessState): Promise<void> {
    this.witnesses.set(state.name, copy(state));
  }

  async leaf(index: number): Promise<KtLeafRecord | undefined> {
    return leafCopyOf(this.leafRecords[index]);
  }

  async leaves(start: number, end: number): Promise<KtLeafRecord[]> {
    return this.leafRecords.slice(start, Math.min(end, this.current.size)).map(leafCopy);
  }

  async leafByPending(pendingId: string): Promise<KtLeafRecord | undefined> {
    const index = this.leafByPendingId.get(pendingId);
    return index === undefined ? undefined : leafCopyOf(this.leafRecords[index]);
  }

  async lastOfSequence(sequence: string): Promise<KtLeafRecord | undefined> {
    const index = this.lastBySequence.get(sequence);
    return index === undefined ? undefined : leafCopyOf(this.leafRecords[index]);
  }

  async leavesOfTenant(tenantId: string, afterIndex: number, limit: number): Promise<KtLeafRecord[]> {
    const indexes = this.byTenant.get(tenantId) ?? [];
    let lo = 0;
    let hi = indexes.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if ((indexes[mid] as number) <= afterIndex) lo = mid + 1;
      else hi = mid;
    }
    return indexes.slice(lo, lo + limit).map((i) => leafCopy(this.leafRecords[i] as KtLeafRecord));
  }

  async eraseCard(cardKey: string, at: Date): Promise<number> {
    let changed = 0;
    for (const leaf of this.leafRecords) {
      if (leaf?.cardKey !== cardKey) continue;
      if (leaf.sequence !== undefined) this.lastBySequence.delete(leaf.sequence);
      if (leaf.statement !== undefined) {
        leaf.erasedStatementSha256 = erasedStatementSha256(leaf.statement);
        this.erasedStatements.add(leaf.erasedStatementSha256);
      }
      for (const member of ERASED_MEMBERS) delete leaf[member];
      leaf.erasedAt = at;
      changed++;
    }
    this.sequences.delete(`card:${cardKey}`);
    for (const [id, record] of this.pendingById) {
      if (record.refused !== undefined && record.kind === "statement" && record.card?.key === cardKey)
        this.pendingById.delete(id);
    }
    return changed;
  }

  async statementErased(sha256: string): Promise<boolean> {
    return this.erasedStatements.has(sha256);
  }

  async directory(sha256: string): Promise<KtDirectoryRecord | undefined> {
    const record = this.directories.get(sha256);
    return record === undefined ? undefined : directoryCopy(record);
  }

  async directoryBefore(size: number): Promise<KtDirectoryRecord | undefined> {
    for (let i = this.directoryOrder.length - 1; i >= 0; i--) {
      const record = this.directories.get(this.directoryOrder[i] as string) as KtDirectoryRecord;
      if (record.index < size) return copy(record);
    }
    return undefined;
  }

  async insertAuditor(auditor: KtAuditorRecord): Promise<void> {
    this.auditors.set(auditor.id, copy(auditor));
  }

  async findAuditorByTokenHash(tokenHash: string): Promise<KtAuditorRecord | undefined> {
    return copy([...this.auditors.values()].find((a) => a.tokenHash === tokenHash));
  }

  async listAuditors(): Promise<KtAuditorRecord[]> {
    return copy([...this.auditors.values()]);
  }

  async revokeAuditor(id: string, at: Date): Promise<boolean> {
    const auditor = this.auditors.get(id);
    if (auditor === undefined) return false;
    auditor.revokedAt ??= at;
    return true;
  }
}

/** What erasure removes from a card's leaf records. */
export const ERASED_MEMBERS = [
  "statement",
  "signature",
  "opening",
  "sequence",
  "version",
  "cardKey",
  "userId",
] as const satisfies ReadonlyArray<keyof KtLeafRecord>;

/** Whether `next` extends `old` (old is a prefix of next). */
function extends_(old: Uint8Array, next: Uint8Array): boolean {
  if (old.length > next.length) return false;
  for (let i = 0; i < old.length; i++) if (old[i] !== next[i]) return false;
  return true;
}

/**
 * A copy of a checkpoint record sharing nothing with it, member by member: what the generic deep copy
 * (`copy.ts`) gives, which walks every member to find the bytes, the date and the cosignatures. Every
 * `GET /kt/v1/checkpoint` reads the newest one (the generic copy was about 2% of that read's busy main
 * thread). test/store/memory-record-copies.test.ts holds it to the generic copy.
 */
export function checkpointCopy(record: KtCheckpointRecord): KtCheckpointRecord {
  const cosignatures: Record<string, KtCosignature> = { ...record.cosignatures };
  for (const witness in cosignatures) {
    cosignatures[witness] = { ...(cosignatures[witness] as KtCosignature) };
  }
  return {
    ...record,
    root: new Uint8Array(record.root),
    signedAt: new Date(record.signedAt.getTime()),
    cosignatures,
  };
}

/**
 * A copy of a directory snapshot record sharing nothing with it (its strings need none), as the
 * generic copy gives it: every `GET /kt/v1/directory/{sha256}` reads one. Held to the generic copy by
 * test/store/memory-record-copies.test.ts.
 */
export function directoryCopy(record: KtDirectoryRecord): KtDirectoryRecord {
  return {
    ...record,
    issuedAt: new Date(record.issuedAt.getTime()),
    notAfter: new Date(record.notAfter.getTime()),
  };
}

/**
 * A copy of a leaf record sharing nothing with it, as the generic copy gives it (its bytes, and the
 * dates): a look-up's answer reads its card's newest leaf (`lastOfSequence`) on every call. Held to
 * the generic copy by test/store/memory-record-copies.test.ts.
 */
export function leafCopy(record: KtLeafRecord): KtLeafRecord {
  const copied = { ...record, appendedAt: new Date(record.appendedAt.getTime()) };
  if (record.leaf !== undefined) copied.leaf = new Uint8Array(record.leaf);
  if (record.erasedAt !== undefined) copied.erasedAt = new Date(record.erasedAt.getTime());
  return copied;
}

function leafCopyOf(record: KtLeafRecord | undefined): KtLeafRecord | undefined {
  return record === undefined ? undefined : leafCopy(record);
}
