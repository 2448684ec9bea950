import { setTimeout as sleep } from "node:timers/promises";
import {
  type ClientSession,
  type Collection,
  type Db,
  type Document,
  MongoClient,
  type MongoClientOptions,
  MongoError,
  MongoTopologyClosedError,
  type TransactionOptions,
  WriteConcern,
} from "mongodb";
import type { Logger } from "pino";
import { AppError } from "../../errors.js";
import { isUnavailable, storeUnavailable } from "./errors.js";
import type { CollectionName } from "./index.js";
import { inTransaction, type TransactionId } from "./sharding.js";

/** Options of the MongoDB store. */
export interface MongoStoreOptions {
  /** Connection string, `mongodb://` or `mongodb+srv://`. Never logged: it may hold credentials. */
  uri: string;
  dbName: string;
  /**
   * Time limit of one database operation in milliseconds, default 3000. It bounds server selection,
   * connecting, each socket read, the server's own work (`maxTimeMS`), the write concern and the
   * retries of a transaction; a whole store call settles within twice this. So a store outage turns
   * into `service_unavailable` within seconds.
   */
  operationTimeoutMs?: number;
  /**
   * Time limit of creating the indexes (`init`) in milliseconds, default 600 000 (10 minutes): building
   * an index on a large existing collection takes far longer than any request may, so it has its own
   * limit rather than `operationTimeoutMs`.
   */
  indexTimeoutMs?: number;
  /**
   * `RECEIPT_RETENTION_DAYS`: when set, `init` keeps TTL indexes that delete delivered receipts (and
   * their claims) that many days after they were made; unset, it drops them.
   */
  receiptRetentionDays?: number | undefined;
  /** Receives connection events (connected, connection failed); silent when absent. */
  logger?: Pick<Logger, "info" | "warn">;
  /**
   * Builds the driver's client from the URI and the options this store pins; default `new MongoClient`.
   * The seam where tests put a driver-level fake (`test/store/fake-mongo/`) under the real adapter.
   */
  createClient?: (uri: string, options: MongoClientOptions) => MongoClient;
}

/** Default of {@link MongoStoreOptions.operationTimeoutMs}. */
export const DEFAULT_OPERATION_TIMEOUT_MS = 3_000;

/** Default of {@link MongoStoreOptions.indexTimeoutMs}. */
export const DEFAULT_INDEX_TIMEOUT_MS = 600_000;

/**
 * Extra time a socket read waits beyond `maxTimeMS`, so that a slow server answers with its own
 * MaxTimeMSExpired error (keeping the connection) before the socket timeout closes the connection.
 */
const SOCKET_MARGIN_MS = 1_000;

/** A whole store call (which may chain operations and retries) settles within this many operation limits. */
const CALL_TIMEOUT_FACTOR = 2;

/**
 * The `operationTimeoutMs` whose whole-call deadline ends before `callLimitMs`, the time limit the
 * service puts around every store call (`STORE_TIMEOUT_MS`, see `withTimeLimit`): the adapter then
 * answers a slow call itself, with every operation's `maxTimeMS` inside the limit, and the outer limit
 * only ever catches a call the adapter lost track of. A twentieth of the limit (at most 100 ms) is
 * kept as a margin for the timers' own lateness.
 */
export function operationTimeoutWithin(callLimitMs: number): number {
  const margin = Math.min(100, Math.floor(callLimitMs / 20));
  return Math.max(1, Math.floor((callLimitMs - margin) / CALL_TIMEOUT_FACTOR));
}

/**
 * The MongoDB client shared by every repository, with the two things they all need: `run`, which
 * connects on demand and turns driver failures into the contract's errors, and `transaction`, a
 * time-bounded transaction runner.
 */
export class MongoContext {
  readonly client: MongoClient;
  readonly db: Db;
  readonly timeoutMs: number;
  /** Time limit of index creation, in ms ({@link MongoStoreOptions.indexTimeoutMs}). */
  readonly indexTimeoutMs: number;
  /**
   * Set by `init` on a database an earlier version made and that was not migrated yet: receipts
   * stored then have no claim in receiptClaims, so a pair is also looked up in receipts themselves.
   */
  claimsMayBeMissing = false;
  /** Options for every operation outside a transaction: the server-side time limit. */
  readonly limit: { maxTimeMS: number };
  /** Options for every read outside a transaction: the time limit, and records without Mongo's `_id`. */
  readonly read: { maxTimeMS: number; projection: { _id: 0 } };
  private readonly logger: MongoStoreOptions["logger"];
  private readonly uri: string;
  private readonly clientOptions: MongoClientOptions;
  private readonly createClient: (uri: string, options: MongoClientOptions) => MongoClient;
  private readonly transactionOptions: TransactionOptions;
  /** The declared transaction each session runs (see `sharding.ts`), named in its operations' comment. */
  private readonly running = new WeakMap<ClientSession, TransactionId>();
  private connecting: Promise<void> | undefined;
  private connected = false;
  private closed = false;

  constructor(options: MongoStoreOptions) {
    const timeoutMs = options.operationTimeoutMs ?? DEFAULT_OPERATION_TIMEOUT_MS;
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1) {
      throw new RangeError("operationTimeoutMs must be a positive integer.");
    }
    this.timeoutMs = timeoutMs;
    this.indexTimeoutMs = options.indexTimeoutMs ?? DEFAULT_INDEX_TIMEOUT_MS;
    if (!Number.isInteger(this.indexTimeoutMs) || this.indexTimeoutMs < 1) {
      throw new RangeError("indexTimeoutMs must be a positive integer.");
    }
    this.limit = { maxTimeMS: timeoutMs };
    this.read = { maxTimeMS: timeoutMs, projection: { _id: 0 } };
    this.logger = options.logger;
    // `timeoutMS` (client-side operation timeout) has no effect in driver 7.x, so the bound is built
    // from the settings that do: selection, connect, socket, pool wait, maxTimeMS and wtimeout.
    this.uri = options.uri;
    this.createClient = options.createClient ?? ((uri, opts) => new MongoClient(uri, opts));
    this.clientOptions = {
      appName: "receipt-encryption-service",
      serverSelectionTimeoutMS: timeoutMs,
      connectTimeoutMS: timeoutMs,
      socketTimeoutMS: timeoutMs + SOCKET_MARGIN_MS,
      waitQueueTimeoutMS: timeoutMs,
      // Pinned whatever the URI says (these options override the URI's): every instance must read
      // what any instance wrote and acknowledged. A secondary may lag behind the primary, and a
      // `local` read may see a write that a failover then rolls back.
      readPreference: "primary",
      readConcernLevel: "majority",
      writeConcern: { w: "majority", wtimeoutMS: timeoutMs },
      ignoreUndefined: true,
    };
    this.client = this.createClient(this.uri, this.clientOptions);
    this.db = this.client.db(options.dbName);
    this.transactionOptions = {
      readConcern: { level: "snapshot" },
      writeConcern: new WriteConcern("majority", timeoutMs),
      readPreference: "primary",
      maxCommitTimeMS: timeoutMs,
    };
  }

  private readonly eventListeners: (() => void)[] = [];

  /** Registers a listener of events written through this store (`EventStore.onWritten`). */
  onEventsWritten(listener: () => void): void {
    this.eventListeners.push(listener);
  }

  /** Calls the listeners: events were written and committed by this process. */
  announceEvents(): void {
    for (const listener of this.eventListeners) listener();
  }

  /**
   * A typed collection of the store's database, by the name a repository declares (`declareCollection`):
   * a collection no repository declares has no indexes and no place on a cluster, so it does not compile.
   */
  collection<T extends Document>(name: CollectionName): Collection<T> {
    return this.db.collection<T>(name);
  }

  /** Options for a write inside the transaction of `session`: its time limit and its declaration. */
  writeIn(session: ClientSession): { session: ClientSession; maxTimeMS: number; comment?: unknown } {
    return { session, ...this.limit, ...this.declarationOf(session) };
  }

  /** Options for a read inside the transaction of `session`. */
  readIn(session: ClientSession): {
    session: ClientSession;
    maxTimeMS: number;
    projection: { _id: 0 };
    comment?: unknown;
  } {
    return { session, ...this.read, ...this.declarationOf(session) };
  }

  private declarationOf(session: ClientSession): { comment?: unknown } {
    const id = this.running.get(session);
    return id === undefined ? {} : inTransaction(id);
  }

  /**
   * Runs one repository method: connects if needed, then maps failures. Unreachable, timed-out or
   * closing databases become `service_unavailable`; other errors (bugs) pass through unchanged.
   */
  async run<T>(work: () => Promise<T>, limitMs = this.timeoutMs * CALL_TIMEOUT_FACTOR): Promise<T> {
    if (this.closed) throw storeUnavailable(new Error("The MongoDB store is closed."));
    try {
      return await this.withinDeadline(limitMs, async () => {
        await this.connect();
        return await work();
      });
    } catch (err) {
      if (err instanceof MongoTopologyClosedError && !this.closed) this.connected = false;
      if (err instanceof AppError) throw err;
      if (isUnavailable(err)) throw storeUnavailable(err);
      throw err;
    }
  }

  /**
   * Settles within `limitMs` (by default {@link CALL_TIMEOUT_FACTOR} x `operationTimeoutMs`) whatever
   * the driver does: each operation has its own limits, but a method may chain several, and the
   * driver retries some once. A call that misses the deadline may still complete in the background;
   * its result is dropped.
   */
  private async withinDeadline<T>(limitMs: number, call: () => Promise<T>): Promise<T> {
    const pending = call();
    pending.catch(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(storeUnavailable(new Error(`No answer within ${limitMs} ms.`))),
        limitMs,
      );
    });
    try {
      return await Promise.race([pending, expired]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Runs `work` as the declared transaction `id` (`sharding.ts`: on a cluster, the shards it may
   * reach) and commits it, retrying on transient errors (write conflicts, elections) with a short
   * backoff until `operationTimeoutMs` has passed. The driver's own `withTransaction` keeps retrying
   * for 120 s, far past any request's patience, hence this runner. `work` may run several times and
   * must only touch the database through `session`, with `writeIn` and `readIn`.
   *
   * Transactions need a replica set or a sharded cluster, as every production deployment (and Atlas)
   * is; a standalone `mongod` refuses them (run it with `--replSet rs0` and `rs.initiate()` locally).
   */
  async transaction<T>(id: TransactionId, work: (session: ClientSession) => Promise<T>): Promise<T> {
    const deadline = performance.now() + this.timeoutMs;
    const session = this.client.startSession();
    this.running.set(session, id);
    try {
      for (let attempt = 1; ; attempt++) {
        session.startTransaction(this.transactionOptions);
        let result: T;
        try {
          result = await work(session);
        } catch (err) {
          if (!(hasLabel(err, "TransientTransactionError") && (await pause(attempt, deadline)))) throw err;
          await session.abortTransaction().catch(() => undefined);
          continue;
        }
        try {
          await this.commit(session, deadline);
          return result;
        } catch (err) {
          if (hasLabel(err, "TransientTransactionError") && (await pause(attempt, deadline))) continue;
          throw err;
        }
      }
    } finally {
      // Not awaited: after a failure, ending the session aborts the transaction, which waits for the
      // server when it is down; the caller should not wait for that cleanup too.
      void session.endSession().catch(() => undefined);
    }
  }

  /**
   * Runs `work` on a client of its own whose socket timeout outlasts `indexTimeoutMs`, then closes it.
   * The shared client's socket timeout (a second past `operationTimeoutMs`) would cut a long index
   * build off mid-command, and the driver has no per-operation socket timeout.
   */
  async withIndexClient<T>(work: (db: Db) => Promise<T>): Promise<T> {
    const client = this.createClient(this.uri, {
      ...this.clientOptions,
      socketTimeoutMS: this.indexTimeoutMs + SOCKET_MARGIN_MS,
    });
    try {
      await client.connect();
      return await work(client.db(this.db.databaseName));
    } finally {
      await client.close().catch(() => undefined);
    }
  }

  /** Closes the client; every later call fails with `service_unavailable`. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    await this.client.close();
  }

  /** Commits, retrying while the outcome is unknown (a network error during commit) and time is left. */
  private async commit(session: ClientSession, deadline: number): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await session.commitTransaction();
        return;
      } catch (err) {
        // MaxTimeMSExpired during commit is final: the server gave up, retrying would only wait again.
        const unknown =
          err instanceof MongoError && err.hasErrorLabel("UnknownTransactionCommitResult") && err.code !== 50;
        if (unknown && (await pause(attempt, deadline))) continue;
        throw err;
      }
    }
  }

  /**
   * Connects once, on first use. A failed first connection leaves the driver's client closed for good,
   * so it is retried on the next call; once connected, the driver itself reconnects after outages.
   */
  private async connect(): Promise<void> {
    if (this.connected) return;
    this.connecting ??= this.client.connect().then(
      () => {
        this.connected = true;
        this.connecting = undefined;
        this.logger?.info({ db: this.db.databaseName }, "connected to MongoDB");
      },
      (err: unknown) => {
        this.connecting = undefined;
        this.logger?.warn({ err }, "cannot connect to MongoDB");
        throw err;
      },
    );
    await this.connecting;
  }
}

function hasLabel(err: unknown, label: string): boolean {
  return err instanceof MongoError && err.hasErrorLabel(label);
}

/**
 * Waits before retry `attempt` (jittered, growing from 5 ms to 500 ms, as the driver's own runner
 * does); false when the wait would end past `deadline`, meaning: give up.
 */
async function pause(attempt: number, deadline: number): Promise<boolean> {
  const ms = Math.random() * Math.min(5 * 1.5 ** attempt, 500);
  if (performance.now() + ms >= deadline) return false;
  await sleep(ms);
  return true;
}
