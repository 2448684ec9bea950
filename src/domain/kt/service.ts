import { setTimeout as sleep } from "node:timers/promises";
import type { Clock } from "../../clock.js";
import { secureRandomBytes } from "../../crypto/random.js";
import { AppError } from "../../errors.js";
import { randomId } from "../../ids.js";
import { base64, fromUtf8 } from "../../kt/bytes.js";
import { nodeSha256 } from "../../kt/node-engine.js";
import { formatVkey, type NoteSigner } from "../../kt/note.js";
import { withoutCardRef } from "../../kt/statements.js";
import { inclusionProofFromTiles, type SubtreeMemo, type TileReader } from "../../kt/tiles.js";
import type { KtDirectoryProof } from "../../kt/wire.js";
import type {
  KtCheckpointRecord,
  KtLogStore,
  KtPendingDirectoryChange,
  KtPendingStatement,
} from "../../store/kt-types.js";
import type { CardRefSeal } from "./card-seal.js";
import { directoryChange } from "./directory-change.js";
import type { KtAnswerProofs, KtLog, StatementToLog } from "./log.js";
import { orderOf } from "./statement-check.js";
import { Lru, SubtreeLru } from "./tile-cache.js";

/** What {@link KtLogService} is made of. */
export interface KtLogServiceDeps {
  log: KtLogStore;
  clock: Clock;
  signer: NoteSigner;
  seal: CardRefSeal;
  /** The store's tiles through a cache. */
  tiles: TileReader;
  /** Complete subtrees' hashes kept between proofs (default: a fresh {@link SubtreeLru}). */
  memo?: SubtreeMemo;
  /** Witness key names whose cosignatures count for the answer checkpoint. */
  witnessNames: readonly string[];
  /** `KT_ANSWER_COSIGNATURES`. */
  answerCosignatures: number;
  /** `KT_LOG_WAIT_MS`. */
  waitMs: number;
  /** Wakes this process's sequencer. */
  wake: () => void;
  /** `KT_MAX_BINDING_DAYS`. */
  maxBindingDays: number;
}

/** How long a checkpoint read stays the answer for lookups without a local signal, ms. */
const CHECKPOINT_CACHE_MS = 100;
/** Leaf proofs kept (about 1 KB each at 10^6 leaves). */
const LEAF_PROOFS_KEPT = 4_096;

/** The key log as the domain uses it (`log.ts` documents each method). */
export class KtLogService implements KtLog {
  readonly origin: string;
  readonly vkey: string;
  readonly maxBindingDays: number;
  private readonly listeners = new Set<() => void>();
  private cached: { at: number; checkpoint: KtCheckpointRecord | undefined } | undefined;
  private answer: KtCheckpointRecord | undefined;
  private readonly memo: SubtreeMemo;
  /** The snapshot's proof under the last answer checkpoint's size: the same for every answer under it. */
  private directoryProof: { size: number; proof: KtDirectoryProof } | undefined;
  /**
   * Leaves' inclusion proofs by tree size and index, base64 as answered: a proof under one size never
   * changes, and a card looked up again under the same checkpoint (by many merchants, or one merchant
   * for every receipt of a busy customer) is answered without reading tiles or hashing.
   */
  private readonly leafProofs = new Lru<string, string[]>(LEAF_PROOFS_KEPT);
  /** The last checkpoint record's note with its cosignatures (records are read fresh, never changed). */
  private note: { checkpoint: KtCheckpointRecord; text: string } | undefined;

  constructor(private readonly deps: KtLogServiceDeps) {
    this.origin = deps.signer.key.name;
    this.vkey = formatVkey(deps.signer.key);
    this.maxBindingDays = deps.maxBindingDays;
    this.memo = deps.memo ?? new SubtreeLru();
  }

  pendingStatement(input: StatementToLog): KtPendingStatement {
    return pendingStatementOf(input, this.deps.clock.now(), this.deps.seal);
  }

  pendingDirectoryChange(reason: string, tenantId?: string): KtPendingDirectoryChange {
    return directoryChange(reason, this.deps.clock.now(), tenantId);
  }

  notify(): void {
    this.deps.wake();
  }

  /** Called by the sequencer of this process after each checkpoint (and cosignature round). */
  checkpointed(): void {
    this.cached = undefined;
    for (const listener of this.listeners) listener();
  }

  async waitForLeaf(pendingId: string, options: { timeoutMs?: number; witnessGraceMs?: number } = {}) {
    const deadline = performance.now() + (options.timeoutMs ?? this.deps.waitMs);
    let signedAt: number | undefined;
    let delay = 5;
    for (;;) {
      const leaf = await this.deps.log.leafByPending(pendingId);
      if (leaf !== undefined) {
        const checkpoint = await this.answerCheckpoint(leaf.index + 1);
        if (checkpoint !== undefined) {
          signedAt ??= performance.now();
          const grace = Math.min(options.witnessGraceMs ?? 0, deadline - signedAt);
          if (this.witnessed(checkpoint) || performance.now() - signedAt >= grace) {
            const proofs = await this.proofsUnder(checkpoint, leaf.index);
            return proofs as KtAnswerProofs & { proof: NonNullable<KtAnswerProofs["proof"]> };
          }
        }
      } else {
        const pending = await this.deps.log.findPending(pendingId);
        if (pending?.refused !== undefined) {
          throw new AppError("internal_server_error", "The key log refused the statement.", {
            cause: new Error(`pending ${pendingId} refused: ${pending.refused}`),
          });
        }
        if (pending === undefined && (await this.deps.log.leafByPending(pendingId)) === undefined) {
          throw new AppError("internal_server_error", "The statement is not in the key log.", {
            cause: new Error(`no pending record or leaf ${pendingId}`),
          });
        }
      }
      const left = deadline - performance.now();
      if (left <= 0 && signedAt === undefined) throw notSequenced(options.timeoutMs ?? this.deps.waitMs);
      await this.signalOr(Math.min(delay, left));
      delay = Math.min(delay * 2, 200);
    }
  }

  async proofs(input: { leafIndex?: number } = {}): Promise<KtAnswerProofs> {
    const checkpoint = await this.answerCheckpoint((input.leafIndex ?? 0) + 1);
    if (checkpoint === undefined) {
      throw new AppError("service_unavailable", "The key log has no checkpoint covering the answer yet.", {
        retryAfterSeconds: 1,
      });
    }
    return this.proofsUnder(checkpoint, input.leafIndex);
  }

  /**
   * The answer checkpoint of at least `minSize`: the newest, when enough witnesses cosigned it; else
   * the last one chosen that they did (while it is large enough); else the newest anyway.
   */
  private async answerCheckpoint(minSize: number): Promise<KtCheckpointRecord | undefined> {
    const latest = await this.latest();
    if (latest === undefined || latest.size < minSize) return undefined;
    if (this.witnessed(latest)) {
      this.answer = latest;
      return latest;
    }
    if (this.answer !== undefined && this.answer.size >= minSize && this.answer.size < latest.size) {
      const again = await this.deps.log.checkpointAt(this.answer.size);
      if (again !== undefined && this.witnessed(again)) return again;
    }
    return latest;
  }

  private witnessed(checkpoint: KtCheckpointRecord): boolean {
    const count = this.deps.witnessNames.filter((name) => checkpoint.cosignatures[name] !== undefined).length;
    return count >= this.deps.answerCosignatures;
  }

  private async latest(): Promise<KtCheckpointRecord | undefined> {
    const now = performance.now();
    if (this.cached !== undefined && now - this.cached.at < CHECKPOINT_CACHE_MS)
      return this.cached.checkpoint;
    const checkpoint = await this.deps.log.latestCheckpoint();
    this.cached = { at: now, checkpoint };
    return checkpoint;
  }

  private async proofsUnder(
    checkpoint: KtCheckpointRecord,
    leafIndex: number | undefined,
  ): Promise<KtAnswerProofs> {
    const note = this.noteOf(checkpoint);
    const answer: KtAnswerProofs = {
      directory: await this.directoryUnder(checkpoint.size),
      checkpoint: note,
      treeSize: checkpoint.size,
    };
    if (leafIndex !== undefined) {
      answer.proof = {
        leafIndex,
        treeSize: checkpoint.size,
        inclusion: await this.proveLeaf(leafIndex, checkpoint.size),
        checkpoint: note,
      };
    }
    return answer;
  }

  private noteOf(checkpoint: KtCheckpointRecord): string {
    if (this.note?.checkpoint !== checkpoint) {
      this.note = { checkpoint, text: noteWithCosignatures(checkpoint) };
    }
    return this.note.text;
  }

  /** A leaf's inclusion proof under `size`, kept: the same proof serves every answer under that size. */
  private async proveLeaf(index: number, size: number): Promise<string[]> {
    const key = `${size}/${index}`;
    const kept = this.leafProofs.get(key);
    if (kept !== undefined) return kept;
    // Frozen: every answer under this size shares the array.
    const proof = Object.freeze(await this.prove(index, size)) as string[];
    this.leafProofs.set(key, proof);
    return proof;
  }

  /** The snapshot in force under a checkpoint of `size` and its inclusion proof, kept for that size. */
  private async directoryUnder(size: number): Promise<KtDirectoryProof> {
    const kept = this.directoryProof;
    if (kept !== undefined && kept.size === size) return kept.proof;
    const directory = await this.deps.log.directoryBefore(size);
    if (directory === undefined) {
      throw new AppError("service_unavailable", "The key log has no directory snapshot yet.", {
        retryAfterSeconds: 1,
      });
    }
    const proof = {
      index: directory.index,
      inclusion: await this.prove(directory.index, size),
      sha256: directory.sha256,
    };
    this.directoryProof = { size, proof };
    return proof;
  }

  private async prove(index: number, size: number): Promise<string[]> {
    return (await inclusionProofFromTiles(this.deps.tiles, index, size, nodeSha256, this.memo)).map(base64);
  }

  /** Waits `ms`, or less when this process's sequencer signs a checkpoint. */
  private async signalOr(ms: number): Promise<void> {
    let listener: (() => void) | undefined;
    const signalled = new Promise<void>((resolve) => {
      listener = resolve;
      this.listeners.add(resolve);
    });
    try {
      await Promise.race([signalled, sleep(ms, undefined, { ref: false })]);
    } finally {
      if (listener !== undefined) this.listeners.delete(listener);
    }
  }
}

/** The checkpoint's note with every cosignature line, in the order of the witnesses' names. */
export function noteWithCosignatures(checkpoint: KtCheckpointRecord): string {
  const lines = Object.keys(checkpoint.cosignatures)
    .sort()
    .map((name) => checkpoint.cosignatures[name]?.line ?? "");
  return `${checkpoint.note}${lines.join("")}`;
}

/**
 * The pending record of a checked statement (`KtLog.pendingStatement`): a fresh random opening, the
 * statement without `cardRef`, and for a card statement the card reference sealed for the sequencer
 * (`seal` is needed only then: the operator API logs tenant statements without one).
 */
export function pendingStatementOf(input: StatementToLog, now: Date, seal?: CardRefSeal): KtPendingStatement {
  const id = input.id ?? randomId("ktp", 16);
  const text = fromUtf8(input.bytes);
  if (text === undefined) throw new TypeError("a statement is UTF-8");
  const record: KtPendingStatement = {
    kind: "statement",
    id,
    tenantId: input.tenantId,
    order: orderOf(input.statement, input.card),
    statement: input.card === undefined ? text : withoutCardRef(text),
    signature: base64(input.signature),
    signingKeyId: input.signingKeyId,
    opening: base64(secureRandomBytes(16)),
    createdAt: now,
  };
  if (input.card !== undefined) {
    if (seal === undefined) throw new TypeError("a card statement needs the card-reference seal");
    record.card = { kind: input.card.kind, key: input.card.key, sealedRef: seal.seal(id, input.card.ref) };
  }
  if (input.userId !== undefined) record.userId = input.userId;
  return record;
}

function notSequenced(ms: number): AppError {
  return new AppError(
    "service_unavailable",
    `The key log did not log the statement within ${ms} ms; the change is stored and its statement queued. Ask again for its proof.`,
    { retryAfterSeconds: 5 },
  );
}
