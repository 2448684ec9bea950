import { AppError } from "../../errors.js";
import type { DomainDeps } from "../deps.js";
import type { ReleaseTarget } from "../escrow.js";
import type { CallerInfo } from "../grants.js";
import { type CardRef, cardKeyOfRef, sealingKeyOf } from "../routing.js";
import { checkSealingKey } from "./seal-check.js";

/**
 * The service's own escrow release for a card whose issuer set `requireBindings` (docs/key-transparency.md,
 * "Server-side sealing"): the receipts go only to a key the service has verified as a merchant would,
 * against its latest checkpoint and the snapshot under it (`checkSealingKey`), and so only once the
 * card's binding is under a checkpoint. The key is the user's active key as the store holds it when
 * the release begins, read again (never the key the request sent): a key row a store writer swapped
 * in the meantime does not verify, and nothing is released to it.
 */

/** Whether releases of `tenantId`'s cards must be verified against the key log first. */
export async function releaseNeedsCheck(deps: DomainDeps, tenantId: string): Promise<boolean> {
  return (await deps.store.ktIssuers.get(tenantId))?.requireBindings === true;
}

/**
 * The release target of `userId`'s card, verified against the key log: the user and its active key as
 * stored now, when that key verifies for `card`; undefined (nothing to release now) when the user or
 * key is gone, or the key does not verify yet (`service_unavailable`: the binding is not under a
 * checkpoint) or at all (`integrity_failure`: audited as `escrow.release_refused`). What is not
 * released stays escrowed for a later release (a retry of the registration, the next one).
 */
export async function verifiedReleaseTarget(
  deps: DomainDeps,
  card: CardRef,
  userId: string,
  caller: CallerInfo,
): Promise<Omit<ReleaseTarget, "panHash"> | undefined> {
  const user = await deps.store.users.findById(userId);
  if (user === undefined) return undefined;
  const row = await deps.store.users.findKey(user.activeKeyId);
  if (row === undefined || row.userId !== userId || row.status !== "active") return undefined;
  const key = sealingKeyOf(row);
  try {
    await checkSealingKey(deps, card, { kind: "user", user, key, panHash: cardKeyOfRef(deps, card) });
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    if (err.code === "integrity_failure") {
      // A refusal the service made on purpose (audited below), not a fault of its own: warn, without a stack.
      deps.logger.warn(
        { userId, keyId: key.keyId, check: err.metadata?.check, reason: err.message },
        "escrow release refused: the key does not verify",
      );
      await deps.store.audit.append({
        at: deps.clock.now(),
        action: "escrow.release_refused",
        tenantId: user.tenantId,
        requestId: caller.requestId,
        sourceIp: caller.sourceIp,
        userId,
        keyId: key.keyId,
        subject: `the user's key does not verify against the key directory (${String(err.metadata?.check ?? "")})`,
      });
    } else if (err.code !== "service_unavailable") {
      throw err;
    }
    return undefined;
  }
  return { user, key };
}
