/* Over 400 lines on purpose: one round of the sequencer (plan, append, report refusals, checkpoint,
 * cosign) shares the lease, the fence and the tile overlay of one class; split, each part would reach
 * into the others' private state. */
import type { Logger } from "pino";
import { LeaseRunner, sleep } from "../../background/lease-runner.js";
import type { Clock } from "../../clock.js";
import { bytesEqual } from "../../kt/bytes.js";
import { leafHash } from "../../kt/merkle.js";
import { nodeSha256 } from "../../kt/node-engine.js";
import { formatCheckpoint, formatNote, type NoteSigner, signNoteLine } from "../../kt/note.js";
import { appendToTiles, rootFromTiles, type TileReader } from "../../kt/tiles.js";
import type {
  KtAppendBatch,
  KtCheckpointRecord,
  KtFence,
  KtLeafRecord,
  KtPendingRecord,
} from "../../store/kt-types.js";
import type { Lease, LeaseStore } from "../../store/lease-types.js";
import type { AuditEvent, AuditStore } from "../../store/types.js";
import { INTERNAL_CALLER } from "../grants.js";
import { type BatchDeps, buildSnapshot, planBatch } from "./batch.js";
import type { DirectorySource } from "./directory-source.js";
import { TileOverlay } from "./tile-cache.js";
import { rootAt, type WitnessClient, type WitnessOutcome } from "./witness-client.js";

/**
 * The log's one sequencer (docs/key-transparency.md). Every instance runs this loop; the one that holds the
 * lease `kt-sequencer` works, the others stand by and take over when its lease runs out. Each round:
 * take up to `batchSize` pending records, check them (`batch.ts`), append their leaves (and a
 * directory snapshot when the directory changed, none exists or the last is a day old) in one fenced
 * store step, then sign a checkpoint of the new head and send it to the witnesses.
 *
 * It never signs a checkpoint inconsistent with what a witness cosigned: before signing size n it
 * checks, for every witness, that the size the witness last cosigned is at most n and that the log's
 * root at that size is the one the witness cosigned; and after taking the lease (a restart, a
 * takeover, a store restored from a backup whose records of the witnesses are old too) it signs only
 * once a witness has answered a probe with the newest checkpoint the store holds. A witness that holds
 * a larger tree than the log, or whose tree the log's is not an extension of, stops the sequencer
 * (`halted`): appending and signing on would fork the log. An operator restores the missing leaves
 * (a newer backup) and restarts.
 *
 * The lease is the events worker's kind: a {@link LeaseRunner} takes it, renews it on a timer and stops
 * the rounds when it is lost; every append and checkpoint carries its fencing token.
 */

/** The lease store the sequencer's {@link LeaseRunner} takes `kt-sequencer` from (the events worker's too). */
export type SequencerLeases = LeaseStore;

export interface SequencerOptions {
  /** This instance's name in the lease. */
  holder: string;
  /** Pending records taken per round. */
  batchSize: number;
  leaseTtlMs: number;
  /** Time between rounds when nothing wakes the loop, ms. */
  pollMs: number;
  /** Witnesses are asked again at least this often with no new checkpoint (fresh cosignatures), ms. */
  witnessIntervalMs: number;
  /** A new directory snapshot at least this often, ms (24 h). */
  directoryRefreshMs: number;
  maxBindingDays: number;
}

export interface SequencerDeps extends BatchDeps {
  leases: SequencerLeases;
  clock: Clock;
  logger: Logger;
  signer: NoteSigner;
  directory: DirectorySource;
  witnesses: WitnessClient;
  /** The store's tiles through a cache. */
  tiles: TileReader;
  /** Called after each checkpoint is stored (wakes the waiters of this process). */
  onCheckpoint?: (checkpoint: KtCheckpointRecord) => void;
  /**
   * Directory changes that fall due with time (a BIN move handed over 7 days after the snapshot that
   * announced it: `bin-moves.ts`), made by the lease holder at the start of each round, so that one
   * instance makes them and the same round snapshots them. Its failures are its own to log.
   */
  settle?: (now: Date) => Promise<unknown>;
  /** Where each refused statement is audited (the tenant's `kt.statement_refused`). */
  audit?: Pick<AuditStore, "append">;
}

/** What a round did. */
export type RoundOutcome = "standby" | "halted" | "idle" | "appended" | "fenced_out" | "moved";

const LEASE = "kt-sequencer";

export class Sequencer {
  private readonly runner: LeaseRunner;
  /** The fencing token of the lease the last round ran under. */
  private token: number | undefined;
  /** Whether a witness answered the probe since this holder took the lease (or there are none). */
  private synced = false;
  private haltedBecause: string | undefined;
  private lastWitnessRound = 0;
  private witnessRound: Promise<void> | undefined;
  private witnessAgain = false;
  private stopped = true;
  private wakeUp = new AbortController();

  constructor(
    private readonly deps: SequencerDeps,
    private readonly options: SequencerOptions,
  ) {
    this.runner = new LeaseRunner({
      leases: deps.leases,
      name: LEASE,
      holder: options.holder,
      ttlMs: options.leaseTtlMs,
      clock: deps.clock,
      logger: deps.logger,
      // A standby instance looks as often as the leader polls, so a released lease moves on at once.
      standbyMs: options.pollMs,
      job: (lease, signal) => this.lead(lease, signal),
    });
  }

  /** Why the sequencer stopped for good (a witness saw another history), if it did. */
  get halted(): string | undefined {
    return this.haltedBecause;
  }

  /** Whether this instance holds the lease (as of its last take or renewal). */
  get leading(): boolean {
    return this.runner.holding;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.runner.start();
  }

  /** Stops the rounds after the one in flight, waits for witness requests, and gives the lease up. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.wake();
    await this.runner.stop();
    await this.witnessRound;
  }

  /** Runs the next round now rather than after the poll interval. */
  wake(): void {
    this.wakeUp.abort();
  }

  /** The job while the lease is held: rounds until it is lost, fenced out or the sequencer stops. */
  private async lead(lease: Lease, signal: AbortSignal): Promise<void> {
    let failures = 0;
    let loggedAt = Number.NEGATIVE_INFINITY;
    while (!signal.aborted && !this.stopped) {
      let outcome: RoundOutcome = "idle";
      try {
        outcome = await this.roundUnder(lease);
        failures = 0;
      } catch (err) {
        failures++;
        // A store outage fails every round: one line when it starts, then one a minute.
        if (failures === 1 || performance.now() - loggedAt >= 60_000) {
          this.deps.logger.error({ err, failures }, "key log sequencer round failed");
          loggedAt = performance.now();
        }
      }
      if (outcome === "fenced_out") {
        this.runner.forget();
        break;
      }
      if (signal.aborted || this.stopped) break;
      if (failures === 0 && (outcome === "appended" || outcome === "moved")) continue;
      // After failures, wait longer each time (up to 5 s), so an outage is not hammered.
      const wait = Math.min(
        this.options.pollMs * 2 ** Math.min(failures, 10),
        Math.max(this.options.pollMs, 5_000),
      );
      await sleep(wait, signal, this.wakeUp.signal);
      if (this.wakeUp.signal.aborted) this.wakeUp = new AbortController();
    }
    await this.witnessRound;
  }

  /**
   * One round, the lease taken or renewed first through the same runner (tests step the sequencer
   * with it); `standby` while another instance holds the lease.
   */
  async round(): Promise<RoundOutcome> {
    if (this.haltedBecause !== undefined) return "halted";
    const outcome = await this.runner.once((lease) => this.roundUnder(lease));
    if (outcome === "fenced_out") this.runner.forget();
    return outcome ?? "standby";
  }

  /** One round under `lease`. */
  private async roundUnder(lease: Lease): Promise<RoundOutcome> {
    if (this.haltedBecause !== undefined) return "halted";
    // secret-compare: lease fencing tokens the store hands out, never sent by a caller.
    if (lease.token !== this.token) {
      this.token = lease.token;
      this.synced = this.deps.witnesses.count === 0;
      this.deps.logger.info({ token: lease.token }, "key log sequencer took the lease");
    }
    const fence: KtFence = { token: lease.token };
    if (!this.synced) await this.probeWitnesses();
    await this.deps.settle?.(this.deps.clock.now());
    const appended = await this.appendPending(fence);
    if (appended === "fenced_out") return appended;
    if (this.haltedBecause !== undefined) return "halted";
    if (this.synced) {
      const signed = await this.checkpoint(fence);
      if (signed === "fenced_out") return signed;
      if (this.haltedBecause !== undefined) return "halted";
    }
    this.witnessHeartbeat();
    return appended;
  }

  /** Appends what is pending (and a snapshot when due) in one fenced step. */
  private async appendPending(fence: KtFence): Promise<RoundOutcome> {
    const { log } = this.deps;
    const now = this.deps.clock.now();
    const head = await log.head();
    const pending = await log.pending(this.options.batchSize);
    const previous = await log.directoryBefore(head.size);
    const stale =
      previous === undefined ||
      now.getTime() - previous.issuedAt.getTime() >= this.options.directoryRefreshMs;
    if (pending.length === 0 && !stale) return "idle";
    const plan = await planBatch(this.deps, pending, now);
    const leaves: Array<{ record: KtLeafRecord; bytes: Uint8Array }> = plan.leaves.map((l, i) => ({
      record: { ...l.record, index: head.size + i },
      bytes: l.bytes,
    }));
    const batch: Omit<KtAppendBatch, "newSize" | "root" | "tiles" | "leaves"> = {
      oldSize: head.size,
      consumed: plan.consumed,
      refused: plan.refused,
      sequences: plan.sequences,
    };
    if (plan.directoryChanged || stale) {
      const index = head.size + leaves.length;
      const snapshot = await buildSnapshot(this.deps.directory, previous, index, now);
      if (snapshot.ok) {
        batch.directory = snapshot.record;
        leaves.push({
          record: { index, kind: "directory", directorySha256: snapshot.record.sha256, appendedAt: now },
          bytes: snapshot.bytes,
        });
      } else {
        this.deps.logger.error({ reason: snapshot.reason }, "key log: the directory cannot be snapshotted");
      }
    }
    if (leaves.length === 0 && plan.consumed.length === 0 && plan.refused.length === 0) return "idle";
    const appended = await appendToTiles(
      this.deps.tiles,
      head.size,
      leaves.map((l) => leafHash(l.bytes, nodeSha256)),
      nodeSha256,
    );
    const root = await rootFromTiles(
      new TileOverlay(this.deps.tiles, appended.tiles),
      appended.size,
      nodeSha256,
    );
    const records = leaves.map((l) =>
      l.record.kind === "directory" ? l.record : { ...l.record, leaf: l.bytes },
    );
    const outcome = await log.append(fence, {
      ...batch,
      newSize: appended.size,
      root,
      tiles: appended.tiles,
      leaves: records,
    });
    if (outcome.kind === "appended") {
      await this.reportRefused(pending, [...plan.refused, ...(outcome.followers ?? [])], now);
    }
    return outcome.kind;
  }

  /**
   * Logs and audits each statement refused in the append just made (those the store refused behind
   * them included), for the tenant that sent it. An audit failure is logged: the refusal stands.
   */
  private async reportRefused(
    pending: readonly KtPendingRecord[],
    refused: ReadonlyArray<{ id: string; reason: string }>,
    at: Date,
  ): Promise<void> {
    for (const { id, reason } of refused) {
      this.deps.logger.error({ pendingId: id, reason }, "key log sequencer refused a statement");
      const record = pending.find((p) => p.id === id) ?? (await this.deps.log.findPending(id));
      if (record === undefined || record.kind === "directory" || this.deps.audit === undefined) continue;
      const event: AuditEvent = {
        at,
        action: "kt.statement_refused",
        tenantId: record.kind === "statement" ? record.tenantId : record.toTenant,
        requestId: INTERNAL_CALLER.requestId,
        sourceIp: INTERNAL_CALLER.sourceIp,
        subject: `${id}: ${reason}`,
      };
      if (record.userId !== undefined) event.userId = record.userId;
      try {
        await this.deps.audit.append(event);
      } catch (err) {
        this.deps.logger.error({ err, pendingId: id }, "key log: a refusal could not be audited");
      }
    }
  }

  /**
   * Signs and stores a checkpoint of the head when it is larger than the newest checkpoint, if it is
   * consistent with what every witness cosigned (else halts).
   */
  private async checkpoint(fence: KtFence): Promise<"signed" | "none" | "fenced_out"> {
    const { log } = this.deps;
    const [head, latest] = await Promise.all([log.head(), log.latestCheckpoint()]);
    if (latest !== undefined && latest.size >= head.size) return "none";
    const root = await rootFromTiles(this.deps.tiles, head.size, nodeSha256);
    if (!bytesEqual(root, head.root)) {
      this.halt(`the head's root is not the root of its tiles at size ${head.size}`);
      return "none";
    }
    const problem = await this.witnessConflict(head.size);
    if (problem !== undefined) {
      this.halt(problem);
      return "none";
    }
    const record = this.sign(head.size, head.root);
    if ((await log.putCheckpoint(fence, record)) === "fenced_out") return "fenced_out";
    this.deps.onCheckpoint?.(record);
    this.submitToWitnesses();
    return "signed";
  }

  private sign(size: number, root: Uint8Array): KtCheckpointRecord {
    const text = formatCheckpoint({ origin: this.deps.signer.key.name, size, root, extensions: [] });
    const note = formatNote(text, [signNoteLine(this.deps.signer, text)]);
    return { size, root: root.slice(), note, signedAt: this.deps.clock.now(), cosignatures: {} };
  }

  /** Why signing size `size` would contradict a witness's record, if it would. */
  private async witnessConflict(size: number): Promise<string | undefined> {
    for (const witness of await this.deps.log.witnessStates()) {
      if (witness.size > size) {
        return `witness ${witness.name} cosigned size ${witness.size}, larger than the log's ${size}`;
      }
      if (witness.size > 0 && !bytesEqual(await rootAt(this.deps.tiles, witness.size), witness.root)) {
        return `the log's root at size ${witness.size} is not the one witness ${witness.name} cosigned`;
      }
    }
    return undefined;
  }

  /**
   * After taking the lease: sends the newest stored checkpoint (a checkpoint of the empty tree when
   * there is none, which contradicts no history) to every witness. A witness's answer that it holds
   * more, or another history, halts; once one witness answers at all, signing may go on.
   */
  private async probeWitnesses(): Promise<void> {
    const latest =
      (await this.deps.log.latestCheckpoint()) ??
      this.sign(0, await rootFromTiles(this.deps.tiles, 0, nodeSha256));
    const outcomes = await this.deps.witnesses.submit(latest);
    this.judge(outcomes);
    if (outcomes.some((o) => o.kind !== "failed")) this.synced = true;
    else this.deps.logger.warn("key log: no witness answered; no checkpoint is signed until one does");
  }

  private judge(outcomes: WitnessOutcome[]): void {
    for (const outcome of outcomes) {
      if (outcome.kind === "ahead") {
        this.halt(
          `witness ${outcome.witness} holds size ${outcome.size}, larger than the log's newest checkpoint`,
        );
      } else if (outcome.kind === "inconsistent") {
        this.halt(`witness ${outcome.witness} refused the log's consistency proof: ${outcome.message}`);
      } else if (outcome.kind === "failed") {
        this.deps.logger.warn(
          { witness: outcome.witness, message: outcome.message },
          "key log witness failed",
        );
      }
    }
  }

  private halt(reason: string): void {
    if (this.haltedBecause !== undefined) return;
    this.haltedBecause = reason;
    this.deps.logger.error({ reason }, "key log sequencer halted: signing on could fork the log");
  }

  /** Sends the newest checkpoint to the witnesses, one round at a time (a newer one waits for the round in flight). */
  private submitToWitnesses(): void {
    if (this.deps.witnesses.count === 0) return;
    if (this.witnessRound !== undefined) {
      this.witnessAgain = true;
      return;
    }
    this.lastWitnessRound = this.deps.clock.now().getTime();
    this.witnessRound = (async () => {
      do {
        this.witnessAgain = false;
        const latest = await this.deps.log.latestCheckpoint();
        if (latest === undefined) break;
        this.judge(await this.deps.witnesses.submit(latest));
        if (this.haltedBecause === undefined) this.deps.onCheckpoint?.(latest);
      } while (this.witnessAgain && !this.stopped);
    })()
      .catch((err: unknown) => this.deps.logger.warn({ err }, "key log witness round failed"))
      .finally(() => {
        this.witnessRound = undefined;
      });
  }

  /** Asks the witnesses again when the last round is `witnessIntervalMs` old. */
  private witnessHeartbeat(): void {
    if (
      this.synced &&
      this.deps.clock.now().getTime() - this.lastWitnessRound >= this.options.witnessIntervalMs
    ) {
      this.submitToWitnesses();
    }
  }
}
