import { AppError } from "../../errors.js";
import type { KeyRevocation } from "../../kt/statements.js";
import { sequenceName } from "../../store/kt-sequence.js";
import type { CardRefKind, KtPendingStatement, KtSequenceState } from "../../store/kt-types.js";
import { cardRefsOf } from "../../store/register.js";
import type { UserRecord } from "../../store/types.js";
import type { DomainDeps } from "../deps.js";
import { isHashedPan, panHashOf, parKeyOf } from "../pan.js";
import {
  checkOrder,
  decodeSigned,
  expectMember,
  fieldError,
  type SignedInput,
  storeSigningKeys,
  verifySigned,
} from "./signed.js";
import { orderOf } from "./statement-check.js";

/**
 * An erasure's revocations (docs/key-transparency.md, "What is stored"): a card the key log
 * holds an active binding of is revoked when its user is erased, by the issuer's own signed
 * `receipts.v1/key-revocation` (reason "erased"), one per card reference, checked here as register
 * checks a binding (signature by a current signing key of the caller's tenant, the card reference
 * one the user holds, `keyId` the card's active key, `version` its last + 1). Their pending records
 * go into the erasure's own store step (`users.erase`), which writes them with the user's deletion or
 * nothing; the erasure then waits for their leaves before it deletes the card's statements and
 * openings, the revocation's own included, so that nothing left identifies the card.
 *
 * The pending ids are derived from the user and the card's place among the user's references, so a
 * retry of an erasure (the user already gone) finds what its first call queued and logs nothing twice.
 */

/** A card of the user whose statements the erasure deletes: its keyed reference and its intake state. */
interface ErasedCard {
  key: string;
  state: KtSequenceState | undefined;
}

/**
 * The keyed references of the cards whose statements erasing `user` deletes: the references it holds,
 * or none when it was superseded (the card's statements are then the new holder's too).
 */
export function cardsToErase(user: UserRecord): string[] {
  return user.supersededAt === undefined ? cardRefsOf(user) : [];
}

/** The pending id of the revocation of the erased user's card number `index` (in {@link cardsToErase}'s order). */
export function revocationPendingId(userId: string, index: number): string {
  return `ktp_erasure_${index}_${userId}`;
}

/**
 * Checks the revocations of an erasure of `user` by tenant `tenantId`, before anything is written, and
 * answers their pending records for the erasure's store step. Every card with an active binding needs
 * one; without any, a tenant that set requireBindings is `forbidden` (naming `revocations`) and any
 * other erases unrevoked, as before. A revocation that is not exactly one of these is refused.
 */
export async function checkErasureRevocations(
  deps: DomainDeps,
  tenantId: string,
  user: UserRecord,
  revocations: readonly SignedInput[],
): Promise<KtPendingStatement[]> {
  const keys = cardsToErase(user);
  const cards: ErasedCard[] = [];
  for (const key of keys)
    cards.push({ key, state: await deps.store.ktLog.sequenceState(sequenceName.card(key)) });
  const bound = cards.filter((c) => (c.state?.active ?? null) !== null);
  if (revocations.length === 0) {
    if (bound.length > 0 && (await deps.store.ktIssuers.get(tenantId))?.requireBindings === true) {
      throw new AppError(
        "forbidden",
        "This issuer requires a signed revocation of each bound card with an erasure.",
        {
          violations: [
            {
              field: "revocations",
              description: `is required: ${bound.length} card reference(s) of the user have a binding in the key log, and the issuer set requireBindings`,
            },
          ],
        },
      );
    }
    return [];
  }
  const pending: KtPendingStatement[] = [];
  for (const [i, input] of revocations.entries()) {
    const context = { cards, pending, userId: user.userId };
    pending.push(await checkRevocation(deps, tenantId, input, `revocations[${i}]`, context));
  }
  if (pending.length < bound.length) {
    throw fieldError(
      "revocations",
      `must hold one revocation for each of the user's ${bound.length} card reference(s) with a binding in the key log`,
    );
  }
  return pending;
}

/** One revocation checked against the user's cards: its pending record, under its derived id. */
async function checkRevocation(
  deps: DomainDeps,
  tenantId: string,
  input: SignedInput,
  field: string,
  context: { cards: readonly ErasedCard[]; pending: readonly KtPendingStatement[]; userId: string },
): Promise<KtPendingStatement> {
  const decoded = decodeSigned(input, field);
  const checked = await verifySigned(
    tenantId,
    decoded,
    storeSigningKeys(deps.store),
    field,
    deps.kt.maxBindingDays,
  );
  const member = (name: string) => `${field}.statement.${name}`;
  expectMember(
    member("type"),
    checked.statement.type,
    "receipts.v1/key-revocation",
    '"receipts.v1/key-revocation"',
  );
  const statement = checked.statement as KeyRevocation;
  expectMember(member("reason"), statement.reason, "erased", '"erased"');
  const kind: CardRefKind = isHashedPan(statement.cardRef) ? "hashed-pan" : "par";
  const key =
    kind === "par" ? parKeyOf(deps.pepper, statement.cardRef) : panHashOf(deps.pepper, statement.cardRef);
  const card = context.cards.find((c) => c.key === key);
  if (card === undefined) throw fieldError(member("cardRef"), "must be a card reference the user holds");
  if (context.pending.some((p) => p.card?.key === key)) {
    throw fieldError(member("cardRef"), "must name each card reference once");
  }
  const active = card.state?.active ?? null;
  if (active === null)
    throw fieldError(member("cardRef"), "must be a card with a binding in the key log to revoke");
  expectMember(member("keyId"), statement.keyId, active.keyId, "the card's active key");
  checkOrder(card.state, orderOf(statement, { key }), member("version"));
  return deps.kt.pendingStatement({
    tenantId,
    statement,
    bytes: checked.bytes,
    signature: checked.signature,
    signingKeyId: checked.signingKeyId,
    card: { kind, ref: statement.cardRef, key },
    userId: context.userId,
    id: revocationPendingId(context.userId, context.cards.indexOf(card)),
  });
}

/**
 * Waits for the leaves of the revocations an erasure queued for `cardCount` cards of `userId` (by
 * their derived ids): those already appended or never queued need nothing. Bounded by
 * `KT_LOG_WAIT_MS`: past it `service_unavailable` with a Retry-After; the same call again finishes.
 */
export async function awaitRevocations(deps: DomainDeps, userId: string, cardCount: number): Promise<void> {
  for (let index = 0; index < cardCount; index++) {
    const id = revocationPendingId(userId, index);
    const pending = await deps.store.ktLog.findPending(id);
    if (pending === undefined) continue;
    if (pending.refused !== undefined) {
      // It passed intake, so a signing key revoked since or a tampered store: the erasure still finishes.
      deps.logger.warn({ userId, pendingId: id }, "the key log refused an erasure's revocation");
      continue;
    }
    deps.kt.notify();
    try {
      await deps.kt.waitForLeaf(id);
    } catch (err) {
      if (!(err instanceof AppError && err.code === "service_unavailable")) throw err;
      throw new AppError(
        "service_unavailable",
        "The user and its keys are erased and the card's revocation is queued in the key log, which has not logged it yet. Send the same request again to finish the erasure.",
        { retryAfterSeconds: err.retryAfterSeconds ?? 5, cause: err },
      );
    }
  }
}
