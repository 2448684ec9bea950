import { receiptAad } from "../crypto/envelope.js";
import { isEscrowHold } from "../crypto/escrow-errors.js";
import type { ReceiptRecord, UserRecord } from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import { releasedEvent } from "./events.js";
import { type CallerInfo, INTERNAL_CALLER } from "./grants.js";
import type { SealingKey } from "./routing.js";

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
   * Escrowed receipts of the card for this tenant that stay escrowed: sealed to the issuer's own escrow
   * key (the issuer releases them), or to a service escrow key this service does not hold or that failed
   * to unwrap (audited as `escrow.held`).
   */
  held: number;
}

/** Escrowed receipts read per page while releasing. */
const RELEASE_PAGE = 100;

/**
 * Releases a card's escrowed receipts to its registered key (section 17): those escrowed without an
 * owner and those escrowed for the user's own tenant, never another tenant's. Each AES key sealed to a
 * service escrow key is unwrapped with the matching escrow key and re-wrapped to the user's key, of
 * either suite (in the crypto worker pool); the ciphertext is untouched. A receipt whose escrow key is
 * unknown or whose unwrap fails stays escrowed and is audited; it never fails the caller. Safe to run
 * concurrently with itself and with new receipts: `release` only succeeds while a receipt is still
 * escrowed to the key it was read with, so each is released exactly once.
 */
export async function releaseEscrow(
  deps: DomainDeps,
  target: ReleaseTarget,
  caller: CallerInfo = INTERNAL_CALLER,
): Promise<ReleaseCounts> {
  const counts: ReleaseCounts = { released: 0, held: 0 };
  const query = { panHash: target.panHash, ownerTenantId: target.user.tenantId, includeUnowned: true };
  let cursor: string | undefined;
  do {
    const page = await deps.store.receipts.findEscrowed(query, deps.clock.now(), RELEASE_PAGE, cursor);
    for (const receipt of page.receipts) {
      const outcome = await releaseOne(deps, target, receipt, caller);
      if (outcome === "released") counts.released += 1;
      else if (outcome === "held") counts.held += 1;
    }
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  if (counts.released > 0 || counts.held > 0) {
    deps.logger.info({ userId: target.user.userId, ...counts }, "escrow released");
  }
  return counts;
}

/**
 * Re-wraps and releases one receipt: `held` when it stays escrowed, `taken` when a concurrent release
 * (or an expiry) got to it first.
 */
async function releaseOne(
  deps: DomainDeps,
  target: ReleaseTarget,
  receipt: ReceiptRecord,
  caller: CallerInfo,
): Promise<"released" | "held" | "taken"> {
  const escrowKeyId = receipt.escrowKeyId ?? "";
  // Sealed to an issuer's own escrow key: only the issuer can re-wrap it (ReleaseEscrow).
  if (escrowKeyId.startsWith(ISSUER_ESCROW_KEY_PREFIX)) return "held";
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
  const bundle = receipt.keyBundle;
  let wrapped: { encryptedAesKey: string; encapsulatedKey?: string };
  try {
    wrapped = await deps.pool.rewrapFromEscrow({
      escrowKeyId,
      encryptedAesKey: Buffer.from(bundle.encryptedAesKey, "base64"),
      encapsulatedKey:
        bundle.encapsulatedKey === undefined ? undefined : Buffer.from(bundle.encapsulatedKey, "base64"),
      aad: receiptAad(receipt),
      target: { keyId: target.key.keyId, spki: target.key.spki, algorithm: target.key.algorithm },
    });
  } catch (err) {
    // A hold is expected (a key no longer configured, a corrupt bundle); anything else is a bug, which
    // must not cost the cardholder the registration either: the receipt stays escrowed.
    if (isEscrowHold(err)) return held(err.message);
    deps.logger.error({ err, receiptId: receipt.id }, "escrow re-wrap failed unexpectedly");
    return held("re-wrap failed");
  }
  const released = await deps.store.receipts.release(
    receipt.id,
    {
      userId: target.user.userId,
      issuerTenantId: target.user.tenantId,
      keyBundle: {
        keyId: target.key.keyId,
        algorithm: target.key.algorithm,
        encryptedAesKey: wrapped.encryptedAesKey,
        ...(wrapped.encapsulatedKey === undefined ? {} : { encapsulatedKey: wrapped.encapsulatedKey }),
      },
    },
    escrowKeyId,
    [releasedEvent(receipt, target.user, deps.clock.now())],
  );
  return released ? "released" : "taken";
}
