import type { CreatePaymentResponse } from "../../gen/receipts/v1/payments_pb.js";
import type { EncryptedReceipt, KeyBundle } from "../../gen/receipts/v1/receipt_pb.js";
import { fromBase64 } from "../kt/base64.js";
import type { CreateOptions, Gateway, MerchantCard, ReceiptsClient } from "./client.js";
import { ReceiptsApiError } from "./errors.js";
import type { CardIdentity, KeyTrust } from "./key-trust.js";
import { type MerchantSigner, signReceiptJson } from "./signing.js";
import { type ReceiptJson, type SealedEnvelope, sealReceipt } from "./webcrypto.js";

export type { MerchantSigner };

/**
 * The merchant's side of zero-knowledge receipts (SECURITY.md, "What the service can read, in each mode") in
 * one call: look up the key the card's receipts go to, sign the receipt (README, "Merchant signatures") and
 * seal it on this side with WebCrypto, then hand the service only the envelope. The service never sees the
 * receipt's content; the signature travels inside the sealed plaintext, where the cardholder's app verifies
 * it. Before sealing, the looked-up key is verified under the merchant's trust policy
 * (docs/key-transparency.md), unless the caller says `trust: "unverified"` in so many words.
 */

/**
 * A receipt to seal on the merchant's side: its fields, and the card it is for: `recipientHashedPan`
 * (SHA-256 of the card number, 64 hexadecimal characters) or `recipientPar` (the card's PAR, for a
 * wallet tap), and `cardBin`, the first 6 or 8 digits when known (routes to the BIN's issuer, and names
 * the issuer whose signature the key must carry: required with a `KeyTrust`, or `tokenBin`).
 */
export type MerchantReceipt = Omit<ReceiptJson, "recipientHashedPan" | "recipientPar"> &
  MerchantCard & {
    /** For a wallet tap, instead of `cardBin`: the device token's first 8 digits (sent as `cardBin`). */
    tokenBin?: string;
  };

/** Options of {@link sealAndStoreReceipt}. */
export interface SealAndStoreOptions extends CreateOptions {
  /**
   * How the looked-up key is checked before anything is sealed or sent: a {@link KeyTrust} made from
   * the merchant's trust policy (`createKeyTrust`), or `"unverified"`, which seals to whatever the
   * service answers: then the operator, a stolen issuer API key or a store writer picks who can read
   * the receipt. There is no default: a merchant chooses, in code a reviewer can see.
   */
  trust: KeyTrust | "unverified";
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
 * Looks up the recipient's key, verifies it under `options.trust`, signs and seals `receipt` locally,
 * and stores it (or creates a payment with it). A key that does not verify throws a
 * `KeyVerificationError` and nothing is sealed or sent after the look-up. A card whose key changes
 * between the look-up and the store (the service answers `conflict`, "look it up again") is looked up,
 * verified and sealed once more; every other error is thrown as it came.
 */
export async function sealAndStoreReceipt(
  client: ReceiptsClient,
  receipt: MerchantReceipt,
  options: SealAndStoreOptions,
): Promise<SealedAndStored> {
  const { recipientHashedPan, recipientPar, cardBin: panBin, tokenBin, ...fields } = receipt;
  const trust = trustOf(options, receipt);
  const cardBin = panBin ?? tokenBin;
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
    const envelope = await sealReceipt(plain, key, trust);
    // A re-sealed envelope is a new body: it needs an idempotency key of its own. The signature is
    // inside the envelope: the create itself is not signed (no signer, trust or payment options).
    const { idempotencyKey, signer: _inside, trust: _trust, payment: _options, ...call } = options;
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

/** The seal's trust: the KeyTrust with the card as the merchant knows it, or "unverified". */
function trustOf(
  options: SealAndStoreOptions | undefined,
  receipt: MerchantReceipt,
): { trust: KeyTrust; card: CardIdentity; signal?: AbortSignal } | { trust: "unverified" } {
  const trust = options?.trust;
  if (trust === "unverified") return { trust };
  if (trust === undefined || typeof trust.verify !== "function") {
    throw new TypeError(
      'sealAndStoreReceipt needs options.trust: a KeyTrust (createKeyTrust with your trust policy), or "unverified"',
    );
  }
  if ((receipt.cardBin === undefined) === (receipt.tokenBin === undefined)) {
    throw new TypeError(
      "sealAndStoreReceipt with a KeyTrust needs the card's own BIN: cardBin (the card number's first 6 or 8 digits) or tokenBin (a wallet token's first 8)",
    );
  }
  const bin =
    receipt.cardBin === undefined ? { tokenBin: receipt.tokenBin as string } : { bin: receipt.cardBin };
  const ref =
    receipt.recipientPar === undefined
      ? { hashedPan: receipt.recipientHashedPan ?? "" }
      : { par: receipt.recipientPar };
  const card: CardIdentity = { ...ref, ...bin };
  return options?.signal === undefined ? { trust, card } : { trust, card, signal: options.signal };
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
