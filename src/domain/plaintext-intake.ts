import { AppError } from "../errors.js";
import type { DomainDeps } from "./deps.js";
import { type CardRef, cardBinOwner, cardKeyOfRef } from "./routing.js";

/**
 * An issuer's `plaintextIntake: "refuse"` (docs/key-transparency.md): receipts for its cards are not
 * taken in the clear. The paths where the service would see a receipt's content (encrypt, create and
 * refund with receipt fields) ask {@link assertPlaintextAccepted} before anything is sealed or written;
 * the paths that take a `sealedReceipt` never do. The issuers of a card are the owner of its BIN and
 * the tenant that registered it: either one refusing is enough, so that a merchant cannot get a
 * receipt for a registered card taken in the clear by naming another issuer's BIN (routing would send
 * it to that issuer's escrow, but the service would have read it). The setting is the root's
 * statement once the tenant has a confirmed root (`setPlaintextIntake`).
 */

/**
 * Refuses (`forbidden`, naming `sealedReceipt`) a receipt in the clear for a card whose issuer set
 * `plaintextIntake: "refuse"`. `card` is checked already (`checkCardRef`). The error names neither
 * the card nor the issuer. Returns the card's keyed reference (`cardKeyOfRef`, or `cardKey` when the
 * caller computed it), for the call's routing to take rather than compute again (`sealForRecipient`'s
 * `cardKey`).
 */
export async function assertPlaintextAccepted(
  deps: DomainDeps,
  card: CardRef,
  cardKey: string = cardKeyOfRef(deps, card),
): Promise<string> {
  const [binOwner, user] = await Promise.all([
    cardBinOwner(deps, card.cardBin),
    deps.store.users.findByPanHash(cardKey),
  ]);
  const tenants = new Set([binOwner, user?.tenantId]);
  for (const tenant of tenants) {
    if (tenant === undefined) continue;
    if ((await deps.store.ktIssuers.get(tenant))?.plaintextIntake === "refuse") throw refused();
  }
  return cardKey;
}

function refused(): AppError {
  return new AppError(
    "forbidden",
    "The card's issuer takes no receipts in the clear: seal the receipt on your side and send it as sealedReceipt.",
    {
      violations: [
        { field: "sealedReceipt", description: "is required: the card's issuer refuses plaintext receipts" },
      ],
    },
  );
}
