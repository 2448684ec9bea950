import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext } from "@connectrpc/connect";
import { type EncryptedReceipt, EncryptedReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import type { CallerInfo } from "../domain/grants.js";
import { KEY_ALGORITHM } from "../domain/onboarding.js";
import { AppError } from "../errors.js";
import type { ApiKeyRecord, ReceiptRecord } from "../store/types.js";
import { kPrincipal, kRemoteAddress, kRequestId } from "./context.js";

/** The stored form of a sealed receipt rendered as the API's `EncryptedReceipt`. */
export function encryptedReceiptOf(record: ReceiptRecord): EncryptedReceipt {
  return create(EncryptedReceiptSchema, {
    version: record.version,
    receiptId: record.receiptId,
    keyId: record.keyBundle.keyId,
    keyBundle: {
      encryptedAesKey: Buffer.from(record.keyBundle.encryptedAesKey, "base64"),
      keyId: record.keyBundle.keyId,
      algorithm: KEY_ALGORITHM,
    },
    ciphertext: Buffer.from(record.ciphertext, "base64"),
    iv: Buffer.from(record.iv, "base64"),
    authTag: Buffer.from(record.authTag, "base64"),
    merchantId: record.merchantId,
    transactionId: record.transactionId,
    createdAt: timestampFromDate(record.createdAt),
    isEscrowed: record.isEscrowed,
    ...(record.escrowKeyId === undefined ? {} : { escrowKeyId: record.escrowKeyId }),
    ...(record.expiresAt === undefined ? {} : { expiresAt: timestampFromDate(record.expiresAt) }),
  });
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
