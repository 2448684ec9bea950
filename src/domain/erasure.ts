import { AppError, Violations } from "../errors.js";
import type { ApiKeyRecord, ErasureRecord, ReceiptRecord } from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import { erasedEvent } from "./events.js";
import type { CallerInfo } from "./grants.js";

/**
 * Erasure (section 19): nothing of an erased user survives it, even what arrives while it runs, and a
 * call that fails at any step finishes when it is retried.
 *
 * How nothing survives: erasure deletes the user's keys first and sweeps its receipts after; every
 * write that leaves a receipt sealed to a user's key (encrypt, sealed, create, escrow release by the
 * service or the issuer) reads that key again once the receipt is stored, and deletes the receipt
 * when the key is gone ({@link keepIfKeyLives}). A receipt stored before the keys went is seen by
 * the sweep; one stored after sees the key gone. Either way it goes, as if it had arrived just before
 * the erasure. (Without this, receipts sealed while the erasure ran survived it: 6 of 40 in a race.)
 *
 * How a retry finishes: an erasure record ({@link ErasureRecord}) is written before anything is
 * deleted and removed after the last step, so a retry finds the user, or the record, and carries on;
 * only when both are gone is the answer `not_found`, and then nothing of the user is left.
 */

/**
 * Erases a user for the issuer tenant that owns it: its keys and the user, its grants, every receipt
 * sealed to its keys (crypto-shredding: the wrapped keys and ciphertexts go together) and the
 * tenant's own escrow of the card (receipts held for that tenant, whatever key they are sealed to).
 * Payments keep their non-secret record without a receipt. Later receipts for the card route as for
 * an unregistered card. The audit keeps the event, with the user's random id and no personal data.
 * Answers what this call deleted: a retry that finishes an erasure counts what it found left.
 */
export async function deleteUser(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { userId: string },
  caller: CallerInfo,
): Promise<{ deletedReceipts: number; deletedKeys: number }> {
  const v = new Violations();
  if (input.userId === "") v.add("userId", "is required");
  v.throwIfAny();
  const erasure = await erasureOf(deps, principal, input.userId);
  const { userId } = erasure;
  // Keys first: from here on a receipt stored for them does not survive (see above).
  // The user's deletion writes its user.erased event (once: a retry finds no user to delete).
  const erased = await deps.store.users.erase(userId, [erasedEvent(erasure, deps.clock.now())]);
  await deps.store.grants.deleteByUser(userId);
  const deletedReceipts =
    (await deps.store.receipts.deleteByUser(userId)) +
    (await deps.store.receipts.deleteEscrowedFor(erasure.panHash, erasure.tenantId));
  const deletedKeys = erased?.deletedKeys ?? 0;
  // Audited before the record goes: a failure here is retried (and audited twice), never lost.
  await deps.store.audit.append({
    at: deps.clock.now(),
    action: "user.erased",
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    userId,
    subject: `${deletedReceipts} receipts, ${deletedKeys} keys`,
  });
  await deps.store.erasures.finish(userId);
  return { deletedReceipts, deletedKeys };
}

/**
 * The erasure to run for `userId`: begun now for a user of the caller's tenant, or one begun before
 * and not finished (a retry). Anything else, another tenant's user included, is `not_found`.
 */
async function erasureOf(deps: DomainDeps, principal: ApiKeyRecord, userId: string): Promise<ErasureRecord> {
  const notFound = () => new AppError("not_found", "User not found.");
  const user = await deps.store.users.findById(userId);
  if (user !== undefined) {
    if (user.tenantId !== principal.tenantId) throw notFound();
    return deps.store.erasures.begin({
      userId,
      tenantId: user.tenantId,
      panHash: user.panHash,
      startedAt: deps.clock.now(),
    });
  }
  const begun = await deps.store.erasures.find(userId);
  if (begun === undefined || begun.tenantId !== principal.tenantId) throw notFound();
  return begun;
}

/**
 * Keeps a receipt just stored (or released) for a user only while the key it is sealed to exists:
 * when an erasure deleted the key meanwhile, deletes the receipt and answers false. See the module
 * comment for why this closes the race with {@link deleteUser}. Costs one key read per receipt
 * stored for a user. The caller has stored the receipt and answers as if it had been erased just
 * after: the merchant's call succeeded, the cardholder's receipt is gone with the rest.
 */
export async function keepIfKeyLives(
  deps: DomainDeps,
  record: Pick<ReceiptRecord, "panHash" | "merchantId" | "receiptId" | "userId" | "keyBundle">,
): Promise<boolean> {
  if (record.userId === undefined) return true;
  const key = await deps.store.users.findKey(record.keyBundle.keyId);
  if (key !== undefined && key.userId === record.userId) return true;
  const { panHash, merchantId, receiptId, keyBundle } = record;
  await deps.store.receipts.deleteIfSealedTo(panHash, merchantId, receiptId, keyBundle.keyId);
  deps.logger.info({ userId: record.userId }, "receipt stored for an erased key deleted");
  return false;
}
