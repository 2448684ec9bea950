import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import { sha256Hex } from "../crypto/digest.js";
import { AppError, Violations } from "../errors.js";
import { randomId } from "../ids.js";
import type { ApiKeyRecord, PaymentRecord, ReceiptOwner, ReceiptRecord } from "../store/types.js";
import { type DecryptCredentials, openWithGrant } from "./decrypt.js";
import type { DomainDeps } from "./deps.js";
import type { PaymentGateway } from "./gateways/gateway.js";
import { gatewayByName } from "./gateways/index.js";
import { type CallerInfo, INTERNAL_CALLER } from "./grants.js";
import { MAX_CARD_NONCE_LENGTH, MAX_MONEY } from "./limits.js";
import { assertMerchantIdUsable, claimMerchantId } from "./merchants.js";
import { prepareReceipt } from "./prepare.js";
import { checkCurrency } from "./receipt-rules.js";
import { prepareSealed } from "./sealed.js";
import { sealForRecipient, settleStoredReceipt } from "./sealing.js";
import { applyMerchantSignature } from "./signatures.js";

/** A created payment as returned to the merchant; `clientSecret` is shown only in this response. */
export interface CreatedPayment {
  payment: PaymentRecord;
  receipt: ReceiptRecord;
  clientSecret?: string;
}

/** A create-payment request after transport decoding. */
export interface CreatePaymentInput {
  gateway: string;
  receipt: Receipt;
  /** The `X-Receipt-Signature` header (section 10); unused for a receipt the merchant sealed. */
  signature?: string | null;
}

/**
 * Charges through the gateway and stores the payment together with its sealed receipt (section 7):
 * a receipt in the clear, sealed here, or one the merchant sealed on its side (`sealedReceipt`,
 * section 16). Without an idempotency key, a second payment for `(merchantId, transactionId)` is
 * `conflict`. Idempotent replays are handled by {@link withIdempotency} around this call.
 */
export async function createPayment(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: CreatePaymentInput,
  caller: CallerInfo = INTERNAL_CALLER,
): Promise<CreatedPayment> {
  const gateway = gatewayByName(input.gateway);
  const paymentId = randomId("pay", 12);
  const charge =
    input.receipt.sealedReceipt === undefined
      ? await sealPlaintext(deps, principal, gateway, input, caller, paymentId)
      : await takeSealed(deps, principal, input.receipt, caller, paymentId);
  return chargeAndStore(deps, principal, gateway, charge);
}

/** What {@link chargeAndStore} needs: the receipt record and what to charge. */
interface PaymentToCharge {
  record: ReceiptRecord;
  amount: number;
  currency: string;
  cardNonce: string | undefined;
}

/** A receipt in the clear: validated with the gateway's rules, signed if required, sealed here. */
async function sealPlaintext(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  gateway: PaymentGateway,
  input: CreatePaymentInput,
  caller: CallerInfo,
  paymentId: string,
): Promise<PaymentToCharge> {
  const receipt = prepareReceipt(input.receipt, deps.clock.now(), gateway);
  const amount = gateway.resolveAmount(receipt);
  receipt.amount = amount;
  await assertMerchantIdUsable(deps, principal, receipt.merchantId);
  // After the amount is resolved: the receipt is sealed (and must be signed) with the amount charged.
  await applyMerchantSignature(deps, input.receipt, receipt, input.signature ?? null);
  await claimMerchantId(deps, principal, receipt.merchantId);
  const record = await sealForRecipient(deps, principal, receipt, caller, paymentId);
  return { record, amount, currency: receipt.currency, cardNonce: receipt.cardNonce };
}

/**
 * The receipt fields that may stand beside a `sealedReceipt` (section 16); every other field of the
 * plaintext receipt is refused, so that nothing the merchant meant to keep sealed reaches the service.
 */
const SEALED_PAYMENT_FIELDS: ReadonlySet<string> = new Set([
  "merchantId",
  "transactionId",
  "recipientHashedPan",
  "currency",
  "amount",
  "cardNonce",
  "cardBin",
  "sealedReceipt",
]);

/** A receipt the merchant sealed: the payment fields checked here, the sealed parts by `prepareSealed`. */
async function takeSealed(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  receipt: Receipt,
  caller: CallerInfo,
  paymentId: string,
): Promise<PaymentToCharge> {
  const v = new Violations();
  for (const [field, value] of Object.entries(receipt)) {
    if (field === "$typeName" || field === "$unknown" || SEALED_PAYMENT_FIELDS.has(field)) continue;
    const empty = value === undefined || value === "" || (Array.isArray(value) && value.length === 0);
    if (!empty) v.add(field, "cannot stand beside sealedReceipt: it belongs inside the sealed receipt");
  }
  checkCurrency(v, receipt.currency);
  const amount = receipt.amount;
  if (amount === undefined) v.add("amount", "is required with a sealedReceipt");
  else if (amount <= 0n || amount > BigInt(MAX_MONEY)) {
    v.add("amount", `must be a whole number from 1 to ${MAX_MONEY}`);
  }
  if (receipt.cardNonce !== undefined && receipt.cardNonce.length > MAX_CARD_NONCE_LENGTH) {
    v.add("cardNonce", `must be at most ${MAX_CARD_NONCE_LENGTH} characters`);
  }
  v.throwIfAny();
  const sealed = receipt.sealedReceipt;
  const record = await prepareSealed(
    deps,
    principal,
    {
      recipientHashedPan: (receipt.recipientHashedPan ?? "").toLowerCase(),
      cardBin: receipt.cardBin,
      version: sealed?.version ?? "",
      receiptId: sealed?.receiptId ?? "",
      merchantId: receipt.merchantId,
      transactionId: receipt.transactionId,
      keyBundle: sealed?.keyBundle,
      ciphertext: sealed?.ciphertext ?? new Uint8Array(),
      iv: sealed?.iv ?? new Uint8Array(),
      authTag: sealed?.authTag ?? new Uint8Array(),
    },
    caller,
    "sealedReceipt.",
    paymentId,
  );
  return {
    record,
    amount: Number(amount),
    currency: receipt.currency.toUpperCase(),
    cardNonce: receipt.cardNonce,
  };
}

/** Charges the card and stores the payment with its receipt, both or neither. */
async function chargeAndStore(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  gateway: PaymentGateway,
  { record, amount, currency, cardNonce }: PaymentToCharge,
): Promise<CreatedPayment> {
  const paymentId = record.paymentId ?? "";
  // Before the gateway charges: a retry without an Idempotency-Key must not charge the card again.
  const earlier = await deps.store.payments.findByTransaction(record.merchantId, record.transactionId);
  if (earlier !== undefined) throw duplicatePayment(principal, earlier);
  const charge = await gateway.charge({
    paymentId,
    amount,
    currency,
    ...(cardNonce === undefined ? {} : { cardNonce }),
  });
  const payment: PaymentRecord = {
    paymentId,
    merchantTenantId: principal.tenantId,
    merchantId: record.merchantId,
    transactionId: record.transactionId,
    receiptId: record.receiptId,
    gateway: gateway.name,
    status: charge.status,
    amount,
    currency,
    orderId: charge.orderId,
    createdAt: record.createdAt,
  };
  if (charge.clientSecret !== undefined) payment.clientSecretHash = sha256Hex(charge.clientSecret);

  const outcome = await deps.store.payments.createWithReceipt(payment, record);
  if (outcome.kind === "duplicate_transaction") {
    // Another call created it after the check above; name it if it can be read back.
    const other = await deps.store.payments.findByTransaction(record.merchantId, record.transactionId);
    throw duplicatePayment(principal, other);
  }
  if (outcome.kind === "duplicate_receipt") {
    throw new AppError("conflict", "A receipt with this receiptId already exists for this merchantId.");
  }
  await settleStoredReceipt(deps, record);
  return charge.clientSecret === undefined
    ? { payment, receipt: record }
    : { payment, receipt: record, clientSecret: charge.clientSecret };
}

/**
 * The `conflict` of a second payment for a `(merchantId, transactionId)`: it names the existing
 * payment (message and `payment_id` metadata) when the caller's tenant made it, so a POS that retried
 * without an Idempotency-Key learns which payment stands; another tenant's payment is never named.
 */
function duplicatePayment(principal: ApiKeyRecord, existing: PaymentRecord | undefined): AppError {
  const message = "A payment for this transactionId already exists for this merchantId";
  if (existing === undefined || existing.merchantTenantId !== principal.tenantId) {
    return new AppError("conflict", `${message}.`);
  }
  return new AppError("conflict", `${message}: ${existing.paymentId}.`, {
    metadata: { payment_id: existing.paymentId },
  });
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
  const find = (owner: ReceiptOwner) => deps.store.receipts.findByPaymentId(input.paymentId, owner);
  return openWithGrant(deps, principal, input, find, {
    ...caller,
    action: "payment.decrypted",
  });
}
