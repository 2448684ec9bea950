import type { Store } from "../types.js";
import { MemoryApiKeys } from "./api-keys.js";
import { MemoryAudit } from "./audit.js";
import { MemoryErasures } from "./erasures.js";
import { MemoryEvents } from "./events.js";
import { MemoryGrants } from "./grants.js";
import { MemoryIdempotency } from "./idempotency.js";
import { MemoryKtIssuers } from "./kt-issuers.js";
import { MemoryKtLog } from "./kt-log.js";
import { MemoryLeases } from "./leases.js";
import { MemoryMerchantKeys } from "./merchant-keys.js";
import { MemoryBins, MemoryIssuerEscrowKeys, MemoryMerchantOwners } from "./ownership.js";
import { MemoryPayments } from "./payments.js";
import { MemoryRateLimits } from "./rate-limits.js";
import { MemoryReceipts } from "./receipts.js";
import { MemoryUsers } from "./users.js";
import { MemoryDeliveries, MemoryWebhookEndpoints } from "./webhooks.js";

/** The stores made by {@link createMemoryStore}, for {@link isMemoryStore}. */
const memoryStores = new WeakSet<Store>();

/**
 * Creates the in-memory store, the embedded default for development and tests. Everything is lost when
 * the process exits, and nothing is shared between processes (rate limits included). Every method does
 * its check and its write with no `await` in between, which makes it atomic on Node's single thread.
 */
export function createMemoryStore(): Store {
  const events = new MemoryEvents();
  const receipts = new MemoryReceipts(events);
  const ktLog = new MemoryKtLog();
  const store: Store = {
    kind: "memory",
    apiKeys: new MemoryApiKeys(),
    rateLimits: new MemoryRateLimits(),
    users: new MemoryUsers(events, ktLog),
    receipts,
    payments: new MemoryPayments(receipts, events),
    grants: new MemoryGrants(),
    idempotency: new MemoryIdempotency(),
    audit: new MemoryAudit(),
    merchantKeys: new MemoryMerchantKeys(),
    issuerEscrowKeys: new MemoryIssuerEscrowKeys(ktLog),
    bins: new MemoryBins(ktLog),
    merchants: new MemoryMerchantOwners(),
    erasures: new MemoryErasures(),
    events,
    webhookEndpoints: new MemoryWebhookEndpoints(),
    deliveries: new MemoryDeliveries(),
    ktLog,
    ktIssuers: new MemoryKtIssuers(ktLog),
    leases: new MemoryLeases(),
    init: async () => {},
    ping: async () => {},
    close: async () => {},
  };
  memoryStores.add(store);
  return store;
}

/**
 * Whether `store` is a store made by {@link createMemoryStore} (not a copy or a wrapper of one). Its
 * calls do their work when they are made and return settled promises: none waits on I/O or a timer.
 */
export function isMemoryStore(store: Store): boolean {
  return memoryStores.has(store);
}
