/* Over 400 lines on purpose: the sealed-receipt format both ways (open, seal, re-wrap) in one place,
 * so a reader checks the format against README, "The sealed receipt", in one file. */

import type { LineItem, Receipt, Tax, TaxBreakdownLine, Tender } from "../../gen/receipts/v1/receipt_pb.js";
import {
  HPKE_SUITE,
  KEY_ALGORITHMS,
  type KeySuite,
  RSA_SUITE,
  suiteNamed,
  suiteOfKeyType,
} from "../crypto/suites.js";
import { fromBase64, toBase64 } from "../kt/base64.js";
import { INPUT_ONLY_FIELDS, type ReceiptInputJsonOf, receiptJsonProblems } from "../receipt-fields.js";
import {
  derKindOf,
  EnvelopeError,
  ecPairsOf,
  importEcKey,
  importRsaKey,
  KEY_WRAP_ALGORITHM,
  type KeyWrapAlgorithm,
  type PrivateKeyInput,
  RSA_OAEP,
  rsaPrivateKeyOf,
  subtleCrypto,
  type WebCryptoKey,
} from "./client-keys.js";
import type { CardIdentity, KeyTrust } from "./key-trust.js";
import {
  ecSuiteOfKey,
  HPKE_KEY_WRAP_ALGORITHM,
  hpkeUnwrapKey,
  hpkeWrapKey,
  type WebCryptoKeyPair,
} from "./p256.js";

export {
  EnvelopeError,
  type EnvelopeErrorCode,
  importP256Key,
  importRsaKey,
  KEY_WRAP_ALGORITHM,
  type KeyWrapAlgorithm,
  type PrivateKeyInput,
  type WebCryptoKey,
} from "./client-keys.js";
export { HPKE_KEY_WRAP_ALGORITHM, type WebCryptoKeyPair } from "./p256.js";

/**
 * The sealed-receipt envelope with WebCrypto only (`globalThis.crypto.subtle`), so
 * that an issuer app opens receipts on the device (the private key never crosses the network) and a
 * merchant can seal on its side, in Node, a browser or React Native alike. No `node:` module and no
 * `Buffer` here. The format:
 *
 * - a fresh 256-bit AES key per receipt, wrapped to the recipient's key by its suite:
 *   `RSA-OAEP-256` (RSA-OAEP, SHA-256 for the hash and for MGF1; when the bundle says `aadBound`, the
 *   OAEP label is the AAD below, otherwise there is none), or `HPKE-P256-SHA256-A256GCM` (RFC 9180
 *   base mode to a P-256 key, `info` "receipts.v1 key wrap", `aad` the AAD below, always; the key
 *   bundle then carries the 65-byte `encapsulatedKey` and a 48-byte `encryptedAesKey`), see `p256.ts`;
 * - AES-256-GCM with a 96-bit IV and a 128-bit tag (`authTag`, kept apart from `ciphertext`);
 * - additional authenticated data: UTF-8 of `version "\n" receiptId "\n" merchantId "\n" transactionId`;
 * - plaintext: UTF-8 JSON of the receipt fields without `recipientHashedPan`, `mockItems`, `cardNonce`.
 */

/** Bytes as the API carries them: base64 text (the JSON surface) or raw bytes (generated messages). */
export type EnvelopeBytes = string | Uint8Array;

/**
 * A sealed receipt: the JSON of an `EncryptedReceipt` (base64 strings, as the REST surface and
 * `toJson` give it) or the generated message itself (`Uint8Array` fields). Extra fields are ignored.
 */
export interface ReceiptEnvelope {
  version: string;
  receiptId: string;
  merchantId: string;
  transactionId: string;
  /** The recipient key's id (also in `keyBundle.keyId`), used to pick a key from a key ring. */
  keyId?: string;
  keyBundle?:
    | {
        encryptedAesKey: EnvelopeBytes;
        /** HPKE only: the encapsulated key. Absent or empty for RSA. */
        encapsulatedKey?: EnvelopeBytes | undefined;
        keyId?: string;
        algorithm?: string;
        /** RSA: the OAEP label is the receipt's AAD when true, empty otherwise. HPKE is always bound. */
        aadBound?: boolean | undefined;
      }
    | undefined;
  ciphertext: EnvelopeBytes;
  iv: EnvelopeBytes;
  authTag: EnvelopeBytes;
}

/** An envelope made by {@link sealReceipt}: the JSON shape of `EncryptedReceipt`, bytes in base64. */
export interface SealedEnvelope {
  version: string;
  receiptId: string;
  merchantId: string;
  transactionId: string;
  keyId: string;
  keyBundle: {
    encryptedAesKey: string;
    keyId: string;
    algorithm: KeyWrapAlgorithm;
    encapsulatedKey?: string;
    /** Set when the wrap is bound to the receipt's AAD: every HPKE wrap, and RSA wraps sealed with `aadBound`. */
    aadBound?: true;
  };
  ciphertext: string;
  iv: string;
  authTag: string;
}

/** A tax on a line item; `rate` a fraction (0.19), `amount` in the smallest currency unit. */
export type ReceiptTaxJson = ReceiptInputJsonOf<Tax>;

/** A line item; prices in the smallest currency unit. */
export type ReceiptLineItemJson = ReceiptInputJsonOf<LineItem>;

/** One means of payment of a split tender; `amount` in the smallest currency unit. */
export type ReceiptTenderJson = ReceiptInputJsonOf<Tender>;

/** The tax of one rate across the receipt; `rate` a fraction, amounts in the smallest unit. */
export type ReceiptTaxLineJson = ReceiptInputJsonOf<TaxBreakdownLine>;

/**
 * A receipt in its JSON form (README, "Refunds, and receipts that find their card statement line"):
 * lowerCamelCase names, money as JSON integers in the smallest currency unit, `transactionDate` as RFC 3339.
 * The input-only fields (`recipientHashedPan`, `recipientPar`, `mockItems`, `cardNonce`) are accepted
 * by {@link sealReceipt} and left out of the sealed plaintext. Made from the proto's `Receipt`
 * ({@link ReceiptInputJsonOf}), whose comments document each member: a field added to receipt.proto
 * is here with no edit. Left out: what only the service answers (`keyId`, `decryptedAt`), the sealed
 * form (`sealedReceipt`), and `cardBin`, which `MerchantReceipt` adds for routing.
 */
export type ReceiptJson = Omit<
  ReceiptInputJsonOf<Receipt>,
  "keyId" | "decryptedAt" | "sealedReceipt" | "cardBin" | "version" | "transactionDate" | "receiptType"
> & {
  /** Receipt format version; {@link sealReceipt} uses "1.0" when unset. */
  version?: string;
  transactionDate: string;
  /** `sale` (also when unset), `refund` or `void`; a refund or void names its sale in `originalReceiptId`. */
  receiptType?: "sale" | "refund" | "void";
};

/** The identity a sealed receipt is bound to, and the keyId to record; each defaults from the receipt. */
export interface SealIdentity {
  version?: string;
  receiptId?: string;
  merchantId?: string;
  transactionId?: string;
  /** The id of the recipient's key, recorded in the envelope. Default "". */
  keyId?: string;
  /**
   * Bind an RSA wrap to the receipt's AAD (the OAEP label), as look-up's `aadBound` asks for escrow
   * keys; the service refuses an unbound wrap to an escrow key. Default false: the v1 form, which
   * every RSA opener reads. HPKE wraps are always bound.
   */
  aadBound?: boolean;
}

const IDENTITY_FIELDS = ["receiptId", "merchantId", "transactionId"] as const;
const AES_KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;

/**
 * Opens a sealed receipt with the recipient's private key and returns the receipt's JSON. The suite
 * is the envelope's `keyBundle.algorithm` (RSA-OAEP-256 when absent). The key is base64 DER PKCS#8
 * (what generate-keys returns) or its PEM, a `CryptoKey` (RSA-OAEP with SHA-256, or ECDH P-256; a
 * non-extractable key made on the device works, e.g. one kept in IndexedDB), or a `CryptoKeyPair`.
 * A key of the other suite is `invalid_key`, saying so. Throws {@link EnvelopeError}; the plaintext's
 * own identity fields must match the envelope's.
 */
export async function openReceipt(
  envelope: ReceiptEnvelope,
  privateKey: PrivateKeyInput,
): Promise<ReceiptJson> {
  checkEnvelope(envelope);
  const rawKey = await unwrapAesKey(envelope, privateKey);
  let plaintext: ArrayBuffer;
  try {
    plaintext = await decryptBody(rawKey, envelope);
  } finally {
    rawKey.fill(0);
  }
  return receiptOf(plaintext, envelope);
}

/**
 * Refuses what is not an envelope before any key is used: a listing's entries come from the service,
 * whose operator may answer anything, and each must fail as `invalid_envelope`, never a TypeError.
 */
function checkEnvelope(envelope: ReceiptEnvelope): void {
  if (typeof envelope !== "object" || envelope === null || Array.isArray(envelope)) {
    throw new EnvelopeError("invalid_envelope", "the envelope is not an object");
  }
  const bundle: unknown = envelope.keyBundle;
  if (bundle !== undefined && (typeof bundle !== "object" || bundle === null || Array.isArray(bundle))) {
    throw new EnvelopeError("invalid_envelope", "keyBundle must be an object");
  }
  aadOf(envelope);
}

/** The receipt's AES-256-GCM layer decrypted with its raw AES key, under the envelope's AAD. */
async function decryptBody(rawKey: Uint8Array<ArrayBuffer>, envelope: ReceiptEnvelope): Promise<ArrayBuffer> {
  const subtle = subtleCrypto();
  const iv = bytesOf(envelope.iv, "iv", IV_BYTES);
  const authTag = bytesOf(envelope.authTag, "authTag", TAG_BYTES);
  const ciphertext = bytesOf(envelope.ciphertext, "ciphertext");
  if (rawKey.length !== AES_KEY_BYTES) throw integrityError("the unwrapped key is not 256 bits");
  const aesKey = await subtle.importKey("raw", rawKey, { name: "AES-GCM" }, false, ["decrypt"]);
  const sealed = new Uint8Array(ciphertext.length + TAG_BYTES);
  sealed.set(ciphertext);
  sealed.set(authTag, ciphertext.length);
  return integrity(() =>
    subtle.decrypt(
      { name: "AES-GCM", iv, additionalData: aadOf(envelope), tagLength: TAG_BYTES * 8 },
      aesKey,
      sealed,
    ),
  );
}

/**
 * What each key suite does with WebCrypto: the client's entry of the suite registry (the facts are in
 * src/crypto/suites.ts, shared with the service). Keyed by every suite's name, so a new suite does not
 * compile until it has its operations here.
 */
interface WebSuite {
  /** A public key of the suite, from base64 DER SPKI or PEM. */
  importPublicKey(text: string): Promise<WebCryptoKey>;
  /** The receipt's AES key from `bundle` with the recipient's private key. */
  unwrap(
    bundle: NonNullable<ReceiptEnvelope["keyBundle"]>,
    privateKey: PrivateKeyInput,
    aad: () => Uint8Array<ArrayBuffer>,
  ): Promise<Uint8Array<ArrayBuffer>>;
  /** The key bundle of `rawKey` wrapped to `key`; `bind` asks an optionally bound suite to bind to `aad`. */
  wrap(
    rawKey: Uint8Array<ArrayBuffer>,
    key: WebCryptoKey,
    aad: Uint8Array<ArrayBuffer>,
    keyId: string,
    bind: boolean,
  ): Promise<SealedEnvelope["keyBundle"]>;
}

/** RSA-OAEP-256 with WebCrypto's RSA-OAEP. */
const RSA_WEB: WebSuite = {
  importPublicKey: (text) => importRsaKey(text, "public"),
  async unwrap(bundle, privateKey, aad) {
    const rsaKey = await rsaPrivateKeyOf(privateKey);
    const wrapped = bytesOf(bundle.encryptedAesKey, "keyBundle.encryptedAesKey");
    const params = rsaOaep(bundle.aadBound === true ? aad() : undefined);
    return new Uint8Array(await integrity(() => subtleCrypto().decrypt(params, rsaKey, wrapped)));
  },
  async wrap(rawKey, key, aad, keyId, bind) {
    const params = rsaOaep(bind ? aad : undefined);
    const encryptedAesKey = new Uint8Array(await subtleCrypto().encrypt(params, key, rawKey));
    const bundle: SealedEnvelope["keyBundle"] = {
      encryptedAesKey: toBase64(encryptedAesKey),
      keyId,
      algorithm: KEY_WRAP_ALGORITHM,
    };
    if (bind) bundle.aadBound = true;
    return bundle;
  },
};

/** An HPKE suite (its KEM, KDF, AEAD and curve from its registry object) with WebCrypto's ECDH. */
function hpkeWeb(suite: KeySuite): WebSuite {
  const sizes = suite.wrappedKeySizes();
  return {
    importPublicKey: (text) => importEcKey(text, "public", suite),
    async unwrap(bundle, privateKey, aad) {
      const pairs = await ecPairsOf(privateKey, suite);
      const { encapsulatedKey } = bundle;
      if (encapsulatedKey === undefined || encapsulatedKey.length === 0) {
        throw new EnvelopeError(
          "invalid_envelope",
          `keyBundle.encapsulatedKey is required for ${suite.algorithm}`,
        );
      }
      const enc = bytesOf(encapsulatedKey, "keyBundle.encapsulatedKey", sizes.encapsulatedKey);
      const wrapped = bytesOf(bundle.encryptedAesKey, "keyBundle.encryptedAesKey", sizes.encryptedAesKey);
      return unwrapWithAny(pairs, enc, wrapped, aad(), suite);
    },
    async wrap(rawKey, key, aad, keyId) {
      const wrapped = await hpkeWrapKey(rawKey, key, aad, suite);
      return {
        encryptedAesKey: toBase64(wrapped.encryptedAesKey),
        encapsulatedKey: toBase64(wrapped.encapsulatedKey),
        keyId,
        algorithm: suite.algorithm,
        aadBound: true,
      };
    },
  };
}

const WEB_SUITES: Readonly<Record<KeyWrapAlgorithm, WebSuite>> = {
  [KEY_WRAP_ALGORITHM]: RSA_WEB,
  [HPKE_KEY_WRAP_ALGORITHM]: hpkeWeb(HPKE_SUITE),
};

/**
 * The receipt's AES key, unwrapped from its key bundle with the private key of the bundle's suite
 * (the caller zeroes it when done).
 */
async function unwrapAesKey(
  envelope: ReceiptEnvelope,
  privateKey: PrivateKeyInput,
): Promise<Uint8Array<ArrayBuffer>> {
  if (envelope.keyBundle === undefined) throw new EnvelopeError("invalid_envelope", "keyBundle is missing");
  const suite = WEB_SUITES[bundleAlgorithm(envelope.keyBundle.algorithm)];
  return suite.unwrap(envelope.keyBundle, privateKey, () => aadOf(envelope));
}

/** The key a receipt's AES key is re-wrapped to: its id and public key (base64 DER SPKI, PEM or a CryptoKey). */
export interface RewrapTarget {
  keyId: string;
  publicKey: string | WebCryptoKey;
  /** Bind an RSA wrap to the receipt's AAD (OAEP label); default false, the v1 form. HPKE always is. */
  aadBound?: boolean;
}

/**
 * Issuer-side escrow release: unwraps a receipt's AES key with the issuer's escrow
 * private key, proves that it is this receipt's key (its AES-GCM tag authenticates under the
 * receipt's AAD; the plaintext is dropped at once), and wraps it to the cardholder's key (either
 * suite), returning the new key bundle to hand to `ReleaseEscrow`. The proof is what keeps the
 * escrow key from being a decryption oracle: a wrapped key lifted from another receipt and planted in
 * this one fails it (`integrity_failure`) instead of coming back re-wrapped to the planter's card.
 */
export async function rewrapKeyBundle(
  envelope: ReceiptEnvelope,
  escrowPrivateKey: PrivateKeyInput,
  target: RewrapTarget,
): Promise<SealedEnvelope["keyBundle"]> {
  const rawKey = await unwrapAesKey(envelope, escrowPrivateKey);
  try {
    new Uint8Array(await decryptBody(rawKey, envelope)).fill(0);
    const key = await publicKeyOf(target.publicKey);
    return await wrapAesKey(rawKey, key, aadOf(envelope), target.keyId, target.aadBound === true);
  } finally {
    rawKey.fill(0);
  }
}

/** A public key of either suite as a CryptoKey (the suite read from the key's DER). */
async function publicKeyOf(publicKey: string | WebCryptoKey): Promise<WebCryptoKey> {
  if (typeof publicKey !== "string") return publicKey;
  const suite = suiteOfKeyType(derKindOf(publicKey)) ?? RSA_SUITE;
  return WEB_SUITES[suite.algorithm].importPublicKey(publicKey);
}

/**
 * Wraps a raw AES key to `key` with the key's suite: HPKE for an ECDH key on an HPKE suite's curve
 * (always bound to the receipt's AAD), RSA-OAEP-256 otherwise, with the AAD as OAEP label when `bindRsa`.
 */
function wrapAesKey(
  rawKey: Uint8Array<ArrayBuffer>,
  key: WebCryptoKey,
  aad: Uint8Array<ArrayBuffer>,
  keyId: string,
  bindRsa: boolean,
): Promise<SealedEnvelope["keyBundle"]> {
  const suite = ecSuiteOfKey(key) ?? RSA_SUITE;
  return WEB_SUITES[suite.algorithm].wrap(rawKey, key, aad, keyId, bindRsa);
}

/** WebCrypto's RSA-OAEP parameters: SHA-256 (from the key), and the OAEP label when the wrap is bound. */
function rsaOaep(label: Uint8Array<ArrayBuffer> | undefined): {
  name: "RSA-OAEP";
  label?: Uint8Array<ArrayBuffer>;
} {
  return label === undefined ? { name: RSA_OAEP.name } : { name: RSA_OAEP.name, label };
}

/** The suite a key bundle names; absent or empty is the seed's RSA-OAEP-256. */
function bundleAlgorithm(algorithm: string | undefined): KeyWrapAlgorithm {
  const suite = suiteNamed(algorithm, RSA_SUITE);
  if (suite !== undefined) return suite.algorithm;
  throw new EnvelopeError("invalid_envelope", `keyBundle.algorithm must be ${KEY_ALGORITHMS.join(" or ")}`);
}

/** HPKE-unwraps with the first candidate key pair that authenticates (see `ecKeyPairCandidates`). */
async function unwrapWithAny(
  pairs: WebCryptoKeyPair[],
  enc: Uint8Array<ArrayBuffer>,
  wrapped: Uint8Array<ArrayBuffer>,
  aad: Uint8Array<ArrayBuffer>,
  suite: KeySuite,
): Promise<Uint8Array<ArrayBuffer>> {
  let failure: unknown;
  for (const pair of pairs) {
    try {
      return new Uint8Array(await hpkeUnwrapKey(pair, enc, wrapped, aad, suite));
    } catch (cause) {
      failure = cause;
    }
  }
  throw integrityError("decryption failed", failure);
}

/**
 * How {@link sealReceipt} checks a lookup (or register) answer before sealing to its key: under a
 * {@link KeyTrust} (the merchant's trust policy) for the card in hand, or not at all, which must be
 * said in so many words (`"unverified"`: whoever controls the service's answer, the operator, a
 * stolen issuer API key, a store writer, then chooses who can read the receipt).
 */
export type SealTrust =
  | { trust: KeyTrust; card: CardIdentity; signal?: AbortSignal }
  | { trust: "unverified" };

/**
 * Seals a receipt to a public key of either suite (base64 DER SPKI, as register takes it, or a
 * `PUBLIC KEY` PEM, or a `CryptoKey`): RSA keys get RSA-OAEP-256, P-256 keys HPKE, in the format the
 * service produces and {@link openReceipt} opens. The AAD is the receipt's version (default "1.0"),
 * receiptId, merchantId and transactionId; `identity` may supply or pin them (a value that disagrees
 * with the receipt's is refused) and names the recipient's `keyId`. Each call draws a new AES key and IV.
 *
 * A bare key is sealed to as it is: the caller vouches for it. Given lookup's answer instead (its JSON
 * `data`, or the client's `LookupKeyResponse`), the answer is verified first under `identity.trust`
 * (docs/key-transparency.md: signed binding, log inclusion, witnessed checkpoint, the BIN's owner) and a
 * failure throws a `KeyVerificationError` before anything is sealed; the key id and AAD binding come
 * from the verified answer.
 */
export async function sealReceipt(
  receipt: ReceiptJson,
  publicKey: string | WebCryptoKey,
  identity?: SealIdentity,
): Promise<SealedEnvelope>;
export async function sealReceipt(
  receipt: ReceiptJson,
  answer: LookupAnswerLike,
  identity: SealIdentity & SealTrust,
): Promise<SealedEnvelope>;
export async function sealReceipt(
  receipt: ReceiptJson,
  recipient: string | WebCryptoKey | LookupAnswerLike,
  identity: SealIdentity & Partial<SealTrust> = {},
): Promise<SealedEnvelope> {
  if (isAnswer(recipient)) {
    const key = await recipientOf(recipient, identity);
    const pinned: SealIdentity = { keyId: key.keyId, aadBound: key.aadBound };
    for (const name of ["version", ...IDENTITY_FIELDS] as const) {
      const value = identity[name];
      if (value !== undefined) pinned[name] = value;
    }
    return sealToKey(receipt, key.publicKey, pinned);
  }
  return sealToKey(receipt, recipient, identity);
}

/** A lookup answer as sealReceipt takes it: at least the key and its id (the rest is checked by the trust). */
export interface LookupAnswerLike {
  keyId: string;
  publicKey: string;
  aadBound?: boolean | undefined;
}

function isAnswer(recipient: unknown): recipient is LookupAnswerLike {
  return (
    typeof recipient === "object" && recipient !== null && "keyId" in recipient && "publicKey" in recipient
  );
}

/** The key an answer names, verified under the trust (or taken as it is, when told "unverified"). */
async function recipientOf(
  answer: LookupAnswerLike,
  identity: SealIdentity & Partial<SealTrust>,
): Promise<{ keyId: string; publicKey: string; aadBound: boolean }> {
  const { trust, card, signal } = identity as Partial<{
    trust: KeyTrust | "unverified";
    card: CardIdentity;
    signal: AbortSignal;
  }>;
  if (trust === undefined) {
    throw new TypeError(
      'sealReceipt: a lookup answer needs identity.trust: a KeyTrust and the card (createKeyTrust), or "unverified"',
    );
  }
  const key =
    trust === "unverified"
      ? { keyId: answer.keyId, publicKey: answer.publicKey, aadBound: answer.aadBound === true }
      : await trust.verify(answer, card as CardIdentity, signal === undefined ? {} : { signal });
  if (identity.keyId !== undefined && identity.keyId !== key.keyId) {
    throw new EnvelopeError("invalid_receipt", "identity.keyId differs from the answer's keyId");
  }
  return key;
}

/** {@link sealReceipt} to a key the caller vouches for. */
async function sealToKey(
  receipt: ReceiptJson,
  publicKey: string | WebCryptoKey,
  identity: SealIdentity = {},
): Promise<SealedEnvelope> {
  const subtle = subtleCrypto();
  const key = await publicKeyOf(publicKey);
  const plain = sealedFieldsOf(receipt, identity);
  const problems = receiptJsonProblems(plain);
  if (problems.length > 0) throw new EnvelopeError("invalid_receipt", problems.join("; "));
  const id = {
    version: String(plain.version),
    receiptId: String(plain.receiptId),
    merchantId: String(plain.merchantId),
    transactionId: String(plain.transactionId),
  };
  const plaintext = new TextEncoder().encode(JSON.stringify(plain));
  const rawKey = globalThis.crypto.getRandomValues(new Uint8Array(AES_KEY_BYTES));
  try {
    const aesKey = await subtle.importKey("raw", rawKey, { name: "AES-GCM" }, false, ["encrypt"]);
    const iv = globalThis.crypto.getRandomValues(new Uint8Array(IV_BYTES));
    const sealed = new Uint8Array(
      await subtle.encrypt(
        { name: "AES-GCM", iv, additionalData: aadOf(id), tagLength: TAG_BYTES * 8 },
        aesKey,
        plaintext,
      ),
    );
    const keyId = identity.keyId ?? "";
    const keyBundle = await wrapAesKey(rawKey, key, aadOf(id), keyId, identity.aadBound === true);
    return {
      ...id,
      keyId,
      keyBundle,
      ciphertext: toBase64(sealed.subarray(0, sealed.length - TAG_BYTES)),
      iv: toBase64(iv),
      authTag: toBase64(sealed.subarray(sealed.length - TAG_BYTES)),
    };
  } finally {
    rawKey.fill(0);
  }
}

/** The additional authenticated data; a line break in a part would make it ambiguous. */
function aadOf(id: Pick<ReceiptEnvelope, "version" | "receiptId" | "merchantId" | "transactionId">) {
  const parts = [id.version, id.receiptId, id.merchantId, id.transactionId];
  if (parts.some((part) => typeof part !== "string" || part.includes("\n"))) {
    throw new EnvelopeError(
      "invalid_envelope",
      "version, receiptId, merchantId and transactionId must be strings without line breaks",
    );
  }
  return new TextEncoder().encode(parts.join("\n"));
}

/** The bytes of an envelope field, copied (so WebCrypto gets a plain ArrayBuffer), length-checked. */
function bytesOf(value: EnvelopeBytes, field: string, length?: number): Uint8Array<ArrayBuffer> {
  if (typeof value !== "string" && !ArrayBuffer.isView(value)) {
    throw new EnvelopeError("invalid_envelope", `${field} must be base64 text or bytes`);
  }
  const bytes = typeof value === "string" ? fromBase64(value) : new Uint8Array(value);
  if (bytes === undefined) throw new EnvelopeError("invalid_envelope", `${field} is not base64`);
  if (length !== undefined && bytes.length !== length) {
    throw new EnvelopeError("invalid_envelope", `${field} must be ${length} bytes`);
  }
  return bytes;
}

function integrityError(detail: string, cause?: unknown): EnvelopeError {
  return new EnvelopeError(
    "integrity_failure",
    `the sealed receipt failed its integrity check (wrong key, or tampered with): ${detail}`,
    cause === undefined ? undefined : { cause },
  );
}

/** Runs a WebCrypto decryption, turning its failure (an opaque `OperationError`) into an integrity failure. */
async function integrity(decrypt: () => Promise<ArrayBuffer>): Promise<ArrayBuffer> {
  try {
    return await decrypt();
  } catch (cause) {
    throw integrityError("decryption failed", cause);
  }
}

/** Parses a plaintext and checks that it describes the receipt the envelope is bound to. */
function receiptOf(plaintext: ArrayBuffer, envelope: ReceiptEnvelope): ReceiptJson {
  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(plaintext));
  } catch (cause) {
    throw integrityError("the plaintext is not UTF-8 JSON", cause);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw integrityError("the plaintext is not a JSON object");
  }
  const fields = parsed as Record<string, unknown>;
  for (const field of ["version", ...IDENTITY_FIELDS] as const) {
    if (field in fields && fields[field] !== envelope[field]) {
      throw integrityError(`the plaintext's ${field} differs from the envelope's`);
    }
  }
  // The AAD proves who sealed it, not what: a merchant may seal anything to the card's key.
  const problems = receiptJsonProblems(parsed);
  if (problems.length > 0) {
    throw new EnvelopeError(
      "integrity_failure",
      `the sealed plaintext is not a receipt: ${problems.join("; ")}`,
    );
  }
  return parsed as ReceiptJson;
}

/** The sealed plaintext object: the receipt without input-only fields, version first, identity filled in. */
function sealedFieldsOf(receipt: ReceiptJson, identity: SealIdentity): Record<string, unknown> {
  const { version: ownVersion, ...rest } = receipt as ReceiptJson & Record<string, unknown>;
  for (const field of INPUT_ONLY_FIELDS) delete rest[field];
  const version = pick("version", identity.version, ownVersion) ?? "1.0";
  const plain: Record<string, unknown> = { version, ...rest };
  for (const field of IDENTITY_FIELDS) {
    const value = pick(field, identity[field], receipt[field]);
    if (value === undefined || value === "") {
      throw new EnvelopeError("invalid_receipt", `${field} is required`);
    }
    plain[field] = value;
  }
  return plain;
}

/** The value of an identity field given by the caller and/or the receipt; the two must agree. */
function pick(field: string, given: string | undefined, own: unknown): string | undefined {
  if (own !== undefined && typeof own !== "string") {
    throw new EnvelopeError("invalid_receipt", `${field} must be a string`);
  }
  if (given !== undefined && own !== undefined && given !== own) {
    throw new EnvelopeError("invalid_receipt", `identity.${field} differs from the receipt's ${field}`);
  }
  return given ?? own;
}
