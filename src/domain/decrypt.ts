import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import { receiptAad, sealedFromText } from "../crypto/envelope.js";
import { AppError, Violations } from "../errors.js";
import { type ApiKeyRecord, type ReceiptOwner, type ReceiptRecord, receiptOwnerOf } from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import { type CallerInfo, validGrant } from "./grants.js";
import { receiptFromPlaintext } from "./sealing.js";

/** The credentials of a decrypt call: a grant token and the user's private key (memory only). */
export interface DecryptCredentials {
  tokenId: string;
  /** Alias of tokenId. */
  accessTokenId: string;
  privateKey: string;
}

/** Checks the presence of a decrypt call's credentials, adding violations for the missing ones. */
export function checkCredentials(input: DecryptCredentials, violations: Violations): string {
  const tokenId = input.tokenId || input.accessTokenId;
  // secret-compare: two fields of the caller's own request, neither compared with a stored token.
  if (input.tokenId && input.accessTokenId && input.tokenId !== input.accessTokenId) {
    violations.add("accessTokenId", "must equal tokenId when both are given");
  }
  if (tokenId === "") violations.add("tokenId", "is required");
  if (input.privateKey === "") violations.add("privateKey", "is required");
  return tokenId;
}

/**
 * The receipt a decrypted plaintext holds, checked against the record it was stored as. The service
 * seals only receipts it validated, but a merchant seals on its side whatever it likes: a plaintext
 * that is not UTF-8 JSON, is not a receipt, or names other ids than the receipt it was stored as (its
 * AAD) is `integrity_failure` (422), as the client library's `openReceipt` refuses it on a device.
 */
function receiptOfPlaintext(plaintext: Uint8Array, record: ReceiptRecord): Receipt {
  let receipt: Receipt;
  try {
    receipt = receiptFromPlaintext(plaintext);
  } catch (cause) {
    throw new AppError("integrity_failure", "The sealed receipt does not hold a receipt.", { cause });
  }
  const identity = ["version", "receiptId", "merchantId", "transactionId"] as const;
  const mismatched = identity.filter((field) => receipt[field] !== "" && receipt[field] !== record[field]);
  if (mismatched.length > 0) {
    throw new AppError(
      "integrity_failure",
      `The sealed receipt's ${mismatched.join(", ")} differ from the receipt it was stored as.`,
    );
  }
  // A merchant may leave the ids out of what it sealed: the AAD bound them, so they are the record's.
  for (const field of identity) receipt[field] = record[field];
  return receipt;
}

/**
 * Opens a stored receipt for the holder of a grant: the token must be valid for the
 * caller's tenant, name the receipt's user and key, and the private key must match that key. The key
 * check runs first in the crypto worker pool (off the event loop), so a wrong key never decrypts anything.
 */
export async function openWithGrant(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: DecryptCredentials,
  find: (owner: ReceiptOwner) => Promise<ReceiptRecord | undefined>,
  caller: CallerInfo & { action: string },
): Promise<Receipt> {
  const violations = new Violations();
  const tokenId = checkCredentials(input, violations);
  violations.throwIfAny();

  const grant = await validGrant(deps, principal, tokenId);
  const key = await deps.store.users.findKey(grant.keyId);
  if (!key) throw new AppError("not_found", "Key not found.");
  // The receipt is looked for among the grant's user's, on its card (which places receipts).
  const user = await deps.store.users.findById(grant.userId);
  if (!user) throw new AppError("not_found", "Receipt not found.");
  const record = await find(receiptOwnerOf(user));
  if (!record || record.issuerTenantId !== principal.tenantId) {
    throw new AppError("not_found", "Receipt not found.");
  }
  if (record.userId !== grant.userId || record.keyBundle.keyId !== grant.keyId) {
    throw new AppError("forbidden", "The access token is not valid for this receipt.");
  }

  const plaintext = await deps.pool.openReceipt({
    privateKey: input.privateKey,
    expectedSpki: key.publicKey,
    sealed: sealedFromText({
      encryptedAesKey: record.keyBundle.encryptedAesKey,
      iv: record.iv,
      ciphertext: record.ciphertext,
      authTag: record.authTag,
      ...(record.keyBundle.encapsulatedKey === undefined
        ? {}
        : { encapsulatedKey: record.keyBundle.encapsulatedKey }),
    }),
    algorithm: record.keyBundle.algorithm,
    aadBound: record.keyBundle.aadBound === true,
    aad: receiptAad(record),
  });
  const receipt = receiptOfPlaintext(plaintext, record);
  const now = deps.clock.now();
  receipt.keyId = record.keyBundle.keyId;
  receipt.decryptedAt = timestampFromDate(now);
  await deps.store.audit.append({
    at: now,
    action: caller.action,
    tenantId: principal.tenantId,
    requestId: caller.requestId,
    sourceIp: caller.sourceIp,
    userId: grant.userId,
    keyId: grant.keyId,
    subject: record.paymentId ?? record.receiptId,
  });
  return receipt;
}
