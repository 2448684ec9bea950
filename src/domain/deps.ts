import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import type { CryptoPool } from "../crypto/crypto-pool.js";
import type { KeyAlgorithm, Store } from "../store/types.js";

/** A service escrow key's public half; its private half lives only in the crypto worker pool. */
export interface EscrowKey {
  /** `esc_<16 hex of SHA-256 of the SPKI>`: the same on every instance sharing the key. */
  keyId: string;
  algorithm: KeyAlgorithm;
  /** Base64 DER SPKI of the public half. */
  spki: string;
}

/** Everything the domain needs from the outside world, passed in explicitly. */
export interface DomainDeps {
  store: Store;
  clock: Clock;
  logger: Logger;
  /** Server secret for the HMAC of hashed PANs. */
  pepper: string;
  grantTtlSeconds: number;
  escrowRetentionDays: number;
  pool: CryptoPool;
  /**
   * The service escrow keys (section 17), newest first: the first seals, every one can release what
   * it sealed. A rotation puts a new key first and keeps the old ones until their escrow is gone.
   */
  escrowKeys: readonly EscrowKey[];
}
