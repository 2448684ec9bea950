import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  CreatePaymentRequestSchema,
  type CreatePaymentResponse,
  CreatePaymentResponseSchema,
  type PaymentsService,
} from "../../../gen/receipts/v1/payments_pb.js";
import { ReceiptSchema } from "../../../gen/receipts/v1/receipt_pb.js";
import type { DomainDeps } from "../../domain/deps.js";
import { type CreatedPayment, createPayment, decryptPayment } from "../../domain/payments.js";
import { SIGNATURE_HEADER } from "../../domain/signatures.js";
import { callerOf, principalOf, timestampOf } from "../convert.js";
import { idempotently } from "../idempotent.js";

/** PaymentsService: create (idempotent) and decrypt, adapted to the domain. */
export function paymentsService(deps: DomainDeps): ServiceImpl<typeof PaymentsService> {
  return {
    async createPayment(req, ctx) {
      const principal = principalOf(ctx);
      return idempotently(
        deps,
        ctx,
        { schema: CreatePaymentRequestSchema, message: req },
        CreatePaymentResponseSchema,
        async () =>
          responseOf(
            await createPayment(
              deps,
              principal,
              {
                gateway: req.gateway,
                receipt: req.receipt ?? create(ReceiptSchema),
                signature: ctx.requestHeader.get(SIGNATURE_HEADER),
              },
              callerOf(ctx),
            ),
          ),
      );
    },
    async decryptPayment(req, ctx) {
      return { receipt: await decryptPayment(deps, principalOf(ctx), req, callerOf(ctx)) };
    },
  };
}

/** The answer of a created payment, as message literals (see `encryptedReceiptOf`). */
function responseOf({ payment, receipt, clientSecret }: CreatedPayment): CreatePaymentResponse {
  const response: CreatePaymentResponse = {
    $typeName: "receipts.v1.CreatePaymentResponse",
    paymentId: payment.paymentId,
    gateway: payment.gateway,
    status: payment.status,
    amount: BigInt(payment.amount),
    currency: payment.currency,
    orderId: payment.orderId,
    createdAt: timestampOf(payment.createdAt),
    serviceMetadata: {
      $typeName: "receipts.v1.ServiceMetadata",
      receiptId: payment.receiptId,
      transactionId: payment.transactionId,
      keyId: receipt.keyBundle.keyId,
      isEscrowed: receipt.isEscrowed,
      gateway: payment.gateway,
      amount: BigInt(payment.amount),
      currency: payment.currency,
    },
  };
  if (clientSecret !== undefined) response.clientSecret = clientSecret;
  return response;
}
