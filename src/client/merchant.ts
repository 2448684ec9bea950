import type { CreatePaymentResponse } from "../../gen/receipts/v1/payments_pb.js";
import type { EncryptedReceipt, KeyBundle } from "../../gen/receipts/v1/receipt_pb.js";
import { fromBase64 } from "./base64.js";
import type { CreateOptions, Gateway, MerchantCard, ReceiptsClient } from "./client.js";
import { ReceiptsApiError } from "./errors.js";
import { type MerchantSigner, signReceiptJson } from "./signing.js";
import { type ReceiptJson, type SealedEnvelope, sealReceipt } from "./webcrypto.js";

export type { MerchantSigner };

/**
 * The merchant's side of zero-knowledge receipts (SPEC section 16) in one call: look up the key the
 * card's receipts go to, sign the receipt (section 10) and seal it on this side with WebCrypto, then
 * hand the service only the envelope. The service never sees the receipt's content; the signature
 * travels inside the sealed plaintext, where the cardholder's app verifies it.
 */

/**
 * A receipt to seal on the merchant's side: its fields, and the card it is for: `recipientHashedPan`
 * (SHA-256 of the card number, 64 hexadecimal characters) or `recipientPar` (the card's PAR, for a
 * wallet tap), and `cardBin`, the first 6 or 8 digits when known (routes to the BIN's issuer).
 */
export type MerchantReceipt = Omit<ReceiptJson, "recipientHashedPan" | "recipientPar"> & MerchantCard;

/** Options of {@link sealAndStoreReceipt}. */
export interface SealAndStoreOptions extends CreateOptions {
  /** Signs the receipt; the signature and key id are sealed with it. */
  signer?: MerchantSigner;
  /** Creates a payment that carries the sealed receipt, instead of storing a receipt alone. */
  payment?: { gateway: Gateway; amount: bigint; cardNonce?: string };
}

/** What {@link sealAndStoreReceipt} stored: the receipt, or the payment that carries it. */
export type SealedAndStored =
  | { kind: "receipt"; receipt: EncryptedReceipt }
  | { kind: "payment"; payment: CreatePaymentResponse };

/**
 * Looks up the recipient's key, signs and seals `receipt` locally, and stores it (or creates a payment
 * with it). A card whose key changes between the look-up and the store (the service answers `conflict`,
 * "look it up again") is looked up and sealed once more; every other error is thrown as it came.
 */
export async function sealAndStoreReceipt(
  client: ReceiptsClient,
  receipt: MerchantReceipt,
  options: SealAndStoreOptions = {},
): Promise<SealedAndStored> {
  const { recipientHashedPan, recipientPar, cardBin, ...fields } = receipt;
  const card: MerchantCard = {
    ...(recipientHashedPan === undefined ? {} : { recipientHashedPan }),
    ...(recipientPar === undefined ? {} : { recipientPar }),
    ...(cardBin === undefined ? {} : { cardBin }),
  };
  const plain: ReceiptJson = { ...fields, version: fields.version ?? "1.0" };
  if (options.signer !== undefined) {
    const signature = await signReceiptJson(plain as never, options.signer.privateKey);
    Object.assign(plain, {
      merchantSignature: signature,
      merchantKeyId: options.signer.merchantKeyId,
    });
  }
  for (let attempt = 1; ; attempt++) {
    const key = await client.lookupKey(card, options);
    const envelope = await sealReceipt(plain, key.publicKey, { keyId: key.keyId, aadBound: key.aadBound });
    // A re-sealed envelope is a new body: it needs an idempotency key of its own. The signature is
    // inside the envelope: the create itself is not signed (no signer, no payment options).
    const { idempotencyKey, signer: _inside, payment: _options, ...call } = options;
    const create: CreateOptions =
      attempt === 1 && idempotencyKey !== undefined ? { ...call, idempotencyKey } : call;
    try {
      return await store(client, card, plain, envelope, create, options.payment);
    } catch (err) {
      const stale =
        err instanceof ReceiptsApiError && err.code === "conflict" && /look it up again/.test(err.message);
      if (!stale || attempt === 2) throw err;
    }
  }
}

async function store(
  client: ReceiptsClient,
  card: MerchantCard,
  plain: ReceiptJson,
  envelope: SealedEnvelope,
  options: CreateOptions,
  payment: SealAndStoreOptions["payment"],
): Promise<SealedAndStored> {
  const bytes = (text: string) => fromBase64(text) ?? new Uint8Array();
  const bundle = envelope.keyBundle;
  const keyBundle: Omit<KeyBundle, "$typeName"> = {
    keyId: bundle.keyId,
    algorithm: bundle.algorithm,
    encryptedAesKey: bytes(bundle.encryptedAesKey),
    aadBound: bundle.aadBound === true,
    ...(bundle.encapsulatedKey === undefined ? {} : { encapsulatedKey: bytes(bundle.encapsulatedKey) }),
  };
  const sealed = {
    keyBundle,
    ciphertext: bytes(envelope.ciphertext),
    iv: bytes(envelope.iv),
    authTag: bytes(envelope.authTag),
  };
  if (payment === undefined) {
    const receipt = await client.storeSealedReceipt(
      {
        ...card,
        version: envelope.version,
        receiptId: envelope.receiptId,
        merchantId: envelope.merchantId,
        transactionId: envelope.transactionId,
        ...sealed,
      },
      options,
    );
    return { kind: "receipt", receipt };
  }
  const created = await client.createPayment(
    payment.gateway,
    {
      ...card,
      merchantId: envelope.merchantId,
      transactionId: envelope.transactionId,
      currency: String(plain.currency ?? ""),
      amount: payment.amount,
      ...(payment.cardNonce === undefined ? {} : { cardNonce: payment.cardNonce }),
      sealedReceipt: { version: envelope.version, receiptId: envelope.receiptId, ...sealed },
    },
    options,
  );
  return { kind: "payment", payment: created };
}
