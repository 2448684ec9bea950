import { createCipheriv, createDecipheriv, createHmac, randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { AppError } from "../errors.js";
import type { DomainDeps } from "./deps.js";

/** How long an idempotency key is remembered: 24 hours. */
export const IDEMPOTENCY_TTL_MS = 24 * 3_600_000;
/**
 * How long a started key is presumed to belong to a live call. A call that has not completed after
 * this long died with its process (a live one is bounded by the store's time limits far sooner), so
 * a retry with the same request takes the key over instead of finding it "in progress" for 24 hours.
 */
export const IDEMPOTENCY_LEASE_MS = 60_000;
/** How long a retry waits for a concurrent first call with the same key before giving up. */
const WAIT_FOR_FIRST_MS = 15_000;
const POLL_MS = 20;

/**
 * An Idempotency-Key: 1-255 printable ASCII characters, no space (the OpenAPI document's pattern is
 * this one).
 */
export const IDEMPOTENCY_KEY_PATTERN = "^[\\x21-\\x7E]{1,255}$";
const KEY_FORMAT = new RegExp(IDEMPOTENCY_KEY_PATTERN);

/** How a call's response is kept for replay. */
export interface IdempotentCall<T> {
  /** The caller's `Idempotency-Key`, or null/empty when none was sent. */
  key: string | null;
  /** Distinguishes callers: the same key from two API keys never collides. */
  scope: string;
  /**
   * A stable hash of the request; the same key with another body is `conflict`. Called only when a
   * key was sent: hashing means encoding the whole request, work a call without a key never needs.
   */
  hashRequest(): string;
  encode(value: T): Buffer;
  decode(bytes: Buffer): T;
  /** Told when the answer is the first call's response, replayed (the transport says so to the caller). */
  replayed?(): void;
}

/**
 * Runs `run` at most once per idempotency key: a retry with the same key and body gets the first
 * response (also while the first call is still running: it waits for it), the same key with another
 * body is `conflict`, and a failed first call is forgotten so a retry can run again. Stored responses
 * are encrypted under a key derived from the server pepper, because they can hold a client secret.
 */
export async function withIdempotency<T>(
  deps: Pick<DomainDeps, "store" | "clock" | "pepper" | "logger">,
  call: IdempotentCall<T>,
  run: () => Promise<T>,
): Promise<T> {
  if (call.key === null) return run();
  if (!KEY_FORMAT.test(call.key)) {
    throw new AppError("invalid_request", "The Idempotency-Key is not valid.", {
      violations: [
        { field: "Idempotency-Key", description: "must be 1-255 printable ASCII characters, no space" },
      ],
    });
  }
  const storeKey = `${call.scope}:${call.key}`;
  const requestHash = call.hashRequest();
  const sealKey = createHmac("sha256", deps.pepper).update("idempotency-responses").digest();
  const deadline = Date.now() + WAIT_FOR_FIRST_MS;
  let leaseUntil: Date;
  for (;;) {
    const now = deps.clock.now();
    leaseUntil = new Date(now.getTime() + IDEMPOTENCY_LEASE_MS);
    const begun = await deps.store.idempotency.begin(
      storeKey,
      requestHash,
      new Date(now.getTime() + IDEMPOTENCY_TTL_MS),
      now,
      leaseUntil,
    );
    if (begun.kind === "started") break;
    if (begun.requestHash !== requestHash) {
      throw new AppError("conflict", "This Idempotency-Key was used with a different request.");
    }
    if (begun.kind === "completed") {
      const first = call.decode(open(sealKey, begun.response));
      call.replayed?.();
      return first;
    }
    if (Date.now() > deadline) {
      throw new AppError("conflict", "A request with this Idempotency-Key is still in progress.");
    }
    await sleep(POLL_MS);
  }
  let value: T;
  try {
    value = await run();
  } catch (err) {
    // The call's own error is the answer; if the key cannot be released now, its lease frees it later.
    // Released only if still ours: a call that outlived its lease may have been taken over meanwhile.
    await deps.store.idempotency.abandon(storeKey, leaseUntil).catch((cause: unknown) => {
      deps.logger.warn({ err: cause }, "could not release an idempotency key; its lease will");
    });
    throw err;
  }
  // The call has happened (a payment exists): its response is the answer even if it cannot be cached.
  // A retry then finds the key in progress until the lease runs out, and its rerun is refused as a
  // duplicate transaction, so nothing is ever done twice.
  await deps.store.idempotency
    .complete(storeKey, seal(sealKey, call.encode(value)))
    .catch((cause: unknown) => {
      deps.logger.warn({ err: cause }, "could not store the response of an idempotency key");
    });
  return value;
}

function seal(key: Buffer, plaintext: Buffer): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", key, iv);
  const body = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return Buffer.concat([iv, cipher.getAuthTag(), body]).toString("base64");
}

function open(key: Buffer, sealed: string): Buffer {
  const bytes = Buffer.from(sealed, "base64");
  const decipher = createDecipheriv("aes-256-gcm", key, bytes.subarray(0, 12));
  decipher.setAuthTag(bytes.subarray(12, 28));
  return Buffer.concat([decipher.update(bytes.subarray(28)), decipher.final()]);
}
