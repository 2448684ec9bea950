import { AppError, Violations } from "../errors.js";
import type { KtPendingStatement } from "../store/kt-types.js";
import {
  type ApiKeyRecord,
  type ErasureRecord,
  ownerCards,
  type ReceiptOwner,
  type ReceiptRecord,
  receiptOwnerOf,
} from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import { erasedEvent } from "./events.js";
import type { CallerInfo } from "./grants.js";
import { awaitRevocations, cardsToErase, checkErasureRevocations } from "./kt/erasure-revocations.js";
import type { SignedInput } from "./kt/signed.js";

/**
 * Erasure: nothing of an erased user survives it, even what arrives while it runs, and a
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
 *
 * The user and its keys go at once; receipts go in pages of {@link ERASURE_PAGE}, at most
 * {@link ERASURE_PAGES_PER_CALL} pages a call (docs/scaling.md: a card with thousands of receipts
 * never makes one request slow or time out). A call answers what it deleted and how many receipts it
 * left; the next call, which finds the erasure record, goes on. Once none are left the record goes,
 * and a further call is `not_found`.
 */
export async function deleteUser(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { userId: string; revocations?: readonly SignedInput[] },
  caller: CallerInfo,
): Promise<{ deletedReceipts: number; deletedKeys: number; receiptsLeft: number }> {
  const v = new Violations();
  if (input.userId === "") v.add("userId", "is required");
  v.throwIfAny();
  const { erasure, revocations } = await erasureOf(deps, principal, input.userId, input.revocations ?? []);
  const { userId } = erasure;
  // Keys first: from here on a receipt stored for them does not survive (see above). The user's
  // deletion writes its user.erased event and the card's revocations (once: a retry finds no user).
  const erased = await deps.store.users.erase(userId, [erasedEvent(erasure, deps.clock.now())], revocations);
  if (erased !== undefined && "kind" in erased) {
    throw new AppError(
      "conflict",
      "The card's key log moved while the erasure was checked; nothing was erased. Sign the revocation again.",
      {
        violations: [{ field: "revocations", description: erased.reason }],
      },
    );
  }
  await eraseStatements(deps, erasure);
  await deps.store.grants.deleteByUser(userId);
  const { deleted: deletedReceipts, left: receiptsLeft } = await deleteReceipts(deps, erasure);
  const deletedKeys = erased?.deletedKeys ?? 0;
  // Audited before the record goes: a failure here is retried (and audited twice), never lost.
  await deps.store.audit.append({
    at: deps.clock.now(),
    action: "user.erased",
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    userId,
    // A key change on record: the key the user held until now (on the call that deleted it).
    ...(erased === undefined ? {} : { previousKeyId: erased.user.activeKeyId }),
    subject: `${deletedReceipts} receipts, ${deletedKeys} keys${revocations.length > 0 ? `, ${revocations.length} revoked` : ""}${receiptsLeft > 0 ? `, ${receiptsLeft} receipts left` : ""}`,
  });
  if (receiptsLeft === 0) await deps.store.erasures.finish(userId);
  return { deletedReceipts, deletedKeys, receiptsLeft };
}

/**
 * The key log's part of an erasure (docs/key-transparency.md): once the card's revocations (if any)
 * are appended, the card's statements, signatures, openings and keyed card reference leave the log's
 * leaf records, the revocation's included; the leaves stay, so every proof still verifies, and a
 * hashed-PAN leaf (a signer hash and a commitment) says nothing of the card without its opening. Runs
 * after the user goes, from the cards the erasure record names, so a retry after a failure runs it
 * again (it is idempotent). A user superseded by the BIN's owner no longer holds the card: its record
 * names none, and the card's statements, which are the new holder's too, stay.
 */
async function eraseStatements(deps: DomainDeps, erasure: ErasureRecord): Promise<void> {
  const cards = erasure.ktCards ?? [];
  await awaitRevocations(deps, erasure.userId, cards.length);
  for (const key of cards) await deps.store.ktLog.eraseCard(key, deps.clock.now());
}

/** Receipts one store call of an erasure deletes. */
export const ERASURE_PAGE = 500;
/** Pages of receipts one erasure call deletes before it answers (the next call deletes the rest). */
export const ERASURE_PAGES_PER_CALL = 4;

/**
 * Deletes the user's receipts, then the tenant's own escrow of the card, a page at a time, at most
 * {@link ERASURE_PAGES_PER_CALL} pages; counts what it could not delete in that many.
 */
async function deleteReceipts(
  deps: DomainDeps,
  erasure: ErasureRecord,
): Promise<{ deleted: number; left: number }> {
  const owner: ReceiptOwner = { userId: erasure.userId, panHash: erasure.panHash };
  if (erasure.aliasPanHash !== undefined) owner.aliasPanHash = erasure.aliasPanHash;
  const receipts = deps.store.receipts;
  // Both references of a card registered by hashed PAN and PAR: the tenant's escrow under either goes.
  const cards = ownerCards(owner);
  const steps = [
    () => receipts.deleteByUser(owner, ERASURE_PAGE),
    ...cards.map((card) => () => receipts.deleteEscrowedFor(card, erasure.tenantId, ERASURE_PAGE)),
  ];
  let deleted = 0;
  let pages = 0;
  for (const step of steps) {
    for (let page = ERASURE_PAGE; page === ERASURE_PAGE; pages++) {
      if (pages === ERASURE_PAGES_PER_CALL) {
        let left = await receipts.countByUser(owner);
        for (const card of cards) left += await receipts.countEscrowedFor(card, erasure.tenantId);
        return { deleted, left };
      }
      page = await step();
      deleted += page;
    }
  }
  return { deleted, left: 0 };
}

/**
 * The erasure to run for `userId`: begun now for a user of the caller's tenant (its revocations
 * checked first: a refusal begins nothing), or one begun before and not finished (a retry, whose
 * revocations were queued by the call that erased the user). Anything else, another tenant's user
 * included, is `not_found`.
 */
async function erasureOf(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  userId: string,
  given: readonly SignedInput[],
): Promise<{ erasure: ErasureRecord; revocations: KtPendingStatement[] }> {
  const notFound = () => new AppError("not_found", "User not found.");
  const user = await deps.store.users.findById(userId);
  if (user !== undefined) {
    if (user.tenantId !== principal.tenantId) throw notFound();
    const revocations = await checkErasureRevocations(deps, principal.tenantId, user, given);
    // A superseded user's receipts are still placed by the card it held (and its alias, if any).
    const { panHash, aliasPanHash } = receiptOwnerOf(user);
    const erasure = await deps.store.erasures.begin({
      userId,
      tenantId: user.tenantId,
      panHash,
      ...(aliasPanHash === undefined ? {} : { aliasPanHash }),
      ktCards: cardsToErase(user),
      startedAt: deps.clock.now(),
    });
    // A record an older version began names no cards: the user, still here, does.
    return { erasure: { ...erasure, ktCards: cardsToErase(user) }, revocations };
  }
  const begun = await deps.store.erasures.find(userId);
  if (begun === undefined || begun.tenantId !== principal.tenantId) throw notFound();
  return { erasure: begun, revocations: [] };
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
