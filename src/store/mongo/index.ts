import { buildRepositories, REPOSITORIES } from "../repositories.js";
import type { Store } from "../types.js";
import type { CollectionDeclaration } from "./collection.js";
import { MongoContext, type MongoStoreOptions } from "./connection.js";
import { createDeclaredIndexes } from "./init.js";

export {
  DEFAULT_INDEX_TIMEOUT_MS,
  DEFAULT_OPERATION_TIMEOUT_MS,
  type MongoStoreOptions,
  operationTimeoutWithin,
} from "./connection.js";

/** A collection's name, as its repository declares it. */
export type CollectionName = {
  [Name in keyof typeof REPOSITORIES]: (typeof REPOSITORIES)[Name]["mongo"]["collections"][number]["name"];
}[keyof typeof REPOSITORIES];

/**
 * Every collection of the MongoDB store, as its repository declares it (in `REPOSITORIES`' order,
 * src/store/repositories.ts): what `init` creates, what the cluster mode of the tests checks, and what
 * docs/scaling.md lists.
 */
export const MONGO_COLLECTIONS: readonly CollectionDeclaration<CollectionName>[] = Object.values(
  REPOSITORIES,
).flatMap(({ mongo }): readonly CollectionDeclaration<CollectionName>[] => mongo.collections);

/**
 * Creates the MongoDB store. It connects on first use rather than here, so a service can start while
 * the database is down: `main` runs `init` in the background (`startStore`, retrying with backoff),
 * `/readyz` says 503 until the database answers and the indexes exist, and every request meanwhile
 * gets `service_unavailable`; the driver reconnects by itself after later outages. Every
 * operation is time-limited by `operationTimeoutMs`; an unreachable database gives
 * `AppError("service_unavailable")`. `register` and `createWithReceipt` use transactions, so the
 * deployment must be a replica set or sharded cluster (as Atlas and every production setup is).
 * Rejects only for a malformed connection string. Its repositories are the MongoDB column of
 * `REPOSITORIES` (src/store/repositories.ts), each built on the one connection.
 */
export async function createMongoStore(options: MongoStoreOptions): Promise<Store> {
  const ctx = new MongoContext(options);
  return {
    kind: "mongodb",
    ...buildRepositories(({ mongo }) => new mongo(ctx)),
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
