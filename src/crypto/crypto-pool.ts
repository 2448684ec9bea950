/* Over 400 lines on purpose: the pool's typed task API, its scheduling and its worker lifecycle share
 * the slots' private state; split, each part would reach into the other's. */
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";
import { AppError, invalidRequest } from "../errors.js";
import { fastPathsOn } from "../fast-paths.js";
import type { WorkerInit, WorkerRequest, WorkerResponse, WorkerTask, WrapTarget } from "./crypto-protocol.js";
import {
  describeCause,
  deserializeError,
  unpackKeyPair,
  unpackSealedText,
  unpackWrappedKey,
} from "./crypto-protocol.js";
import type { SealedReceipt, SealedReceiptText } from "./envelope.js";
import { type EscrowKeyInfo, escrowKeysOf } from "./escrow-keys.js";
import type { GeneratedKeyPair } from "./keys.js";
import { isKeyAlgorithm, KEY_ALGORITHMS, type KeyAlgorithm, RSA_OAEP_256 } from "./suites.js";
import { workerEntry } from "./worker-entry.js";

/** Options of a {@link CryptoPool}. */
export interface CryptoPoolOptions {
  /** Number of worker threads for sealing and private-key operations; default `os.availableParallelism()`. */
  size?: number;
  /** Number of worker threads for key generation; default `size`. */
  keygenSize?: number;
  /**
   * The service's escrow private keys, base64 DER PKCS#8 (or PEM), the current one first (escrow:
   * the first seals, all can release). Each worker parses them once, when needed.
   */
  escrowPrivateKeys: string[];
}

/**
 * The nice value of key-generation workers (Linux): an RSA-2048 key takes tens to hundreds of
 * milliseconds of CPU, and at the default priority a burst of generate-keys calls took the cores from
 * the event loop (an encrypt load at 1,500 req/s fell to 900 req/s and its p99 doubled). At nice 10
 * the event loop runs first and key generation gets the rest of the CPU, which on an idle machine is
 * all of it.
 */
export const KEYGEN_NICENESS = 10;

/**
 * The most tasks of one event-loop turn sent to one worker before another is woken too: a seal
 * takes about 100 us, so a full message keeps a worker busy for about a millisecond.
 */
export const TURN_BATCH = 8;

/** What {@link CryptoPool.openReceipt} needs to decrypt one receipt for its owner. */
export interface OpenReceiptRequest {
  /** The caller's private key of either suite, base64 DER PKCS#8 or PEM. Held in memory for this call only. */
  privateKey: string;
  /** Canonical base64 DER SPKI of the key the grant names (as returned by `parsePublicKey`). */
  expectedSpki: string;
  /** The receipt; `encapsulatedKey` set when its key is wrapped with HPKE. */
  sealed: SealedReceipt;
  /** The key bundle's suite, when stored; otherwise HPKE exactly when `sealed.encapsulatedKey` is set. */
  algorithm?: KeyAlgorithm | undefined;
  /** The key bundle's `aadBound` mark: an RSA wrap's OAEP label is `aad`. */
  aadBound?: boolean | undefined;
  /** The receipt's additional authenticated data, `receiptAad(...)`. */
  aad: Uint8Array;
}

/** What {@link CryptoPool.seal} needs to seal one receipt to its recipient. */
export interface SealRequest {
  /** The receipt's sealed plaintext, as text (`plaintextTextOf`); the worker encodes it as UTF-8. */
  plaintext: string;
  /** The receipt's additional authenticated data, as text (`receiptAadText`); the worker encodes it as UTF-8. */
  aad: string;
  /** The recipient key's id and its base64 DER SPKI; each worker parses a key once (`PublicKeyCache`). */
  keyId: string;
  spki: string;
  /**
   * The recipient key's suite. The worker reads the suite from the key itself; when given, a value that
   * disagrees with the key is `invalid_request` (field `algorithm`) rather than a receipt nobody opens.
   */
  algorithm?: KeyAlgorithm | undefined;
  /** RSA only: bind the wrap to the AAD (OAEP label), as every wrap to an escrow key is. */
  aadBound?: boolean | undefined;
}

/** What {@link CryptoPool.rewrapFromEscrow} needs to release one escrowed receipt's AES key. */
export interface RewrapRequest {
  /** The receipt's `escrowKeyId`: which configured escrow key it was sealed to. */
  escrowKeyId: string;
  /** The receipt's wrapped AES key, and its encapsulated key when the escrow key is a P-256 one. */
  encryptedAesKey: Uint8Array;
  encapsulatedKey?: Uint8Array | undefined;
  /** The escrowed bundle's `aadBound` mark: an RSA wrap's OAEP label is `aad`. */
  aadBound?: boolean | undefined;
  /** The receipt's AES-GCM parts, which the unwrapped key must authenticate before it is re-wrapped. */
  sealed: Pick<SealedReceipt, "iv" | "ciphertext" | "authTag">;
  /** The receipt's additional authenticated data, `receiptAad(...)`: HPKE binds the wrapped key to it. */
  aad: Uint8Array;
  /** The key to re-wrap to, of either suite. */
  target: WrapTarget;
}

/** A re-wrapped AES key, base64 as the store keeps it; `encapsulatedKey` set for an HPKE target. */
export interface RewrappedKey {
  encryptedAesKey: string;
  encapsulatedKey?: string;
}

interface Pending {
  resolve: (result: Buffer | string) => void;
  reject: (error: unknown) => void;
}

/** A task waiting for the end of the event-loop turn to be sent to its worker. */
interface Outgoing {
  slot: Slot;
  request: WorkerRequest;
}

interface Slot {
  worker: Worker | undefined;
  pending: Map<number, Pending>;
  /** How the slot's worker starts. */
  init: WorkerInit;
}

/**
 * A pool of worker threads for the service's key work, both suites: private-key operations
 * (decrypting receipts, releasing escrow), sealing new receipts and, on workers of their own at a
 * lower priority, key generation. An RSA-2048 private operation costs about a millisecond of CPU; on the event loop a burst
 * of decrypts would stall every other request, so they run here instead. Sealing (a fresh AES key, AES-
 * GCM, RSA-OAEP wrap) is cheaper but was still the event loop's largest single cost of an encrypt.
 * Tasks go to the least busy worker of their kind.
 * Workers start on first use, are replaced when one dies (its pending tasks are rejected with
 * `internal_server_error`, never left hanging), and do not keep the process alive while idle.
 */
export class CryptoPool {
  /** Number of worker threads for sealing and private-key operations. */
  readonly size: number;
  private readonly slots: Slot[];
  private readonly keygenSlots: Slot[];
  private nextTaskId = 1;
  /** Tasks queued in this event-loop turn, not sent yet (see `run`). */
  private outbox: Outgoing[] = [];
  private cursor = 0;
  private closed = false;

  /**
   * The public side of each escrow key, in configuration order: the first is the one new escrowed
   * receipts are sealed to, and its `keyId` is what they record as `escrowKeyId`.
   */
  readonly escrowKeys: readonly EscrowKeyInfo[];

  /**
   * Throws `invalid_request` (field `escrowPrivateKeys[i]`) when an escrow key is not a usable key, is
   * given twice, or when there is none.
   */
  constructor(options: CryptoPoolOptions) {
    const size = options.size ?? availableParallelism();
    const keygenSize = options.keygenSize ?? size;
    for (const n of [size, keygenSize]) {
      if (!Number.isInteger(n) || n < 1) throw new RangeError("CryptoPool sizes must be positive integers");
    }
    this.escrowKeys = Object.freeze(escrowKeysOf(options.escrowPrivateKeys));
    this.size = size;
    const escrowPrivateKeys = [...options.escrowPrivateKeys];
    const fastPaths = fastPathsOn();
    const slots = (count: number, init: WorkerInit): Slot[] =>
      Array.from({ length: count }, () => ({ worker: undefined, pending: new Map(), init }));
    this.slots = slots(size, { escrowPrivateKeys, fastPaths });
    this.keygenSlots = slots(keygenSize, { escrowPrivateKeys, niceness: KEYGEN_NICENESS, fastPaths });
  }

  /**
   * Generates a key pair of the suite on a key-generation worker: RSA-2048 with public exponent 65537
   * (the default), or EC P-256 for `HPKE-P256-SHA256-A256GCM`; base64 DER SPKI and PKCS#8 either way.
   * An unknown suite name is `invalid_request` (field `algorithm`).
   */
  async generateKeyPair(algorithm: KeyAlgorithm = RSA_OAEP_256): Promise<GeneratedKeyPair> {
    if (!isKeyAlgorithm(algorithm)) {
      throw invalidRequest([{ field: "algorithm", description: `must be ${KEY_ALGORITHMS.join(" or ")}` }]);
    }
    const packed = await this.runBytes({ op: "generate", algorithm }, this.keygenSlots);
    try {
      const { spki, pkcs8 } = unpackKeyPair(packed);
      return { publicKey: spki.toString("base64"), privateKey: pkcs8.toString("base64"), algorithm };
    } finally {
      packed.fill(0);
    }
  }

  /**
   * Decrypts a sealed receipt with its owner's private key (either suite, read from the key) and
   * returns the plaintext. The key is checked against `expectedSpki` before anything else:
   * `invalid_request` (field `privateKey`) when it does not parse, `forbidden` when it is not the
   * grant's key or is of another suite than the receipt's key bundle, and only then is the receipt
   * opened; a receipt that fails to open with the right key is `internal_server_error` (corruption or a bug).
   */
  openReceipt(request: OpenReceiptRequest): Promise<Buffer> {
    const { sealed } = request;
    const [encryptedAesKey, iv, ciphertext, authTag, aad, encapsulatedKey] = copyIntoOneBuffer([
      sealed.encryptedAesKey,
      sealed.iv,
      sealed.ciphertext,
      sealed.authTag,
      request.aad,
      sealed.encapsulatedKey ?? new Uint8Array(0),
    ]);
    const task: WorkerTask = {
      op: "open",
      privateKey: request.privateKey,
      expectedSpki: request.expectedSpki,
      algorithm: request.algorithm,
      aadBound: request.aadBound,
      encryptedAesKey,
      iv,
      ciphertext,
      authTag,
      aad,
      ...(sealed.encapsulatedKey === undefined ? {} : { encapsulatedKey }),
    };
    return this.runBytes(task);
  }

  /**
   * Seals a receipt to a recipient's public key on a worker: RSA-OAEP-256 (`sealReceipt`) or
   * HPKE (`sealReceiptHpke`) as the key's suite says; the AES key is drawn, used and zeroed
   * there and never reaches the event loop. The parts come back as base64, the form the store keeps,
   * with `encapsulatedKey` set for HPKE. A key that does not parse is `invalid_request` on `publicKey`,
   * as `parsePublicKey` words it.
   *
   * Not an async function: one would keep `request`, and so the plaintext, alive until the worker
   * answers (a suspended async function keeps its parameters); the task is the message's alone.
   */
  seal(request: SealRequest): Promise<SealedReceiptText> {
    return this.run({ op: "seal", ...request }).then((packed) => {
      if (typeof packed !== "string") throw unexpectedAnswer();
      return unpackSealedText(packed);
    });
  }

  /**
   * Re-wraps an escrowed receipt's AES key to a user's key (escrow release): unwraps
   * it with the escrow key `escrowKeyId` (any configured one; its suite is read from the key), proves
   * it is this receipt's key (its AES-GCM tag authenticates under `aad`) and wraps it to `target`, of
   * either suite (HPKE binds the wrapped key to `aad`; RSA does when `target.aadBound`). The receipt's
   * ciphertext stays byte-for-byte the same.
   *
   * An unknown `escrowKeyId`, or an unwrap or proof that fails, rejects with `conflict` and the message
   * `ESCROW_KEY_UNKNOWN` or `ESCROW_UNWRAP_FAILED` (test with `isEscrowHold`): the receipt must stay
   * escrowed. A target key that does not parse, or whose suite is not `target.algorithm`, is `invalid_request`.
   */
  async rewrapFromEscrow(request: RewrapRequest): Promise<RewrappedKey> {
    const [encryptedAesKey, aad, iv, ciphertext, authTag, encapsulatedKey] = copyIntoOneBuffer([
      request.encryptedAesKey,
      request.aad,
      request.sealed.iv,
      request.sealed.ciphertext,
      request.sealed.authTag,
      request.encapsulatedKey ?? new Uint8Array(0),
    ]);
    const packed = await this.run({
      op: "rewrap",
      escrowKeyId: request.escrowKeyId,
      aadBound: request.aadBound,
      encryptedAesKey,
      iv,
      ciphertext,
      authTag,
      aad,
      target: { ...request.target },
      ...(request.encapsulatedKey === undefined ? {} : { encapsulatedKey }),
    });
    if (typeof packed !== "string") throw unexpectedAnswer();
    return unpackWrappedKey(packed);
  }

  /**
   * Stops every worker. Tasks still pending are rejected with `service_unavailable` (the server is
   * shutting down), and so is any call made afterwards. Calling it again is harmless.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const all = [...this.slots, ...this.keygenSlots];
    for (const slot of all) rejectAll(slot, shuttingDown());
    await Promise.all(
      all.map(async (slot) => {
        const worker = slot.worker;
        slot.worker = undefined;
        await worker?.terminate();
      }),
    );
  }

  /**
   * Queues a task on a worker of `slots`. Tasks queued in one event-loop turn go to their worker
   * together, as one message, at the end of the turn: waking a worker thread is a message's main
   * cost (under an encrypt load each message cost the event loop about 20 us, mostly in the kernel).
   * So a turn's tasks fill one worker's message, up to {@link TURN_BATCH} of them, before the next
   * least busy worker is woken as well; the next turn starts on the least busy one.
   */
  private run(task: WorkerTask, slots = this.slots): Promise<Buffer | string> {
    if (this.closed) return Promise.reject(shuttingDown());
    const slot = this.slotForTurn(slots);
    const request: WorkerRequest = { ...task, id: this.nextTaskId++ };
    return new Promise<Buffer | string>((resolve, reject) => {
      // In the executor: a worker that cannot start rejects the task (seal is not async).
      if (slot.worker === undefined) this.spawn(slot);
      slot.pending.set(request.id, { resolve, reject });
      if (this.outbox.length === 0) setImmediate(this.post);
      this.outbox.push({ slot, request });
    });
  }

  /** {@link run} for the tasks answered with bytes. */
  private async runBytes(task: WorkerTask, slots = this.slots): Promise<Buffer> {
    const result = await this.run(task, slots);
    if (typeof result === "string") throw unexpectedAnswer();
    return result;
  }

  /** Sends the tasks queued this turn, one message per worker; tasks settled meanwhile are dropped. */
  private readonly post = (): void => {
    const outbox = this.outbox;
    this.outbox = [];
    if (this.closed) return;
    const bySlot = new Map<Slot, Outgoing[]>();
    for (const item of outbox) {
      if (!item.slot.pending.has(item.request.id)) continue;
      const items = bySlot.get(item.slot);
      if (items === undefined) bySlot.set(item.slot, [item]);
      else items.push(item);
    }
    for (const [slot, items] of bySlot) {
      const worker = slot.worker ?? this.spawn(slot);
      worker.ref();
      try {
        worker.postMessage(items.map((item) => item.request));
      } catch (error) {
        const failure = new AppError("internal_server_error", "The crypto task could not be sent.", {
          cause: error,
        });
        for (const item of items) this.settle(slot, worker, item.request.id)?.reject(failure);
      }
    }
  };

  /**
   * The slot of the task queued last this turn while its message holds fewer than
   * {@link TURN_BATCH} tasks, otherwise the least busy slot.
   */
  private slotForTurn(slots: Slot[]): Slot {
    const last = this.outbox[this.outbox.length - 1];
    if (last === undefined || !slots.includes(last.slot)) return this.leastBusySlot(slots);
    let queued = 0;
    for (const item of this.outbox) if (item.slot === last.slot) queued++;
    return queued < TURN_BATCH ? last.slot : this.leastBusySlot(slots);
  }

  /** The slot with the fewest pending tasks; ties go round-robin so idle workers share the load. */
  private leastBusySlot(slots: Slot[]): Slot {
    let best: Slot | undefined;
    for (let i = 0; i < slots.length; i++) {
      const slot = slots[(this.cursor + i) % slots.length];
      if (slot !== undefined && (best === undefined || slot.pending.size < best.pending.size)) best = slot;
    }
    this.cursor++;
    if (best === undefined) throw new Error("CryptoPool has no slots");
    return best;
  }

  private spawn(slot: Slot): Worker {
    const entry = workerEntry("crypto-worker", import.meta.url);
    const worker = new Worker(entry.url, {
      name: "crypto-worker",
      workerData: slot.init,
      ...(entry.execArgv === undefined ? {} : { execArgv: entry.execArgv }),
    });
    worker.unref();
    let failure: unknown;
    worker.on("message", (responses: WorkerResponse[]) => {
      for (const response of responses) {
        const pending = this.settle(slot, worker, response.id);
        if (pending === undefined) continue;
        if (response.ok) {
          const { result } = response;
          pending.resolve(
            typeof result === "string"
              ? result
              : Buffer.from(result.buffer, result.byteOffset, result.byteLength),
          );
        } else {
          pending.reject(deserializeError(response.error));
        }
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
        new AppError("internal_server_error", "The crypto worker stopped unexpectedly.", { cause }),
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

/**
 * Copies of `parts` as views of one fresh ArrayBuffer. A message carries a view's whole buffer (and a
 * small Buffer is a view of Node's 8 KiB pool), and a message with one buffer costs the main thread
 * about half of one with a buffer per field.
 */
function copyIntoOneBuffer<T extends Uint8Array[]>(
  parts: [...T],
): { [K in keyof T]: Uint8Array<ArrayBuffer> } {
  const buffer = new ArrayBuffer(parts.reduce((sum, part) => sum + part.byteLength, 0));
  let offset = 0;
  const views = parts.map((part) => {
    const view = new Uint8Array(buffer, offset, part.byteLength);
    view.set(part);
    offset += part.byteLength;
    return view;
  });
  return views as { [K in keyof T]: Uint8Array<ArrayBuffer> };
}

function rejectAll(slot: Slot, error: AppError): void {
  const pending = [...slot.pending.values()];
  slot.pending.clear();
  for (const task of pending) task.reject(error);
}

/** A worker answered a task with text where bytes were due, or the other way round: a bug. */
function unexpectedAnswer(): AppError {
  return new AppError("internal_server_error", "The crypto worker answered in an unexpected form.");
}

function shuttingDown(): AppError {
  return new AppError("service_unavailable", "The server is shutting down.");
}
