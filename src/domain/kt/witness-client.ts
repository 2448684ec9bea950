import type { Logger } from "pino";
import type { Clock } from "../../clock.js";
import { nodeEngine, nodeSha256 } from "../../kt/node-engine.js";
import { checkNoteSignature, type NoteKey, parseNote } from "../../kt/note.js";
import { consistencyProofFromTiles, rootFromTiles, type TileReader } from "../../kt/tiles.js";
import { formatAddCheckpoint, readWitnessReply } from "../../kt/witness.js";
import type { KtCheckpointRecord, KtLogStore } from "../../store/kt-types.js";

/**
 * The log's side of the C2SP tlog-witness `add-checkpoint` protocol: after each checkpoint (and at
 * least every 10 minutes), every witness of `WITNESS_URLS` gets the newest checkpoint with a
 * consistency proof from the size it last cosigned. A cosignature is checked with the witness's key
 * (as a merchant will) before it is stored and served. A witness that answers it holds a size the
 * log does not have, or that the proof does not verify from what it holds, has seen another history
 * of this log: the sequencer stops signing (see `sequencer.ts`).
 */

/** A witness as configured: where it listens and its cosigner key (vkey type 0x04). */
export interface WitnessEndpoint {
  /** The URL prefix; the log posts to `<url>/add-checkpoint`. */
  url: string;
  key: NoteKey;
}

/** What one witness made of a checkpoint. */
export type WitnessOutcome =
  | { witness: string; kind: "cosigned"; size: number; timestamp: number }
  /** It holds a larger tree than the checkpoint's: the log lost leaves (a restored backup). */
  | { witness: string; kind: "ahead"; size: number }
  /** Its tree is not a prefix of the log's (422): another history. */
  | { witness: string; kind: "inconsistent"; message: string }
  /** Unreachable, a refusal other than the above, or an answer that does not verify. */
  | { witness: string; kind: "failed"; message: string };

/** A cosignature more than this far in the future is refused (merchants would not count it either). */
const MAX_FUTURE_SECONDS = 60;

export interface WitnessClientOptions {
  witnesses: readonly WitnessEndpoint[];
  store: KtLogStore;
  /** Where consistency proofs are read (the store's tiles, through a cache). */
  tiles: TileReader;
  clock: Clock;
  logger: Logger;
  /** Time limit of one request, ms. */
  timeoutMs: number;
  fetch?: typeof fetch;
}

export class WitnessClient {
  private readonly fetch: typeof fetch;

  constructor(private readonly options: WitnessClientOptions) {
    this.fetch = options.fetch ?? fetch;
  }

  get count(): number {
    return this.options.witnesses.length;
  }

  /** Sends `checkpoint` to every witness at once; each outcome, in the order of the witnesses. */
  submit(checkpoint: KtCheckpointRecord): Promise<WitnessOutcome[]> {
    return Promise.all(this.options.witnesses.map((w) => this.submitTo(w, checkpoint)));
  }

  private async submitTo(witness: WitnessEndpoint, checkpoint: KtCheckpointRecord): Promise<WitnessOutcome> {
    const name = witness.key.name;
    const states = await this.options.store.witnessStates();
    let oldSize = states.find((s) => s.name === name)?.size ?? 0;
    for (let attempt = 1; attempt <= 2; attempt++) {
      if (oldSize > checkpoint.size) return { witness: name, kind: "ahead", size: oldSize };
      const reply = await this.post(witness, checkpoint, oldSize).catch((err: unknown) => ({
        kind: "refused" as const,
        status: 0,
        message: err instanceof Error ? err.message : String(err),
      }));
      if (reply.kind === "cosigned") return this.accept(witness, checkpoint, reply.lines);
      if (reply.kind === "stale" && attempt === 1) {
        oldSize = reply.size;
        continue;
      }
      if (reply.kind === "stale") return { witness: name, kind: "failed", message: "stale twice" };
      if (reply.status === 422) return { witness: name, kind: "inconsistent", message: reply.message };
      return { witness: name, kind: "failed", message: `${reply.status}: ${reply.message}` };
    }
    return { witness: name, kind: "failed", message: "unreachable" };
  }

  private async post(witness: WitnessEndpoint, checkpoint: KtCheckpointRecord, oldSize: number) {
    const proof =
      oldSize === 0 || oldSize === checkpoint.size
        ? []
        : await consistencyProofFromTiles(this.options.tiles, oldSize, checkpoint.size, nodeSha256);
    const body = formatAddCheckpoint({ oldSize, proof, checkpoint: checkpoint.note });
    const response = await this.fetch(`${witness.url.replace(/\/+$/, "")}/add-checkpoint`, {
      method: "POST",
      headers: { "content-type": "text/plain; charset=utf-8" },
      body,
      signal: AbortSignal.timeout(this.options.timeoutMs),
    });
    const text = (await response.text()).slice(0, 64 * 1024);
    return readWitnessReply(response.status, response.headers.get("content-type") ?? "", text);
  }

  /** Verifies the witness's line with its key, then stores the cosignature and what the witness now holds. */
  private async accept(
    witness: WitnessEndpoint,
    checkpoint: KtCheckpointRecord,
    lines: string[],
  ): Promise<WitnessOutcome> {
    const name = witness.key.name;
    const note = parseNote(checkpoint.note);
    const now = Math.floor(this.options.clock.now().getTime() / 1000);
    for (const line of lines) {
      if (note === undefined) break;
      const check = checkNoteSignature(
        { text: note.text, signatures: parseNote(`${note.text}\n${line}`)?.signatures ?? [] },
        witness.key,
        nodeEngine,
      );
      if (check.status !== "good" || check.timestamp === undefined) continue;
      if (check.timestamp > now + MAX_FUTURE_SECONDS) {
        return { witness: name, kind: "failed", message: "cosignature dated in the future" };
      }
      await this.options.store.addCosignature(checkpoint.size, name, { line, timestamp: check.timestamp });
      await this.options.store.putWitnessState({
        name,
        size: checkpoint.size,
        root: checkpoint.root,
        updatedAt: this.options.clock.now(),
      });
      return { witness: name, kind: "cosigned", size: checkpoint.size, timestamp: check.timestamp };
    }
    this.options.logger.warn({ witness: name }, "a witness answered without a valid cosignature of its key");
    return { witness: name, kind: "failed", message: "no valid cosignature of the witness's key" };
  }
}

/** The root of the log's tree at `size`, for comparing with what a witness cosigned. */
export function rootAt(tiles: TileReader, size: number): Promise<Uint8Array> {
  return rootFromTiles(tiles, size, nodeSha256);
}
