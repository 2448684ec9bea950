/* The fake's data: collections, unique indexes, and transactions with snapshot reads and rollback. */

import type { Query } from "mingo";
import type { IndexDescription } from "mongodb";
import { type Doc, keyOf, serverError, valueAt } from "./bson.js";
import {
  ClusterPolicyError,
  checkPattern,
  isHashed,
  keyValues,
  type ShardKeyPattern,
  shardOf,
  uniqueIndexAllowed,
} from "./cluster.js";

/** An index as the fake keeps it. Only `unique` (with `partialFilterExpression`) is enforced. */
export interface IndexSpec {
  name: string;
  /** Fields and their order (1, -1), or "hashed". */
  key: Record<string, number | string>;
  unique: boolean;
  partial: Query | undefined;
  description: IndexDescription;
}

/**
 * One collection: committed documents by location (insertion order), indexes, and write locks. A
 * location is the `_id` key, preceded by the shard for a sharded collection: two documents with one
 * `_id` can then live on two shards, as on a cluster whose shard key is not `_id`.
 */
export class CollectionData {
  readonly docs = new Map<string, Doc>();
  /** Set once the collection is sharded (`shardCollection`). */
  shardKey: ShardKeyPattern | undefined;
  /** Whether the collection exists: a write, an index or `shardCollection` creates it. */
  created = false;
  readonly indexes: IndexSpec[] = [
    {
      name: "_id_",
      key: { _id: 1 },
      unique: true,
      partial: undefined,
      description: { key: { _id: 1 }, name: "_id_" },
    },
  ];
  /** `_id` keys with an uncommitted write, and the transaction that holds each. */
  readonly locks = new Map<string, Transaction>();
  /** Unique index keys written by an uncommitted transaction. */
  readonly uniqueLocks = new Map<string, Transaction>();
}

/** Thrown inside an operation when it must wait for another transaction; the operation runs again. */
export class LockBusy extends Error {}

/** The error a transaction gets when it writes what another one wrote since its snapshot. */
export function writeConflict(): Error {
  return serverError(112, "WriteConflict", "Write conflict during plan execution (fake MongoDB).", {
    errorLabels: ["TransientTransactionError"],
  });
}

/**
 * A multi-document transaction: reads see the database as of its first operation (a snapshot) plus
 * its own writes; writes are buffered and take document locks at once, so a second writer of the same
 * document (or of the same unique key) fails with a WriteConflict, as MongoDB's first-writer-wins.
 */
export class Transaction {
  /** Per collection, the committed documents at the snapshot; taken at the first operation. */
  snapshot: Map<string, Map<string, Doc>> | undefined;
  readonly writes = new Map<string, Map<string, Doc | null>>();
  readonly held: Array<{ data: CollectionData; key: string; unique: boolean }> = [];
  /** Cluster mode: the declaration its operations name, and what they touched (see `TransactionRecord`). */
  declared: string | undefined;
  readonly targets = new Set<string>();
  readonly shards = new Set<number>();
}

/** The shard of a location (see {@link CollectionData}); undefined for an unsharded collection's. */
export function shardPart(location: string): string | undefined {
  // `#` never starts a JSON text, so an unsharded location (a bare `_id` key) never looks like one.
  return location.startsWith("#") ? location.slice(0, location.indexOf("|")) : undefined;
}

/** One database of the fake server. `shards` is 1 outside cluster mode. */
export class Database {
  readonly collections = new Map<string, CollectionData>();

  constructor(readonly shards = 1) {}

  /** Where `doc` lives in collection `name`: its `_id` key, after its shard when the collection is sharded. */
  locate(name: string, doc: Doc): string {
    const key = this.collection(name).shardKey;
    const id = keyOf(doc._id);
    return key === undefined ? id : `#${shardOf(keyValues(key, doc), this.shards)}|${id}`;
  }

  /** The shard a document of `name` lives on; unsharded collections live on the primary shard, 0. */
  shardOfDoc(name: string, doc: Doc): number {
    const key = this.collection(name).shardKey;
    return key === undefined ? 0 : shardOf(keyValues(key, doc), this.shards);
  }

  /**
   * `shardCollection` as MongoDB does it: refused when a unique index (other than `_id`) does not start
   * with a ranged key, when `unique` is asked of a hashed key, or when no index supports the key on a
   * collection with documents; on an empty one, it creates the key's index (default name, unique when
   * asked). Then the documents move to their shards. Sharding again with the same key is a no-op.
   */
  shardCollection(name: string, key: ShardKeyPattern, unique: boolean): void {
    checkPattern(key);
    const data = this.collection(name);
    const pattern = JSON.stringify(key);
    if (data.shardKey !== undefined) {
      if (keyOf(data.shardKey) === keyOf(key)) return;
      throw serverError(
        20,
        "AlreadyInitialized",
        `${name} is already sharded by ${JSON.stringify(data.shardKey)}.`,
      );
    }
    if (unique && isHashed(key)) throw serverError(2, "BadValue", "A hashed shard key cannot be unique.");
    for (const index of data.indexes) {
      if (!index.unique || index.name === "_id_" || uniqueIndexAllowed(index.key, key)) continue;
      throw serverError(
        72,
        "InvalidOptions",
        `can't shard collection ${name} with unique index ${index.name} ${JSON.stringify(index.key)} and proposed shard key ${pattern}: uniqueness can't be maintained unless the shard key is a prefix`,
      );
    }
    const supporting = data.indexes.find((index) =>
      Object.entries(key).every(
        ([field, kind], i) => Object.entries(index.key)[i]?.join() === [field, kind].join(),
      ),
    );
    if (supporting === undefined) {
      if (data.docs.size > 0) {
        throw serverError(
          72,
          "InvalidOptions",
          `Please create an index that starts with the shard key ${pattern} before sharding ${name}.`,
        );
      }
      const indexName = Object.entries(key)
        .map(([field, kind]) => `${field}_${kind}`)
        .join("_");
      const description = { key, name: indexName, ...(unique ? { unique: true } : {}) };
      data.indexes.push({ name: indexName, key, unique, partial: undefined, description });
    } else if (unique && !(supporting.unique && keyOf(supporting.key) === keyOf(key))) {
      throw serverError(
        72,
        "InvalidOptions",
        `The index supporting ${pattern} on ${name} is not unique on the shard key alone.`,
      );
    }
    if (data.locks.size > 0 || data.uniqueLocks.size > 0) {
      throw new ClusterPolicyError(
        "fake MongoDB: shardCollection while a transaction writes to the collection",
      );
    }
    data.shardKey = key;
    data.created = true;
    const docs = [...data.docs.values()];
    data.docs.clear();
    for (const doc of docs) data.docs.set(this.locate(name, doc), doc);
  }

  collection(name: string): CollectionData {
    let data = this.collections.get(name);
    if (data === undefined) {
      data = new CollectionData();
      this.collections.set(name, data);
    }
    return data;
  }

  /** The documents of `name` as `txn` (or, without one, a plain read of committed data) sees them. */
  view(name: string, txn: Transaction | undefined): Map<string, Doc> {
    const committed = this.collection(name).docs;
    if (txn === undefined) return committed;
    txn.snapshot ??= new Map([...this.collections].map(([n, d]) => [n, new Map(d.docs)]));
    const seen = new Map(txn.snapshot.get(name) ?? []);
    for (const [key, doc] of txn.writes.get(name) ?? []) {
      if (doc === null) seen.delete(key);
      else seen.set(key, doc);
    }
    return seen;
  }

  /**
   * Writes `after` (null deletes) at location `id` (see {@link CollectionData}), after the checks MongoDB makes: unique indexes
   * (code 11000), and, inside a transaction, conflicts with other writers. Throws before changing
   * anything, so a failed write leaves no trace.
   */
  write(name: string, txn: Transaction | undefined, id: string, after: Doc | null): void {
    const data = this.collection(name);
    const view = this.view(name, txn);
    const holder = data.locks.get(id);
    if (holder !== undefined && holder !== txn) {
      if (txn === undefined) throw new LockBusy();
      throw writeConflict();
    }
    if (txn !== undefined && data.docs.get(id) !== txn.snapshot?.get(name)?.get(id)) throw writeConflict();
    const uniqueKeys = after === null ? [] : this.checkUnique(data, view, id, after, txn);
    if (after !== null) data.created = true;

    if (txn === undefined) {
      if (after === null) data.docs.delete(id);
      else data.docs.set(id, after);
      return;
    }
    let writes = txn.writes.get(name);
    if (writes === undefined) {
      writes = new Map();
      txn.writes.set(name, writes);
    }
    writes.set(id, after);
    if (holder === undefined) {
      data.locks.set(id, txn);
      txn.held.push({ data, key: id, unique: false });
    }
    for (const key of uniqueKeys) {
      if (data.uniqueLocks.get(key) === txn) continue;
      data.uniqueLocks.set(key, txn);
      txn.held.push({ data, key, unique: true });
    }
  }

  /** The unique index keys of `doc`, after checking that no other document holds one of them. */
  private checkUnique(
    data: CollectionData,
    view: Map<string, Doc>,
    id: string,
    doc: Doc,
    txn: Transaction | undefined,
  ): string[] {
    const keys: string[] = [];
    for (const index of data.indexes) {
      if (!index.unique || index.name === "_id_") continue;
      const entry = indexKey(index, doc);
      if (entry === undefined) continue;
      // A shard checks only its own documents: a unique index is per shard on a cluster.
      const shard = shardPart(id);
      const key = shard === undefined ? entry : `${shard}|${entry}`;
      for (const [otherId, other] of view) {
        if (otherId !== id && shardPart(otherId) === shard && indexKey(index, other) === entry) {
          throw duplicateKey(index, doc);
        }
      }
      const holder = data.uniqueLocks.get(key);
      if (holder !== undefined && holder !== txn) {
        if (txn === undefined) throw new LockBusy();
        throw writeConflict();
      }
      if (txn !== undefined) {
        // Committed after this transaction's snapshot: MongoDB reports a conflict, and a retry sees it.
        for (const [otherId, other] of data.docs) {
          if (otherId === id || view.has(otherId) || shardPart(otherId) !== shard) continue;
          if (indexKey(index, other) === entry) throw writeConflict();
        }
      }
      keys.push(key);
    }
    return keys;
  }

  /** Makes a transaction's writes visible, all at once, and releases its locks. */
  commit(txn: Transaction): void {
    for (const [name, writes] of txn.writes) {
      const docs = this.collection(name).docs;
      for (const [id, doc] of writes) {
        if (doc === null) docs.delete(id);
        else docs.set(id, doc);
      }
    }
    this.release(txn);
  }

  /** Drops a transaction's writes and releases its locks. */
  release(txn: Transaction): void {
    for (const { data, key, unique } of txn.held) {
      const map = unique ? data.uniqueLocks : data.locks;
      if (map.get(key) === txn) map.delete(key);
    }
    txn.held.length = 0;
    txn.writes.clear();
  }
}

/** The entry of `doc` in a unique index, or undefined when a partial index leaves it out. */
export function indexKey(index: IndexSpec, doc: Doc): string | undefined {
  if (index.partial !== undefined && !index.partial.test(doc)) return undefined;
  return `${index.name}:${keyOf(Object.keys(index.key).map((path) => valueAt(doc, path) ?? null))}`;
}

/** The duplicate-key error of MongoDB, code 11000, naming the index and the key. */
export function duplicateKey(index: IndexSpec, doc: Doc): Error {
  const keyValue = Object.fromEntries(
    Object.keys(index.key).map((path) => [path, valueAt(doc, path) ?? null]),
  );
  return serverError(11000, "DuplicateKey", `E11000 duplicate key error index: ${index.name}`, {
    keyPattern: index.key,
    keyValue,
  });
}
