import { AppError, invalidRequest, Violations } from "../errors.js";
import { randomId } from "../ids.js";
import { assertTenantOf, audit, checkId, type OperatorContext, objectOf, onlyFields } from "./admin.js";
import { newTransferId, transferEntries } from "./kt/transfer-log.js";

/** The answer of {@link transferCard}. */
export interface CardTransfer {
  /** The transfer's id, as the card's key-log entries, the issuers' monitor alerts and both audits name it. */
  transferId: string;
  /** The user that held the card: it keeps its keys and receipts, and no longer holds the card. */
  previousUserId: string;
  fromTenant: string;
  /** The card's new user, of `toTenant`, with no key until `toTenant` registers the card. */
  userId: string;
  toTenant: string;
  transferredAt: string;
}

/**
 * Moves the card a user holds (both references, for a card registered by hashed PAN and PAR) to
 * another issuer tenant from `{userId, toTenant}`: the operator's remedy when a card is registered by
 * the wrong issuer and no BIN settles it (a PAR without a token BIN). What moves is the card, not the
 * cardholder: the user keeps its keys, grants and receipts (they were sealed to its key) and is
 * superseded; a new user of `toTenant` holds the card without a key, receipts for the card wait in
 * escrow for `toTenant`, and `toTenant`'s registration of the card activates its key and takes that
 * escrow. The previous issuer's key never receives the card's receipts again, and its registration of
 * the card is refused from then on. Audited under both tenants (each naming only its own user), and
 * logged: each card reference's key-log entry (`kt/transfer-log.ts`) is written in the move's store
 * step, so the log shows every transfer to the monitors of both issuers, and the old issuer's key is
 * retired from the card's statements (the new issuer's first binding supersedes nothing).
 */
export async function transferCard(ctx: OperatorContext, body: unknown): Promise<CardTransfer> {
  const input = objectOf(body);
  const v = new Violations();
  onlyFields(v, input, ["userId", "toTenant"]);
  const userId = checkId(v, "userId", input.userId);
  const toTenant = checkId(v, "toTenant", input.toTenant);
  v.throwIfAny();
  await assertTenantOf(ctx.store, toTenant, "issuer", "toTenant");
  const newUserId = randomId("usr", 12);
  const transfer = newTransferId();
  const holder = await ctx.store.users.findById(userId);
  const kt =
    holder === undefined || holder.supersededAt !== undefined || holder.tenantId === toTenant
      ? undefined
      : await transferEntries(ctx.store.ktLog, holder, { transfer, toTenant, newUserId, now: ctx.now });
  const outcome = await ctx.store.users.transfer({
    userId,
    toTenantId: toTenant,
    newUserId,
    now: ctx.now,
    ...(kt === undefined ? {} : { kt }),
  });
  if (outcome.kind === "not_found")
    throw new AppError("not_found", "No user holding a card has this userId.");
  if (outcome.kind === "same_tenant") {
    throw invalidRequest([{ field: "toTenant", description: "already holds the card" }]);
  }
  if (outcome.kind === "log_refused") {
    throw new AppError(
      "conflict",
      "The card changed while it was being transferred: nothing moved. Send the transfer again.",
    );
  }
  const { previous, user } = outcome;
  await audit(
    ctx,
    "admin.card.transferred_away",
    previous.tenantId,
    `user ${previous.userId} no longer holds its card: moved to another issuer tenant (${transfer})`,
    { previousKeyId: previous.activeKeyId },
  );
  await audit(
    ctx,
    "admin.card.transferred",
    toTenant,
    `user ${user.userId} holds a card moved from issuer tenant ${previous.tenantId} (${transfer}); register it to receive its receipts`,
  );
  return {
    transferId: transfer,
    previousUserId: previous.userId,
    fromTenant: previous.tenantId,
    userId: user.userId,
    toTenant,
    transferredAt: ctx.now.toISOString(),
  };
}
