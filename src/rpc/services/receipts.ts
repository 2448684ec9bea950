import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { ReceiptSchema } from "../../../gen/receipts/v1/receipt_pb.js";
import type { MerchantSigningKeySchema, ReceiptsService } from "../../../gen/receipts/v1/receipts_pb.js";
import type { DomainDeps } from "../../domain/deps.js";
import { listPendingEscrow, releaseByIssuer } from "../../domain/issuer-escrow.js";
import {
  decryptReceipt,
  encryptReceipt,
  getTransactionReceipt,
  listReceipts,
  storeSealedReceipt,
} from "../../domain/receipts.js";
import { SIGNATURE_HEADER } from "../../domain/signatures.js";
import {
  listSigningKeys,
  registerSigningKey,
  revokeSigningKey,
  type SigningKeyView,
} from "../../domain/signing-keys.js";
import { isOn } from "../../fast-paths.js";
import { callerOf, encryptedReceiptOf, encryptedReceiptWith, principalOf } from "../convert.js";
import { receiptPageResponse } from "../receipt-page.js";

/** ReceiptsService: encrypt, decrypt, list, signing keys, adapted to the domain. */
export function receiptsService(deps: DomainDeps): ServiceImpl<typeof ReceiptsService> {
  return {
    async encryptReceipt(req, ctx) {
      const record = await encryptReceipt(
        deps,
        principalOf(ctx),
        req.receipt ?? create(ReceiptSchema),
        ctx.requestHeader.get(SIGNATURE_HEADER),
        callerOf(ctx),
      );
      // A message literal, not create(): encrypt is the hot path (see encryptedReceiptOf).
      return {
        $typeName: "receipts.v1.EncryptReceiptResponse" as const,
        receipt: encryptedReceiptOf(record),
      };
    },
    async decryptReceipt(req, ctx) {
      return { receipt: await decryptReceipt(deps, principalOf(ctx), req, callerOf(ctx)) };
    },
    async listReceipts(req, ctx) {
      const page = await listReceipts(deps, principalOf(ctx), req);
      // With the JSON writer's fast path, a REST answer is written from the page's records (receipt-page.ts).
      if (isOn("json-writer")) return receiptPageResponse(page);
      return { receipts: page.receipts.map(encryptedReceiptOf), nextPageToken: page.nextCursor ?? "" };
    },
    async getTransactionReceipt(req, ctx) {
      return { receipt: encryptedReceiptOf(await getTransactionReceipt(deps, principalOf(ctx), req)) };
    },
    async registerSigningKey(req, ctx) {
      const key = await registerSigningKey(deps, principalOf(ctx), req, callerOf(ctx));
      return { ...key, registeredAt: timestampFromDate(key.registeredAt) };
    },
    async listSigningKeys(req, ctx) {
      const { merchantId, keys } = await listSigningKeys(deps, principalOf(ctx), req);
      return { merchantId, signingKeys: keys.map(signingKeyOf) };
    },
    async revokeSigningKey(req, ctx) {
      return { signingKey: signingKeyOf(await revokeSigningKey(deps, principalOf(ctx), req, callerOf(ctx))) };
    },
    async storeSealedReceipt(req, ctx) {
      const input = { ...req, recipientHashedPan: req.recipientHashedPan.toLowerCase() };
      const record = await storeSealedReceipt(deps, principalOf(ctx), input, callerOf(ctx));
      // A message literal, as encrypt answers; the sealed parts are the request's own bytes, which
      // the record holds in base64: not decoded back from it.
      return {
        $typeName: "receipts.v1.StoreSealedReceiptResponse" as const,
        receipt: encryptedReceiptWith(record, req),
      };
    },
    async listPendingEscrow(req, ctx) {
      const page = await listPendingEscrow(deps, principalOf(ctx), req);
      return { receipts: page.receipts.map(encryptedReceiptOf), nextPageToken: page.nextCursor ?? "" };
    },
    releaseEscrow: (req, ctx) => releaseByIssuer(deps, principalOf(ctx), req, callerOf(ctx)),
  };
}

/** A merchant signing key as the API renders it. */
function signingKeyOf(key: SigningKeyView): MessageInitShape<typeof MerchantSigningKeySchema> {
  const { registeredAt, replacedAt, revokedAt, ...rest } = key;
  return {
    ...rest,
    registeredAt: timestampFromDate(registeredAt),
    ...(replacedAt === undefined ? {} : { replacedAt: timestampFromDate(replacedAt) }),
    ...(revokedAt === undefined ? {} : { revokedAt: timestampFromDate(revokedAt) }),
  };
}
