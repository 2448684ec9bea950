import type { IndexDescription } from "mongodb";
import { type CollectionDeclaration, retentionIndex, type ShardKeyDeclaration } from "./collection.js";
import { type CollectionName, MONGO_COLLECTIONS } from "./index.js";

/**
 * The store's collections seen as tables, for the tests and tools that read them by name. Each table is
 * made from the declarations (`MONGO_COLLECTIONS`: each collection declared beside its repository), so
 * none is written by hand here.
 */

export { RETENTION_INDEX } from "./collection.js";
export type { CollectionName, ShardKeyDeclaration };

/** The store's collection names, by name. */
export const COLLECTIONS = Object.fromEntries(MONGO_COLLECTIONS.map(({ name }) => [name, name])) as {
  readonly [Name in CollectionName]: Name;
};

/** Every declared index, by collection (collections that declare none are left out, as `init` leaves them). */
export const INDEXES: Record<string, IndexDescription[]> = Object.fromEntries(
  MONGO_COLLECTIONS.filter(({ indexes }) => indexes.length > 0).map(({ name, indexes }) => [
    name,
    [...indexes],
  ]),
);

/** Every collection's place on a sharded cluster (docs/scaling.md), by collection. */
export const SHARD_KEYS = Object.fromEntries(
  MONGO_COLLECTIONS.map(({ name, shardKey }) => [name, shardKey]),
) as Record<CollectionName, ShardKeyDeclaration>;

/** The TTL indexes of a receipt retention of `days` (`RECEIPT_RETENTION_DAYS`), by collection. */
export function retentionIndexes(days: number): Record<string, IndexDescription[]> {
  const found: Record<string, IndexDescription[]> = {};
  for (const declared of MONGO_COLLECTIONS as readonly CollectionDeclaration[]) {
    const index = retentionIndex(declared, days);
    if (index !== undefined) found[declared.name] = [index];
  }
  return found;
}
