import { AppError, type ErrorCode, type FieldViolation, isErrorCode } from "../errors.js";

/**
 * The messages between `PrivateKeyPool` (main thread) and `private-key-worker` (worker threads).
 * Only structured-clonable data crosses: byte fields as Uint8Array (their buffers are transferred),
 * errors as {@link SerializedError} and rebuilt as `AppError` on the main thread.
 */

/** `workerData` of each worker. */
export interface WorkerInit {
  /** The escrow private key, base64 DER PKCS#8 or PEM; parsed once when the worker starts. */
  escrowPrivateKey: string;
}

/** A unit of private-key work. */
export type WorkerTask =
  | {
      op: "open";
      privateKey: string;
      expectedSpki: string;
      encryptedAesKey: Uint8Array;
      iv: Uint8Array;
      ciphertext: Uint8Array;
      authTag: Uint8Array;
      aad: Uint8Array;
    }
  | { op: "rewrap"; encryptedAesKey: Uint8Array; toSpki: string };

/** A task as posted to a worker, with the id its response carries. */
export type WorkerRequest = WorkerTask & { id: number };

/** A worker's answer to one request. */
export type WorkerResponse =
  | { id: number; ok: true; result: Uint8Array }
  | { id: number; ok: false; error: SerializedError };

/** An `AppError` flattened for `postMessage` (class instances lose their prototype when cloned). */
export interface SerializedError {
  code: ErrorCode;
  message: string;
  violations: FieldViolation[];
  /** A non-secret description of the underlying failure, for the server log only. */
  cause?: string;
}

/** Flattens a thrown value; anything that is not an `AppError` is a bug and becomes `internal_server_error`. */
export function serializeError(error: unknown): SerializedError {
  if (error instanceof AppError) {
    const cause = describeCause(error.cause);
    return {
      code: error.code,
      message: error.message,
      violations: error.violations,
      ...(cause === undefined ? {} : { cause }),
    };
  }
  const cause = describeCause(error);
  return {
    code: "internal_server_error",
    message: "The private-key operation failed.",
    violations: [],
    ...(cause === undefined ? {} : { cause }),
  };
}

/** Rebuilds the `AppError` a worker threw, with the same code, message and violations. */
export function deserializeError(error: SerializedError): AppError {
  const code = isErrorCode(error.code) ? error.code : "internal_server_error";
  return new AppError(code, error.message, {
    violations: error.violations,
    ...(error.cause === undefined ? {} : { cause: new Error(error.cause) }),
  });
}

/**
 * A loggable description of a failure that is safe to keep. Node's argument-validation errors
 * (`ERR_INVALID_ARG_*`) quote the offending value, which could be key material, so only their name and
 * code are kept; OpenSSL errors and our own plain errors describe the failure, never the data.
 */
export function describeCause(cause: unknown): string | undefined {
  if (!(cause instanceof Error)) return cause === undefined ? undefined : "non-Error value thrown";
  const code = (cause as { code?: unknown }).code;
  if (typeof code !== "string") return `${cause.name}: ${cause.message}`;
  return code.startsWith("ERR_OSSL")
    ? `${cause.name} (${code}): ${cause.message}`
    : `${cause.name} (${code})`;
}
