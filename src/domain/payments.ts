import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import { sha256Hex } from "../crypto/digest.js";
import { AppError, Violations } from "../errors.js";
import { randomId } from "../ids.js";
import type {
  ApiKeyRecord,
  CreatePaymentOutcome,
  PaymentRecord,
  ReceiptOwner,
  ReceiptRecord,
} from "../store/types.js";
import { type DecryptCredentials, openWithGrant } from "./decrypt.js";
import type { DomainDeps } from "./deps.js";
import { declinedEvent, paymentEvents } from "./events.js";
import type { ChargeResult, PaymentGateway } from "./gateways/gateway.js";
import { gatewayIdempotencyKey } from "./gateways/gateway.js";
import { gatewayByName } from "./gateways/index.js";
import { type CallerInfo, INTERNAL_CALLER } from "./grants.js";
import { MAX_CARD_NONCE_LENGTH, MAX_MONEY } from "./limits.js";
import { assertMerchantIdUsable, claimMerchantId, replacePreviousOwners } from "./merchants.js";
import { assertPlaintextAccepted } from "./plaintext-intake.js";
import { prepareReceipt } from "./prepare.js";
import { checkCurrency, type ValidReceipt } from "./receipt-rules.js";
import { auditBindingConflict } from "./routing.js";
import { prepareSealed } from "./sealed.js";
import { type PreparedReceipt, sealForRecipient, settleStoredReceipt } from "./sealing.js";
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
  /**
   * The `X-Receipt-Signature` header (README, "Merchant signatures"); unused for a receipt the merchant
   * sealed.
   */
  signature?: string | null;
  /** The caller's Idempotency-Key, passed on to the gateway (see `gatewayIdempotencyKey`). */
  idempotencyKey?: string | undefined;
}

/**
 * Charges through the gateway and stores the payment together with its sealed receipt:
 * a receipt in the clear, sealed here, or one the merchant sealed on its side (`sealedReceipt`).
 * Without an idempotency key, a second payment for `(merchantId, transactionId)` is
 * `conflict`. Idempotent replays are handled by {@link withIdempotency} around this call.
 */
export function createPayment(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: CreatePaymentInput,
  caller: CallerInfo = INTERNAL_CALLER,
): Promise<CreatedPayment> {
  // Steps, not one async function, so that neither the request nor the receipt is kept alive while
  // the worker seals (see sealForRecipient).
  return checkedPayment(deps, principal, input)
    .then((checked) => (checked.kind === "sealed" ? checked : sealToCharge(deps, principal, checked)))
    .then(({ gateway, charge }) => chargeAndStore(deps, principal, gateway, charge, caller));
}

/** What {@link chargeAndStore} needs: the receipt record (and its binding conflict) and what to charge. */
interface PaymentToCharge {
  prepared: PreparedReceipt;
  amount: number;
  currency: string;
  cardNonce: string | undefined;
  /** The gateway's idempotency key, when the caller sent an Idempotency-Key. */
  idempotencyKey?: string | undefined;
}

/** A payment whose receipt is ready to charge and store (`sealed`), or still to seal (`plaintext`). */
type CheckedPayment =
  | { kind: "sealed"; gateway: PaymentGateway; charge: PaymentToCharge }
  | {
      kind: "plaintext";
      gateway: PaymentGateway;
      receipt: ValidReceipt;
      /** The card's keyed reference, from the plaintext intake check, for routing. */
      cardKey: string;
      amount: number;
      paymentId: string;
      idempotencyKey: string | undefined;
    };

/** The payment request checked: the merchant's sealed receipt taken, or a receipt in the clear validated. */
async function checkedPayment(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: CreatePaymentInput,
): Promise<CheckedPayment> {
  const gateway = gatewayByName(input.gateway, deps.gateways);
  const paymentId = randomId("pay", 12);
  const idempotencyKey = gatewayIdempotencyKey("charge", principal.id, input.idempotencyKey);
  if (input.receipt.sealedReceipt !== undefined) {
    const charge = await takeSealed(deps, principal, input.receipt, paymentId);
    return { kind: "sealed", gateway, charge: { ...charge, idempotencyKey } };
  }
  const { receipt, cardKey, amount } = await checkedPlaintext(deps, principal, gateway, input);
  return { kind: "plaintext", gateway, receipt, cardKey, amount, paymentId, idempotencyKey };
}

/** A receipt in the clear: validated with the gateway's rules, its amount resolved, signed if required. */
async function checkedPlaintext(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  gateway: PaymentGateway,
  input: CreatePaymentInput,
): Promise<{ receipt: ValidReceipt; cardKey: string; amount: number }> {
  const receipt = await prepareReceipt(deps, principal, input.receipt, gateway);
  const amount = gateway.resolveAmount(receipt);
  receipt.amount = amount;
  await assertMerchantIdUsable(deps, principal, receipt.merchantId);
  const cardKey = await assertPlaintextAccepted(deps, receipt);
  // After the amount is resolved: the receipt is sealed (and must be signed) with the amount charged.
  await applyMerchantSignature(deps, input.receipt, receipt, input.signature ?? null);
  return { receipt, cardKey, amount };
}

/** Seals a checked receipt in the clear; what waits for the worker holds the charge's fields only. */
function sealToCharge(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  {
    gateway,
    receipt,
    cardKey,
    amount,
    paymentId,
    idempotencyKey,
  }: Extract<CheckedPayment, { kind: "plaintext" }>,
): Promise<{ gateway: PaymentGateway; charge: PaymentToCharge }> {
  const { currency, cardNonce } = receipt;
  return sealForRecipient(deps, principal, receipt, { paymentId, cardKey }).then((prepared) => ({
    gateway,
    charge: { prepared, amount, currency, cardNonce, idempotencyKey },
  }));
}

/**
 * The receipt fields that may stand beside a `sealedReceipt`; every other field of the
 * plaintext receipt is refused, so that nothing the merchant meant to keep sealed reaches the service.
 */
const SEALED_PAYMENT_FIELDS: ReadonlySet<string> = new Set([
  "merchantId",
  "transactionId",
  "recipientHashedPan",
  "recipientPar",
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
  const prepared = await prepareSealed(
    deps,
    principal,
    {
      recipientHashedPan: (receipt.recipientHashedPan ?? "").toLowerCase(),
      recipientPar: receipt.recipientPar,
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
    "sealedReceipt.",
    paymentId,
  );
  return {
    prepared,
    amount: Number(amount),
    currency: receipt.currency.toUpperCase(),
    cardNonce: receipt.cardNonce,
  };
}

/**
 * Charges the card and stores the payment with its receipt, both or neither; an id that a previous
 * owner of the merchantId used is freed first ({@link replacePreviousOwners}). A declined card leaves
 * a declined payment without a receipt (see {@link recordDecline}); a later attempt of the same
 * transaction with another card takes over its paymentId.
 */
async function chargeAndStore(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  gateway: PaymentGateway,
  { prepared, amount, currency, cardNonce, idempotencyKey }: PaymentToCharge,
  caller: CallerInfo,
): Promise<CreatedPayment> {
  const { record } = prepared;
  // Before the gateway charges: a retry without an Idempotency-Key must not charge the card again. A
  // previous owner's payment of the merchantId does not stop its owner (storePayment frees the id).
  const earlier = await deps.store.payments.findByTransaction(record.merchantId, record.transactionId);
  if (earlier !== undefined && earlier.merchantTenantId === principal.tenantId) {
    if (earlier.status !== "declined") throw duplicatePayment(principal, earlier);
    record.paymentId = earlier.paymentId;
  }
  const payment: PaymentRecord = {
    paymentId: record.paymentId ?? "",
    merchantTenantId: principal.tenantId,
    merchantId: record.merchantId,
    transactionId: record.transactionId,
    receiptId: record.receiptId,
    gateway: gateway.name,
    status: "succeeded",
    amount,
    currency,
    orderId: "",
    createdAt: record.createdAt,
  };
  let charge: ChargeResult;
  try {
    charge = await gateway.charge({
      paymentId: payment.paymentId,
      amount,
      currency,
      ...(cardNonce === undefined ? {} : { cardNonce }),
      ...(idempotencyKey === undefined ? {} : { idempotencyKey }),
    });
  } catch (err) {
    throw await recordDecline(deps, payment, err);
  }
  payment.orderId = charge.orderId;
  if (charge.clientSecret !== undefined) payment.clientSecretHash = sha256Hex(charge.clientSecret);
  // Checked (assertMerchantIdUsable) before anything else, claimed (a first use) only once the gateway
  // accepted the charge: a refused call writes nothing, a declined one only its declined payment.
  await claimMerchantId(deps, principal, record.merchantId);

  const outcome = await storePayment(deps, principal, payment, record, caller);
  if (outcome.kind === "duplicate_transaction") {
    // Another call created it after the check above; name it if it can be read back.
    const other = await deps.store.payments.findByTransaction(record.merchantId, record.transactionId);
    throw duplicatePayment(principal, other);
  }
  if (outcome.kind === "duplicate_receipt") {
    throw new AppError("conflict", "A receipt with this receiptId already exists for this merchantId.");
  }
  await auditBindingConflict(deps, principal, prepared.conflict, caller);
  await settleStoredReceipt(deps, record, prepared.card);
  return charge.clientSecret === undefined
    ? { payment, receipt: record }
    : { payment, receipt: record, clientSecret: charge.clientSecret };
}

/**
 * Keeps a declined payment (`status: "declined"`, its decline code, no receipt: nothing was charged)
 * with its `payment.declined` event (docs/events.md), so that its merchant can read it and hear of it, and
 * answers the decline naming it (`payment_id`). Any other
 * failure of the gateway is answered as it came. The decline is the answer even when it cannot be
 * kept: the failure to keep it is logged.
 */
async function recordDecline(deps: DomainDeps, payment: PaymentRecord, err: unknown): Promise<unknown> {
  if (!(err instanceof AppError) || err.code !== "payment_declined") return err;
  const declined: PaymentRecord = { ...payment, status: "declined" };
  const code = err.metadata.decline_code;
  if (code !== undefined) declined.declineCode = code;
  try {
    const event = declinedEvent(declined.merchantTenantId, deps.clock.now(), {
      paymentId: declined.paymentId,
      merchantId: declined.merchantId,
      transactionId: declined.transactionId,
      receiptId: declined.receiptId,
    });
    if ((await deps.store.payments.recordDecline(declined, [event])) === "duplicate_transaction") return err;
  } catch (cause) {
    deps.logger.warn({ err: cause, paymentId: payment.paymentId }, "could not keep a declined payment");
    return err;
  }
  return new AppError(err.code, err.message, {
    metadata: { ...err.metadata, payment_id: payment.paymentId },
  });
}

/**
 * Stores the payment with its receipt and their events; when a previous owner of the merchantId holds the
 * transactionId or the receiptId, frees it and tries again (each at most once).
 */
async function storePayment(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  payment: PaymentRecord,
  record: ReceiptRecord,
  caller: CallerInfo,
): Promise<CreatePaymentOutcome> {
  const events = paymentEvents(deps, payment, record);
  const freed = new Set<string>();
  for (;;) {
    const outcome = await deps.store.payments.createWithReceipt(payment, record, events);
    if (outcome.kind === "created" || freed.has(outcome.kind)) return outcome;
    freed.add(outcome.kind);
    const id =
      outcome.kind === "duplicate_transaction"
        ? { transactionId: payment.transactionId }
        : { receiptId: record.receiptId };
    if (!(await replacePreviousOwners(deps, principal, id, payment.merchantId, caller))) return outcome;
  }
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

/** Decrypts the receipt of a payment for the holder of a grant. */
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
