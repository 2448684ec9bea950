import { type Collection, type Db, type IndexDescription, MongoServerError } from "mongodb";
import { type CollectionDeclaration, RETENTION_INDEX, retentionIndex } from "./collection.js";
import { RECEIPTS } from "./receipts.js";

/**
 * The unique index on `(merchantId, receiptId)` of versions before receiptClaims. While it exists the
 * database was not migrated (docs/scaling.md): some receipts may have no claim, and it still refuses
 * their pairs.
 */
export const LEGACY_RECEIPT_PAIR_INDEX = "uniq_merchantId_receiptId";

/** MongoDB's code for a collection that does not exist (yet). */
const NAMESPACE_NOT_FOUND = 26;

/** An index as `listIndexes` describes it. */
interface ExistingIndex {
  name: string;
  key: Record<string, unknown>;
  unique?: boolean;
  expireAfterSeconds?: number | undefined;
}

/**
 * Creates every collection's indexes (`init`), where an index with the same keys does not already
 * serve. Such an index, under another name, is the one `sh.shardCollection` made for the shard key
 * when the operator sharded first (`panHash_1_id_1`), or one an earlier version made: creating ours
 * beside it would be refused (IndexOptionsConflict), so it stands in for ours. Unless ours is unique
 * and it is not: then a unique rule would not hold, and init fails saying what to do.
 *
 * The retention's TTL indexes follow `retentionDays` (`RECEIPT_RETENTION_DAYS`): made when it is set,
 * given a new lifetime with `collMod` when it changes, dropped when it is unset. Says whether the
 * receipts still have the index of {@link LEGACY_RECEIPT_PAIR_INDEX}.
 */
export async function createDeclaredIndexes(
  db: Db,
  collections: readonly CollectionDeclaration[],
  maxTimeMS: number,
  retentionDays?: number,
): Promise<{ legacyReceipts: boolean }> {
  let legacyReceipts = false;
  for (const declared of collections) {
    // A collection with no index of its own is made by its first write.
    if (declared.indexes.length === 0 && declared.retention === undefined) continue;
    const { name } = declared;
    const collection = db.collection(name);
    const existing = await existingIndexes(collection, maxTimeMS);
    if (name === RECEIPTS.name) {
      legacyReceipts = existing.some((i) => i.name === LEGACY_RECEIPT_PAIR_INDEX);
    }
    const retention = retentionDays === undefined ? undefined : retentionIndex(declared, retentionDays);
    await followRetention(db, name, retention, existing, maxTimeMS);
    const missing = indexesToCreate(
      name,
      [...declared.indexes, ...(retention === undefined ? [] : [retention])],
      existing,
    );
    if (missing.length > 0) await collection.createIndexes(missing, { maxTimeMS });
  }
  return { legacyReceipts };
}

/**
 * Brings an existing retention TTL index of `collection` to `wanted` (undefined: no retention): a new
 * lifetime through `collMod`, which keeps the index, or a drop. A missing one is created with the rest.
 */
async function followRetention(
  db: Db,
  collection: string,
  wanted: IndexDescription | undefined,
  existing: ExistingIndex[],
  maxTimeMS: number,
): Promise<void> {
  const at = existing.findIndex((index) => index.name === RETENTION_INDEX);
  const current = existing[at];
  if (current === undefined) return;
  if (wanted === undefined) {
    await db.collection(collection).dropIndex(RETENTION_INDEX, { maxTimeMS });
    existing.splice(at, 1);
    return;
  }
  if (current.expireAfterSeconds === wanted.expireAfterSeconds) return;
  const index = { name: RETENTION_INDEX, expireAfterSeconds: wanted.expireAfterSeconds };
  await db.command({ collMod: collection, index, maxTimeMS });
  // Now the same as the wanted one: createIndexes finds it identical.
  current.expireAfterSeconds = wanted.expireAfterSeconds;
}

async function existingIndexes(collection: Collection, maxTimeMS: number): Promise<ExistingIndex[]> {
  try {
    return (await collection.listIndexes({ maxTimeMS }).toArray()) as ExistingIndex[];
  } catch (err) {
    if (err instanceof MongoServerError && err.code === NAMESPACE_NOT_FOUND) return [];
    throw err;
  }
}

/** Whether two index keys are the same fields in the same order and directions. */
function sameKey(a: Record<string, unknown>, b: Record<string, unknown>): boolean {
  return JSON.stringify(Object.entries(a)) === JSON.stringify(Object.entries(b));
}

/** The declared indexes of `collection` that no existing index serves already. */
export function indexesToCreate(
  collection: string,
  declared: readonly IndexDescription[],
  existing: readonly ExistingIndex[],
): IndexDescription[] {
  return declared.filter((index) => {
    const key = index.key as Record<string, unknown>;
    const other = existing.find((e) => e.name !== index.name && sameKey(e.key, key));
    if (other === undefined) return true;
    if (index.unique === true && other.unique !== true) {
      throw new Error(
        `MongoDB index ${collection}.${other.name} has the keys of ${index.name} but is not unique, so its ` +
          `rule would not hold. If the operator sharded ${collection} first, shard it again with ` +
          "unique: true (docs/scaling.md lists the commands); or drop that index and restart.",
      );
    }
    return false;
  });
}
