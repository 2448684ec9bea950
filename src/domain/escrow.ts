import { receiptAad, sealedFromText } from "../crypto/envelope.js";
import { ESCROW_UNWRAP_FAILED, isEscrowHold } from "../crypto/escrow-errors.js";
import { storedAadBound } from "../crypto/suites.js";
import {
  type ApiKeyRecord,
  holdsCard,
  type ReceiptRecord,
  type StoredKeyBundle,
  type UserRecord,
} from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import { keepIfKeyLives } from "./erasure.js";
import { releasedEvent } from "./events.js";
import { type CallerInfo, INTERNAL_CALLER } from "./grants.js";
import { countInWindow } from "./rate-limit.js";
import type { Recipient, SealingKey } from "./routing.js";

/** A service escrow key's public half and its stable id (`esc_...`), from the private key in configuration. */
export { escrowKeyOf } from "../crypto/escrow-keys.js";

/** The prefix of issuer escrow key ids (`iek_...`); service escrow keys are `esc_...`. */
export const ISSUER_ESCROW_KEY_PREFIX = "iek_";

/** Where a card's escrowed receipts go once it registers: the user and its active key. */
export interface ReleaseTarget {
  panHash: string;
  user: UserRecord;
  key: SealingKey;
}

/** What a release did: receipts released, and receipts that stay escrowed. */
export interface ReleaseCounts {
  released: number;
  /**
   * Escrowed receipts of the card for this tenant that it looked at and that stay escrowed: sealed to
   * the issuer's own escrow key (the issuer releases them), or to a service escrow key this service
   * does not hold or that failed to unwrap (audited as `escrow.held`).
   */
  held: number;
  /** Set when the release stopped at its limit with receipts left: where to go on from. */
  nextCursor?: string;
}

/**
 * Counts a receipt about to be escrowed against the intake limit of its merchant tenant and card
 * (`escrow.intakeLimit` per `escrow.intakeWindowSeconds`), and refuses it over the limit with
 * `rate_limit_exceeded` and the seconds until the window ends. Receipts for a registered user are not
 * counted. The bound is what keeps planted escrow finite: whoever knows a card's hashed PAN can escrow
 * receipts for it, and the card's registration then has them all to look at.
 */
export async function admitToEscrow(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  recipient: Recipient,
): Promise<void> {
  if (recipient.kind !== "escrow") return;
  await countInWindow(deps, {
    counter: `escrow-intake:${principal.tenantId}:${recipient.panHash}`,
    limit: deps.escrow.intakeLimit,
    windowSeconds: deps.escrow.intakeWindowSeconds,
    message: "Too many receipts escrowed for this card by this merchant; try again later.",
  });
}

/** Escrowed receipts read per page while releasing. */
const RELEASE_PAGE = 100;

/** Options of {@link releaseEscrow}: where to start, and how many receipts to look at (all by default). */
export interface ReleaseOptions {
  cursor?: string | undefined;
  limit?: number;
}

/**
 * Releases a card's escrowed receipts to its registered key: those escrowed without an
 * owner and those escrowed for the user's own tenant, never another tenant's, oldest first, at most
 * `options.limit` of them (then `nextCursor` says where the rest begin). Each AES key sealed to a
 * service escrow key is unwrapped with the matching escrow key, proven to be its receipt's own, and
 * re-wrapped to the user's key, of either suite (in the crypto worker pool); the ciphertext is
 * untouched. A receipt whose escrow key is unknown or whose key fails stays escrowed and is audited;
 * it never fails the caller, and one whose key fails its proof is not looked at again (it never
 * will release: planted or corrupt). Safe to run concurrently with itself and with new receipts:
 * `release` only succeeds while a receipt is still escrowed to the key it was read with, so each is
 * released exactly once. It stops once the target key is no longer the user's active one (a rotation
 * or an erasure since it began, e.g. while it ran in the background), or the user no longer holds the
 * card (the BIN's owner took it): what is left stays escrowed for the registration that made another
 * key active or took the card.
 */
export async function releaseEscrow(
  deps: DomainDeps,
  target: ReleaseTarget,
  caller: CallerInfo = INTERNAL_CALLER,
  options: ReleaseOptions = {},
): Promise<ReleaseCounts> {
  const counts: ReleaseCounts = { released: 0, held: 0 };
  const query = {
    panHash: target.panHash,
    ownerTenantId: target.user.tenantId,
    includeUnowned: true,
    excludeHeld: true,
  };
  let left = options.limit ?? Number.POSITIVE_INFINITY;
  let cursor = options.cursor;
  while (left > 0) {
    const pageSize = Math.min(RELEASE_PAGE, left);
    const page = await deps.store.receipts.findEscrowed(query, deps.clock.now(), pageSize, cursor);
    for (const receipt of page.receipts) {
      const outcome = await releaseReceipt(deps, target, receipt, caller);
      if (outcome === "released") counts.released += 1;
      else if (outcome === "held") counts.held += 1;
      else if (outcome === "key_inactive") return counts;
    }
    left -= page.receipts.length;
    cursor = page.nextCursor;
    if (cursor === undefined) break;
  }
  if (cursor !== undefined) counts.nextCursor = cursor;
  if (counts.released > 0 || counts.held > 0) {
    deps.logger.info({ userId: target.user.userId, ...counts }, "escrow released");
  }
  return counts;
}

/** Whether `keyId` is still the active key of `userId` (no rotation or erasure since it was read). */
export async function keyStillActive(deps: DomainDeps, keyId: string, userId: string): Promise<boolean> {
  const key = await deps.store.users.findKey(keyId);
  return key !== undefined && key.userId === userId && key.status === "active";
}

/**
 * Whether the card's escrow still goes to `target`: its key is still the user's active key, and the user
 * still holds the card (the BIN's owner supersedes it, and then the escrow is the owner's). The two
 * reads run at once: the check waits for the store no longer than the key check alone did.
 */
async function targetStillCurrent(deps: DomainDeps, target: ReleaseTarget): Promise<boolean> {
  const [keyActive, user] = await Promise.all([
    keyStillActive(deps, target.key.keyId, target.user.userId),
    deps.store.users.findById(target.user.userId),
  ]);
  return keyActive && user !== undefined && holdsCard(user, target.panHash);
}

/** The receipt's AES key, unwrapped with the service escrow key it names, wrapped to the target key. */
function rewrapped(
  deps: DomainDeps,
  target: ReleaseTarget,
  receipt: ReceiptRecord,
): Promise<{ encryptedAesKey: string; encapsulatedKey?: string }> {
  const bundle = receipt.keyBundle;
  const { iv, ciphertext, authTag } = sealedFromText({ ...receipt, encryptedAesKey: "" });
  return deps.pool.rewrapFromEscrow({
    escrowKeyId: receipt.escrowKeyId ?? "",
    aadBound: bundle.aadBound === true,
    encryptedAesKey: Buffer.from(bundle.encryptedAesKey, "base64"),
    encapsulatedKey:
      bundle.encapsulatedKey === undefined ? undefined : Buffer.from(bundle.encapsulatedKey, "base64"),
    sealed: { iv, ciphertext, authTag },
    aad: receiptAad(receipt),
    target: {
      keyId: target.key.keyId,
      spki: target.key.spki,
      algorithm: target.key.algorithm,
      aadBound: target.key.aadBound,
    },
  });
}

/**
 * Re-wraps and releases one escrowed receipt to the target: `held` when it stays escrowed, `taken`
 * when a concurrent release (or an expiry, or an erasure of the user) got to it first, `key_inactive`
 * (nothing done) when the target key is no longer the user's active key or the user lost the card.
 */
export async function releaseReceipt(
  deps: DomainDeps,
  target: ReleaseTarget,
  receipt: ReceiptRecord,
  caller: CallerInfo,
): Promise<"released" | "held" | "taken" | "key_inactive"> {
  const escrowKeyId = receipt.escrowKeyId ?? "";
  // Sealed to an issuer's own escrow key: only the issuer can re-wrap it (ReleaseEscrow).
  if (escrowKeyId.startsWith(ISSUER_ESCROW_KEY_PREFIX)) return "held";
  if (!(await targetStillCurrent(deps, target))) return "key_inactive";
  const held = async (reason: string): Promise<"held"> => {
    await deps.store.audit.append({
      at: deps.clock.now(),
      action: "escrow.held",
      tenantId: target.user.tenantId,
      requestId: caller.requestId,
      sourceIp: caller.sourceIp,
      userId: target.user.userId,
      keyId: escrowKeyId,
      subject: `${receipt.merchantId}/${receipt.receiptId}: ${reason}`,
    });
    deps.logger.warn({ receiptId: receipt.id, escrowKeyId, reason }, "escrowed receipt held");
    return "held";
  };
  let wrapped: { encryptedAesKey: string; encapsulatedKey?: string };
  try {
    wrapped = await rewrapped(deps, target, receipt);
  } catch (err) {
    // A hold is expected (a key no longer configured, a corrupt bundle); anything else is a bug, which
    // must not cost the cardholder the registration either: the receipt stays escrowed.
    if (isEscrowHold(err)) {
      // A key that fails its unwrap or proof never will release: later releases skip it.
      if (err.message === ESCROW_UNWRAP_FAILED)
        await deps.store.receipts.markHeld(receipt.panHash, receipt.id);
      return held(err.message);
    }
    deps.logger.error({ err, receiptId: receipt.id }, "escrow re-wrap failed unexpectedly");
    return held("re-wrap failed");
  }
  const stored = await deps.store.receipts.release(
    receipt,
    {
      userId: target.user.userId,
      issuerTenantId: target.user.tenantId,
      keyBundle: bundleOf(target, wrapped),
    },
    escrowKeyId,
    [releasedEvent(receipt, target.user, deps.clock.now())],
  );
  if (!stored) return "taken";
  // An erasure of the user that took its key meanwhile takes this receipt too.
  const kept = await keepIfKeyLives(deps, {
    panHash: receipt.panHash,
    merchantId: receipt.merchantId,
    receiptId: receipt.receiptId,
    userId: target.user.userId,
    keyBundle: { keyId: target.key.keyId, algorithm: target.key.algorithm, encryptedAesKey: "" },
  });
  return kept ? "released" : "taken";
}

/** The key bundle of a receipt re-wrapped to the target's key. */
function bundleOf(
  target: ReleaseTarget,
  wrapped: { encryptedAesKey: string; encapsulatedKey?: string },
): StoredKeyBundle {
  return {
    keyId: target.key.keyId,
    algorithm: target.key.algorithm,
    encryptedAesKey: wrapped.encryptedAesKey,
    ...(wrapped.encapsulatedKey === undefined ? {} : { encapsulatedKey: wrapped.encapsulatedKey }),
    ...storedAadBound(target.key.algorithm, target.key.aadBound),
  };
}
