import { generateKeyPairSync, type KeyObject, sign, verify } from "node:crypto";
import canonicalizeModule from "canonicalize";

/**
 * The two outside ends of merchant signatures (README, "Merchant signatures"), written from the README's rule
 * and not from the service's code, so the tests prove the rule a merchant and a cardholder's app follow:
 * drop the unsigned members, drop every `null`, `""` and `[]` member at any depth, canonicalize
 * (RFC 8785), sign or verify the UTF-8 bytes with Ed25519.
 */

/** `canonicalize` is CommonJS typed as an ES default export; the default import is the function. */
const canonicalize = canonicalizeModule as unknown as (input: unknown) => string;

/** What a merchant leaves out of its request body: the input-only fields. */
export const MERCHANT_DROPS = ["recipientHashedPan", "mockItems", "cardNonce"] as const;
/** What a cardholder's app leaves out of a decrypted receipt: what the service added. */
export const CARDHOLDER_DROPS = ["keyId", "decryptedAt", "merchantSignature", "merchantKeyId"] as const;

/** A merchant's Ed25519 key pair: the public key as base64 DER SPKI, as registered. */
export interface MerchantKeys {
  publicKey: string;
  publicKeyObject: KeyObject;
  privateKey: KeyObject;
}

export function merchantKeys(): MerchantKeys {
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  return {
    publicKey: publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    publicKeyObject: publicKey,
    privateKey,
  };
}

/** The signed bytes of a receipt JSON object without the `drop` members. */
export function signingInput(receipt: Record<string, unknown>, drop: readonly string[]): Buffer {
  const kept = Object.fromEntries(Object.entries(receipt).filter(([name]) => !drop.includes(name)));
  return Buffer.from(canonicalize(pruned(kept)), "utf8");
}

/** The merchant's `X-Receipt-Signature` for a request body. */
export function signBody(body: Record<string, unknown>, privateKey: KeyObject): string {
  return sign(null, signingInput(body, MERCHANT_DROPS), privateKey).toString("base64");
}

/** The cardholder app's check of a decrypted receipt against the merchant's public key. */
export function cardholderVerifies(receipt: Record<string, unknown>, publicKey: KeyObject): boolean {
  const signature = receipt.merchantSignature;
  if (typeof signature !== "string") return false;
  return verify(null, signingInput(receipt, CARDHOLDER_DROPS), publicKey, Buffer.from(signature, "base64"));
}

function pruned(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(pruned);
  if (typeof value !== "object" || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [name, member] of Object.entries(value)) {
    const p = pruned(member);
    if (p === null || p === undefined || p === "" || (Array.isArray(p) && p.length === 0)) continue;
    out[name] = p;
  }
  return out;
}
