/* The fake's sharded cluster: shard keys, where a document lives, and how an operation is routed. */
import { createHash } from "node:crypto";
import { ObjectId } from "mongodb";
import { type Doc, keyOf, serverError, valueAt } from "./bson.js";

/** A shard key as `shardCollection` takes it: ranged fields (`1`), or one hashed field. */
export type ShardKeyPattern = Record<string, 1 | "hashed">;

/**
 * What the code under test declares about its cluster use, read by the fake in cluster mode: the
 * queries allowed to reach every shard, and each transaction's most shards. An operation names its
 * declaration in the driver's `comment` option (`{ scatterGather: id }` or `{ transaction: id }`), which
 * a real server also shows in its logs and `currentOp`.
 */
export interface ClusterDeclarations {
  scatterGather: Readonly<Record<string, { collection: string; reason: string }>>;
  transactions: Readonly<Record<string, { maxShards: number }>>;
}

/** Options of the cluster mode of {@link FakeMongo}. */
export interface ClusterOptions {
  /** Number of shards documents are spread over; default 4. */
  shards?: number;
  declarations: ClusterDeclarations;
}

/** A committed transaction, for tests and for the figures in docs/scaling.md. */
export interface TransactionRecord {
  name: string;
  /**
   * Distinct shard key values (or key prefixes) it read or wrote, plus one for the unsharded
   * collections (the primary shard): the most shards it can touch however chunks are spread. This is
   * what is checked against the declared maximum.
   */
  targets: number;
  /** Shards it touched in this fake's placement (at most `targets`). */
  shards: number;
}

/** A check of the cluster mode failed: the code under test did something a cluster would refuse or broadcast. */
export class ClusterPolicyError extends Error {
  override name = "ClusterPolicyError";
}

/** How an operation reaches the shards. */
export type Route =
  /** Every shard. */
  | { kind: "all" }
  /**
   * The chunks of these shard key prefixes (each an array of values of the key's first fields); `full`
   * when every prefix is the whole key, i.e. exactly one chunk each.
   */
  | { kind: "targeted"; prefixes: unknown[][]; full: boolean };

/** What an operation is, for the rules a cluster applies to it. */
export type OperationKind =
  /** find, count, aggregate: any route, but a broadcast must be declared. */
  | "read"
  /** updateMany, deleteMany: as reads. */
  | "multiWrite"
  /** updateOne, replaceOne, deleteOne: the whole shard key, or a declared broadcast on `_id`. */
  | "singleWrite"
  /** findOneAndUpdate: the whole shard key. */
  | "findAndModify";

/** The shard (0-based) a document with these shard key values lives on. */
export function shardOf(values: unknown[], shards: number): number {
  return createHash("sha256").update(keyOf(values)).digest().readUInt32BE(0) % shards;
}

/** The values of the shard key's fields in `doc` (a missing field is null, as MongoDB treats it). */
export function keyValues(key: ShardKeyPattern, doc: Doc): unknown[] {
  return Object.keys(key).map((field) => valueAt(doc, field) ?? null);
}

/** Whether the pattern is a hashed key (one hashed field). */
export function isHashed(key: ShardKeyPattern): boolean {
  return Object.values(key).includes("hashed");
}

/** Checks a pattern the fake can model: ranged fields, or exactly one hashed field. */
export function checkPattern(key: ShardKeyPattern): void {
  const fields = Object.keys(key);
  if (fields.length === 0) throw serverError(2, "BadValue", "The shard key pattern is empty.");
  if (isHashed(key) && fields.length > 1) {
    throw new ClusterPolicyError("fake MongoDB models hashed shard keys of one field only");
  }
  for (const value of Object.values(key)) {
    if (value !== 1 && value !== "hashed") {
      throw serverError(2, "BadValue", `Unsupported shard key value ${String(value)}.`);
    }
  }
}

/**
 * Whether a unique index with key `index` can be enforced across shards under `shardKey`: only when
 * every document with one index value lives in one chunk, i.e. the index starts with every field of a
 * ranged shard key. A hashed shard key backs no unique index (MongoDB's `unique: true` is refused
 * with a hashed key). `_id` is the exception the caller handles: its index exists on every collection.
 */
export function uniqueIndexAllowed(index: Record<string, unknown>, shardKey: ShardKeyPattern): boolean {
  if (isHashed(shardKey)) return false;
  const indexFields = Object.keys(index);
  return Object.keys(shardKey).every((field, i) => indexFields[i] === field);
}

/** The candidate values per field that a filter pins by equality (`{f: v}`, `$eq`, `$in`, `$and`). */
function equalities(
  filter: Record<string, unknown>,
  out = new Map<string, unknown[]>(),
): Map<string, unknown[]> {
  for (const [field, condition] of Object.entries(filter)) {
    if (field === "$and" && Array.isArray(condition)) {
      for (const part of condition) equalities(part as Record<string, unknown>, out);
      continue;
    }
    if (field.startsWith("$")) continue;
    const values = pinned(condition);
    if (values !== undefined && !out.has(field)) out.set(field, values);
  }
  return out;
}

/** The values a field's condition allows, when it allows only listed values; else undefined. */
function pinned(condition: unknown): unknown[] | undefined {
  if (condition instanceof RegExp) return undefined;
  if (!isOperatorObject(condition)) return [condition];
  const operators = condition as Record<string, unknown>;
  if ("$eq" in operators) return [operators.$eq];
  if (Array.isArray(operators.$in)) return operators.$in;
  return undefined;
}

/** An object of `$` operators (`{$gt: 1}`), as opposed to a value (a Date, an ObjectId, an embedded document). */
export function isOperatorObject(value: unknown): boolean {
  if (typeof value !== "object" || value === null || value instanceof Date || value instanceof ObjectId) {
    return false;
  }
  const keys = Object.keys(value);
  return keys.length > 0 && keys.every((key) => key.startsWith("$"));
}

/** How a filter on a collection sharded by `key` is routed, as mongos routes it. */
export function route(key: ShardKeyPattern, filter: Record<string, unknown>): Route {
  const pins = equalities(filter);
  const fields = Object.keys(key);
  const prefix: unknown[][] = [];
  for (const field of fields) {
    const values = pins.get(field);
    if (values === undefined) break;
    prefix.push(values);
  }
  // A hashed key has no order: only its whole value targets a chunk.
  if (prefix.length === 0 || (isHashed(key) && prefix.length < fields.length)) return { kind: "all" };
  let prefixes: unknown[][] = [[]];
  for (const values of prefix) prefixes = prefixes.flatMap((p) => values.map((v) => [...p, v]));
  return { kind: "targeted", prefixes, full: prefix.length === fields.length };
}

/** The declaration an operation names in its `comment` option, if any. */
export function declarationOf(
  options: { comment?: unknown } | undefined,
  kind: "scatterGather" | "transaction",
) {
  const comment = options?.comment;
  if (typeof comment !== "object" || comment === null) return undefined;
  const name = (comment as Record<string, unknown>)[kind];
  return typeof name === "string" ? name : undefined;
}

/**
 * Applies the cluster's routing rules to one operation on a sharded collection and returns its route.
 * Refusals a real cluster makes are `MongoServerError`s with its codes; broadcasts that the code did
 * not declare (which a cluster would run, slowly, on every shard) are {@link ClusterPolicyError}s.
 */
export function checkRoute(
  declarations: ClusterDeclarations,
  collection: string,
  key: ShardKeyPattern,
  kind: OperationKind,
  filter: Record<string, unknown>,
  options: { upsert?: boolean; comment?: unknown } | undefined,
): Route {
  const found = route(key, filter);
  const full = found.kind === "targeted" && found.full && found.prefixes.length === 1;
  const pattern = JSON.stringify(key);
  if (options?.upsert === true && !full) {
    throw serverError(
      61,
      "ShardKeyNotFound",
      `An upsert on a sharded collection must contain the shard key ${pattern} (${collection}).`,
    );
  }
  if (kind === "findAndModify" && !full) {
    throw serverError(
      61,
      "ShardKeyNotFound",
      `Query for sharded findAndModify must contain the shard key ${pattern} (${collection}).`,
    );
  }
  if (kind === "singleWrite" && !full) {
    // With `_id` equality a cluster sends the write to every shard; without it, it refuses.
    if (!equalities(filter).has("_id")) {
      throw serverError(
        72,
        "InvalidOptions",
        `A single update or delete on a sharded collection must contain an exact match on _id or the shard key ${pattern} (${collection}).`,
      );
    }
    return requireDeclared(declarations, collection, options, { kind: "all" }, filter);
  }
  if (found.kind === "all") return requireDeclared(declarations, collection, options, found, filter);
  return found;
}

function requireDeclared(
  declarations: ClusterDeclarations,
  collection: string,
  options: { comment?: unknown } | undefined,
  found: Route,
  filter: Record<string, unknown>,
): Route {
  const name = declarationOf(options, "scatterGather");
  const declared = name === undefined ? undefined : declarations.scatterGather[name];
  if (declared === undefined || declared.collection !== collection || declared.reason.trim() === "") {
    throw new ClusterPolicyError(
      `fake MongoDB (sharded): an undeclared scatter-gather on ${collection} (filter on ${Object.keys(filter).join(", ") || "nothing"}${name === undefined ? "" : `, declaration "${name}"`}): name the shard key or declare it`,
    );
  }
  return found;
}

/** The cluster as a collection's operations see it (see `FakeCollection`). */
export interface ClusterView {
  options: Required<ClusterOptions>;
  /** The collection's shard key; undefined while it is unsharded (on the primary shard). */
  shardKey: ShardKeyPattern | undefined;
  /** The shard a document of the collection lives on. */
  shardOfDoc(doc: Doc): number;
}

/**
 * The cluster's rules for the operations of one collection, and the count of what each transaction
 * touches. Every method is a no-op on what the rule does not concern.
 */
export class CollectionRouter {
  constructor(
    private readonly cluster: ClusterView,
    private readonly collection: string,
  ) {}

  /** Checks an operation's route (see {@link checkRoute}) and counts its targets in `txn`. */
  operation(
    txn: TransactionTargets | undefined,
    kind: OperationKind,
    filter: Record<string, unknown>,
    options: { upsert?: boolean; comment?: unknown } | undefined,
  ): void {
    this.join(txn, options);
    const key = this.cluster.shardKey;
    if (key === undefined) {
      this.target(txn, "primary", 0);
      return;
    }
    const found = checkRoute(this.cluster.options.declarations, this.collection, key, kind, filter, options);
    const shards = this.cluster.options.shards;
    if (found.kind === "all") {
      for (let shard = 0; shard < shards; shard++) this.target(txn, `${this.collection}:*${shard}`, shard);
      return;
    }
    for (const prefix of found.prefixes) {
      this.target(
        txn,
        `${this.collection}:${keyOf(prefix)}`,
        found.full ? shardOf(prefix, shards) : undefined,
      );
    }
  }

  /** Refuses a document without every shard key field (see the header of `server.ts`). */
  inserting(txn: TransactionTargets | undefined, doc: Doc, options: { comment?: unknown } | undefined): void {
    this.join(txn, options);
    const key = this.cluster.shardKey;
    if (key === undefined) return;
    const missing = Object.keys(key).filter((field) => valueAt(doc, field) === undefined);
    if (missing.length > 0) {
      throw new ClusterPolicyError(
        `fake MongoDB (sharded): a document of ${this.collection} without its shard key field ${missing.join(", ")}`,
      );
    }
  }

  /** Refuses an update that changes a document's shard key (its chunk). */
  updating(before: Doc, after: Doc): void {
    const key = this.cluster.shardKey;
    if (key === undefined || keyOf(keyValues(key, before)) === keyOf(keyValues(key, after))) return;
    throw serverError(
      66,
      "ImmutableField",
      `After applying the update, the shard key ${JSON.stringify(key)} of ${this.collection} was found to have been altered.`,
    );
  }

  /** Counts a document read or written by `txn`: its own chunk, and its shard. */
  touched(txn: TransactionTargets | undefined, doc: Doc, written: boolean): void {
    if (txn === undefined) return;
    const key = this.cluster.shardKey;
    const shard = this.cluster.shardOfDoc(doc);
    if (key === undefined) this.target(txn, "primary", shard);
    else if (written) this.target(txn, `${this.collection}:${keyOf(keyValues(key, doc))}`, shard);
    else txn.shards.add(shard);
  }

  /** Every operation in a transaction names one declared transaction. */
  private join(txn: TransactionTargets | undefined, options: { comment?: unknown } | undefined): void {
    if (txn === undefined) return;
    const name = declarationOf(options, "transaction");
    if (name === undefined || this.cluster.options.declarations.transactions[name] === undefined) {
      throw new ClusterPolicyError(
        `fake MongoDB (sharded): an operation on ${this.collection} in a transaction that names no declared transaction${name === undefined ? "" : ` ("${name}")`}`,
      );
    }
    if (txn.declared !== undefined && txn.declared !== name) {
      throw new ClusterPolicyError(
        `fake MongoDB (sharded): transaction "${txn.declared}" has an operation on ${this.collection} naming "${name}"`,
      );
    }
    txn.declared = name;
  }

  private target(txn: TransactionTargets | undefined, target: string, shard: number | undefined): void {
    if (txn === undefined || txn.declared === undefined) return;
    txn.targets.add(target);
    if (shard !== undefined) txn.shards.add(shard);
    const max = this.cluster.options.declarations.transactions[txn.declared]?.maxShards ?? 0;
    if (txn.targets.size > max) {
      throw new ClusterPolicyError(
        `fake MongoDB (sharded): transaction "${txn.declared}" reaches ${txn.targets.size} shards (${[...txn.targets].join("; ")}), declared at most ${max}`,
      );
    }
  }
}

/** What a transaction records of its cluster use (a `Transaction` of `storage.ts`). */
export interface TransactionTargets {
  declared: string | undefined;
  readonly targets: Set<string>;
  readonly shards: Set<number>;
}
