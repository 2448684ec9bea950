import { Binary } from "mongodb";
import { RSA_OAEP_256 } from "../../crypto/suites.js";
import type { SealedTexts } from "../sealed-texts.js";
import type { EscrowCopy, ReceiptRecord, StoredKeyBundle } from "../types.js";

/**
 * Receipts as MongoDB documents. The records carry their bytes (ciphertext, IV, tag, wrapped key) as
 * base64 text, which costs a third more than the bytes; the documents carry them as BSON binary,
 * 19-24% less per receipt (docs/scaling.md, measured with `npm run bench:sizes`).
 *
 * Documents written before hold text, and are read as they are: reading takes either form, so there
 * is no migration to run, and a release rewrites the key bundle it touches as binary. Nothing filters
 * or sorts on these fields, so the two forms can live side by side for good. A value that is not
 * canonical base64 (which the domain never stores) is kept as text, so the mapping never loses a byte.
 */

/** A byte field as stored: binary, or base64 text (documents of earlier versions). */
type StoredBytes = Binary | string;

/** A key bundle as stored. */
export interface KeyBundleDoc
  extends Omit<StoredKeyBundle, "encryptedAesKey" | "encapsulatedKey" | "algorithm"> {
  /** Absent on receipts stored before there were two suites: all RSA-OAEP-256. */
  algorithm?: StoredKeyBundle["algorithm"];
  encryptedAesKey: StoredBytes;
  encapsulatedKey?: StoredBytes;
}

/** A receipt as stored in `receipts`. */
export interface ReceiptDoc extends Omit<ReceiptRecord, "keyBundle" | "ciphertext" | "iv" | "authTag"> {
  keyBundle: KeyBundleDoc;
  ciphertext: StoredBytes;
  iv: StoredBytes;
  authTag: StoredBytes;
}

/** Base64 text as binary, when it is canonical base64 (it decodes and re-encodes to itself). */
function toBytes(text: string): StoredBytes {
  const bytes = Buffer.from(text, "base64");
  return bytes.toString("base64") === text ? new Binary(bytes) : text;
}

function toText(stored: StoredBytes): string {
  return typeof stored === "string"
    ? stored
    : Buffer.from(stored.read(0, stored.length())).toString("base64");
}

/** The document of a key bundle. */
export function keyBundleDoc(bundle: StoredKeyBundle): KeyBundleDoc {
  const doc: KeyBundleDoc = {
    keyId: bundle.keyId,
    algorithm: bundle.algorithm,
    encryptedAesKey: toBytes(bundle.encryptedAesKey),
  };
  if (bundle.encapsulatedKey !== undefined) doc.encapsulatedKey = toBytes(bundle.encapsulatedKey);
  if (bundle.aadBound === true) doc.aadBound = true;
  return doc;
}

/** The document of a receipt (a new object: the driver adds `_id` to what it inserts). */
export function receiptDoc(record: ReceiptRecord): ReceiptDoc {
  return {
    ...record,
    keyBundle: keyBundleDoc(record.keyBundle),
    ciphertext: toBytes(record.ciphertext),
    iv: toBytes(record.iv),
    authTag: toBytes(record.authTag),
  };
}

/** The key bundle of its document, whichever form its bytes were stored in. */
function keyBundleRecord(keyBundle: KeyBundleDoc): StoredKeyBundle {
  const bundle: StoredKeyBundle = {
    keyId: keyBundle.keyId,
    algorithm: keyBundle.algorithm ?? RSA_OAEP_256,
    encryptedAesKey: toText(keyBundle.encryptedAesKey),
  };
  if (keyBundle.encapsulatedKey !== undefined) bundle.encapsulatedKey = toText(keyBundle.encapsulatedKey);
  if (keyBundle.aadBound === true) bundle.aadBound = true;
  return bundle;
}

/** The record of a stored receipt, whichever form its bytes were stored in. */
export function receiptRecord(doc: ReceiptDoc): ReceiptRecord {
  const { keyBundle, ciphertext, iv, authTag, ...rest } = doc;
  return {
    ...rest,
    keyBundle: keyBundleRecord(keyBundle),
    ciphertext: toText(ciphertext),
    iv: toText(iv),
    authTag: toText(authTag),
  };
}

/**
 * The sealed texts of `record`, read from `doc` by {@link receiptRecord}, when every one of them was
 * stored as binary: then each is `Buffer#toString("base64")` of its bytes, canonical with no check.
 */
export function sealedTextsOfDoc(doc: ReceiptDoc, record: ReceiptRecord): SealedTexts | undefined {
  const bundle = doc.keyBundle;
  if (
    !(doc.ciphertext instanceof Binary) ||
    !(doc.iv instanceof Binary) ||
    !(doc.authTag instanceof Binary) ||
    !(bundle.encryptedAesKey instanceof Binary) ||
    !(bundle.encapsulatedKey === undefined || bundle.encapsulatedKey instanceof Binary)
  ) {
    return undefined;
  }
  return {
    encryptedAesKey: record.keyBundle.encryptedAesKey,
    encapsulatedKey: record.keyBundle.encapsulatedKey,
    ciphertext: record.ciphertext,
    iv: record.iv,
    authTag: record.authTag,
  };
}

/**
 * An issuer release's escrow copy in `escrowCopies`, placed by its receipt's card and id; `createdAt`
 * is the receipt's (the listing's order), `expiresAt` the escrow's (its TTL).
 */
export interface EscrowCopyDoc {
  panHash: string;
  id: string;
  createdAt: Date;
  ownerTenantId: string;
  escrowKeyId: string;
  keyBundle: KeyBundleDoc;
  expiresAt: Date;
}

/** The record of a stored escrow copy. */
export function escrowCopyRecord(doc: EscrowCopyDoc): EscrowCopy {
  return {
    ownerTenantId: doc.ownerTenantId,
    escrowKeyId: doc.escrowKeyId,
    keyBundle: keyBundleRecord(doc.keyBundle),
    expiresAt: doc.expiresAt,
  };
}
