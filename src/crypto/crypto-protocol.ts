import { AppError, type ErrorCode, type FieldViolation, isErrorCode } from "../errors.js";
import type { FastPath } from "../fast-paths.js";
import type { SealedReceipt, SealedReceiptText } from "./envelope.js";
import type { KeyAlgorithm } from "./suites.js";

/**
 * The messages between `CryptoPool` (main thread) and `crypto-worker` (worker threads): a list of
 * {@link WorkerRequest}s one way, a list of {@link WorkerResponse}s the other.
 * Only structured-clonable data crosses, and it is copied, never transferred: text as strings (a sealed
 * receipt too: {@link packSealedText}), bytes as Uint8Array views of buffers made for the message (a
 * message copies a view's whole buffer, so never a view of Node's Buffer pool), errors as
 * {@link SerializedError}, rebuilt as `AppError` on the main thread. Transferring a buffer of a few
 * hundred bytes costs both threads more than copying it.
 */

/** `workerData` of each worker. */
export interface WorkerInit {
  /** The escrow private keys, base64 DER PKCS#8 or PEM, the sealing one first; parsed once, when first needed. */
  escrowPrivateKeys: string[];
  /** A nice value (1-19) for the worker's thread, on Linux: lower priority than the event loop. */
  niceness?: number;
  /** The fast paths on in the main thread when the pool was made (src/fast-paths.ts), for the worker's own. */
  fastPaths: FastPath[];
}

/** The key a receipt is (re-)wrapped to: its id, base64 DER SPKI and, when the caller knows it, suite. */
export interface WrapTarget {
  keyId: string;
  spki: string;
  /** Checked against the key's own suite when given; inferred from the key when absent. */
  algorithm?: KeyAlgorithm | undefined;
  /**
   * RSA only: wrap with the OAEP label = the receipt's AAD (`keyBundle.aadBound`), as every wrap to an
   * escrow key is. HPKE wraps are always bound to the AAD.
   */
  aadBound?: boolean | undefined;
}

/**
 * A unit of work for a crypto worker: open, re-wrap, seal or generate. RSA tasks run synchronously;
 * HPKE tasks are asynchronous (WebCrypto) and may be answered after later tasks.
 */
export type WorkerTask =
  | {
      op: "open";
      privateKey: string;
      expectedSpki: string;
      /** The key bundle's suite, when known; otherwise read from the presence of `encapsulatedKey`. */
      algorithm?: KeyAlgorithm | undefined;
      /** The key bundle's `aadBound` mark: an RSA wrap's OAEP label is `aad`. */
      aadBound?: boolean | undefined;
      encryptedAesKey: Uint8Array;
      encapsulatedKey?: Uint8Array | undefined;
      iv: Uint8Array;
      ciphertext: Uint8Array;
      authTag: Uint8Array;
      aad: Uint8Array;
    }
  | {
      op: "rewrap";
      escrowKeyId: string;
      /** The escrowed bundle's `aadBound` mark: an RSA wrap's OAEP label is `aad`. */
      aadBound?: boolean | undefined;
      encryptedAesKey: Uint8Array;
      encapsulatedKey?: Uint8Array | undefined;
      /** The receipt's AES-GCM parts: the unwrapped key must authenticate them before it is re-wrapped. */
      iv: Uint8Array;
      ciphertext: Uint8Array;
      authTag: Uint8Array;
      aad: Uint8Array;
      target: WrapTarget;
    }
  | ({ op: "seal"; plaintext: string; aad: string } & WrapTarget)
  | { op: "generate"; algorithm: KeyAlgorithm };

/** A task as posted to a worker (in a list: the tasks of one event-loop turn), with the id its response carries. */
export type WorkerRequest = WorkerTask & { id: number };

/** A worker's answer to one request (in a list: see `crypto-worker`). */
export type WorkerResponse =
  | { id: number; ok: true; result: Uint8Array | string }
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
    message: "The crypto operation failed.",
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

/** A generated key pair in one buffer: `u32 length of the SPKI`, SPKI DER, PKCS#8 DER. */
export function packKeyPair(spki: Uint8Array, pkcs8: Uint8Array): Uint8Array {
  const packed = new Uint8Array(4 + spki.length + pkcs8.length);
  new DataView(packed.buffer).setUint32(0, spki.length);
  packed.set(spki, 4);
  packed.set(pkcs8, 4 + spki.length);
  return packed;
}

/** The two DER encodings of a {@link packKeyPair} buffer, as views of it. */
export function unpackKeyPair(packed: Buffer): { spki: Buffer; pkcs8: Buffer } {
  const spkiLength = packed.readUInt32BE(0);
  return { spki: packed.subarray(4, 4 + spkiLength), pkcs8: packed.subarray(4 + spkiLength) };
}

/**
 * A sealed receipt as one string: the base64 of the wrapped AES key, IV, auth tag and ciphertext, in
 * that order, and for HPKE the encapsulated key fifth, joined by "." (not a base64 character). The
 * store keeps the parts as base64, so the worker encodes them: a string crosses to the main thread for
 * less than a buffer does (a cloned buffer is a new backing store and a view per answer), and the
 * event loop no longer encodes them.
 */
export function packSealedText(sealed: SealedReceipt): string {
  const { encryptedAesKey, iv, authTag, ciphertext, encapsulatedKey } = sealed;
  const parts = [encryptedAesKey, iv, authTag, ciphertext];
  if (encapsulatedKey !== undefined) parts.push(encapsulatedKey);
  return parts.map((part) => part.toString("base64")).join(".");
}

/** The four (RSA) or five (HPKE) parts of a {@link packSealedText} string. */
export function unpackSealedText(packed: string): SealedReceiptText {
  const [encryptedAesKey, iv, authTag, ciphertext, encapsulatedKey, extra] = packed.split(".");
  if (ciphertext === undefined || extra !== undefined || encapsulatedKey === "") {
    throw new Error("not a sealed receipt text");
  }
  const text: SealedReceiptText = {
    encryptedAesKey: encryptedAesKey as string,
    iv: iv as string,
    authTag: authTag as string,
    ciphertext,
  };
  if (encapsulatedKey !== undefined) text.encapsulatedKey = encapsulatedKey;
  return text;
}

/** A re-wrapped key as one string: the base64 wrapped AES key, then for HPKE "." and the encapsulated key. */
export function packWrappedKey(wrapped: {
  encryptedAesKey: Buffer;
  encapsulatedKey?: Buffer | undefined;
}): string {
  const { encryptedAesKey, encapsulatedKey } = wrapped;
  const first = encryptedAesKey.toString("base64");
  return encapsulatedKey === undefined ? first : `${first}.${encapsulatedKey.toString("base64")}`;
}

/** The parts of a {@link packWrappedKey} string, base64. */
export function unpackWrappedKey(packed: string): { encryptedAesKey: string; encapsulatedKey?: string } {
  const [encryptedAesKey, encapsulatedKey, extra] = packed.split(".");
  if (
    encryptedAesKey === undefined ||
    encryptedAesKey === "" ||
    extra !== undefined ||
    encapsulatedKey === ""
  ) {
    throw new Error("not a wrapped key text");
  }
  return encapsulatedKey === undefined ? { encryptedAesKey } : { encryptedAesKey, encapsulatedKey };
}
