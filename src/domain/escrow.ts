import { receiptAad } from "../crypto/envelope.js";
import { RSA_OAEP_256 } from "../crypto/suites.js";
import type { DomainDeps } from "./deps.js";

/** The escrow key's public half and its stable id (`esc_...`), from the private key in configuration. */
export { escrowKeyOf } from "../crypto/escrow-keys.js";

/** Where escrowed receipts of a card go once it registers. */
export interface ReleaseTarget {
  panHash: string;
  userId: string;
  issuerTenantId: string;
  keyId: string;
  /** The user's public key, base64 DER SPKI. */
  spki: string;
}

/**
 * Releases a card's escrowed receipts to its newly registered key: each AES key is unwrapped with the
 * escrow key and re-wrapped to the user's key (in the crypto worker pool); the ciphertext is untouched.
 * Returns how many this call released. Safe to run concurrently with itself and with new receipts:
 * `release` only succeeds while a receipt is still escrowed, so each is released exactly once.
 */
export async function releaseEscrow(deps: DomainDeps, target: ReleaseTarget): Promise<number> {
  const escrowed = await deps.store.receipts.listEscrowed(target.panHash, deps.clock.now());
  let released = 0;
  for (const receipt of escrowed) {
    const wrapped = await deps.pool.rewrapFromEscrow({
      escrowKeyId: receipt.escrowKeyId ?? deps.escrow.keyId,
      encryptedAesKey: Buffer.from(receipt.keyBundle.encryptedAesKey, "base64"),
      aad: receiptAad(receipt),
      // The stored key bundle has no encapsulatedKey yet, so only RSA keys can be released to here.
      target: { keyId: target.keyId, spki: target.spki, algorithm: RSA_OAEP_256 },
    });
    const ok = await deps.store.receipts.release(receipt.id, {
      userId: target.userId,
      issuerTenantId: target.issuerTenantId,
      keyBundle: { keyId: target.keyId, encryptedAesKey: wrapped.encryptedAesKey },
    });
    if (ok) released += 1;
  }
  if (released > 0) deps.logger.info({ userId: target.userId, released }, "escrow released");
  return released;
}
