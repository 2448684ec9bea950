import type { Db } from "mongodb";
import { SHARD_KEYS } from "../../src/store/mongo/indexes.js";
import { SCATTER_GATHER, TRANSACTIONS } from "../../src/store/mongo/sharding.js";
import type { ClusterDeclarations } from "./fake-mongo/index.js";

/** The adapter's declarations, as the fake's cluster mode reads them. */
export const DECLARATIONS: ClusterDeclarations = {
  scatterGather: SCATTER_GATHER,
  transactions: TRANSACTIONS,
};

/**
 * Shards every collection as `SHARD_KEYS` declares, as an operator would with the commands of
 * docs/scaling.md (`sh.shardCollection(ns, key, unique)`), through the admin database of a cluster:
 * the fake's, or a real one's.
 */
export async function shardAsDeclared(admin: Db, dbName: string): Promise<void> {
  await admin.command({ enableSharding: dbName, maxTimeMS: 30_000 });
  for (const [name, declared] of Object.entries(SHARD_KEYS)) {
    if (declared.key === "unsharded") continue;
    await admin.command({
      shardCollection: `${dbName}.${name}`,
      key: declared.key,
      ...(declared.unique === true ? { unique: true } : {}),
      maxTimeMS: 30_000,
    });
  }
}
