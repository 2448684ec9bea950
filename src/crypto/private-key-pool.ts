import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { AppError } from "../errors.js";
import type { SealedReceipt } from "./envelope.js";
import { parsePrivateKey } from "./keys.js";
import type { WorkerInit, WorkerRequest, WorkerResponse, WorkerTask } from "./private-key-protocol.js";
import { describeCause, deserializeError } from "./private-key-protocol.js";
import { workerEntry } from "./worker-entry.js";

/** Options of a {@link PrivateKeyPool}. */
export interface PrivateKeyPoolOptions {
  /** Number of worker threads; default `os.availableParallelism()`. */
  size?: number;
  /** The escrow private key, base64 DER PKCS#8 (or PEM). Each worker parses it once at start. */
  escrowPrivateKey: string;
}

/** What {@link PrivateKeyPool.openReceipt} needs to decrypt one receipt for its owner. */
export interface OpenReceiptRequest {
  /** The caller's private key, base64 DER PKCS#8 or PEM. Held in memory for this call only. */
  privateKey: string;
  /** Canonical base64 DER SPKI of the key the grant names (as returned by `parsePublicKey`). */
  expectedSpki: string;
  sealed: SealedReceipt;
  /** The receipt's additional authenticated data, `receiptAad(...)`. */
  aad: Uint8Array;
}

interface Pending {
  resolve: (result: Buffer) => void;
  reject: (error: unknown) => void;
}

interface Slot {
  worker: Worker | undefined;
  pending: Map<number, Pending>;
}

/**
 * A pool of worker threads for RSA private-key work (decrypting receipts, releasing escrow). An
 * RSA-2048 private operation costs about a millisecond of CPU; on the event loop a burst of decrypts
 * would stall every other request, so they run here instead. Tasks go to the least busy worker.
 * Workers start on first use, are replaced when one dies (its pending tasks are rejected with
 * `internal_server_error`, never left hanging), and do not keep the process alive while idle.
 */
export class PrivateKeyPool {
  /** Number of worker threads. */
  readonly size: number;
  private readonly init: WorkerInit;
  private readonly slots: Slot[];
  private nextTaskId = 1;
  private cursor = 0;
  private closed = false;

  /** Throws `invalid_request` (field `escrowPrivateKey`) when the escrow key is not a usable RSA key. */
  constructor(options: PrivateKeyPoolOptions) {
    const size = options.size ?? availableParallelism();
    if (!Number.isInteger(size) || size < 1)
      throw new RangeError("PrivateKeyPool size must be a positive integer");
    parsePrivateKey(options.escrowPrivateKey, "escrowPrivateKey");
    this.size = size;
    this.init = { escrowPrivateKey: options.escrowPrivateKey };
    this.slots = Array.from({ length: size }, () => ({ worker: undefined, pending: new Map() }));
  }

  /**
   * Decrypts a sealed receipt with its owner's private key and returns the plaintext. The key is
   * checked against `expectedSpki` before anything else: `invalid_request` (field `privateKey`) when it
   * does not parse, `forbidden` when it is not the grant's key, and only then is the receipt opened;
   * a receipt that fails to open with the right key is `internal_server_error` (corruption or a bug).
   */
  openReceipt(request: OpenReceiptRequest): Promise<Buffer> {
    const { sealed } = request;
    const bytes = {
      encryptedAesKey: copyBytes(sealed.encryptedAesKey),
      iv: copyBytes(sealed.iv),
      ciphertext: copyBytes(sealed.ciphertext),
      authTag: copyBytes(sealed.authTag),
      aad: copyBytes(request.aad),
    };
    const task: WorkerTask = {
      op: "open",
      privateKey: request.privateKey,
      expectedSpki: request.expectedSpki,
      ...bytes,
    };
    return this.run(
      task,
      Object.values(bytes).map((b) => b.buffer),
    );
  }

  /**
   * Re-wraps an escrowed receipt's AES key to a newly registered public key (escrow release): unwraps
   * it with the escrow private key and wraps it to `toSpki` (base64 DER SPKI). The receipt's ciphertext
   * is not involved and stays byte-for-byte the same.
   */
  rewrapFromEscrow(encryptedAesKey: Uint8Array, toSpki: string): Promise<Buffer> {
    const wrapped = copyBytes(encryptedAesKey);
    return this.run({ op: "rewrap", encryptedAesKey: wrapped, toSpki }, [wrapped.buffer]);
  }

  /**
   * Stops every worker. Tasks still pending are rejected with `service_unavailable` (the server is
   * shutting down), and so is any call made afterwards. Calling it again is harmless.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const slot of this.slots) rejectAll(slot, shuttingDown());
    await Promise.all(
      this.slots.map(async (slot) => {
        const worker = slot.worker;
        slot.worker = undefined;
        await worker?.terminate();
      }),
    );
  }

  private run(task: WorkerTask, transfer: ArrayBuffer[]): Promise<Buffer> {
    if (this.closed) return Promise.reject(shuttingDown());
    const slot = this.leastBusySlot();
    const worker = slot.worker ?? this.spawn(slot);
    const id = this.nextTaskId++;
    const request: WorkerRequest = { ...task, id };
    return new Promise<Buffer>((resolve, reject) => {
      slot.pending.set(id, { resolve, reject });
      worker.ref();
      try {
        worker.postMessage(request, transfer);
      } catch (error) {
        this.settle(slot, worker, id);
        reject(
          new AppError("internal_server_error", "The private-key task could not be sent.", { cause: error }),
        );
      }
    });
  }

  /** The slot with the fewest pending tasks; ties go round-robin so idle workers share the load. */
  private leastBusySlot(): Slot {
    let best: Slot | undefined;
    for (let i = 0; i < this.slots.length; i++) {
      const slot = this.slots[(this.cursor + i) % this.slots.length];
      if (slot !== undefined && (best === undefined || slot.pending.size < best.pending.size)) best = slot;
    }
    this.cursor = (this.cursor + 1) % this.slots.length;
    if (best === undefined) throw new Error("PrivateKeyPool has no slots");
    return best;
  }

  private spawn(slot: Slot): Worker {
    const entry = workerEntry("private-key-worker", import.meta.url);
    const worker = new Worker(entry.url, {
      name: "private-key-worker",
      workerData: this.init,
      ...(entry.execArgv === undefined ? {} : { execArgv: entry.execArgv }),
    });
    worker.unref();
    let failure: unknown;
    worker.on("message", (response: WorkerResponse) => {
      const pending = this.settle(slot, worker, response.id);
      if (pending === undefined) return;
      if (response.ok) {
        const { result } = response;
        pending.resolve(Buffer.from(result.buffer, result.byteOffset, result.byteLength));
      } else {
        pending.reject(deserializeError(response.error));
      }
    });
    worker.on("error", (error) => {
      failure = error;
    });
    worker.on("exit", (exitCode) => {
      if (slot.worker === worker) slot.worker = undefined;
      if (this.closed) return;
      const cause = new Error(`worker exited with code ${exitCode}: ${describeCause(failure) ?? "no error"}`);
      rejectAll(
        slot,
        new AppError("internal_server_error", "The private-key worker stopped unexpectedly.", { cause }),
      );
    });
    slot.worker = worker;
    return worker;
  }

  /** Removes a task from its slot; lets the process exit again once the worker is idle. */
  private settle(slot: Slot, worker: Worker, id: number): Pending | undefined {
    const pending = slot.pending.get(id);
    slot.pending.delete(id);
    if (slot.pending.size === 0) worker.unref();
    return pending;
  }
}

/** A copy of the bytes in a fresh ArrayBuffer that can be transferred without detaching the caller's. */
function copyBytes(bytes: Uint8Array): Uint8Array<ArrayBuffer> {
  return new Uint8Array(bytes);
}

function rejectAll(slot: Slot, error: AppError): void {
  const pending = [...slot.pending.values()];
  slot.pending.clear();
  for (const task of pending) task.reject(error);
}

function shuttingDown(): AppError {
  return new AppError("service_unavailable", "The server is shutting down.");
}
