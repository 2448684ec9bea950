import type { Store } from "../types.js";
import { MongoApiKeys } from "./api-keys.js";
import { MongoAudit } from "./audit.js";
import type { CollectionDeclaration } from "./collection.js";
import { MongoContext, type MongoStoreOptions } from "./connection.js";
import { MongoErasures } from "./erasures.js";
import { MongoEvents } from "./events.js";
import { MongoGrants } from "./grants.js";
import { MongoIdempotency } from "./idempotency.js";
import { createDeclaredIndexes } from "./init.js";
import { MongoKtIssuers } from "./kt-issuers.js";
import { MongoKtLog } from "./kt-log.js";
import { MongoLeases } from "./leases.js";
import { MongoMerchantKeys } from "./merchant-keys.js";
import { MongoBins, MongoIssuerEscrowKeys, MongoMerchantOwners } from "./ownership.js";
import { MongoPayments } from "./payments.js";
import { MongoRateLimits } from "./rate-limits.js";
import { MongoReceipts } from "./receipts.js";
import { MongoUsers } from "./users.js";
import { MongoDeliveries, MongoWebhookEndpoints } from "./webhooks.js";

export {
  DEFAULT_INDEX_TIMEOUT_MS,
  DEFAULT_OPERATION_TIMEOUT_MS,
  type MongoStoreOptions,
  operationTimeoutWithin,
} from "./connection.js";

/** A repository of the MongoDB store: built on the connection, and declaring the collections it uses. */
interface MongoRepository {
  new (ctx: MongoContext): object;
  readonly collections: readonly CollectionDeclaration[];
}

/**
 * The store's repositories, by their name in `Store`. Each is built on the one connection and lists the
 * collections it declares (its static `collections`): a collection is declared once, beside the code
 * that reads and writes it, and this table is how the store knows them all. Their order is the order
 * of docs/scaling.md's list: the receipts and what grows with them first.
 */
const REPOSITORIES = {
  receipts: MongoReceipts,
  payments: MongoPayments,
  idempotency: MongoIdempotency,
  rateLimits: MongoRateLimits,
  audit: MongoAudit,
  users: MongoUsers,
  grants: MongoGrants,
  apiKeys: MongoApiKeys,
  merchantKeys: MongoMerchantKeys,
  issuerEscrowKeys: MongoIssuerEscrowKeys,
  bins: MongoBins,
  merchants: MongoMerchantOwners,
  erasures: MongoErasures,
  ktLog: MongoKtLog,
  ktIssuers: MongoKtIssuers,
  leases: MongoLeases,
  events: MongoEvents,
  webhookEndpoints: MongoWebhookEndpoints,
  deliveries: MongoDeliveries,
} as const satisfies Record<string, MongoRepository>;

type Repositories = {
  -readonly [Name in keyof typeof REPOSITORIES]: InstanceType<(typeof REPOSITORIES)[Name]>;
};

/** A collection's name, as its repository declares it. */
export type CollectionName = {
  [Name in keyof typeof REPOSITORIES]: (typeof REPOSITORIES)[Name]["collections"][number]["name"];
}[keyof typeof REPOSITORIES];

/**
 * Every collection of the MongoDB store, as its repository declares it: what `init` creates, what the
 * cluster mode of the tests checks, and what docs/scaling.md lists.
 */
export const MONGO_COLLECTIONS: readonly CollectionDeclaration<CollectionName>[] = Object.values(
  REPOSITORIES,
).flatMap((repository): readonly CollectionDeclaration<CollectionName>[] => repository.collections);

/** Every repository of {@link REPOSITORIES}, built on `ctx`. */
function repositoriesOn(ctx: MongoContext): Repositories {
  const built: Partial<Record<keyof Repositories, unknown>> = {};
  for (const [name, Repository] of Object.entries(REPOSITORIES)) {
    built[name as keyof Repositories] = new Repository(ctx);
  }
  return built as Repositories;
}

/**
 * Creates the MongoDB store. It connects on first use rather than here, so a service can start while
 * the database is down: `main` runs `init` in the background (`startStore`, retrying with backoff),
 * `/readyz` says 503 until the database answers and the indexes exist, and every request meanwhile
 * gets `service_unavailable`; the driver reconnects by itself after later outages. Every
 * operation is time-limited by `operationTimeoutMs`; an unreachable database gives
 * `AppError("service_unavailable")`. `register` and `createWithReceipt` use transactions, so the
 * deployment must be a replica set or sharded cluster (as Atlas and every production setup is).
 * Rejects only for a malformed connection string.
 */
export async function createMongoStore(options: MongoStoreOptions): Promise<Store> {
  const ctx = new MongoContext(options);
  return {
    kind: "mongodb",
    ...repositoriesOn(ctx),
    /**
     * Creates every collection's indexes (`createDeclaredIndexes`: an index already serving, such as
     * one a `sh.shardCollection` made first, stands in). Bounded by `indexTimeoutMs`, not the per-call
     * limit, on a client whose socket timeout allows it: a build on a big collection takes long.
     */
    init: () =>
      ctx.run(
        () =>
          ctx.withIndexClient(async (db) => {
            const { legacyReceipts } = await createDeclaredIndexes(
              db,
              MONGO_COLLECTIONS,
              ctx.indexTimeoutMs,
              options.receiptRetentionDays,
            );
            ctx.claimsMayBeMissing = legacyReceipts;
          }),
        ctx.indexTimeoutMs + 2 * ctx.timeoutMs,
      ),
    // `maxTimeMS` in the command itself: `db.command` takes no time-limit option, and without one a
    // ping to a stalled server would only end at the socket timeout.
    ping: () =>
      ctx.run(async () => {
        await ctx.db.command({ ping: 1, maxTimeMS: ctx.timeoutMs });
      }),
    close: () => ctx.close(),
  };
}
