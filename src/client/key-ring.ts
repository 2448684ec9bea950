import {
  EnvelopeError,
  openReceipt,
  type ReceiptEnvelope,
  type ReceiptJson,
  type WebCryptoKey,
} from "./webcrypto.js";

/**
 * A user's private keys by `keyId`: every key the card has had, since a listing holds receipts sealed
 * to each key that was active when they were made (a rotation keeps the old receipts on the old key).
 * Values as `openReceipt` takes them: base64 PKCS#8, PEM, or a (non-extractable) `CryptoKey`.
 */
export type KeyRing =
  | ReadonlyMap<string, string | WebCryptoKey>
  | Readonly<Record<string, string | WebCryptoKey>>;

/** One receipt of a listing, opened or not. */
export type OpenedListingEntry =
  | { receiptId: string; keyId: string; receipt: ReceiptJson; error?: undefined }
  | { receiptId: string; keyId: string; receipt?: undefined; error: EnvelopeError };

/**
 * Opens every receipt of a listing (`GET /api/v1/receipts/{userId}`'s `receipts`, or the client's
 * `listReceipts`/`listAllReceipts` messages) with the key its bundle names, on the device. A receipt
 * whose key is not in the ring, or that fails to open, is reported with its error instead of hiding
 * the others; the order of the listing (newest first) is kept.
 */
export async function openListing(
  envelopes: Iterable<ReceiptEnvelope & { keyId?: string }>,
  keyRing: KeyRing,
): Promise<OpenedListingEntry[]> {
  const keyFor = (keyId: string): string | WebCryptoKey | undefined => {
    if (keyRing instanceof Map) return keyRing.get(keyId);
    const record = keyRing as Readonly<Record<string, string | WebCryptoKey>>;
    return Object.hasOwn(record, keyId) ? record[keyId] : undefined;
  };
  const opened: OpenedListingEntry[] = [];
  for (const envelope of envelopes) {
    const keyId = envelope.keyBundle?.keyId || envelope.keyId || "";
    const key = keyFor(keyId);
    const { receiptId } = envelope;
    if (key === undefined) {
      const error = new EnvelopeError("invalid_key", `no key in the key ring for keyId "${keyId}"`);
      opened.push({ receiptId, keyId, error });
      continue;
    }
    try {
      opened.push({ receiptId, keyId, receipt: await openReceipt(envelope, key) });
    } catch (err) {
      if (!(err instanceof EnvelopeError)) throw err;
      opened.push({ receiptId, keyId, error: err });
    }
  }
  return opened;
}
