import { KeyEncodingError, readPrivateKey, readPublicKey } from "../crypto/key-encoding.js";
import { RSA_OAEP_256 } from "../crypto/suites.js";
import { fromBase64 } from "./base64.js";
import {
  ECDH_P256,
  HPKE_KEY_WRAP_ALGORITHM,
  isP256Key,
  p256KeyPairCandidates,
  type WebCryptoKeyPair,
} from "./p256.js";

/**
 * Keys for the client's WebCrypto envelope (see `webcrypto.ts`), both suites: importing key text,
 * telling the suites apart, and the error type of the envelope functions. WebCrypto only, no `node:`.
 */

/** JOSE name of the RSA key wrapping, `keyBundle.algorithm`, and the default when a bundle names none. */
export const KEY_WRAP_ALGORITHM = RSA_OAEP_256;

/** The key suites, as `keyBundle.algorithm` names them. */
export type KeyWrapAlgorithm = typeof KEY_WRAP_ALGORITHM | typeof HPKE_KEY_WRAP_ALGORITHM;

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

/** The RSA-OAEP key of a {@link PrivateKeyInput}, or `invalid_key` saying that it is of the other suite. */
export async function rsaPrivateKeyOf(input: PrivateKeyInput): Promise<WebCryptoKey> {
  if (typeof input === "string") {
    if (derKindOf(input) === "p256") throw suiteMismatch("an EC P-256", KEY_WRAP_ALGORITHM);
    return importRsaKey(input, "private");
  }
  const key = isKeyPair(input) ? input.privateKey : input;
  if ((key.algorithm as { name?: string }).name !== "RSA-OAEP") {
    throw suiteMismatch(`a ${(key.algorithm as { name?: string }).name ?? "non-RSA"}`, KEY_WRAP_ALGORITHM);
  }
  return key;
}

/** The candidate P-256 key pairs of a {@link PrivateKeyInput}, or `invalid_key` for another key type. */
export async function p256PairsOf(input: PrivateKeyInput): Promise<WebCryptoKeyPair[]> {
  if (typeof input === "string") {
    if (derKindOf(input) === "rsa") throw suiteMismatch("an RSA", HPKE_KEY_WRAP_ALGORITHM);
    return p256KeyPairCandidates(await importP256Key(input, "private"));
  }
  if (isKeyPair(input)) {
    if (!isP256Key(input.privateKey) || !isP256Key(input.publicKey)) {
      throw suiteMismatch("a non-P-256", HPKE_KEY_WRAP_ALGORITHM);
    }
    return [input];
  }
  if (!isP256Key(input)) {
    throw suiteMismatch(
      `a ${(input.algorithm as { name?: string }).name ?? "non-P-256"}`,
      HPKE_KEY_WRAP_ALGORITHM,
    );
  }
  return p256KeyPairCandidates(input);
}

function isKeyPair(input: WebCryptoKey | WebCryptoKeyPair): input is WebCryptoKeyPair {
  return "privateKey" in input && "publicKey" in input;
}

function suiteMismatch(kind: string, algorithm: KeyWrapAlgorithm): EnvelopeError {
  return new EnvelopeError(
    "invalid_key",
    `the private key is ${kind} key, but this receipt's key is wrapped with ${algorithm}: use the key of the receipt's keyId`,
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
  checkKeyEncoding(der, kind, "rsa", `the ${kind} key is not an RSA ${format} key`);
  try {
    return await subtleCrypto().importKey(format, der, RSA_OAEP, false, [
      kind === "private" ? "decrypt" : "encrypt",
    ]);
  } catch (cause) {
    throw new EnvelopeError("invalid_key", `the ${kind} key is not an RSA ${format} key`, { cause });
  }
}

/**
 * Imports a P-256 key for HPKE (ECDH): base64 DER (PKCS#8 for `private`, SPKI for `public`) or the
 * matching PEM. SEC1 `EC PRIVATE KEY` PEM is refused: WebCrypto cannot import it. The key is checked
 * as the service checks it (`key-encoding.ts`: the named curve, a valid point that is not the point
 * at infinity, a scalar from 1 to n - 1) before WebCrypto sees it. A private key imported from text
 * is extractable, so that its public half (which HPKE needs) can be read from it.
 */
export async function importP256Key(text: string, kind: "private" | "public"): Promise<WebCryptoKey> {
  const format = kind === "private" ? "pkcs8" : "spki";
  const der = derOfKeyText(text, kind);
  checkKeyEncoding(der, kind, "p256", `the ${kind} key is not an EC P-256 ${format} key`);
  try {
    return await subtleCrypto().importKey(
      format,
      der,
      ECDH_P256,
      true,
      kind === "private" ? ["deriveBits"] : [],
    );
  } catch (cause) {
    throw new EnvelopeError("invalid_key", `the ${kind} key is not an EC P-256 ${format} key`, { cause });
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
  type: "rsa" | "p256",
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

/** DER of the algorithm OIDs that tell the suites apart: rsaEncryption, and id-ecPublicKey with prime256v1. */
const RSA_OID = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const P256_OID = [0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

/**
 * Which suite key text looks like, from the algorithm OID near the start of its DER (SPKI or PKCS#8);
 * only used to choose an importer and to word errors, the import itself validates the key.
 */
export function derKindOf(text: string): "rsa" | "p256" | "unknown" {
  const pem = /-----BEGIN [A-Z0-9 ]+-----([\s\S]*?)-----END /.exec(text);
  const der = fromBase64((pem === null ? text : (pem[1] ?? "")).replace(/\s+/g, ""));
  if (der === undefined) return "unknown";
  const head = der.subarray(0, 40);
  if (contains(head, RSA_OID)) return "rsa";
  if (contains(head, P256_OID)) return "p256";
  return "unknown";
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
