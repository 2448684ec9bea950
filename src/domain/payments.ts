import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import { sha256Hex } from "../crypto/digest.js";
import { AppError, Violations } from "../errors.js";
import { randomId } from "../ids.js";
import type { ApiKeyRecord, PaymentRecord, ReceiptRecord } from "../store/types.js";
import { assertMerchantAllowed } from "./api-keys.js";
import { type DecryptCredentials, openWithGrant } from "./decrypt.js";
import type { DomainDeps } from "./deps.js";
import { gatewayByName } from "./gateways/index.js";
import type { CallerInfo } from "./grants.js";
import { prepareReceipt } from "./prepare.js";
import { sealForRecipient, settleEscrowRace } from "./sealing.js";
import { applyMerchantSignature } from "./signatures.js";

/** A created payment as returned to the merchant; `clientSecret` is shown only in this response. */
export interface CreatedPayment {
  payment: PaymentRecord;
  receipt: ReceiptRecord;
  clientSecret?: string;
}

/**
 * Charges through the gateway and stores the payment together with its sealed receipt (section 7).
 * Without an idempotency key, a second payment for `(merchantId, transactionId)` is `conflict`.
 * Idempotent replays are handled by {@link withIdempotency} around this call. `signature` is the
 * `X-Receipt-Signature` header, required once the merchantId has a signing key (section 10).
 */
export async function createPayment(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: { gateway: string; receipt: Receipt; signature?: string | null },
): Promise<CreatedPayment> {
  const gateway = gatewayByName(input.gateway);
  const receipt = prepareReceipt(input.receipt, deps.clock.now(), gateway);
  assertMerchantAllowed(principal, receipt.merchantId);
  const amount = gateway.resolveAmount(receipt);
  receipt.amount = amount;
  // After the amount is resolved: the receipt is sealed (and must be signed) with the amount charged.
  await applyMerchantSignature(deps, input.receipt, receipt, input.signature ?? null);

  const paymentId = randomId("pay", 12);
  const record = await sealForRecipient(deps, principal, receipt, paymentId);
  const charge = await gateway.charge({
    paymentId,
    amount,
    currency: receipt.currency,
    ...(receipt.cardNonce === undefined ? {} : { cardNonce: receipt.cardNonce }),
  });
  const payment: PaymentRecord = {
    paymentId,
    merchantTenantId: principal.tenantId,
    merchantId: receipt.merchantId,
    transactionId: receipt.transactionId,
    receiptId: receipt.receiptId,
    gateway: gateway.name,
    status: charge.status,
    amount,
    currency: receipt.currency,
    orderId: charge.orderId,
    createdAt: record.createdAt,
  };
  if (charge.clientSecret !== undefined) payment.clientSecretHash = sha256Hex(charge.clientSecret);

  const outcome = await deps.store.payments.createWithReceipt(payment, record);
  if (outcome.kind === "duplicate_transaction") {
    throw new AppError("conflict", "A payment for this transactionId already exists for this merchantId.");
  }
  if (outcome.kind === "duplicate_receipt") {
    throw new AppError("conflict", "A receipt with this receiptId already exists for this merchantId.");
  }
  await settleEscrowRace(deps, record);
  return charge.clientSecret === undefined
    ? { payment, receipt: record }
    : { payment, receipt: record, clientSecret: charge.clientSecret };
}

/** A decrypt-payment request after transport decoding. */
export interface DecryptPaymentInput extends DecryptCredentials {
  paymentId: string;
}

/** Decrypts the receipt of a payment for the holder of a grant (section 7). */
export async function decryptPayment(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: DecryptPaymentInput,
  caller: CallerInfo,
): Promise<Receipt> {
  if (input.paymentId === "") {
    const violations = new Violations();
    violations.add("paymentId", "is required");
    violations.throwIfAny();
  }
  return openWithGrant(deps, principal, input, () => deps.store.receipts.findByPaymentId(input.paymentId), {
    ...caller,
    action: "payment.decrypted",
  });
}
