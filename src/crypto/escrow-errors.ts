import { AppError } from "../errors.js";

/**
 * How an escrow release that cannot happen is reported, so that the domain holds the receipt
 * (it stays escrowed and is audited; the registration does not fail). Both are
 * `conflict` errors with one of these messages; {@link isEscrowHold} tells them from other failures.
 */

/** The receipt's `escrowKeyId` names no configured escrow key (e.g. one removed from configuration). */
export const ESCROW_KEY_UNKNOWN = "The receipt's escrow key is not configured.";

/** The escrow key named by the receipt did not unwrap its AES key (wrong key, corrupt bundle). */
export const ESCROW_UNWRAP_FAILED = "The receipt's key could not be unwrapped with its escrow key.";

/** Whether a failed `rewrapFromEscrow` means "hold this receipt in escrow" rather than a bug or a bad target. */
export function isEscrowHold(error: unknown): error is AppError {
  return (
    error instanceof AppError &&
    error.code === "conflict" &&
    (error.message === ESCROW_KEY_UNKNOWN || error.message === ESCROW_UNWRAP_FAILED)
  );
}
