/* Over 400 lines on purpose: the issuer escrow API of section 17 in one read (escrow keys, the pending
 * list, release and release again), because the owner and card checks of listing and releasing must
 * stay one rule; the key check of a release lives in kt/ and the store steps in the stores. */
import type { KeyBundle } from "../../gen/receipts/v1/receipt_pb.js";
import { parsePublicKey } from "../crypto/keys.js";
import { AppError, Violations } from "../errors.js";
import { randomId } from "../ids.js";
import {
  type ApiKeyRecord,
  type EscrowCopy,
  holdsCard,
  type IssuerEscrowKeyRecord,
  type ReceiptPage,
  type ReceiptRecord,
  type UserRecord,
} from "../store/types.js";
import { recordChange } from "./audit.js";
import type { DomainDeps } from "./deps.js";
import { keepIfKeyLives } from "./erasure.js";
import { ISSUER_ESCROW_KEY_PREFIX, keyStillActive } from "./escrow.js";
import { panHashOfEscrowRef, releasedEvent } from "./events.js";
import { type CallerInfo, INTERNAL_CALLER } from "./grants.js";
import { checkKeyBundle } from "./key-bundles.js";
import { checkEscrowKeyBinding, requireBindingIfSet } from "./kt/bindings.js";
import { checkSealingKey } from "./kt/seal-check.js";
import type { SignedInput } from "./kt/signed.js";
import { cardKeyOf, checkCardReference, ISSUER_CARD_FIELDS } from "./pan.js";
import { PAGE_SIZE } from "./receipts.js";
import { type CardRef, type SealingKey, sealingKeyOf } from "./routing.js";

/**
 * Escrow that the service cannot open: an issuer tenant registers escrow public keys of
 * its own; receipts escrowed for it (its BIN, a card not registered to it) are sealed to its current
 * one. The issuer lists them, unwraps and re-wraps the AES key to the cardholder's key on its side,
 * and hands the new key bundles back: the ciphertext never changes, and the service never holds a key
 * that opens it.
 */

/**
 * Registers an escrow public key (either suite) of the caller's tenant; it becomes the current one.
 * With `binding` (the issuer's signed `receipts.v1/escrow-key` statement, checked as register's
 * binding is) the statement's keyId is the escrowKeyId, and the statement with its opening is written
 * in the key's store step for the sequencer to append; without one, when the tenant set
 * `requireBindings`, it is `forbidden` and nothing is written. Audited as `escrow_key.registered`
 * with the current key before and after.
 */
export async function registerEscrowKey(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { publicKey: string; binding?: SignedInput | undefined },
  caller: CallerInfo = INTERNAL_CALLER,
): Promise<IssuerEscrowKeyRecord> {
  const v = new Violations();
  if (input.publicKey === "") v.add("publicKey", "is required");
  v.throwIfAny();
  const parsed = parsePublicKey(input.publicKey, "publicKey");
  await requireBindingIfSet(deps, principal.tenantId, input.binding, "escrow key");
  const before = await deps.store.issuerEscrowKeys.current(principal.tenantId);
  const signed =
    input.binding === undefined
      ? undefined
      : await checkEscrowKeyBinding(deps, input.binding, {
          tenantId: principal.tenantId,
          algorithm: parsed.algorithm,
          spki: parsed.spki,
          current: before?.escrowKeyId ?? null,
        });
  const record: IssuerEscrowKeyRecord = {
    escrowKeyId: signed?.statement.keyId ?? randomId(ISSUER_ESCROW_KEY_PREFIX.slice(0, -1), 12),
    tenantId: principal.tenantId,
    algorithm: parsed.algorithm,
    publicKey: parsed.spki,
    createdAt: deps.clock.now(),
  };
  // The tenant's current escrow key is in the directory: the key log snapshots it (docs/key-transparency.md),
  // after appending its statement when it has one.
  const refused = await deps.store.issuerEscrowKeys.insert(record, [
    signed?.pending ?? deps.kt.pendingDirectoryChange("issuerEscrowKeys.insert", principal.tenantId),
  ]);
  if (refused?.kind === "id_taken") throw new AppError("conflict", "This escrowKeyId is already in use.");
  if (refused !== undefined) throw new AppError("conflict", refused.reason);
  deps.kt.notify();
  await recordChange(deps, {
    at: record.createdAt,
    action: "escrow_key.registered",
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    keyId: record.escrowKeyId,
    ...(before === undefined ? {} : { previousKeyId: before.escrowKeyId }),
    subject: record.escrowKeyId,
  });
  return record;
}

/** The caller's escrow keys, newest first (revoked ones too), and the current one's id ("" for none). */
export async function listEscrowKeys(
  deps: DomainDeps,
  principal: ApiKeyRecord,
): Promise<{ keys: IssuerEscrowKeyRecord[]; currentEscrowKeyId: string }> {
  const keys = await deps.store.issuerEscrowKeys.list(principal.tenantId);
  return { keys, currentEscrowKeyId: keys.find((k) => k.revokedAt === undefined)?.escrowKeyId ?? "" };
}

/**
 * Revokes one of the caller's escrow keys: nothing new is sealed to it (the newest unrevoked key is
 * current, else the service escrow key seals the tenant's escrow). Receipts already sealed to it stay
 * escrowed and releasable by the issuer (`ListPendingEscrow`, `ReleaseEscrow`): the service cannot
 * re-seal them, and whoever holds the private key can open them until they are released. Another
 * tenant's key id is `not_found`, as an unknown one. Audited as `escrow_key.revoked`.
 */
export async function revokeEscrowKey(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { escrowKeyId: string },
  caller: CallerInfo,
): Promise<{ key: IssuerEscrowKeyRecord; currentEscrowKeyId: string }> {
  const v = new Violations();
  if (input.escrowKeyId === "") v.add("escrowKeyId", "is required");
  v.throwIfAny();
  const before = await deps.store.issuerEscrowKeys.current(principal.tenantId);
  const now = deps.clock.now();
  const key = await deps.store.issuerEscrowKeys.revoke(principal.tenantId, input.escrowKeyId, now);
  if (key === undefined) throw new AppError("not_found", "No escrow key of this tenant has this id.");
  const after = await deps.store.issuerEscrowKeys.current(principal.tenantId);
  // Revoked before: nothing changed, nothing to record.
  if (key.revokedAt?.getTime() !== now.getTime())
    return { key, currentEscrowKeyId: after?.escrowKeyId ?? "" };
  // The tenant's current escrow key is in the directory: the key log snapshots it (docs/key-transparency.md).
  // Not in the revocation's store step (the store's revoke takes no pending records); a crash in between
  // leaves it to the daily snapshot.
  await deps.store.ktLog.enqueue([
    deps.kt.pendingDirectoryChange("issuerEscrowKeys.revoke", principal.tenantId),
  ]);
  deps.kt.notify();
  await recordChange(deps, {
    at: now,
    action: "escrow_key.revoked",
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    ...(after === undefined ? {} : { keyId: after.escrowKeyId }),
    ...(before === undefined ? {} : { previousKeyId: before.escrowKeyId }),
    subject: key.escrowKeyId,
  });
  return { key, currentEscrowKeyId: after?.escrowKeyId ?? "" };
}

/**
 * The receipts escrowed for the caller's tenant under its own escrow keys, for one card, oldest first.
 * The card is named by its hashed PAN or PAR, or by the `escrowRef` of an `escrow.pending` event sent
 * to the caller (an issuer that owns a BIN may not know which of its cards a receipt was for). With
 * `released`, instead: the card's receipts this tenant released that still keep their escrow copy,
 * each with that copy as its key bundle (`isEscrowed` false, `escrowKeyId` and `expiresAt` the
 * copy's, `userId` the user it was released to), for a release again.
 */
export async function listPendingEscrow(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: {
    hashedPan: string;
    par?: string | undefined;
    escrowRef?: string;
    pageSize: number;
    pageToken: string;
    released?: boolean;
  },
): Promise<ReceiptPage> {
  const v = new Violations();
  const escrowRef = input.escrowRef ?? "";
  let panHash: string | undefined;
  if (escrowRef !== "") {
    if (input.hashedPan !== "" || (input.par ?? "") !== "") {
      v.add("escrowRef", "cannot stand beside hashedPan or par: name the card by exactly one");
    }
    panHash = panHashOfEscrowRef(deps, principal.tenantId, escrowRef);
    if (panHash === undefined) v.add("escrowRef", "is not an escrow reference sent to this tenant");
  } else {
    checkCardReference(input, ISSUER_CARD_FIELDS, v);
  }
  if (input.pageSize < 0 || input.pageSize > PAGE_SIZE.max)
    v.add("pageSize", `must be from 1 to ${PAGE_SIZE.max}`);
  if (input.pageToken.length > 512) v.add("pageToken", "is not a valid page token");
  v.throwIfAny();
  const card = panHash ?? cardKeyOf(deps.pepper, input);
  const pageSize = input.pageSize || PAGE_SIZE.default;
  if (input.released === true) {
    const page = await deps.store.receipts.findEscrowCopies(
      { panHash: card, ownerTenantId: principal.tenantId },
      deps.clock.now(),
      pageSize,
      input.pageToken || undefined,
    );
    const receipts = page.released.map(({ receipt, copy }) => ({
      ...receipt,
      keyBundle: copy.keyBundle,
      escrowKeyId: copy.escrowKeyId,
      expiresAt: copy.expiresAt,
    }));
    return page.nextCursor === undefined ? { receipts } : { receipts, nextCursor: page.nextCursor };
  }
  // A tenant with no escrow key of its own asks the store too: no receipt matches an empty key list in
  // either store, and the store refuses a page token it did not make, as it does for every tenant.
  const keys = await deps.store.issuerEscrowKeys.list(principal.tenantId);
  return deps.store.receipts.findEscrowed(
    {
      panHash: card,
      ownerTenantId: principal.tenantId,
      includeUnowned: false,
      escrowKeyIds: keys.map((k) => k.escrowKeyId),
    },
    deps.clock.now(),
    pageSize,
    input.pageToken || undefined,
  );
}

/** At most this many receipts per release call. */
export const MAX_RELEASES_PER_CALL = 200;

/** One re-wrapped receipt of a release request. */
export interface EscrowReleaseInput {
  merchantId: string;
  receiptId: string;
  keyBundle?: KeyBundle | undefined;
}

/** Why one receipt of a release request stayed escrowed. */
export interface ReleaseFailure {
  merchantId: string;
  receiptId: string;
  reason: "not_found" | "not_escrowed" | "key_mismatch" | "invalid_key_bundle";
}

/**
 * Swaps the key bundles of receipts escrowed for the caller's tenant under its own escrow keys for
 * bundles it re-wrapped to the user's active key: each must be a receipt of the user's
 * card, escrowed for this tenant, and its bundle must name the user's active key with that key's
 * suite and sizes. Each receipt succeeds or fails on its own; the answer says which failed and why.
 *
 * The service cannot check what a bundle holds (it is wrapped to the user's key), so a release with
 * bundles of random bytes (a stolen API key) would leave receipts nobody opens. So each release keeps
 * the receipt's escrow-wrapped key as its escrow copy until the escrow would have expired, and while it
 * is kept the tenant may release that receipt again, under the same checks, to the user it was
 * released to (`ListPendingEscrow` with `released` lists them): the bank recovers after revoking the
 * stolen key. Each release again is audited with the key the replaced bundle named and the new one.
 */
export async function releaseByIssuer(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { userId: string; receipts: EscrowReleaseInput[]; hashedPan?: string; par?: string | undefined },
  caller: CallerInfo,
): Promise<{ released: number; failed: ReleaseFailure[] }> {
  const v = new Violations();
  if (input.userId === "") v.add("userId", "is required");
  if (input.receipts.length === 0) v.add("receipts", "is required");
  else if (input.receipts.length > MAX_RELEASES_PER_CALL) {
    v.add("receipts", `must have at most ${MAX_RELEASES_PER_CALL} entries`);
  }
  input.receipts.forEach((r, i) => {
    if (r.merchantId === "") v.add(`receipts[${i}].merchantId`, "is required");
    if (r.receiptId === "") v.add(`receipts[${i}].receiptId`, "is required");
  });
  v.throwIfAny();
  const user = await deps.store.users.findById(input.userId);
  if (!user || user.tenantId !== principal.tenantId) throw new AppError("not_found", "User not found.");
  const active = await deps.store.users.findKey(user.activeKeyId);
  if (!active) throw new AppError("internal_server_error", "A user's active key is missing.");
  const key = sealingKeyOf(active);
  await checkReleaseKey(deps, principal.tenantId, user, key, input);
  const issuerKeyIds = new Set(
    (await deps.store.issuerEscrowKeys.list(principal.tenantId)).map((k) => k.escrowKeyId),
  );
  const release: Release = { deps, tenantId: principal.tenantId, user, key, issuerKeyIds, caller };

  let released = 0;
  const failed: ReleaseFailure[] = [];
  for (const item of input.receipts) {
    const reason = await releaseOne(release, item);
    if (reason === undefined) released += 1;
    else failed.push({ merchantId: item.merchantId, receiptId: item.receiptId, reason });
  }
  await deps.store.audit.append({
    at: deps.clock.now(),
    action: "escrow.released_by_issuer",
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    userId: user.userId,
    keyId: key.keyId,
    subject: `${released} released, ${failed.length} failed`,
  });
  return { released, failed };
}

/** One release call's settled facts: the caller's tenant, the user, its active key, the tenant's escrow keys. */
interface Release {
  deps: DomainDeps;
  tenantId: string;
  user: UserRecord;
  key: SealingKey;
  issuerKeyIds: Set<string>;
  caller: CallerInfo;
}

/** Releases (or releases again) one receipt of a release call; the reason it failed, if it did. */
async function releaseOne(
  r: Release,
  item: EscrowReleaseInput,
): Promise<ReleaseFailure["reason"] | undefined> {
  const { deps, user, key } = r;
  const receipt = await deps.store.receipts.findByMerchantReceipt(item.merchantId, item.receiptId);
  if (
    !receipt ||
    !holdsCard(user, receipt.panHash) ||
    (receipt.isEscrowed && receipt.escrowOwnerTenantId !== r.tenantId)
  ) {
    return "not_found";
  }
  // Released already: again only while its escrow copy of this tenant is kept, to the same user.
  const copy = receipt.isEscrowed ? undefined : await releasedCopy(r, receipt);
  if (receipt.isEscrowed ? !r.issuerKeyIds.has(receipt.escrowKeyId ?? "") : copy === undefined) {
    return "not_escrowed";
  }
  // The user's active key, still (a rotation while this call runs makes it another's).
  if (item.keyBundle?.keyId !== key.keyId || !(await keyStillActive(deps, key.keyId, user.userId))) {
    return "key_mismatch";
  }
  const bundle = checkKeyBundle(new Violations(), "keyBundle", item.keyBundle, key);
  if (bundle === undefined) return "invalid_key_bundle";
  const now = deps.clock.now();
  const events = [releasedEvent(receipt, user, now)];
  const to = { userId: user.userId, issuerTenantId: user.tenantId, keyBundle: bundle };
  const ok =
    copy === undefined
      ? await deps.store.receipts.release(receipt, to, receipt.escrowKeyId, events, true)
      : await deps.store.receipts.releaseAgain(receipt, to, r.tenantId, now, events);
  if (!ok) return "not_escrowed";
  // An erasure of the user that took its key meanwhile takes the receipt too.
  if (!(await keepIfKeyLives(deps, { ...receipt, userId: user.userId, keyBundle: bundle })))
    return "not_found";
  if (copy !== undefined) {
    await deps.store.audit.append({
      at: now,
      action: "escrow.released_by_issuer",
      tenantId: r.tenantId,
      requestId: r.caller.requestId,
      sourceIp: r.caller.sourceIp,
      userId: user.userId,
      keyId: bundle.keyId,
      previousKeyId: receipt.keyBundle.keyId,
      subject: `${receipt.receiptId} released again`,
    });
  }
  return undefined;
}

/**
 * The escrow copy a released receipt keeps for this tenant's release again: only a receipt released to
 * this user, whose copy is this tenant's and unexpired; else undefined.
 */
async function releasedCopy(r: Release, receipt: ReceiptRecord): Promise<EscrowCopy | undefined> {
  if (receipt.userId !== r.user.userId) return undefined;
  const copy = await r.deps.store.receipts.escrowCopyOf(receipt, r.deps.clock.now());
  return copy?.ownerTenantId === r.tenantId ? copy : undefined;
}

/**
 * Server-side sealing's check for an issuer's release (docs/key-transparency.md, "Server-side
 * sealing"): for a tenant with requireBindings, the user's active key must verify against the key log
 * (the issuer's signed binding of exactly the card the request names and this key, under the latest
 * checkpoint) before any bundle moves: a key row swapped in the store is `integrity_failure`, a
 * binding not under a checkpoint yet `service_unavailable`. The card reference is the request's (the
 * service keeps none in the clear to rebuild the signed bytes), and must be the user's card.
 */
async function checkReleaseKey(
  deps: DomainDeps,
  tenantId: string,
  user: UserRecord,
  key: SealingKey,
  card: { hashedPan?: string; par?: string | undefined },
): Promise<void> {
  if ((await deps.store.ktIssuers.get(tenantId))?.requireBindings !== true) return;
  const v = new Violations();
  if ((card.hashedPan ?? "") === "" && (card.par ?? "") === "") {
    throw new AppError(
      "forbidden",
      "This issuer requires every escrow release to name the card, whose key is checked against the key directory.",
      {
        violations: [
          { field: "hashedPan", description: "is required (or par): the issuer set requireBindings" },
        ],
      },
    );
  }
  checkCardReference(card, ISSUER_CARD_FIELDS, v);
  v.throwIfAny();
  const panHash = cardKeyOf(deps.pepper, card);
  if (!holdsCard(user, panHash)) {
    throw new AppError("invalid_request", "The request is invalid.", {
      violations: [{ field: card.par ? "par" : "hashedPan", description: "must be the user's card" }],
    });
  }
  const ref: CardRef = { recipientHashedPan: card.hashedPan ?? "" };
  if (card.par) ref.recipientPar = card.par;
  await checkSealingKey(deps, ref, { kind: "user", user, key, panHash });
}
