import type { Logger } from "pino";
import type { Clock } from "../clock.js";
import type { EscrowLimits } from "../config.js";
import type { CryptoPool } from "../crypto/crypto-pool.js";
import type { EscrowKeyInfo } from "../crypto/escrow-keys.js";
import type { Store } from "../store/types.js";
import type { BackgroundTasks } from "./background.js";
import type { PaymentGateway } from "./gateways/gateway.js";
import type { KtLog } from "./kt/log.js";

/** Everything the domain needs from the outside world, passed in explicitly. */
export interface DomainDeps {
  store: Store;
  clock: Clock;
  logger: Logger;
  /** Server secret for the HMAC of hashed PANs. */
  pepper: string;
  grantTtlSeconds: number;
  escrowRetentionDays: number;
  /** Escrow intake per merchant tenant and card, and release per registration (`config.escrow`). */
  escrow: EscrowLimits;
  /** Work started by a call that does not wait for it (escrow release past a registration's first page). */
  background: BackgroundTasks;
  pool: CryptoPool;
  /**
   * The service escrow keys, newest first: the first seals, every one can release what
   * it sealed. A rotation puts a new key first and keeps the old ones until their escrow is gone.
   */
  escrowKeys: readonly EscrowKeyInfo[];
  /** The key-transparency log (docs/key-transparency.md: `kt/log.ts`). */
  kt: KtLog;
  /** The payment gateways by name; the offline sandboxes when absent (a test passes its own). */
  gateways?: readonly PaymentGateway[];
}
