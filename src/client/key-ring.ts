import {
  checkReceiptSignature,
  type SignatureCheck,
  type SigningKeySource,
  signingKeysOnce,
  storedAtOf,
} from "./signatures.js";
import {
  EnvelopeError,
  openReceipt,
  type PrivateKeyInput,
  type ReceiptEnvelope,
  type ReceiptJson,
} from "./webcrypto.js";

/**
 * A cardholder's private keys by keyId, for a user who rotated keys (say RSA to a P-256 key made on
 * the device) and still holds receipts sealed to the old one: a `Map`, a plain object, or a lookup
 * function (e.g. reading a device key store), each giving a {@link PrivateKeyInput} or undefined.
 */
export type KeyRing =
  | ReadonlyMap<string, PrivateKeyInput>
  | Readonly<Record<string, PrivateKeyInput>>
  | ((keyId: string) => PrivateKeyInput | undefined | Promise<PrivateKeyInput | undefined>);

/** The keyId an envelope is sealed to: `keyBundle.keyId`, else the receipt's own `keyId`; "" if neither is a string. */
export function keyIdOf(envelope: ReceiptEnvelope): string {
  if (typeof envelope !== "object" || envelope === null) return "";
  const keyId: unknown = envelope.keyBundle?.keyId || envelope.keyId;
  return typeof keyId === "string" ? keyId : "";
}

/**
 * Opens a sealed receipt with the key of its keyId from `keyRing`, whatever that key's suite. A ring
 * without that key is an {@link EnvelopeError} `unknown_key` naming the keyId; otherwise as
 * {@link openReceipt}.
 */
export async function openReceiptWithKeyRing(
  envelope: ReceiptEnvelope,
  keyRing: KeyRing,
): Promise<ReceiptJson> {
  const keyId = keyIdOf(envelope);
  if (keyId === "")
    throw new EnvelopeError("invalid_envelope", "the envelope names no keyId (keyBundle.keyId)");
  const key = await lookUp(keyRing, keyId);
  if (key === undefined) {
    throw new EnvelopeError("unknown_key", `no private key for keyId ${keyId} in the key ring`);
  }
  return openReceipt(envelope, key);
}

/**
 * One receipt of a listing opened by {@link openListing}: its receipt, or why it did not open. With
 * signing keys to check against, an opened receipt also says whether its merchant signature is
 * valid, invalid or absent.
 */
export type OpenedReceipt =
  | { receiptId: string; keyId: string; ok: true; receipt: ReceiptJson; signature?: SignatureCheck }
  | { receiptId: string; keyId: string; ok: false; error: EnvelopeError };

/** Options of {@link openListing}. */
export interface OpenListingOptions {
  /**
   * Where to read each merchantId's signing keys (read once per merchantId), e.g.
   * `(merchantId) => client.signingKeysFor(merchantId)`. With it, every opened receipt carries its
   * `signature` check.
   */
  signingKeys?: SigningKeySource;
}

/**
 * Opens every receipt of a listing (`GET /api/v1/receipts/{userId}`'s `receipts`) with a key ring, in
 * order, and checks each one's merchant signature when given the merchants' signing keys. Each receipt
 * succeeds or fails on its own, so one receipt of a key the device no longer has does not hide the
 * others.
 */
export async function openListing(
  receipts: readonly ReceiptEnvelope[],
  keyRing: KeyRing,
  options: OpenListingOptions = {},
): Promise<OpenedReceipt[]> {
  const keysOf = options.signingKeys === undefined ? undefined : signingKeysOnce(options.signingKeys);
  return Promise.all(
    receipts.map(async (envelope): Promise<OpenedReceipt> => {
      const ids = idsOf(envelope);
      let receipt: ReceiptJson;
      try {
        receipt = await openReceiptWithKeyRing(envelope, keyRing);
      } catch (error) {
        if (!(error instanceof EnvelopeError)) throw error;
        return { ...ids, ok: false, error };
      }
      if (keysOf === undefined) return { ...ids, ok: true, receipt };
      const keys = await keysOf(envelope.merchantId);
      const signature: SignatureCheck =
        keys instanceof Error
          ? { status: "invalid", reason: `the merchant's signing keys could not be read: ${keys.message}` }
          : await checkReceiptSignature(receipt, keys, storedAtOf(envelope));
      return { ...ids, ok: true, receipt, signature };
    }),
  );
}

/** A listing entry's ids as far as they are strings: an entry may be anything the service answered. */
function idsOf(envelope: ReceiptEnvelope): { receiptId: string; keyId: string } {
  if (typeof envelope !== "object" || envelope === null) return { receiptId: "", keyId: "" };
  const receiptId: unknown = envelope.receiptId;
  return { receiptId: typeof receiptId === "string" ? receiptId : "", keyId: keyIdOf(envelope) };
}

async function lookUp(keyRing: KeyRing, keyId: string): Promise<PrivateKeyInput | undefined> {
  if (typeof keyRing === "function") return keyRing(keyId);
  if (keyRing instanceof Map) return keyRing.get(keyId);
  const record = keyRing as Readonly<Record<string, PrivateKeyInput>>;
  return Object.hasOwn(record, keyId) ? record[keyId] : undefined;
}
