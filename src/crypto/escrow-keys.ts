import { createPublicKey } from "node:crypto";
import { invalidRequest } from "../errors.js";
import { sha256Hex } from "./digest.js";
import { keyAlgorithmOf, parsePrivateKey } from "./keys.js";
import type { KeyAlgorithm } from "./suites.js";

/** The public side of one of the service's escrow keys (the first seals, all can release). */
export interface EscrowKeyInfo {
  /** `esc_` + the first 16 hex digits of SHA-256 of the DER SPKI: the same on every instance sharing the key. */
  keyId: string;
  /** Base64 DER SubjectPublicKeyInfo of the public half. */
  spki: string;
  /** The key's suite, read from the key (the service escrow keys are RSA-2048 today). */
  algorithm: KeyAlgorithm;
}

/**
 * The id of an escrow key with this base64 DER SPKI. Derived from the public key, so a receipt's
 * `escrowKeyId` names its key on every instance and survives a reordering of the configured keys.
 */
export function escrowKeyIdOf(spki: string): string {
  return `esc_${sha256Hex(Buffer.from(spki, "base64")).slice(0, 16)}`;
}

/**
 * The id, public half and suite of an escrow private key from configuration (base64 DER PKCS#8 or
 * PEM). Throws `invalid_request` naming `field` when it is not a key of a suite.
 */
export function escrowKeyOf(privateKey: string, field = "ESCROW_PRIVATE_KEY"): EscrowKeyInfo {
  const key = parsePrivateKey(privateKey, field);
  const spki = createPublicKey(key).export({ type: "spki", format: "der" }).toString("base64");
  return { keyId: escrowKeyIdOf(spki), spki, algorithm: keyAlgorithmOf(key, field) };
}

/**
 * {@link escrowKeyOf} for each configured escrow key, in order (the first is the one that seals).
 * Throws `invalid_request` naming `field[i]` for each key that does not parse, for a key given twice,
 * and on `field` when the list is empty.
 */
export function escrowKeysOf(privateKeys: readonly string[], field = "escrowPrivateKeys"): EscrowKeyInfo[] {
  if (privateKeys.length === 0) {
    throw invalidRequest([{ field, description: "must hold at least one escrow private key" }]);
  }
  const keys = privateKeys.map((privateKey, i) => escrowKeyOf(privateKey, `${field}[${i}]`));
  const seen = new Set<string>();
  keys.forEach((key, i) => {
    if (seen.has(key.keyId)) {
      throw invalidRequest([{ field: `${field}[${i}]`, description: "is the same key as an earlier one" }]);
    }
    seen.add(key.keyId);
  });
  return keys;
}
