import { AppError, Violations } from "../../errors.js";
import type { ApiKeyRecord } from "../../store/types.js";
import type { DomainDeps } from "../deps.js";
import {
  answerOf,
  type CardRef,
  cardKeyOfRef,
  checkCardRef,
  type LookedUpKey,
  recipientOf,
} from "../routing.js";

/**
 * `POST /api/v1/kt/self-check` (docs/key-transparency.md): what look-up answers a merchant now for a
 * card of one of the calling issuer's users, built by the same function, proofs included. Any other
 * card is `not_found`, whether registered by another tenant or not at all, so the call says nothing
 * about other issuers' cards. An honest service answers both calls alike; a dishonest one can tell
 * them apart, which is why the issuer's monitor reads the log itself (SECURITY.md, "The key log").
 */
export async function ktSelfCheck(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: CardRef,
): Promise<LookedUpKey & { userId: string }> {
  const violations = new Violations();
  checkCardRef(input, violations);
  violations.throwIfAny();
  const user = await deps.store.users.findByPanHash(cardKeyOfRef(deps, input));
  if (user === undefined || user.tenantId !== principal.tenantId) {
    throw new AppError("not_found", "No user of this tenant holds this card.");
  }
  const recipient = await recipientOf(deps, input);
  return { userId: user.userId, ...(await answerOf(deps, input, recipient)) };
}
