import type { Logger } from "pino";
import { createMemoryStore } from "./memory/index.js";
import { createMongoStore, type MongoStoreOptions, operationTimeoutWithin } from "./mongo/index.js";
import type { Store } from "./types.js";

export { createMemoryStore } from "./memory/index.js";
export { createMongoStore, type MongoStoreOptions } from "./mongo/index.js";

/** What the store needs of the configuration (src/config.ts reads it from the environment). */
export interface StoreSettings {
  store: "memory" | "mongodb";
  mongodbUri: string | undefined;
  mongodbDb: string;
  /**
   * Time limit of one store call in milliseconds (`STORE_TIMEOUT_MS`, default 5000): a slower call
   * answers `service_unavailable` rather than hold its request open (see `withTimeLimit`).
   */
  storeTimeoutMs: number;
  /**
   * How long a delivered receipt is kept, in days after it was made (`RECEIPT_RETENTION_DAYS`); unset
   * keeps receipts until their user is erased. At least `escrowRetentionDays`. MongoDB deletes them
   * (and their claims) with a TTL index, about a minute late; nothing hides them before.
   */
  receiptRetentionDays: number | undefined;
}

/**
 * Creates the store the configuration asks for: MongoDB (`STORE=mongodb`) or the in-memory default.
 * MongoDB's operations are limited so that a whole call ends within `STORE_TIMEOUT_MS`. `seams` lets
 * tests put a driver fake under the adapter.
 */
export async function createStore(
  config: StoreSettings,
  logger: Logger,
  seams: Pick<MongoStoreOptions, "createClient"> = {},
): Promise<Store> {
  if (config.store === "memory") return createMemoryStore();
  if (config.mongodbUri === undefined) throw new Error("STORE=mongodb needs MONGODB_URI.");
  return createMongoStore({
    uri: config.mongodbUri,
    dbName: config.mongodbDb,
    operationTimeoutMs: operationTimeoutWithin(config.storeTimeoutMs),
    receiptRetentionDays: config.receiptRetentionDays,
    logger,
    ...seams,
  });
}
