import type { Logger } from "pino";
import type { Config } from "../config.js";
import { createMemoryStore } from "./memory/index.js";
import { createMongoStore, type MongoStoreOptions, operationTimeoutWithin } from "./mongo/index.js";
import type { Store } from "./types.js";

export { createMemoryStore } from "./memory/index.js";
export { createMongoStore, type MongoStoreOptions } from "./mongo/index.js";

/**
 * Creates the store the configuration asks for: MongoDB (`STORE=mongodb`) or the in-memory default.
 * MongoDB's operations are limited so that a whole call ends within `STORE_TIMEOUT_MS`. `seams` lets
 * tests put a driver fake under the adapter.
 */
export async function createStore(
  config: Pick<Config, "store" | "mongodbUri" | "mongodbDb" | "storeTimeoutMs" | "receiptRetentionDays">,
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
