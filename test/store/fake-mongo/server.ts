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
 * It refuses any operation without a server-side time limit (`maxTimeMS`), as SPEC section 11 asks.
 * A new collection needs nothing here: collections appear on first use, and unique indexes come from
 * the adapter's own `createIndexes` (its `INDEXES` table) as on a real server.
 *
 * What it CANNOT prove, and only a run against a real server (MONGODB_URI) can:
 * - transactions under real contention and isolation: the fake runs one operation at a time, locks
 *   whole documents, and does not model the storage engine, retries inside the server, or sharding;
 * - TTL deletion (indexes with `expireAfterSeconds` are recorded, nothing is ever deleted);
 * - time limits: `maxTimeMS`, socket and server-selection timeouts are checked for presence, never
 *   enforced; a slow server is not simulated (an outage fails fast);
 * - write concern, read concern, read preference, replication, elections and failover;
 * - index semantics beyond unique keys: no query plans, no index use, no collation, no multikey rules;
 * - BSON beyond the types the store uses (no Decimal128, Long, Binary), and 16 MB document limits.
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
  [option: string]: unknown;
}

/** Options of {@link FakeMongo}. */
export interface FakeMongoOptions {
  /** Seed of the random latencies; the same seed gives the same interleaving for the same calls. */
  seed?: number;
  /** Largest latency of one operation in milliseconds (uniform from 0). Default 3. */
  maxLatencyMs?: number;
}

/** A find the adapter issued, for checks on query shapes (e.g. that an index serves a sorted page). */
export interface RecordedQuery {
  collection: string;
  filter: Record<string, unknown>;
  sort: Record<string, 1 | -1> | undefined;
  limit: number;
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
  /** Every operation that ran, by name (`find receipts`, `command ping`), for tests on what was sent. */
  readonly operations: Array<{
    name: string;
    options: OperationOptions | undefined;
    /** The options of the client that sent it. */
    client: MongoClientOptions | undefined;
  }> = [];

  constructor(options: FakeMongoOptions = {}) {
    this.random = seededRandom(options.seed ?? 1);
    this.maxLatencyMs = options.maxLatencyMs ?? 3;
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
      db = new Database();
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

  /** Only `ping` is known. The time limit may be in the command (`maxTimeMS`) or in the options. */
  async command(command: Record<string, unknown>, options?: OperationOptions): Promise<{ ok: 1 }> {
    if (this.isClosed()) throw new MongoTopologyClosedError();
    const maxTimeMS = (command.maxTimeMS as number | undefined) ?? options?.maxTimeMS;
    const name = Object.keys(command)[0] ?? "";
    const work = () => {
      if (name !== "ping") throw serverError(59, "CommandNotFound", `no such command: '${name}'`);
      return { ok: 1 as const };
    };
    return this.server.run(`command ${name}`, { ...options, maxTimeMS }, work, undefined, this.client);
  }
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
