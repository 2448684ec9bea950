import { createPublicKey, type KeyObject, webcrypto } from "node:crypto";
import { AES_KEY_BYTES, decryptBody, encryptBody, integrityError, type SealedReceipt } from "./envelope.js";
import { ecdhParams, hpkeCipherSuite } from "./hpke-suites.js";
import { secureRandomBytes } from "./random.js";
import { HPKE_INFO_TEXT, HPKE_SUITE, type KeySuite } from "./suites.js";

/**
 * The HPKE key wrap on the server, for every HPKE key suite (`HPKE-P256-SHA256-A256GCM` unless a
 * call names another), with `@hpke/core` (a maintained RFC 9180 implementation over WebCrypto, never
 * one of ours): base mode, the suite's DHKEM, KDF and AEAD (`hpke-suites.ts`; P-256: DHKEM(P-256,
 * HKDF-SHA256), HKDF-SHA256, AES-256-GCM), `info` = UTF-8 `receipts.v1 key wrap`, `aad` = the receipt's
 * AAD, plaintext = the receipt's 32-byte AES key. The AES-256-GCM layer of the receipt is the one of
 * `envelope.ts`, unchanged. Every call is asynchronous (WebCrypto), unlike the RSA suite's.
 */

/** WebCrypto's key type, as Node names it. */
export type CryptoKey = webcrypto.CryptoKey;

const subtle = webcrypto.subtle;
const INFO = new TextEncoder().encode(HPKE_INFO_TEXT);

/** A recipient's public key of `suite` (base64 DER SPKI, as stored) as a WebCrypto key for HPKE. */
export async function importHpkePublicKey(
  spki: string | Uint8Array,
  suite: KeySuite = HPKE_SUITE,
): Promise<CryptoKey> {
  const der = typeof spki === "string" ? Buffer.from(spki, "base64") : spki;
  // Extractable: HPKE puts the recipient's serialized public key into the KEM context.
  return subtle.importKey("spki", der, ecdhParams(suite), true, []);
}

/**
 * A private key of `suite` (a parsed `KeyObject`) as the WebCrypto key pair HPKE opens with. The pair's
 * public half is given, not derived: deriving it makes @hpke/core export the private key as a JWK.
 */
export async function hpkeKeyPairOf(
  privateKey: KeyObject,
  suite: KeySuite = HPKE_SUITE,
): Promise<webcrypto.CryptoKeyPair> {
  const pkcs8 = privateKey.export({ type: "pkcs8", format: "der" });
  try {
    const [secret, publicKey] = await Promise.all([
      subtle.importKey("pkcs8", pkcs8, ecdhParams(suite), false, ["deriveBits"]),
      importHpkePublicKey(createPublicKey(privateKey).export({ type: "spki", format: "der" }), suite),
    ]);
    return { privateKey: secret, publicKey };
  } finally {
    pkcs8.fill(0);
  }
}

/** An AES key wrapped with HPKE: the encapsulated key (65 bytes for P-256) and the 48-byte ciphertext. */
export interface HpkeWrappedKey {
  encapsulatedKey: Buffer;
  encryptedAesKey: Buffer;
}

/** Wraps a receipt's AES key to a public key of `suite`, bound to the receipt's AAD. */
export async function hpkeWrap(
  aesKey: Uint8Array,
  recipient: CryptoKey,
  aad: Uint8Array,
  suite: KeySuite = HPKE_SUITE,
): Promise<HpkeWrappedKey> {
  const { ct, enc } = await hpkeCipherSuite(suite).seal(
    { recipientPublicKey: recipient, info: INFO },
    aesKey,
    aad,
  );
  return { encapsulatedKey: Buffer.from(enc), encryptedAesKey: Buffer.from(ct) };
}

/**
 * Unwraps a receipt's AES key with the recipient's key pair. Wrong sizes, another key, another
 * receipt's AAD or a tampered part all fail alike: an integrity failure (`internal_server_error`).
 */
export async function hpkeUnwrap(
  recipient: webcrypto.CryptoKeyPair,
  wrapped: { encapsulatedKey?: Uint8Array | undefined; encryptedAesKey: Uint8Array },
  aad: Uint8Array,
  suite: KeySuite = HPKE_SUITE,
): Promise<Buffer> {
  const { encapsulatedKey, encryptedAesKey } = wrapped;
  const sizes = suite.wrappedKeySizes();
  if (
    encapsulatedKey === undefined ||
    encapsulatedKey.length !== sizes.encapsulatedKey ||
    encryptedAesKey.length !== sizes.encryptedAesKey
  ) {
    throw integrityError(new Error("the HPKE wrapped key has the wrong size"));
  }
  let opened: ArrayBuffer;
  try {
    opened = await hpkeCipherSuite(suite).open(
      { recipientKey: recipient, enc: encapsulatedKey, info: INFO },
      encryptedAesKey,
      aad,
    );
  } catch (cause) {
    throw integrityError(cause);
  }
  // A copy (Buffer.from of an ArrayBuffer would share it), so WebCrypto's output can be wiped.
  const aesKey = Buffer.from(new Uint8Array(opened));
  new Uint8Array(opened).fill(0);
  if (aesKey.length !== AES_KEY_BYTES) {
    aesKey.fill(0);
    throw integrityError(new Error(`unwrapped key is ${aesKey.length} bytes`));
  }
  return aesKey;
}

/** Seals a receipt to a key of `suite`: a fresh AES key and IV, AES-256-GCM, the key wrapped with HPKE. */
export async function sealReceiptHpke(
  plaintext: Uint8Array,
  aad: Uint8Array,
  recipient: CryptoKey,
  suite: KeySuite = HPKE_SUITE,
): Promise<SealedReceipt> {
  const aesKey = secureRandomBytes(AES_KEY_BYTES);
  try {
    const body = encryptBody(aesKey, plaintext, aad);
    return { ...(await hpkeWrap(aesKey, recipient, aad, suite)), ...body };
  } finally {
    aesKey.fill(0);
  }
}

/** Opens a receipt sealed to a key of `suite`, with its key pair (see {@link hpkeKeyPairOf}). */
export async function openSealedReceiptHpke(
  sealed: SealedReceipt,
  aad: Uint8Array,
  recipient: webcrypto.CryptoKeyPair,
  suite: KeySuite = HPKE_SUITE,
): Promise<Buffer> {
  const aesKey = await hpkeUnwrap(recipient, sealed, aad, suite);
  try {
    return decryptBody(aesKey, sealed, aad);
  } finally {
    aesKey.fill(0);
  }
}
