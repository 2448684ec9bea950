/**
 * A driver-level fake of MongoDB for the store's tests: `MongoClient`, `Db`, `Collection`,
 * `FindCursor` and `ClientSession` as the MongoDB adapter (`src/store/mongo/`) calls them, on the
 * maintained query engine `mingo` for filters and update operators (pipeline updates included). It is
 * put under the real adapter through its connection seam (`MongoStoreOptions.createClient`), so the
 * store contract suite runs against the adapter's own code on every CI run, with no server.
 *
 * What it does as MongoDB does: filters, sorts (BSON type order), projections, update operators and
 * pipelines, upserts (`$setOnInsert`), unique indexes (partial ones too) failing with a real
 * `MongoServerError` code 11000, `findOneAndUpdate` returning the document (driver 7), multi-document
 * transactions with snapshot reads, first-writer-wins WriteConflicts (code 112, labelled
 * TransientTransactionError) and rollback on abort, `ignoreUndefined`, and an outage (`down()`): the
 * driver's own network and server-selection errors until `up()`. Every operation waits a random few
 * milliseconds (seeded, so a run repeats) before it runs atomically, so concurrent calls interleave.
 * It refuses any operation without a server-side time limit (`maxTimeMS`), as the service's store requires.
 * A new collection needs nothing here: collections appear on first use, and unique indexes come from
 * the adapter's own `createIndexes` (its `INDEXES` table) as on a real server.
 *
 * Cluster mode (`cluster: {shards, declarations}`) makes it a sharded cluster seen through mongos:
 * - `shardCollection` (a method, or the admin command) with a ranged or one-field hashed key, refused as
 *   MongoDB refuses it: a unique index that does not start with a ranged key, `unique` with a hashed
 *   key, no supporting index on a collection with documents. On an empty collection it creates the key's
 *   index under the default name (`panHash_1_id_1`), unique when asked, as MongoDB does.
 * - Placement: a document lives on the shard its whole shard key value hashes to, for ranged keys too:
 *   the worst a balancer can do, since any two key values may sit in different chunks. Unsharded
 *   collections live on the primary shard. Uniqueness is per shard, `_id` included, so a unique rule
 *   the key does not carry lets duplicates in, as on a cluster; and `createIndexes` refuses a unique
 *   index a sharded collection cannot enforce (code 67), as MongoDB does.
 * - Routing, as mongos routes (strict: every server version since 4.4 accepts what the fake accepts):
 *   an upsert or a findOneAndUpdate needs equality on the whole shard key (code 61); an updateOne,
 *   replaceOne or deleteOne needs the whole key, or `_id` equality (a broadcast); an update may not
 *   change a document's shard key (code 66). A query that pins no prefix of a ranged key, or not the
 *   hashed field, goes to every shard: allowed only when its `comment` names a declared scatter-gather
 *   of that collection (`{ scatterGather: id }`), else a `ClusterPolicyError`. Stricter than MongoDB on
 *   purpose: a document missing a shard key field is refused (MongoDB would file it under null).
 * - Transactions: every operation in one names a declared transaction (`comment: { transaction: id }`),
 *   and the transaction fails once it reaches more shards than declared, counted as distinct shard key
 *   values (or prefixes) read or written plus one for the primary shard: the worst case whatever the
 *   placement. Committed ones are listed in `transactions`.
 *
 * What it CANNOT prove, and only a run against a real server (MONGODB_URI) can:
 * - transactions under real contention and isolation: the fake runs one operation at a time, locks
 *   whole documents, and does not model the storage engine or retries inside the server;
 * - a real cluster: chunk splits, migrations and the balancer, mongos caching stale routing tables,
 *   two-phase commit across shards, and writes without a shard key (MongoDB 7.1+), which the fake
 *   refuses rather than models;
 * - TTL deletion (indexes with `expireAfterSeconds` are recorded, nothing is ever deleted);
 * - time limits: `maxTimeMS`, socket and server-selection timeouts are checked for presence, never
 *   enforced; a slow server is not simulated (an outage fails fast);
 * - write concern, read concern, read preference, replication, elections and failover;
 * - index semantics beyond unique keys: no query plans, no index use, no collation, no multikey rules;
 * - BSON beyond the types the store uses (no Decimal128, Long; Binary is copied and compared, not
 *   queried), and 16 MB document limits.
 */
import { setTimeout as sleep } from "node:timers/promises";
import {
  type ClientSession,
  type MongoClient,
  type MongoClientOptions,
  MongoNetworkError,
  MongoServerSelectionError,
  MongoTopologyClosedError,
  MongoTransactionError,
  type TransactionOptions,
} from "mongodb";
import { seededRandom, serverError } from "./bson.js";
import type { ClusterOptions, OperationKind, ShardKeyPattern, TransactionRecord } from "./cluster.js";
import { FakeCollection } from "./collection.js";
import { Database, LockBusy, Transaction } from "./storage.js";

/** The options of any operation that the fake reads. */
export interface OperationOptions {
  session?: ClientSession | FakeSession | undefined;
  maxTimeMS?: number | undefined;
  projection?: Record<string, unknown>;
  sort?: Record<string, 1 | -1>;
  limit?: number;
  skip?: number;
  upsert?: boolean;
  returnDocument?: "before" | "after";
  arrayFilters?: Record<string, unknown>[];
  /** Any value; in cluster mode, the declaration the operation names (see above). */
  comment?: unknown;
  [option: string]: unknown;
}

/** Options of {@link FakeMongo}. */
export interface FakeMongoOptions {
  /** Seed of the random latencies; the same seed gives the same interleaving for the same calls. */
  seed?: number;
  /** Largest latency of one operation in milliseconds (uniform from 0). Default 3. */
  maxLatencyMs?: number;
  /** Makes the fake a sharded cluster (a mongos): see the header of this file. Default: a replica set. */
  cluster?: ClusterOptions;
}

/** A find the adapter issued, for checks on query shapes (e.g. that an index serves a sorted page). */
export interface RecordedQuery {
  collection: string;
  filter: Record<string, unknown>;
  sort: Record<string, 1 | -1> | undefined;
  limit: number;
}

/**
 * The filter of an operation the adapter issued (a read, an update, a delete, an aggregation's first
 * `$match`), for checks that an index serves each one.
 */
export interface RecordedFilter {
  collection: string;
  kind: OperationKind;
  filter: Record<string, unknown>;
}

/** The fake server: its databases, its up/down state, and the clients made by its `createClient`. */
export class FakeMongo {
  private readonly databases = new Map<string, Database>();
  private readonly random: () => number;
  private readonly maxLatencyMs: number;
  private available = true;
  private readonly slowness: Array<{ prefix: string; ms: number }> = [];
  /**
   * Called with each operation's name (`insertOne idempotency`) just before it runs, in the same
   * synchronous step: a test's stand-in for another client's write landing at that moment.
   */
  onOperation: ((name: string) => void) | undefined;
  /** The options each client was built with (what the adapter pins: read preference, write concern). */
  readonly clientOptions: MongoClientOptions[] = [];
  /** Every find, in order. */
  readonly queries: RecordedQuery[] = [];
  /** Every filter sent, finds and writes alike, in order. */
  readonly filters: RecordedFilter[] = [];
  /** Every operation that ran, by name (`find receipts`, `command ping`), for tests on what was sent. */
  readonly operations: Array<{
    name: string;
    options: OperationOptions | undefined;
    /** The options of the client that sent it. */
    client: MongoClientOptions | undefined;
  }> = [];

  /** Cluster mode's options (default shard count filled in); undefined for a replica set. */
  readonly cluster: Required<ClusterOptions> | undefined;
  /** Cluster mode: every committed transaction, with what it touched. */
  readonly transactions: TransactionRecord[] = [];

  constructor(options: FakeMongoOptions = {}) {
    this.random = seededRandom(options.seed ?? 1);
    this.maxLatencyMs = options.maxLatencyMs ?? 3;
    if (options.cluster !== undefined) {
      const shards = options.cluster.shards ?? 4;
      if (!Number.isInteger(shards) || shards < 1) throw new RangeError("shards must be a positive integer");
      this.cluster = { shards, declarations: options.cluster.declarations };
    }
  }

  /**
   * The operator's `sh.shardCollection(ns, key, unique)` (also reachable as the admin command). Only in
   * cluster mode: a replica set does not know the command.
   */
  async shardCollection(ns: string, key: ShardKeyPattern, options: { unique?: boolean } = {}): Promise<void> {
    await this.reach();
    if (this.cluster === undefined)
      throw serverError(59, "CommandNotFound", "no such command: 'shardCollection'");
    const dot = ns.indexOf(".");
    if (dot < 1) throw serverError(73, "InvalidNamespace", `Invalid namespace ${ns}.`);
    this.database(ns.slice(0, dot)).shardCollection(ns.slice(dot + 1), key, options.unique === true);
  }

  /** The adapter's `createClient` seam: a client of this fake server. */
  readonly createClient = (_uri: string, options: MongoClientOptions): MongoClient => {
    this.clientOptions.push(options);
    return new FakeClient(this, options) as unknown as MongoClient;
  };

  /** Makes every later operation and connection attempt fail as with an unreachable server. */
  down(): void {
    this.available = false;
  }

  up(): void {
    this.available = true;
  }

  /** Makes the operations whose name starts with `prefix` (`createIndexes`, `find receipts`) take `ms` longer. */
  slow(prefix: string, ms: number): void {
    this.slowness.push({ prefix, ms });
  }

  database(name: string): Database {
    let db = this.databases.get(name);
    if (db === undefined) {
      db = new Database(this.cluster?.shards);
      this.databases.set(name, db);
    }
    return db;
  }

  /** Waits the operation's latency, then fails if the server is down. */
  async reach(): Promise<void> {
    await sleep(this.random() * this.maxLatencyMs);
    if (!this.available) throw new MongoNetworkError("connect ECONNREFUSED (fake MongoDB is down)");
  }

  /**
   * Runs one operation: checks its time limit, waits its latency, then runs `work` in one synchronous
   * step (a single-document write is atomic on MongoDB too). Outside a transaction, a write that
   * meets another transaction's uncommitted write waits for it, as MongoDB makes it wait.
   */
  async run<T>(
    name: string,
    options: OperationOptions | undefined,
    work: (txn?: Transaction) => T,
    db?: Database,
    client?: MongoClientOptions,
  ): Promise<T> {
    const maxTimeMS = options?.maxTimeMS;
    if (typeof maxTimeMS !== "number" || !Number.isInteger(maxTimeMS) || maxTimeMS < 1) {
      throw new Error(`fake MongoDB: ${name} sent without a server-side time limit (maxTimeMS)`);
    }
    this.operations.push({ name, options, client });
    await this.reach();
    for (const { prefix, ms } of this.slowness) if (name.startsWith(prefix)) await sleep(ms);
    const session = options?.session as FakeSession | undefined;
    const txn = session?.transactionIn(db);
    for (let waited = 0; ; waited++) {
      try {
        this.onOperation?.(name);
        return work(txn);
      } catch (err) {
        if (!(err instanceof LockBusy)) throw err;
        if (waited >= maxTimeMS) throw serverError(50, "MaxTimeMSExpired", "operation exceeded time limit");
        await sleep(1);
      }
    }
  }
}

/** A driver `MongoClient` of the fake server. */
class FakeClient {
  private closed = false;
  readonly options: MongoClientOptions;

  constructor(
    private readonly server: FakeMongo,
    options: MongoClientOptions,
  ) {
    this.options = options;
  }

  async connect(): Promise<this> {
    try {
      await this.server.reach();
    } catch (err) {
      throw new MongoServerSelectionError("Server selection timed out (fake MongoDB is down)", {
        error: err,
      } as never);
    }
    this.closed = false;
    return this;
  }

  db(name: string): FakeDb {
    return new FakeDb(this.server, name, this.options, () => this.closed);
  }

  startSession(): FakeSession {
    return new FakeSession(this.server);
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}

/** A driver `Db` of the fake server. */
class FakeDb {
  private readonly collections = new Map<string, FakeCollection>();

  constructor(
    private readonly server: FakeMongo,
    readonly databaseName: string,
    private readonly client: MongoClientOptions,
    private readonly isClosed: () => boolean,
  ) {}

  collection(name: string): FakeCollection {
    let collection = this.collections.get(name);
    if (collection === undefined) {
      collection = new FakeCollection(this.server, this.databaseName, name, this.client);
      this.collections.set(name, collection);
    }
    return collection;
  }

  private collMod(command: Record<string, unknown>, options: OperationOptions): Promise<{ ok: 1 }> {
    const db = this.server.database(this.databaseName);
    return this.server.run(
      `command collMod`,
      options,
      () => changeIndex(db, command),
      undefined,
      this.client,
    );
  }

  /**
   * `ping`, `collMod` (a TTL index's lifetime), and on a cluster's `admin` database `enableSharding`
   * and `shardCollection`. The time limit
   * may be in the command (`maxTimeMS`) or in the options.
   */
  async command(command: Record<string, unknown>, options?: OperationOptions): Promise<{ ok: 1 }> {
    if (this.isClosed()) throw new MongoTopologyClosedError();
    const maxTimeMS = (command.maxTimeMS as number | undefined) ?? options?.maxTimeMS;
    const name = Object.keys(command)[0] ?? "";
    const admin = this.databaseName === "admin" && this.server.cluster !== undefined;
    if (name === "collMod") return this.collMod(command, { ...options, maxTimeMS });
    if (admin && name === "shardCollection") {
      await this.server.shardCollection(String(command.shardCollection), command.key as ShardKeyPattern, {
        unique: command.unique === true,
      });
      return { ok: 1 };
    }
    const work = () => {
      if (name !== "ping" && !(admin && name === "enableSharding")) {
        throw serverError(59, "CommandNotFound", `no such command: '${name}'`);
      }
      return { ok: 1 as const };
    };
    return this.server.run(`command ${name}`, { ...options, maxTimeMS }, work, undefined, this.client);
  }
}

/** `collMod`'s change of a TTL index's lifetime: `{collMod: collection, index: {name, expireAfterSeconds}}`. */
function changeIndex(db: Database, command: Record<string, unknown>): { ok: 1 } {
  const change = command.index as { name?: unknown; expireAfterSeconds?: unknown } | undefined;
  const data = db.collection(String(command.collMod));
  const index = data.indexes.find((i) => i.name === change?.name);
  if (index === undefined || typeof change?.expireAfterSeconds !== "number") {
    throw serverError(27, "IndexNotFound", `cannot find index ${String(change?.name)} for collMod`);
  }
  if (index.description.expireAfterSeconds === undefined) {
    throw serverError(72, "InvalidOptions", "no expireAfterSeconds field to update");
  }
  index.description = { ...index.description, expireAfterSeconds: change.expireAfterSeconds };
  return { ok: 1 };
}

/** A driver `ClientSession`: at most one transaction at a time, over one database. */
export class FakeSession {
  private txn: Transaction | undefined;
  private db: Database | undefined;
  private ended = false;

  constructor(private readonly server: FakeMongo) {}

  inTransaction(): boolean {
    return this.txn !== undefined;
  }

  /**
   * The transaction an operation of this session on `db` joins (none outside `startTransaction`); the
   * fake keeps a transaction to the database of its first operation.
   */
  transactionIn(db: Database | undefined): Transaction | undefined {
    if (this.txn === undefined || db === undefined) return this.txn;
    if (this.db !== undefined && this.db !== db)
      throw new Error("fake MongoDB: one database per transaction");
    this.db = db;
    return this.txn;
  }

  startTransaction(options?: TransactionOptions): void {
    if (this.ended) throw new MongoTransactionError("Cannot use a session that has ended");
    if (this.txn !== undefined) throw new MongoTransactionError("Transaction already in progress");
    if (options?.maxCommitTimeMS === undefined) {
      throw new Error("fake MongoDB: a transaction started without a commit time limit (maxCommitTimeMS)");
    }
    this.txn = new Transaction();
    this.db = undefined;
  }

  async commitTransaction(): Promise<void> {
    const txn = this.txn;
    if (txn === undefined) throw new MongoTransactionError("No transaction started");
    try {
      await this.server.reach();
    } catch (err) {
      this.abortNow();
      throw err;
    }
    this.db?.commit(txn);
    if (txn.declared !== undefined) {
      this.server.transactions.push({
        name: txn.declared,
        targets: txn.targets.size,
        shards: txn.shards.size,
      });
    }
    this.txn = undefined;
  }

  async abortTransaction(): Promise<void> {
    if (this.txn === undefined) throw new MongoTransactionError("No transaction started");
    this.abortNow();
  }

  /** Runs `fn` in a transaction and commits, retrying on TransientTransactionError (a few times). */
  async withTransaction<T>(
    fn: (session: FakeSession) => Promise<T>,
    options?: TransactionOptions,
  ): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      this.startTransaction({ maxCommitTimeMS: 1000, ...options });
      try {
        const result = await fn(this);
        await this.commitTransaction();
        return result;
      } catch (err) {
        if (this.txn !== undefined) this.abortNow();
        const transient =
          typeof (err as { hasErrorLabel?: unknown }).hasErrorLabel === "function" &&
          (err as { hasErrorLabel(label: string): boolean }).hasErrorLabel("TransientTransactionError");
        if (!transient || attempt >= 20) throw err;
      }
    }
  }

  /** Ends the session; an open transaction is rolled back at once (its locks released). */
  async endSession(): Promise<void> {
    if (this.txn !== undefined) this.abortNow();
    this.ended = true;
  }

  private abortNow(): void {
    const txn = this.txn;
    this.txn = undefined;
    if (txn !== undefined) this.db?.release(txn);
  }
}
