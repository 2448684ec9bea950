import { isAadBound } from "../crypto/suites.js";
import { AppError, invalidRequest, Violations } from "../errors.js";
import { RESERVED_KEY_ID } from "../store/register.js";
import type { ApiKeyRecord, KeyAlgorithm, KeyRecord, UserRecord } from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import type { CallerInfo } from "./grants.js";
import { type AnswerSubject, type KtAnswerFields, ktAnswerFields } from "./kt/answers.js";
import { cardKeyOf, checkCardBin, checkCardReference, MERCHANT_CARD_FIELDS } from "./pan.js";

/**
 * Where a receipt for a card goes, decided in one place for encrypt, create,
 * merchant-side sealing and key look-up:
 * - a `cardBin` owned by issuer tenant T: the card's user if T registered it; otherwise T's escrow
 *   (and a card registered by another tenant is a `card_binding_conflict`, audited);
 * - no `cardBin`, or one nobody owns: the card's user, else escrow without an owner.
 * Escrow for T is sealed to T's current issuer escrow key when T has one (the service holds nothing
 * that opens it), else to the service escrow key that seals, and marked for T.
 */

/** The public key a receipt is sealed to. */
export interface SealingKey {
  keyId: string;
  algorithm: KeyAlgorithm;
  /** Base64 DER SubjectPublicKeyInfo. */
  spki: string;
  /**
   * Whether every wrap to this key is bound to the receipt's AAD (`keyBundle.aadBound`; for RSA the
   * OAEP label). True for escrow keys, service and issuer alike: their holders unwrap to re-wrap for
   * someone else, and must never unwrap a key lifted from another receipt. False for a cardholder's
   * RSA key, which only opens receipts for its holder (who authenticates each one under its AAD), so
   * that devices reading the v1 format keep opening what they receive. HPKE wraps are always bound.
   */
  aadBound: boolean;
}

export type Recipient =
  | {
      kind: "user";
      user: UserRecord;
      key: SealingKey;
      /**
       * The keyed card reference the card was named by (its hashed PAN's or its PAR's HMAC), the key
       * of its statements in the key log: computed once per call and carried, not computed again.
       */
      panHash: string;
    }
  | {
      kind: "escrow";
      key: SealingKey;
      /** The issuer tenant the receipt is escrowed for; unset for escrow without an owner. */
      ownerTenantId?: string;
      /** With an owner: the card BIN that made it the owner. */
      cardBin?: string;
      /** The keyed card reference (HMAC of the hashed PAN or of the PAR), as stored. */
      panHash: string;
      /**
       * Set when the card is registered by a tenant that does not own its BIN: the caller writes the
       * `card_binding_conflict` ({@link auditBindingConflict}) once the receipt is stored, so that a
       * refused call writes nothing.
       */
      conflict?: BindingConflict;
    };

/** A card in tenant `binOwner`'s BIN, registered by tenant `registeredBy`. */
export interface BindingConflict {
  binOwner: string;
  registeredBy: string;
}

/** The card a merchant request names: by hashed PAN or by PAR, exactly one. */
export interface CardRef {
  recipientHashedPan: string;
  recipientPar?: string | undefined;
  cardBin?: string | undefined;
}

/**
 * Adds violations unless `card` names its card by exactly one well-formed hashed PAN or PAR, and its
 * card BIN (if any) is 6 or 8 digits; the fields are named as merchants send them.
 */
export function checkCardRef(card: CardRef, violations: Violations): void {
  checkCardReference(
    { hashedPan: card.recipientHashedPan, par: card.recipientPar },
    MERCHANT_CARD_FIELDS,
    violations,
  );
  checkCardBin(card.cardBin, "cardBin", violations);
}

/** The keyed reference (`panHash`) of the card a checked {@link CardRef} names. */
export function cardKeyOfRef(deps: Pick<DomainDeps, "pepper">, card: CardRef): string {
  return cardKeyOf(deps.pepper, { hashedPan: card.recipientHashedPan, par: card.recipientPar });
}

/** The sealing key of a registered user key. */
export function sealingKeyOf(key: KeyRecord): SealingKey {
  return { keyId: key.keyId, algorithm: key.algorithm, spki: key.publicKey, aadBound: false };
}

/**
 * The issuer tenant that owns a card BIN, or `undefined` when nobody does. Six digits
 * that cover an 8-digit prefix some tenant owns, and no 6-digit prefix, name no owner for sure: the
 * card may be in that 8-digit prefix or not. That is `invalid_request` asking for 8 digits, never
 * "unowned", which would route the receipt past the owner's escrow.
 */
export async function cardBinOwner(
  deps: DomainDeps,
  cardBin: string | undefined,
): Promise<string | undefined> {
  if (cardBin === undefined) return undefined;
  const owner = await deps.store.bins.ownerOf(cardBin);
  if (owner !== undefined || cardBin.length !== 6) return owner;
  if (await deps.store.bins.hasOwnedPrefixUnder(cardBin)) {
    throw invalidRequest(
      [{ field: "cardBin", description: "is ambiguous: send the card's first 8 digits" }],
      "Issuers own 8-digit prefixes under these 6 digits: send the card's first 8 digits as cardBin.",
    );
  }
  return undefined;
}

/**
 * Decides the recipient of a receipt for `card` (validated by {@link checkCardRef}); writes nothing.
 * A binding conflict is returned for the caller to audit once the receipt is stored. `panHash` is
 * the card's keyed reference when the caller has it already (`cardKeyOfRef(deps, card)`).
 */
export async function recipientOf(
  deps: DomainDeps,
  card: CardRef,
  panHash: string = cardKeyOfRef(deps, card),
): Promise<Recipient> {
  // Without a card BIN there is no owner to read beside the card: one read, not a pair of promises.
  const [binOwner, found] =
    card.cardBin === undefined
      ? [undefined, await deps.store.users.findByPanHash(panHash)]
      : await Promise.all([cardBinOwner(deps, card.cardBin), deps.store.users.findByPanHash(panHash)]);
  let owner = binOwner;
  let user = found;
  if (user !== undefined && (owner === undefined || owner === user.tenantId)) {
    // A card the operator moved to a tenant that has not registered it yet: escrowed for that tenant.
    if (user.activeKeyId === RESERVED_KEY_ID) owner = user.tenantId;
    const key = await deps.store.users.findKey(user.activeKeyId);
    if (key !== undefined) return { kind: "user", user, key: sealingKeyOf(key), panHash };
    // Only an erasure deletes keys, and the user goes right after them: the card is unregistered.
    user = undefined;
  }
  if (owner === undefined) return { kind: "escrow", key: serviceEscrowKey(deps), panHash };
  const issuerKey = await deps.store.issuerEscrowKeys.current(owner);
  const key: SealingKey = issuerKey
    ? {
        keyId: issuerKey.escrowKeyId,
        algorithm: issuerKey.algorithm,
        spki: issuerKey.publicKey,
        aadBound: true,
      }
    : serviceEscrowKey(deps);
  const recipient: Recipient = {
    kind: "escrow",
    key,
    ownerTenantId: owner,
    cardBin: card.cardBin ?? "",
    panHash,
  };
  if (user !== undefined) recipient.conflict = { binOwner: owner, registeredBy: user.tenantId };
  return recipient;
}

/**
 * Writes a binding conflict to the audit log as `card_binding_conflict`, under the BIN owner's tenant
 * (it learns which issuer registered a card of its BIN), caused by the merchant tenant `principal`.
 */
export async function auditBindingConflict(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  conflict: BindingConflict | undefined,
  caller: CallerInfo,
): Promise<void> {
  if (conflict === undefined) return;
  await deps.store.audit.append({
    at: deps.clock.now(),
    action: "card_binding_conflict",
    tenantId: conflict.binOwner,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    subject: `a receipt for a card of this tenant's BIN registered by issuer tenant ${conflict.registeredBy}`,
    actorTenantId: principal.tenantId,
  });
}

/** The service escrow key that seals: the first one configured. */
export function serviceEscrowKey(deps: DomainDeps): SealingKey {
  const [first] = deps.escrowKeys;
  if (first === undefined) throw new AppError("internal_server_error", "No escrow key is configured.");
  return { keyId: first.keyId, algorithm: first.algorithm, spki: first.spki, aadBound: true };
}

/** A key look-up request after transport decoding. */
export type LookupInput = CardRef;

/** The key a merchant seals to on its own side, as returned by look-up, with its proofs. */
export interface LookedUpKey extends KtAnswerFields {
  keyId: string;
  algorithm: KeyAlgorithm;
  publicKey: string;
  isEscrowed: boolean;
  /** Seal with the binding to the receipt's AAD (`keyBundle.aadBound`; RSA: OAEP label = the AAD). */
  aadBound: boolean;
}

/**
 * The key the service would seal a receipt for this card to right now, for merchants
 * that seal on their side. Audited as `key.lookup` (the card itself is never written down).
 */
export async function lookupKey(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: LookupInput,
  caller: CallerInfo,
): Promise<LookedUpKey> {
  const violations = new Violations();
  checkCardRef(input, violations);
  violations.throwIfAny();
  const recipient = await recipientOf(deps, input);
  if (recipient.kind === "escrow") await auditBindingConflict(deps, principal, recipient.conflict, caller);
  await deps.store.audit.append({
    at: deps.clock.now(),
    action: "key.lookup",
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    keyId: recipient.key.keyId,
  });
  return answerOf(deps, input, recipient);
}

/**
 * What look-up answers for `recipient`, the card's key or escrow, with the key directory's members
 * (the logged statement about exactly that key, its leaf's proof, the snapshot's): the self-check
 * answers the same.
 */
export async function answerOf(deps: DomainDeps, card: CardRef, recipient: Recipient): Promise<LookedUpKey> {
  const kt = await ktAnswerFields(deps, subjectOf(deps, card, recipient));
  return {
    keyId: recipient.key.keyId,
    algorithm: recipient.key.algorithm,
    publicKey: recipient.key.spki,
    isEscrowed: recipient.kind === "escrow",
    aadBound: isAadBound(recipient.key.algorithm, recipient.key.aadBound),
    ...kt,
  };
}

/**
 * Where the logged statement of the answer's key is: the card's (under the keyed reference routing
 * computed, so a look-up takes the card's HMAC once), the BIN owner's escrow key's, or none.
 */
function subjectOf(deps: DomainDeps, card: CardRef, recipient: Recipient): AnswerSubject {
  if (recipient.kind === "user") {
    const par = card.recipientPar ?? "";
    const cardRef = par === "" ? card.recipientHashedPan.toLowerCase() : par;
    return { kind: "card", cardKey: recipient.panHash, cardRef, keyId: recipient.key.keyId };
  }
  const service = deps.escrowKeys.some((k) => k.keyId === recipient.key.keyId);
  if (recipient.ownerTenantId === undefined || service) return { kind: "service-escrow" };
  return { kind: "escrow", tenantId: recipient.ownerTenantId, keyId: recipient.key.keyId };
}
