import { MemoryApiKeys } from "./memory/api-keys.js";
import { MemoryAudit } from "./memory/audit.js";
import { MemoryErasures } from "./memory/erasures.js";
import { MemoryEvents } from "./memory/events.js";
import { MemoryGrants } from "./memory/grants.js";
import { MemoryIdempotency } from "./memory/idempotency.js";
import { MemoryKtIssuers } from "./memory/kt-issuers.js";
import { MemoryKtLog } from "./memory/kt-log.js";
import { MemoryLeases } from "./memory/leases.js";
import { MemoryMerchantKeys } from "./memory/merchant-keys.js";
import { MemoryBins, MemoryIssuerEscrowKeys, MemoryMerchantOwners } from "./memory/ownership.js";
import { MemoryPayments } from "./memory/payments.js";
import { MemoryRateLimits } from "./memory/rate-limits.js";
import { MemoryReceipts } from "./memory/receipts.js";
import { MemoryUsers } from "./memory/users.js";
import { MemoryDeliveries, MemoryWebhookEndpoints } from "./memory/webhooks.js";
import { MongoApiKeys } from "./mongo/api-keys.js";
import { MongoAudit } from "./mongo/audit.js";
import type { CollectionDeclaration } from "./mongo/collection.js";
import type { MongoContext } from "./mongo/connection.js";
import { MongoErasures } from "./mongo/erasures.js";
import { MongoEvents } from "./mongo/events.js";
import { MongoGrants } from "./mongo/grants.js";
import { MongoIdempotency } from "./mongo/idempotency.js";
import { MongoKtIssuers } from "./mongo/kt-issuers.js";
import { MongoKtLog } from "./mongo/kt-log.js";
import { MongoLeases } from "./mongo/leases.js";
import { MongoMerchantKeys } from "./mongo/merchant-keys.js";
import { MongoBins, MongoIssuerEscrowKeys, MongoMerchantOwners } from "./mongo/ownership.js";
import { MongoPayments } from "./mongo/payments.js";
import { MongoRateLimits } from "./mongo/rate-limits.js";
import { MongoReceipts } from "./mongo/receipts.js";
import { MongoUsers } from "./mongo/users.js";
import { MongoDeliveries, MongoWebhookEndpoints } from "./mongo/webhooks.js";
import type { Store } from "./types.js";

/**
 * The memory repositories others write to in the same synchronous step as their own change (which is
 * what makes that change atomic in memory): the event outbox, the key log, and the receipts a payment is
 * stored with. One of each per memory store, made by {@link memoryParts}.
 */
export interface MemoryParts {
  readonly events: MemoryEvents;
  readonly ktLog: MemoryKtLog;
  readonly receipts: MemoryReceipts;
}

/** A new memory store's {@link MemoryParts}. */
export function memoryParts(): MemoryParts {
  const events = new MemoryEvents();
  return { events, ktLog: new MemoryKtLog(), receipts: new MemoryReceipts(events) };
}

/** A repository of the MongoDB store: built on the connection, and declaring the collections it uses. */
export interface MongoRepository<Repository = object> {
  new (ctx: MongoContext): Repository;
  readonly collections: readonly CollectionDeclaration[];
}

/** The members of `Store` that are repositories (the others are the store's own calls). */
export type RepositoryName = Exclude<keyof Store, "kind" | "init" | "ping" | "close">;

/** How each store makes one repository. */
interface Implementations<Repository> {
  /** The memory repository, made from the memory store's shared parts (the ones it writes to). */
  readonly memory: (parts: MemoryParts) => Repository;
  /** The MongoDB repository's class: built on the connection, its `collections` declared. */
  readonly mongo: MongoRepository<Repository>;
}

/**
 * The store's repositories, by their name in `Store`: each one's memory and MongoDB implementations side
 * by side. `createMemoryStore` (memory/index.ts) and `createMongoStore` (mongo/index.ts) both build
 * their store from this table, and the MongoDB store knows its collections from it (each declared
 * beside the code that reads and writes it, listed in its class's static `collections`): `init`
 * creates their indexes, and `MONGO_COLLECTIONS`, `CollectionName` and docs/scaling.md are made from
 * them. The compiler holds the table to `Store`: a repository missing here, one `Store` does not name,
 * or an implementation that does not fit its interface does not compile. The order is the order of
 * docs/scaling.md's list and of `init`'s index creation: the receipts and what grows with them first.
 */
export const REPOSITORIES = {
  receipts: { memory: (parts) => parts.receipts, mongo: MongoReceipts },
  payments: { memory: (parts) => new MemoryPayments(parts.receipts, parts.events), mongo: MongoPayments },
  idempotency: { memory: () => new MemoryIdempotency(), mongo: MongoIdempotency },
  rateLimits: { memory: () => new MemoryRateLimits(), mongo: MongoRateLimits },
  audit: { memory: () => new MemoryAudit(), mongo: MongoAudit },
  users: { memory: (parts) => new MemoryUsers(parts.events, parts.ktLog), mongo: MongoUsers },
  grants: { memory: () => new MemoryGrants(), mongo: MongoGrants },
  apiKeys: { memory: () => new MemoryApiKeys(), mongo: MongoApiKeys },
  merchantKeys: { memory: () => new MemoryMerchantKeys(), mongo: MongoMerchantKeys },
  issuerEscrowKeys: {
    memory: (parts) => new MemoryIssuerEscrowKeys(parts.ktLog),
    mongo: MongoIssuerEscrowKeys,
  },
  bins: { memory: (parts) => new MemoryBins(parts.ktLog), mongo: MongoBins },
  merchants: { memory: () => new MemoryMerchantOwners(), mongo: MongoMerchantOwners },
  erasures: { memory: () => new MemoryErasures(), mongo: MongoErasures },
  ktLog: { memory: (parts) => parts.ktLog, mongo: MongoKtLog },
  ktIssuers: { memory: (parts) => new MemoryKtIssuers(parts.ktLog), mongo: MongoKtIssuers },
  leases: { memory: () => new MemoryLeases(), mongo: MongoLeases },
  events: { memory: (parts) => parts.events, mongo: MongoEvents },
  webhookEndpoints: { memory: () => new MemoryWebhookEndpoints(), mongo: MongoWebhookEndpoints },
  deliveries: { memory: () => new MemoryDeliveries(), mongo: MongoDeliveries },
} as const satisfies { readonly [Name in RepositoryName]: Implementations<Store[Name]> };

/** One row of {@link REPOSITORIES}: a repository's two implementations. */
export type RepositoryRow = (typeof REPOSITORIES)[RepositoryName];

/**
 * One store's repositories, each member of {@link REPOSITORIES} built by `make` from its row, in the
 * table's order: `({ memory }) => memory(parts)` for the memory store, `({ mongo }) => new mongo(ctx)`
 * for MongoDB's. (The table's type holds each row to its member of `Store`; the loop cannot say so.)
 */
export function buildRepositories(make: (row: RepositoryRow) => unknown): Repositories {
  const built: Partial<Record<RepositoryName, unknown>> = {};
  for (const [name, row] of Object.entries(REPOSITORIES)) built[name as RepositoryName] = make(row);
  return built as Repositories;
}

/** The repositories of a `Store`. */
export type Repositories = { -readonly [Name in RepositoryName]: Store[Name] };
