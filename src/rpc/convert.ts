import { create } from "@bufbuild/protobuf";
import type { HandlerContext } from "@connectrpc/connect";
import { type LookupKeyResponse, LookupKeyResponseSchema } from "../../gen/receipts/v1/keys_pb.js";
import type { EncryptedReceipt } from "../../gen/receipts/v1/receipt_pb.js";
import { isAadBound } from "../crypto/suites.js";
import type { CallerInfo } from "../domain/grants.js";
import type { LookedUpKey } from "../domain/routing.js";
import { AppError } from "../errors.js";
import { timestampOf } from "../proto-scalars.js";
import type { ApiKeyRecord, ReceiptRecord } from "../store/types.js";
import { bytesFromBase64 } from "./base64-bytes.js";
import { kPrincipal, kRemoteAddress, kRequestId } from "./context.js";

/** The AES-GCM parts of a receipt as bytes, and the key bundle's wrapped key when the caller has it. */
export interface SealedPartBytes {
  ciphertext: Uint8Array;
  iv: Uint8Array;
  authTag: Uint8Array;
  keyBundle?: { encryptedAesKey: Uint8Array; encapsulatedKey?: Uint8Array | undefined } | undefined;
}

/**
 * The stored form of a sealed receipt rendered as the API's `EncryptedReceipt`. Written as message
 * literals rather than with `create()`, which fills in every field by reflection first: a page of
 * receipts renders twenty of these. The types still require every field `create()` would set.
 */
export function encryptedReceiptOf(record: ReceiptRecord): EncryptedReceipt {
  return encryptedReceiptWith(record, undefined);
}

/**
 * {@link encryptedReceiptOf}, with `parts` (when the caller holds them) the very bytes the record's
 * base64 parts were made from (a receipt the merchant sealed, answered as it is stored): used as they
 * are, not decoded back from the record.
 */
export function encryptedReceiptWith(
  record: ReceiptRecord,
  parts: SealedPartBytes | undefined,
): EncryptedReceipt {
  const receipt: EncryptedReceipt = {
    $typeName: "receipts.v1.EncryptedReceipt",
    version: record.version,
    receiptId: record.receiptId,
    keyId: record.keyBundle.keyId,
    keyBundle: {
      $typeName: "receipts.v1.KeyBundle",
      encryptedAesKey: parts?.keyBundle?.encryptedAesKey ?? bytesFromBase64(record.keyBundle.encryptedAesKey),
      keyId: record.keyBundle.keyId,
      algorithm: record.keyBundle.algorithm,
      aadBound: isAadBound(record.keyBundle.algorithm, record.keyBundle.aadBound),
    },
    ciphertext: parts?.ciphertext ?? bytesFromBase64(record.ciphertext),
    iv: parts?.iv ?? bytesFromBase64(record.iv),
    authTag: parts?.authTag ?? bytesFromBase64(record.authTag),
    merchantId: record.merchantId,
    transactionId: record.transactionId,
    createdAt: timestampOf(record.createdAt),
    isEscrowed: record.isEscrowed,
  };
  const { encapsulatedKey } = record.keyBundle;
  if (encapsulatedKey !== undefined && receipt.keyBundle !== undefined) {
    // The record holds one only when the request's was given and checked (never empty then).
    const given = parts?.keyBundle?.encapsulatedKey;
    receipt.keyBundle.encapsulatedKey =
      given !== undefined && given.length > 0 ? given : bytesFromBase64(encapsulatedKey);
  }
  if (record.escrowKeyId !== undefined) receipt.escrowKeyId = record.escrowKeyId;
  if (record.expiresAt !== undefined) receipt.expiresAt = timestampOf(record.expiresAt);
  return receipt;
}

/** The members of a look-up answer that a message literal carries; any other goes through `create()`. */
const PLAIN_LOOKUP_MEMBERS = new Set(["keyId", "algorithm", "publicKey", "isEscrowed", "aadBound"]);

/**
 * A look-up's answer as its message. Without key-directory members (a key with no logged statement,
 * the common case) a message literal, as encrypt answers: `create()` walks the schema's eleven fields
 * and was 2% of a gRPC look-up's busy main thread. With any other member (a binding, its proofs, a
 * checkpoint, a member added later) `create()` builds the nested messages, as before.
 */
export function lookupKeyResponseOf(key: LookedUpKey): LookupKeyResponse {
  for (const name in key) {
    if (!PLAIN_LOOKUP_MEMBERS.has(name)) return create(LookupKeyResponseSchema, key);
  }
  return {
    $typeName: "receipts.v1.LookupKeyResponse",
    keyId: key.keyId,
    algorithm: key.algorithm,
    publicKey: key.publicKey,
    isEscrowed: key.isEscrowed,
    aadBound: key.aadBound,
  };
}

/** The authenticated caller of a handler; the access interceptor guarantees it for keyed methods. */
export function principalOf(ctx: HandlerContext): ApiKeyRecord {
  const principal = ctx.values.get(kPrincipal);
  if (!principal) throw new AppError("internal_server_error", "Handler reached without a principal.");
  return principal;
}

/** Request id and client address of a call, for the audit log. */
export function callerOf(ctx: HandlerContext): CallerInfo {
  return { requestId: ctx.values.get(kRequestId), sourceIp: ctx.values.get(kRemoteAddress) };
}
