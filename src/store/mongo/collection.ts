import type { Document, IndexDescription } from "mongodb";

/** How one collection is placed on a sharded cluster (docs/scaling.md). */
export interface ShardKeyDeclaration {
  /**
   * The key as `sh.shardCollection` takes it (ranged fields, or one hashed field), or `"unsharded"`: the
   * collection stays whole on the database's primary shard.
   */
  key: Readonly<Record<string, 1 | "hashed">> | "unsharded";
  /** `sh.shardCollection`'s `unique`: the key itself carries one of the collection's unique rules. */
  unique?: true;
  /**
   * Why this key: what the hot queries name, which unique rule it carries, or why the collection stays
   * whole. docs/scaling.md prints it (`UPDATE_SCALING=1 npx vitest run test/docs/scaling.test.ts`).
   */
  why: string;
}

/**
 * One MongoDB collection of the store, declared beside the code that reads and writes it: its name, its
 * indexes and its place on a sharded cluster. Unique indexes carry the contract's uniqueness rules (a
 * duplicate write fails with code 11000, which the repositories turn into their "already exists"
 * results); the others serve a repository query, named after it. The rules of a cluster
 * (docs/scaling.md): a unique rule holds there only when its index starts with a ranged shard key, or
 * when `_id` is the shard key, or when it lives in a claims collection keyed by the rule's own fields and
 * written in the same transaction; a hashed key backs no unique rule. Every query on a sharded
 * collection names the key or is a declared scatter-gather (`sharding.ts`).
 *
 * A repository lists the collections it declares in its static `collections`; the store is built from
 * the repositories of `REPOSITORIES` (src/store/repositories.ts) and so knows every collection:
 * `init` creates their indexes, the cluster-mode contract run (test/store/) fails any unique index a
 * key cannot carry and any query or transaction not declared, and docs/scaling.md's shard keys are
 * printed from them.
 */
export interface CollectionDeclaration<Name extends string = string> {
  readonly name: Name;
  /** Its indexes, as `createIndexes` takes them, each named (the name is how `init` finds it again). */
  readonly indexes: readonly IndexDescription[];
  /**
   * The TTL index of `RECEIPT_RETENTION_DAYS`, on the collections a receipt retention deletes from: its
   * key and filter. `init` names it {@link RETENTION_INDEX} and gives it the retention's lifetime.
   */
  readonly retention?: { key: Readonly<Record<string, 1>>; partialFilterExpression?: Document };
  readonly shardKey: ShardKeyDeclaration;
}

/** A collection's declaration, its name kept as a literal type (for `CollectionName`). */
export function declareCollection<const Name extends string>(
  declaration: CollectionDeclaration<Name>,
): CollectionDeclaration<Name> {
  return declaration;
}

/** A TTL index: MongoDB deletes a document once its `expiresAt` has passed (checked about every 60 s). */
export const TTL_INDEX: IndexDescription = {
  key: { expiresAt: 1 },
  name: "ttl_expiresAt",
  expireAfterSeconds: 0,
};

/** The name of the TTL indexes of `RECEIPT_RETENTION_DAYS`, on receipts and on their claims. */
export const RETENTION_INDEX = "ttl_retention";

/**
 * The TTL index of a receipt retention of `days` on `collection` (none when it declares no retention):
 * its documents are deleted `days` after they were made.
 */
export function retentionIndex(
  collection: CollectionDeclaration,
  days: number,
): IndexDescription | undefined {
  const retention = collection.retention;
  if (retention === undefined) return undefined;
  const { key, partialFilterExpression } = retention;
  return {
    key,
    name: RETENTION_INDEX,
    expireAfterSeconds: days * 86_400,
    ...(partialFilterExpression === undefined ? {} : { partialFilterExpression }),
  };
}
