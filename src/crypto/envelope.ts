import {
  constants,
  createCipheriv,
  createDecipheriv,
  createPublicKey,
  createSecretKey,
  type KeyObject,
  privateDecrypt,
  publicEncrypt,
} from "node:crypto";
import { AppError, invalidRequest } from "../errors.js";
import { secureRandomBytes } from "./random.js";

/**
 * The sealed-receipt format: a fresh AES-256-GCM key per receipt, wrapped with
 * RSA-OAEP (SHA-256 for both the OAEP hash and MGF1), with the receipt's immutable identity as
 * additional authenticated data. Anyone holding the private key can open it with WebCrypto or OpenSSL:
 *
 * 1. RSA-OAEP-256 decrypt `encryptedAesKey` with the private key: 32 raw bytes, the AES key. A bundle
 *    marked `aadBound` was wrapped with the OAEP label = {@link receiptAad}; one without it (every
 *    receipt stored before the mark existed, and RSA wraps to a cardholder's key) with no label.
 * 2. AES-256-GCM decrypt `ciphertext` with that key, `iv` (12 bytes), `authTag` (16 bytes; WebCrypto
 *    wants it appended to the ciphertext) and `additionalData` = {@link receiptAad}.
 *
 * Why the label: a key that unwraps on someone else's behalf (an escrow key, whose holder re-wraps the
 * AES key to a cardholder) must never unwrap a key lifted from another receipt. With the label, the
 * wrap only opens under the AAD of the receipt it was made for.
 */

/** JOSE name of the key-wrapping algorithm, sent as `keyBundle.algorithm`. */
export const ENVELOPE_ALGORITHM = "RSA-OAEP-256";

/** AES-256 key length, in bytes. */
export const AES_KEY_BYTES = 32;

/** AES-GCM IV length, in bytes: 96 bits, the size GCM is designed for (no extra GHASH pass). */
export const IV_BYTES = 12;

/** AES-GCM authentication tag length, in bytes: the full 128 bits. */
export const AUTH_TAG_BYTES = 16;

/**
 * A receipt encrypted for one key, of either suite (`suites.ts`). Every field is raw bytes; the API
 * carries them as base64.
 */
export interface SealedReceipt {
  /**
   * The receipt's AES key wrapped to the recipient's public key: the RSA-OAEP-256 ciphertext (the
   * modulus size), or the 48-byte HPKE ciphertext.
   */
  encryptedAesKey: Buffer;
  /** HPKE only: the 65-byte encapsulated key (`enc`, an uncompressed P-256 point). */
  encapsulatedKey?: Buffer;
  iv: Buffer;
  ciphertext: Buffer;
  authTag: Buffer;
}

/** A {@link SealedReceipt} with each part as base64 text, the form the store keeps and the API sends. */
export type SealedReceiptText = { [K in keyof SealedReceipt]: string };

/** The bytes of a {@link SealedReceiptText}; an empty `encapsulatedKey` counts as absent. */
export function sealedFromText(text: SealedReceiptText): SealedReceipt {
  const sealed: SealedReceipt = {
    encryptedAesKey: Buffer.from(text.encryptedAesKey, "base64"),
    iv: Buffer.from(text.iv, "base64"),
    ciphertext: Buffer.from(text.ciphertext, "base64"),
    authTag: Buffer.from(text.authTag, "base64"),
  };
  if (text.encapsulatedKey !== undefined && text.encapsulatedKey !== "") {
    sealed.encapsulatedKey = Buffer.from(text.encapsulatedKey, "base64");
  }
  return sealed;
}

/** The immutable identity of a receipt that its ciphertext is bound to. */
export interface ReceiptIdentity {
  version: string;
  receiptId: string;
  merchantId: string;
  transactionId: string;
}

/**
 * The additional authenticated data of a receipt: the UTF-8 bytes of
 * `version + "\n" + receiptId + "\n" + merchantId + "\n" + transactionId`. Moving a ciphertext to
 * another receipt therefore fails authentication. The keyId is deliberately absent, so that escrow
 * release can re-wrap the AES key without touching the ciphertext. A component containing a line break
 * is refused (`invalid_request`), since it would make two different identities encode the same way.
 */
export function receiptAad(id: ReceiptIdentity): Buffer {
  return Buffer.from(receiptAadText(id), "utf8");
}

/** {@link receiptAad} before its UTF-8 encoding, with the same refusal of line breaks. */
export function receiptAadText(id: ReceiptIdentity): string {
  const parts = [
    ["version", id.version],
    ["receiptId", id.receiptId],
    ["merchantId", id.merchantId],
    ["transactionId", id.transactionId],
  ] as const;
  const bad = parts.filter(([, value]) => value.includes("\n"));
  if (bad.length > 0) {
    throw invalidRequest(bad.map(([field]) => ({ field, description: "must not contain a line break" })));
  }
  return parts.map(([, value]) => value).join("\n");
}

/**
 * Encrypts a receipt to an RSA public key. Each call draws a new random AES key and IV, so sealing
 * the same plaintext twice gives unrelated envelopes. The AES key is zeroed once wrapped. With
 * `aadBound`, the wrap's OAEP label is `aad` (see the format above).
 */
export function sealReceipt(
  plaintext: Uint8Array,
  aad: Uint8Array,
  publicKey: KeyObject,
  aadBound = false,
): SealedReceipt {
  const aesKey = secureRandomBytes(AES_KEY_BYTES);
  try {
    return {
      encryptedAesKey: wrapAesKey(aesKey, publicKey, aadBound ? aad : undefined),
      ...encryptBody(aesKey, plaintext, aad),
    };
  } finally {
    aesKey.fill(0);
  }
}

/** The receipt's own layer, the same for every suite: AES-256-GCM with a fresh 96-bit IV and `aad`. */
export function encryptBody(
  aesKey: Uint8Array,
  plaintext: Uint8Array,
  aad: Uint8Array,
): { iv: Buffer; ciphertext: Buffer; authTag: Buffer } {
  const iv = secureRandomBytes(IV_BYTES);
  const cipher = createCipheriv("aes-256-gcm", createSecretKey(aesKey), iv, {
    authTagLength: AUTH_TAG_BYTES,
  });
  cipher.setAAD(aad);
  const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()]);
  return { iv, ciphertext, authTag: cipher.getAuthTag() };
}

/**
 * Decrypts the receipt's AES-256-GCM layer with its unwrapped AES key. A wrong key, a tampered part or
 * another receipt's AAD is an integrity failure ({@link integrityError}, nothing about the data).
 */
export function decryptBody(
  aesKey: Uint8Array,
  sealed: Pick<SealedReceipt, "iv" | "ciphertext" | "authTag">,
  aad: Uint8Array,
): Buffer {
  if (sealed.iv.length !== IV_BYTES || sealed.authTag.length !== AUTH_TAG_BYTES) {
    throw integrityError(new Error("iv or authTag has the wrong length"));
  }
  const decipher = createDecipheriv("aes-256-gcm", createSecretKey(aesKey), sealed.iv, {
    authTagLength: AUTH_TAG_BYTES,
  });
  decipher.setAAD(aad);
  decipher.setAuthTag(sealed.authTag);
  try {
    return Buffer.concat([decipher.update(sealed.ciphertext), decipher.final()]);
  } catch (cause) {
    throw integrityError(cause);
  }
}

/**
 * Proves that `aesKey` is the key of this receipt: its AES-GCM tag authenticates under `aad`. A key
 * unwrapped from a bundle lifted out of another receipt fails here, whatever it was wrapped with, so a
 * holder of a key that re-wraps for others (escrow release) never hands out a key it was not meant to.
 * Costs one AES-GCM pass over the ciphertext (the plaintext is zeroed at once); an integrity failure
 * otherwise.
 */
export function proveAesKey(
  aesKey: Uint8Array,
  sealed: Pick<SealedReceipt, "iv" | "ciphertext" | "authTag">,
  aad: Uint8Array,
): void {
  decryptBody(aesKey, sealed, aad).fill(0);
}

/**
 * Decrypts a sealed receipt with the recipient's private key and returns the plaintext. This is an RSA
 * private-key operation (about a millisecond of CPU): in the server call it through `CryptoPool`,
 * which also checks first that the key is the right one. `aadBound` is the key bundle's mark (the OAEP
 * label is `aad`). Any failure (wrong key, tampered or mis-bound ciphertext, malformed field) is an
 * integrity failure, with a message that says nothing about the key or the plaintext.
 */
export function openSealedReceipt(
  sealed: SealedReceipt,
  aad: Uint8Array,
  privateKey: KeyObject,
  aadBound = false,
): Buffer {
  const aesKey = unwrapAesKey(sealed.encryptedAesKey, privateKey, aadBound ? aad : undefined);
  try {
    return decryptBody(aesKey, sealed, aad);
  } finally {
    aesKey.fill(0);
  }
}

/** RSA-OAEP with SHA-256; Node (OpenSSL) uses `oaepHash` for MGF1 too, which the WebCrypto test proves. */
const OAEP = { padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: "sha256" } as const;

/** A public RSA key that carries the OAEP options itself; `oaepLabel` is set for one call at a time. */
type OaepKey = KeyObject & { padding: number; oaepHash: string; oaepLabel: Uint8Array | undefined };

/**
 * Why the AES keys go to node:crypto as `createSecretKey` objects and the public RSA keys as
 * {@link OaepKey}s: Node 24 tells a key argument's kind by trying it, and a Buffer key or an options
 * object `{ key, padding, oaepHash }` fails its KeyObject and its CryptoKey check, each by an error
 * thrown and caught inside node:crypto. Those four throws were about half of a seal (a 10.6 KB receipt:
 * 176-200 against 89-109 us per seal in a loop of 3,000, Node 24.21). A KeyObject passes the first
 * check, and `publicEncrypt` reads `padding`, `oaepHash` and `oaepLabel` from whatever object it is
 * given as the key. The secret key object's copy of the AES key is cleared by OpenSSL when the object
 * is collected; the caller's bytes are zeroed as before. An unwrap keeps the options object: its
 * private key is most often parsed for that one call (a copy would be a second, slow, DER import: 0.2-0.3
 * ms more per decrypt), and the RSA private operation dwarfs the two throws.
 */
const oaepKeys = new WeakMap<KeyObject, OaepKey>();

/** `key`'s own copy with the OAEP options, made once per key (not `key` itself: `verify` reads `padding`). */
function oaepKeyOf(key: KeyObject): OaepKey {
  let oaep = oaepKeys.get(key);
  if (oaep === undefined) {
    const der = key.export({ format: "der", type: "spki" });
    oaep = Object.assign(createPublicKey({ key: der, format: "der", type: "spki" }), OAEP, {
      oaepLabel: undefined,
    });
    oaepKeys.set(key, oaep);
  }
  return oaep;
}

/** Wraps an AES key with RSA-OAEP-256 to `publicKey`; with `label`, bound to it (the receipt's AAD). */
export function wrapAesKey(aesKey: Uint8Array, publicKey: KeyObject, label?: Uint8Array): Buffer {
  const oaep = oaepKeyOf(publicKey);
  oaep.oaepLabel = label;
  try {
    return publicEncrypt(oaep, aesKey);
  } finally {
    oaep.oaepLabel = undefined;
  }
}

/**
 * Unwraps an RSA-OAEP-256 wrapped AES key, with the OAEP `label` it was wrapped with (none for an
 * unbound bundle); another label, another key or anything but 32 bytes out is an integrity failure.
 */
export function unwrapAesKey(encryptedAesKey: Uint8Array, privateKey: KeyObject, label?: Uint8Array): Buffer {
  let aesKey: Buffer;
  try {
    aesKey = privateDecrypt(
      label === undefined ? { key: privateKey, ...OAEP } : { key: privateKey, ...OAEP, oaepLabel: label },
      encryptedAesKey,
    );
  } catch (cause) {
    throw integrityError(cause);
  }
  if (aesKey.length !== AES_KEY_BYTES) {
    aesKey.fill(0);
    throw integrityError(new Error(`unwrapped key is ${aesKey.length} bytes`));
  }
  return aesKey;
}

/**
 * A sealed receipt or wrapped key that does not decrypt: `integrity_failure` (422), saying nothing of
 * the data. Not a 5xx: the service cannot check what a merchant sealed on its side, so a receipt that
 * was sealed wrongly, or tampered with in the store, is a property of that receipt, not a fault of
 * the service, and retrying cannot help. The key that failed was already proven to be the grant's
 * key (a wrong or forged key is `forbidden` before this point).
 */
export function integrityError(cause: unknown): AppError {
  return new AppError("integrity_failure", "The sealed receipt failed its integrity check.", { cause });
}
