import { parseEd25519PublicKey } from "../crypto/keys.js";
import { AppError, Violations } from "../errors.js";
import { randomId } from "../ids.js";
import type { ApiKeyRecord, MerchantKeyRecord } from "../store/types.js";
import { recordChange } from "./audit.js";
import type { DomainDeps } from "./deps.js";
import { type CallerInfo, INTERNAL_CALLER } from "./grants.js";
import * as limits from "./limits.js";
import { assertMerchantIdUsable, claimMerchantId, merchantIdTaken } from "./merchants.js";
import { SIGNATURE_ALGORITHM } from "./signatures.js";

/**
 * Merchants' signing keys (README, "Merchant signatures"): registered, rotated and revoked by the merchant
 * tenant that owns the merchantId, and listed for issuers so that a cardholder's app can check the signature
 * sealed inside a receipt, which the service cannot see. Every change is audited under the merchant
 * tenant with the current key before and after.
 *
 * What a key means for a receipt, as the client library checks it (`src/client/signatures.ts`): a
 * receipt signed with a key that was revoked before the receipt was stored does not verify; one
 * signed before the revocation does. A merchant may declare with a key that every receipt is signed
 * while that key is current: an unsigned receipt of that time is then invalid, not just unsigned.
 */

/** A merchant signing key as returned by {@link registerSigningKey}. */
export interface RegisteredSigningKey {
  merchantKeyId: string;
  merchantId: string;
  algorithm: typeof SIGNATURE_ALGORITHM;
  registeredAt: Date;
  allReceiptsSigned: boolean;
}

/** One signing key of a merchantId as listed. */
export interface SigningKeyView {
  merchantKeyId: string;
  algorithm: typeof SIGNATURE_ALGORITHM;
  publicKey: string;
  registeredAt: Date;
  replacedAt?: Date;
  revokedAt?: Date;
  allReceiptsSigned: boolean;
  current: boolean;
}

/** Checks a merchantId as the API takes it, adding a violation on `merchantId`. */
function checkMerchantId(v: Violations, merchantId: string): void {
  if (merchantId === "") v.add("merchantId", "is required");
  else if (merchantId.length > limits.MAX_ID_LENGTH || !limits.ID_PATTERN.test(merchantId)) {
    v.add("merchantId", "is not a valid merchantId");
  }
}

/**
 * Registers the Ed25519 key that signs `merchantId`'s receipts, or replaces the tenant's current one
 * (rotation: a new `merchantKeyId`; the replaced key moves to the record's history, and receipts
 * sealed before keep naming it). Registering the current key again with the same declaration changes
 * nothing and returns it, so a retry is harmless. The merchantId must be allowed for the API key and
 * belong to the caller's tenant (registering a key is a first use that claims it):
 * otherwise `forbidden`, and nothing is written.
 */
export async function registerSigningKey(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { merchantId: string; publicKey: string; allReceiptsSigned?: boolean },
  caller: CallerInfo = INTERNAL_CALLER,
): Promise<RegisteredSigningKey> {
  const violations = new Violations();
  checkMerchantId(violations, input.merchantId);
  let spki = "";
  if (input.publicKey === "") violations.add("publicKey", "is required");
  else {
    try {
      spki = parseEd25519PublicKey(input.publicKey, "publicKey").spki;
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      for (const v of err.violations) violations.add(v.field, v.description);
    }
  }
  violations.throwIfAny();
  const allReceiptsSigned = input.allReceiptsSigned === true;
  await assertMerchantIdUsable(deps, principal, input.merchantId);
  const current = await deps.store.merchantKeys.findByMerchantId(input.merchantId);
  if (current !== undefined && current.tenantId !== principal.tenantId) throw merchantIdTaken();
  if (
    current !== undefined &&
    current.publicKey === spki &&
    current.revokedAt === undefined &&
    (current.allReceiptsSigned === true) === allReceiptsSigned
  ) {
    return registered(current);
  }
  await claimMerchantId(deps, principal, input.merchantId);
  const key: Omit<MerchantKeyRecord, "previousKeys"> = {
    merchantKeyId: randomId("mk", 12),
    merchantId: input.merchantId,
    tenantId: principal.tenantId,
    algorithm: SIGNATURE_ALGORITHM,
    publicKey: spki,
    registeredAt: deps.clock.now(),
    ...(allReceiptsSigned ? { allReceiptsSigned } : {}),
  };
  const outcome = await deps.store.merchantKeys.put(key);
  if (outcome.kind === "taken") throw merchantIdTaken();
  await recordChange(deps, {
    at: key.registeredAt,
    action: "signing_key.registered",
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    keyId: key.merchantKeyId,
    ...(outcome.kind === "replaced" ? { previousKeyId: outcome.previousKeyId } : {}),
    subject: `${input.merchantId}${allReceiptsSigned ? ": all receipts signed" : ""}`,
  });
  return registered(key);
}

/**
 * A merchantId's signing keys, the current one first, then the replaced ones newest first (at most
 * `MERCHANT_KEY_HISTORY` of them), with their times. Issuers read any merchantId's (one in use with
 * no key lists none: its receipts are unsigned; one nobody ever used is `not_found`); a merchant reads
 * only those of a merchantId its key may use and its tenant owns (otherwise `forbidden`).
 */
export async function listSigningKeys(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { merchantId: string },
): Promise<{ merchantId: string; keys: SigningKeyView[] }> {
  const v = new Violations();
  checkMerchantId(v, input.merchantId);
  v.throwIfAny();
  if (principal.role === "merchant") await assertMerchantIdUsable(deps, principal, input.merchantId);
  const record = await deps.store.merchantKeys.findByMerchantId(input.merchantId);
  if (record === undefined) {
    // A merchantId nobody ever used is unknown; one in use without a key signs nothing.
    if ((await deps.store.merchants.find(input.merchantId)) === undefined) {
      throw new AppError("not_found", "No merchant uses this merchantId.");
    }
    return { merchantId: input.merchantId, keys: [] };
  }
  if (principal.role === "merchant" && record.tenantId !== principal.tenantId) throw merchantIdTaken();
  return { merchantId: input.merchantId, keys: viewsOf(record) };
}

/**
 * Revokes one of a merchantId's signing keys, current or replaced, for the merchant tenant that owns
 * it. A receipt stored after the revocation must not carry its signature (the client library then
 * reports the signature invalid); one stored before still verifies. Revoking the current key refuses
 * encrypt and create for the merchantId (`invalid_signature`) until a new key is registered: a
 * compromised key must not turn signing off. Audited as `signing_key.revoked`; an id the tenant has no
 * key of is `not_found`, another tenant's merchantId `forbidden`.
 */
export async function revokeSigningKey(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { merchantId: string; merchantKeyId: string },
  caller: CallerInfo,
): Promise<SigningKeyView> {
  const v = new Violations();
  checkMerchantId(v, input.merchantId);
  if (input.merchantKeyId === "") v.add("merchantKeyId", "is required");
  v.throwIfAny();
  await assertMerchantIdUsable(deps, principal, input.merchantId);
  const now = deps.clock.now();
  const before = await deps.store.merchantKeys.findByMerchantId(input.merchantId);
  const after = await deps.store.merchantKeys.revoke(
    principal.tenantId,
    input.merchantId,
    input.merchantKeyId,
    now,
  );
  const view =
    after === undefined ? undefined : viewsOf(after).find((k) => k.merchantKeyId === input.merchantKeyId);
  if (before === undefined || after === undefined || view === undefined) {
    throw new AppError("not_found", "This merchantId has no signing key with this id.");
  }
  if (view.revokedAt?.getTime() !== now.getTime()) return view;
  const usable = (record: MerchantKeyRecord) =>
    record.revokedAt === undefined ? record.merchantKeyId : undefined;
  const [keyBefore, keyAfter] = [usable(before), usable(after)];
  await recordChange(deps, {
    at: now,
    action: "signing_key.revoked",
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    ...(keyAfter === undefined ? {} : { keyId: keyAfter }),
    ...(keyBefore === undefined ? {} : { previousKeyId: keyBefore }),
    subject: `${input.merchantId}: revoked ${input.merchantKeyId}`,
  });
  return view;
}

/** The keys of a record as listed: the current one, then the replaced ones newest first. */
function viewsOf(record: MerchantKeyRecord): SigningKeyView[] {
  const current: SigningKeyView = {
    merchantKeyId: record.merchantKeyId,
    algorithm: SIGNATURE_ALGORITHM,
    publicKey: record.publicKey,
    registeredAt: record.registeredAt,
    allReceiptsSigned: record.allReceiptsSigned === true,
    current: true,
    ...(record.revokedAt === undefined ? {} : { revokedAt: record.revokedAt }),
  };
  const replaced = [...record.previousKeys].reverse().map(
    (k): SigningKeyView => ({
      merchantKeyId: k.merchantKeyId,
      algorithm: SIGNATURE_ALGORITHM,
      publicKey: k.publicKey,
      registeredAt: k.registeredAt,
      replacedAt: k.replacedAt,
      allReceiptsSigned: k.allReceiptsSigned === true,
      current: false,
      ...(k.revokedAt === undefined ? {} : { revokedAt: k.revokedAt }),
    }),
  );
  return [current, ...replaced];
}

function registered(key: Omit<MerchantKeyRecord, "previousKeys">): RegisteredSigningKey {
  return {
    merchantKeyId: key.merchantKeyId,
    merchantId: key.merchantId,
    algorithm: key.algorithm,
    registeredAt: key.registeredAt,
    allReceiptsSigned: key.allReceiptsSigned === true,
  };
}
