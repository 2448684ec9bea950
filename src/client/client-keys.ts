import { ecdhParams } from "../crypto/hpke-suites.js";
import { KeyEncodingError, readPrivateKey, readPublicKey } from "../crypto/key-encoding.js";
import {
  HPKE_SUITE,
  KEY_SUITES,
  type KeyAlgorithm,
  type KeySuite,
  RSA_OAEP_256,
  RSA_SUITE,
  type SuiteKeyType,
  suiteOfKeyType,
} from "../crypto/suites.js";
import { fromBase64 } from "../kt/base64.js";
import { ecKeyPairCandidates, isEcKeyOf, type WebCryptoKeyPair } from "./p256.js";

/**
 * Keys for the client's WebCrypto envelope (see `webcrypto.ts`), every suite (`suites.ts` says each
 * suite's key family and curve): importing key text, telling the suites apart, and the error type of
 * the envelope functions. WebCrypto only, no `node:`.
 */

/** JOSE name of the RSA key wrapping, `keyBundle.algorithm`, and the default when a bundle names none. */
export const KEY_WRAP_ALGORITHM = RSA_OAEP_256;

/** The key suites, as `keyBundle.algorithm` names them. */
export type KeyWrapAlgorithm = KeyAlgorithm;

/**
 * A private key for {@link openReceipt}: base64 DER PKCS#8 or its PEM (either suite), a `CryptoKey`
 * (RSA-OAEP with SHA-256, or ECDH P-256; extractable or not), or a `CryptoKeyPair` as
 * `crypto.subtle.generateKey` returns it.
 */
export type PrivateKeyInput = string | WebCryptoKey | WebCryptoKeyPair;

/** Why an envelope could not be opened or made; `unknown_key` when a key ring has no key for its keyId. */
export type EnvelopeErrorCode =
  | "invalid_key"
  | "invalid_envelope"
  | "invalid_receipt"
  | "integrity_failure"
  | "unknown_key";

/**
 * A failure of {@link openReceipt} or {@link sealReceipt}. `integrity_failure` covers a wrong key and a
 * tampered or mis-bound envelope alike: WebCrypto cannot tell them apart, and neither should a caller.
 */
export class EnvelopeError extends Error {
  readonly code: EnvelopeErrorCode;

  constructor(code: EnvelopeErrorCode, message: string, options?: { cause: unknown }) {
    super(message, options);
    this.name = "EnvelopeError";
    this.code = code;
  }
}

type Subtle = typeof globalThis.crypto.subtle;
/** WebCrypto's `CryptoKey`, named without depending on the DOM or Node type libraries. */
export type WebCryptoKey = Awaited<ReturnType<Subtle["importKey"]>>;

/** RSA-OAEP with SHA-256 for the hash and MGF1, as WebCrypto names it. */
export const RSA_OAEP = { name: "RSA-OAEP", hash: "SHA-256" } as const;

/** The suite another suite's key text belongs to, by its DER, when it is not `suite`'s. */
function otherSuiteOf(text: string, suite: KeySuite): KeySuite | undefined {
  const found = suiteOfKeyType(derKindOf(text));
  return found === suite ? undefined : found;
}

/** The RSA-OAEP key of a {@link PrivateKeyInput}, or `invalid_key` saying that it is of another suite. */
export async function rsaPrivateKeyOf(input: PrivateKeyInput): Promise<WebCryptoKey> {
  if (typeof input === "string") {
    const other = otherSuiteOf(input, RSA_SUITE);
    if (other !== undefined) throw suiteMismatch(other.keyWords, KEY_WRAP_ALGORITHM);
    return importRsaKey(input, "private");
  }
  const key = isKeyPair(input) ? input.privateKey : input;
  if ((key.algorithm as { name?: string }).name !== "RSA-OAEP") {
    throw suiteMismatch(
      `a ${(key.algorithm as { name?: string }).name ?? "non-RSA"} key`,
      KEY_WRAP_ALGORITHM,
    );
  }
  return key;
}

/** The candidate P-256 key pairs of a {@link PrivateKeyInput}, or `invalid_key` for another key type. */
export function p256PairsOf(input: PrivateKeyInput): Promise<WebCryptoKeyPair[]> {
  return ecPairsOf(input, HPKE_SUITE);
}

/** The candidate key pairs of an HPKE suite's {@link PrivateKeyInput}, or `invalid_key` for another key type. */
export async function ecPairsOf(input: PrivateKeyInput, suite: KeySuite): Promise<WebCryptoKeyPair[]> {
  const curve = suite.curve?.name ?? "";
  if (typeof input === "string") {
    const other = otherSuiteOf(input, suite);
    if (other !== undefined) throw suiteMismatch(other.keyWords, suite.algorithm);
    return ecKeyPairCandidates(await importEcKey(input, "private", suite), suite);
  }
  if (isKeyPair(input)) {
    if (!isEcKeyOf(input.privateKey, suite) || !isEcKeyOf(input.publicKey, suite)) {
      throw suiteMismatch(`a non-${curve} key`, suite.algorithm);
    }
    return [input];
  }
  if (!isEcKeyOf(input, suite)) {
    throw suiteMismatch(
      `a ${(input.algorithm as { name?: string }).name ?? `non-${curve}`} key`,
      suite.algorithm,
    );
  }
  return ecKeyPairCandidates(input, suite);
}

function isKeyPair(input: WebCryptoKey | WebCryptoKeyPair): input is WebCryptoKeyPair {
  return "privateKey" in input && "publicKey" in input;
}

/** `key`: the key in words, `an RSA key`. */
function suiteMismatch(key: string, algorithm: KeyWrapAlgorithm): EnvelopeError {
  return new EnvelopeError(
    "invalid_key",
    `the private key is ${key}, but this receipt's key is wrapped with ${algorithm}: use the key of the receipt's keyId`,
  );
}

/**
 * Imports an RSA key for RSA-OAEP with SHA-256: base64 DER (PKCS#8 for `private`, SPKI for `public`)
 * or the matching PEM. PKCS#1 PEM (`RSA PRIVATE KEY`) is refused: WebCrypto cannot import it.
 * The key is checked as the service checks it (`key-encoding.ts`: 2048 to 8192 bits, exponent
 * 65537, strict DER) before WebCrypto sees it.
 */
export async function importRsaKey(text: string, kind: "private" | "public"): Promise<WebCryptoKey> {
  const format = kind === "private" ? "pkcs8" : "spki";
  const der = derOfKeyText(text, kind);
  checkKeyEncoding(der, kind, RSA_SUITE.keyType, `the ${kind} key is not an RSA ${format} key`);
  try {
    return await subtleCrypto().importKey(format, der, RSA_OAEP, false, [
      kind === "private" ? "decrypt" : "encrypt",
    ]);
  } catch (cause) {
    throw new EnvelopeError("invalid_key", `the ${kind} key is not an RSA ${format} key`, { cause });
  }
}

/** Imports a P-256 key for HPKE (ECDH), see {@link importEcKey}. */
export function importP256Key(text: string, kind: "private" | "public"): Promise<WebCryptoKey> {
  return importEcKey(text, kind, HPKE_SUITE);
}

/**
 * Imports a key of an HPKE suite for HPKE (ECDH on the suite's curve): base64 DER (PKCS#8 for
 * `private`, SPKI for `public`) or the matching PEM. SEC1 `EC PRIVATE KEY` PEM is refused: WebCrypto
 * cannot import it. The key is checked as the service checks it (`key-encoding.ts`: the named curve, a
 * valid point that is not the point at infinity, a scalar from 1 to n - 1) before WebCrypto sees it. A
 * private key imported from text is extractable, so that its public half (which HPKE needs) can be
 * read from it.
 */
export async function importEcKey(
  text: string,
  kind: "private" | "public",
  suite: KeySuite,
): Promise<WebCryptoKey> {
  const format = kind === "private" ? "pkcs8" : "spki";
  const refused = `the ${kind} key is not an EC ${suite.curve?.name ?? ""} ${format} key`;
  const der = derOfKeyText(text, kind);
  checkKeyEncoding(der, kind, suite.keyType, refused);
  try {
    return await subtleCrypto().importKey(
      format,
      der,
      ecdhParams(suite),
      true,
      kind === "private" ? ["deriveBits"] : [],
    );
  } catch (cause) {
    throw new EnvelopeError("invalid_key", refused, { cause });
  }
}

/**
 * Checks key DER with the service's own reader before WebCrypto imports it, so that a hostile key
 * fails here with a reason rather than inside the platform's crypto (where, in Node 20, some abort
 * the process). `malformed` says `malformedMessage`.
 */
function checkKeyEncoding(
  der: Uint8Array,
  kind: "private" | "public",
  type: SuiteKeyType,
  malformedMessage: string,
): void {
  try {
    const key = kind === "private" ? readPrivateKey(der, "pkcs8") : readPublicKey(der, "spki", [type]);
    if (key.type !== type) throw new KeyEncodingError("unsupported");
  } catch (error) {
    if (!(error instanceof KeyEncodingError)) throw error;
    if (error.problem === "invalid") {
      throw new EnvelopeError("invalid_key", `the ${kind} key is refused: it ${error.message}`);
    }
    if (error.problem === "private") {
      throw new EnvelopeError("invalid_key", "a private key was given where a public key belongs");
    }
    throw new EnvelopeError("invalid_key", malformedMessage);
  }
}

/** The DER bytes of key text: base64 DER or a PEM block of the label WebCrypto imports. */
function derOfKeyText(text: string, kind: "private" | "public"): Uint8Array<ArrayBuffer> {
  const format = kind === "private" ? "pkcs8" : "spki";
  const label = kind === "private" ? "PRIVATE KEY" : "PUBLIC KEY";
  // One PEM block and nothing else around it (a second block would be silently ignored).
  const pem = /^\s*-----BEGIN ([A-Z0-9 ]+)-----([\s\S]*?)-----END \1-----\s*$/.exec(text);
  if (pem !== null && pem[1] !== label) {
    throw new EnvelopeError(
      "invalid_key",
      `a ${pem[1]} PEM is not accepted; WebCrypto imports ${label} (${format})`,
    );
  }
  const der = fromBase64((pem === null ? text : (pem[2] ?? "")).replace(/\s+/g, ""));
  if (der === undefined || der.length === 0) {
    throw new EnvelopeError("invalid_key", `the ${kind} key must be base64 DER ${format} or PEM`);
  }
  return der;
}

/** DER of the OID that tells an RSA suite's keys apart: rsaEncryption. */
const RSA_OID = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

/** The OID that tells a suite's keys apart: rsaEncryption, or its curve's (id-ecPublicKey's parameter). */
function suiteOid(suite: KeySuite): number[] {
  const hex = suite.curve?.oid;
  if (hex === undefined) return RSA_OID;
  return Array.from({ length: hex.length / 2 }, (_, i) => Number.parseInt(hex.slice(2 * i, 2 * i + 2), 16));
}

/**
 * Which suite's key type key text looks like, from the algorithm OID near the start of its DER (SPKI
 * or PKCS#8); only used to choose an importer and to word errors, the import itself validates the key.
 */
export function derKindOf(text: string): SuiteKeyType | "unknown" {
  const pem = /-----BEGIN [A-Z0-9 ]+-----([\s\S]*?)-----END /.exec(text);
  const der = fromBase64((pem === null ? text : (pem[1] ?? "")).replace(/\s+/g, ""));
  if (der === undefined) return "unknown";
  const head = der.subarray(0, 40);
  return KEY_SUITES.find((suite) => contains(head, suiteOid(suite)))?.keyType ?? "unknown";
}

function contains(haystack: Uint8Array, needle: number[]): boolean {
  outer: for (let i = 0; i + needle.length <= haystack.length; i++) {
    for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer;
    return true;
  }
  return false;
}

export function subtleCrypto(): Subtle {
  const subtle = globalThis.crypto?.subtle as Subtle | undefined;
  if (subtle === undefined) throw new Error("WebCrypto (globalThis.crypto.subtle) is not available here");
  return subtle;
}
