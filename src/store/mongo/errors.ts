import {
  MongoClientClosedError,
  MongoError,
  MongoNetworkError,
  MongoNotConnectedError,
  MongoOperationTimeoutError,
  MongoServerClosedError,
  MongoServerError,
  MongoServerSelectionError,
  MongoTopologyClosedError,
} from "mongodb";
import { AppError } from "../../errors.js";

/** MongoDB's duplicate-key error code (a unique index refused a write). */
export const DUPLICATE_KEY = 11000;

/** Whether `err` is a duplicate-key error, the signal for the contract's "already exists" results. */
export function isDuplicateKey(err: unknown): boolean {
  return err instanceof MongoServerError && err.code === DUPLICATE_KEY;
}

/** The `_id` a duplicate-key error names (MongoDB reports the colliding key in `keyValue`), or "". */
export function duplicateId(err: unknown): string {
  const id =
    err instanceof MongoServerError ? (err.keyValue as { _id?: unknown } | undefined)?._id : undefined;
  return typeof id === "string" ? id : "";
}

/**
 * Server error codes that mean "not reachable now, try again later": time limits, shutdowns, elections
 * and network failures reported by a mongos or a replica set member.
 */
const UNAVAILABLE_CODES: ReadonlySet<number> = new Set([
  6, // HostUnreachable
  7, // HostNotFound
  50, // MaxTimeMSExpired
  64, // WriteConcernFailed (wtimeout)
  89, // NetworkTimeout
  91, // ShutdownInProgress
  112, // WriteConflict, after the transaction retries ran out of time
  189, // PrimarySteppedDown
  262, // ExceededTimeLimit
  9001, // SocketException
  10107, // NotWritablePrimary
  11600, // InterruptedAtShutdown
  11602, // InterruptedDueToReplStateChange
  13435, // NotPrimaryNoSecondaryOk
  13436, // NotPrimaryOrSecondary
]);

/** Error labels the server and driver put on failures that a later retry may not see. */
const UNAVAILABLE_LABELS = [
  "RetryableWriteError",
  "TransientTransactionError",
  "UnknownTransactionCommitResult",
  "SystemOverloadedError",
] as const;

/** Driver errors that are not exported as classes, recognised by name. */
const UNAVAILABLE_NAMES: ReadonlySet<string> = new Set([
  "MongoWaitQueueTimeoutError",
  "MongoPoolClosedError",
]);

/** Whether `err` means the database is unreachable, overloaded, timed out or closing. */
export function isUnavailable(err: unknown): boolean {
  if (
    err instanceof MongoNetworkError ||
    err instanceof MongoServerSelectionError ||
    err instanceof MongoOperationTimeoutError ||
    err instanceof MongoTopologyClosedError ||
    err instanceof MongoNotConnectedError ||
    err instanceof MongoClientClosedError ||
    err instanceof MongoServerClosedError
  ) {
    return true;
  }
  if (!(err instanceof MongoError)) return false;
  if (UNAVAILABLE_NAMES.has(err.name)) return true;
  if (typeof err.code === "number" && UNAVAILABLE_CODES.has(err.code)) return true;
  return UNAVAILABLE_LABELS.some((label) => err.hasErrorLabel(label));
}

/** The error every store method throws when the database cannot be used; `cause` is logged, never shown. */
export function storeUnavailable(cause: unknown): AppError {
  return new AppError("service_unavailable", "The store is unavailable.", { cause });
}
