import { create } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import type {
  CreatePaymentResponse,
  Payment,
  PaymentsService,
  Refund,
  RefundPaymentResponse,
  ServiceMetadata,
} from "../../../gen/receipts/v1/payments_pb.js";
import { ReceiptSchema } from "../../../gen/receipts/v1/receipt_pb.js";
import type { DomainDeps } from "../../domain/deps.js";
import { type CreatedPayment, createPayment, decryptPayment } from "../../domain/payments.js";
import { getPayment, listPayments, type RefundedPayment, refundPayment } from "../../domain/refunds.js";
import { SIGNATURE_HEADER } from "../../domain/signatures.js";
import { timestampOf } from "../../proto-scalars.js";
import type { PaymentRecord, ReceiptRecord, RefundRecord } from "../../store/types.js";
import { callerOf, principalOf } from "../convert.js";
import { IDEMPOTENCY_HEADER } from "../idempotent.js";

/** PaymentsService: create and refund (idempotent), read, list and decrypt, adapted to the domain. */
export function paymentsService(deps: DomainDeps): ServiceImpl<typeof PaymentsService> {
  return {
    async createPayment(req, ctx) {
      const input = {
        gateway: req.gateway,
        receipt: req.receipt ?? create(ReceiptSchema),
        signature: ctx.requestHeader.get(SIGNATURE_HEADER),
        idempotencyKey: ctx.requestHeader.get(IDEMPOTENCY_HEADER) ?? undefined,
      };
      return responseOf(await createPayment(deps, principalOf(ctx), input, callerOf(ctx)));
    },
    async decryptPayment(req, ctx) {
      return { receipt: await decryptPayment(deps, principalOf(ctx), req, callerOf(ctx)) };
    },
    async getPayment(req, ctx) {
      return { payment: paymentOf(await getPayment(deps, principalOf(ctx), req.paymentId)) };
    },
    async listPayments(req, ctx) {
      const page = await listPayments(deps, principalOf(ctx), req);
      return { payments: page.payments.map(paymentOf), nextPageToken: page.nextCursor ?? "" };
    },
    async refundPayment(req, ctx) {
      const input = {
        paymentId: req.paymentId,
        receipt: req.receipt ?? create(ReceiptSchema),
        signature: ctx.requestHeader.get(SIGNATURE_HEADER),
        idempotencyKey: ctx.requestHeader.get(IDEMPOTENCY_HEADER) ?? undefined,
      };
      return refundResponseOf(await refundPayment(deps, principalOf(ctx), input, callerOf(ctx)));
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
    serviceMetadata: metadataOf(payment, receipt, payment.amount),
  };
  if (clientSecret !== undefined) response.clientSecret = clientSecret;
  return response;
}

/** What the service did with a payment's (or a refund's) receipt. */
function metadataOf(payment: PaymentRecord, receipt: ReceiptRecord, amount: number): ServiceMetadata {
  return {
    $typeName: "receipts.v1.ServiceMetadata",
    receiptId: receipt.receiptId,
    transactionId: receipt.transactionId,
    keyId: receipt.keyBundle.keyId,
    isEscrowed: receipt.isEscrowed,
    gateway: payment.gateway,
    amount: BigInt(amount),
    currency: payment.currency,
  };
}

/** A stored payment as its merchant reads it: `refundedAmount` counts the refunds that succeeded. */
function paymentOf(record: PaymentRecord): Payment {
  const refunds = (record.refunds ?? []).map(refundOf);
  const payment: Payment = {
    $typeName: "receipts.v1.Payment",
    paymentId: record.paymentId,
    gateway: record.gateway,
    status: record.status,
    amount: BigInt(record.amount),
    currency: record.currency,
    merchantId: record.merchantId,
    transactionId: record.transactionId,
    receiptId: record.receiptId,
    orderId: record.orderId,
    createdAt: timestampOf(record.createdAt),
    refundedAmount: refunds.reduce((sum, r) => (r.status === "succeeded" ? sum + r.amount : sum), 0n),
    refunds,
  };
  if (record.declineCode !== undefined) payment.declineCode = record.declineCode;
  return payment;
}

function refundOf(record: RefundRecord): Refund {
  return {
    $typeName: "receipts.v1.Refund",
    refundId: record.refundId,
    amount: BigInt(record.amount),
    status: record.status,
    receiptId: record.receiptId,
    gatewayRefundId: record.gatewayRefundId ?? "",
    createdAt: timestampOf(record.createdAt),
  };
}

function refundResponseOf({ refund, payment, receipt }: RefundedPayment): RefundPaymentResponse {
  return {
    $typeName: "receipts.v1.RefundPaymentResponse",
    refund: refundOf(refund),
    payment: paymentOf(payment),
    serviceMetadata: metadataOf(payment, receipt, refund.amount),
  };
}
