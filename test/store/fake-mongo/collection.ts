/* The fake's Collection and FindCursor: the driver methods the store uses, on mingo's query engine. Over
 * 400 lines on purpose: one class per driver class, each method as the driver has it. */
import {
  aggregate as mingoAggregate,
  update as mingoUpdate,
  updateOne as mingoUpdateOne,
  Query,
} from "mingo";
import {
  type Document,
  type IndexDescription,
  type MongoClientOptions,
  MongoInvalidArgumentError,
  ObjectId,
} from "mongodb";
import { bsonCopy, compareValues, type Doc, keyOf, serverError, valueAt } from "./bson.js";
import { CollectionRouter, isOperatorObject, type OperationKind, uniqueIndexAllowed } from "./cluster.js";
import type { FakeMongo, OperationOptions } from "./server.js";
import { duplicateKey, type IndexSpec, indexKey, shardPart, type Transaction } from "./storage.js";

type Filter = Record<string, unknown>;
type Sort = Record<string, 1 | -1>;
type Update = Record<string, unknown> | Record<string, unknown>[];

/** A driver `Collection`, as far as the store (and the domain's future collections) use one. */
export class FakeCollection {
  constructor(
    private readonly server: FakeMongo,
    private readonly dbName: string,
    readonly collectionName: string,
    private readonly client: MongoClientOptions,
  ) {}

  private get db() {
    return this.server.database(this.dbName);
  }

  private exec<T>(name: string, options: OperationOptions | undefined, work: (txn?: Transaction) => T) {
    return this.server.run(name, options, work, this.db, this.client);
  }

  private docs(txn: Transaction | undefined): Doc[] {
    return [...this.db.view(this.collectionName, txn).values()];
  }

  private copy<T>(value: T): T {
    return bsonCopy(value, this.client.ignoreUndefined === true);
  }

  /** The cluster's rules for this collection; undefined outside cluster mode. */
  private get router(): CollectionRouter | undefined {
    const options = this.server.cluster;
    if (options === undefined) return undefined;
    const [db, name] = [this.db, this.collectionName];
    const view = {
      options,
      shardKey: db.collection(name).shardKey,
      shardOfDoc: (doc: Doc) => db.shardOfDoc(name, doc),
    };
    return new CollectionRouter(view, name);
  }

  /** Records an operation's filter (see `FakeMongo.filters`), then routes it as a cluster would. */
  private route(
    txn: Transaction | undefined,
    kind: OperationKind,
    filter: Filter,
    options: OperationOptions | undefined,
  ): void {
    this.record(kind, filter);
    this.router?.operation(txn, kind, filter, options);
  }

  private record(kind: OperationKind, filter: Filter): void {
    this.server.filters.push({ collection: this.collectionName, kind, filter });
  }

  /** Where `doc` lives (see `CollectionData`). */
  private locate(doc: Doc): string {
    return this.db.locate(this.collectionName, doc);
  }

  /** Writes `doc` (null deletes) at `location`, the place of `placed` (the document before or after). */
  private write(txn: Transaction | undefined, doc: Doc | null, location: string, placed: Doc): void {
    this.router?.touched(txn, placed, true);
    this.db.write(this.collectionName, txn, location, doc);
  }

  async insertOne(doc: Doc, options?: OperationOptions) {
    // Like the driver, the caller's document gets the generated `_id`.
    doc._id ??= new ObjectId();
    const stored = this.copy(doc);
    return this.exec(`insertOne ${this.collectionName}`, options, (txn) => {
      this.router?.inserting(txn, stored, options);
      const location = this.locate(stored);
      if (this.db.view(this.collectionName, txn).has(location)) {
        throw duplicateKey(this.db.collection(this.collectionName).indexes[0] as IndexSpec, stored);
      }
      this.write(txn, stored, location, stored);
      return { acknowledged: true, insertedId: stored._id };
    });
  }

  /** Inserts in order, stopping at the first failure (an ordered insert); none at all, as driver 7 refuses. */
  async insertMany(docs: Doc[], options?: OperationOptions) {
    if (docs.length === 0)
      throw new MongoInvalidArgumentError("Invalid BulkOperation, Batch cannot be empty");
    const insertedIds: Record<number, unknown> = {};
    for (const [i, doc] of docs.entries()) {
      insertedIds[i] = (await this.insertOne(doc, options)).insertedId;
    }
    return { acknowledged: true, insertedCount: docs.length, insertedIds };
  }

  async findOne(filter: Filter = {}, options?: OperationOptions) {
    return this.exec(`findOne ${this.collectionName}`, options, (txn) => {
      this.route(txn, "read", filter, options);
      const found = this.select(txn, filter, options?.sort)[0];
      return found === undefined ? null : project(this.copy(found), options?.projection);
    });
  }

  find(filter: Filter = {}, options?: OperationOptions): FakeFindCursor {
    return new FakeFindCursor(options, (spec) => {
      this.server.queries.push({
        collection: this.collectionName,
        filter,
        sort: spec.sort,
        limit: spec.limit,
      });
      return this.exec(`find ${this.collectionName}`, options, (txn) => {
        this.route(txn, "read", filter, options);
        let found = this.select(txn, filter, spec.sort);
        found = found.slice(spec.skip, spec.limit === 0 ? undefined : spec.skip + spec.limit);
        return found.map((doc) => project(this.copy(doc), spec.projection));
      });
    });
  }

  async countDocuments(filter: Filter = {}, options?: OperationOptions) {
    return this.exec(`countDocuments ${this.collectionName}`, options, (txn) => {
      this.route(txn, "read", filter, options);
      return this.select(txn, filter).length;
    });
  }

  /**
   * Runs a pipeline on mingo. A last `$merge` stage writes into a collection of the same database, in
   * the one form the fake knows: `{into, on: "_id", whenMatched: "keepExisting", whenNotMatched: "insert"}`.
   */
  aggregate(pipeline: Document[], options?: OperationOptions): FakeFindCursor {
    // A cluster routes an aggregation by its first stage, when that is a `$match`.
    const match = (pipeline[0]?.$match ?? {}) as Filter;
    const merge = pipeline.at(-1)?.$merge as Record<string, unknown> | undefined;
    const stages = merge === undefined ? pipeline : pipeline.slice(0, -1);
    return new FakeFindCursor(options, () =>
      this.exec(`aggregate ${this.collectionName}`, options, (txn) => {
        this.route(txn, "read", match, options);
        // What a stage leaves undefined (a missing field path, `$$REMOVE`) is absent on the server,
        // whatever the client's ignoreUndefined: mingo's undefined must not become a stored null.
        const out = mingoAggregate(
          this.docs(txn).map((doc) => this.copy(doc)),
          stages,
        ).map((doc) => bsonCopy(doc, true));
        if (merge === undefined) return out;
        this.mergeInto(txn, merge, out);
        return [];
      }),
    );
  }

  /** The `$merge` of {@link aggregate}: inserts each document whose `_id` is not in `into` yet. */
  private mergeInto(txn: Transaction | undefined, merge: Record<string, unknown>, docs: Doc[]): void {
    const known =
      merge.on === "_id" && merge.whenMatched === "keepExisting" && merge.whenNotMatched === "insert";
    if (typeof merge.into !== "string" || !known) {
      throw new Error(`fake MongoDB: $merge ${JSON.stringify(merge)} is not modelled`);
    }
    const target = this.server.database(this.dbName);
    for (const doc of docs) {
      const location = target.locate(merge.into, doc);
      if (target.view(merge.into, txn).has(location)) continue;
      target.write(merge.into, txn, location, doc);
    }
  }

  async updateOne(filter: Filter, update: Update, options?: OperationOptions) {
    checkUpdate(update);
    return this.exec(`updateOne ${this.collectionName}`, options, (txn) => {
      this.route(txn, "singleWrite", filter, options);
      const { matched, modified, upsertedId } = this.updateFirst(txn, filter, update, options, false);
      return {
        acknowledged: true,
        matchedCount: matched === undefined ? 0 : 1,
        modifiedCount: modified ? 1 : 0,
        upsertedCount: upsertedId === undefined ? 0 : 1,
        upsertedId: upsertedId ?? null,
      };
    });
  }

  async updateMany(filter: Filter, update: Update, options?: OperationOptions) {
    checkUpdate(update);
    return this.exec(`updateMany ${this.collectionName}`, options, (txn) => {
      const router = this.router;
      this.record("multiWrite", filter);
      router?.operation(txn, "multiWrite", filter, options);
      const matches = this.select(txn, filter);
      // Like MongoDB's, not atomic as a whole: a failure part way leaves the earlier documents updated.
      const updated = matches.map((doc) => this.applied(doc, update, false, options));
      let modifiedCount = 0;
      for (const [i, after] of updated.entries()) {
        const before = matches[i] as Doc;
        if (keyOf(after) === keyOf(before)) continue;
        router?.updating(before, after);
        this.write(txn, after, this.locate(before), before);
        modifiedCount++;
      }
      if (matches.length === 0 && options?.upsert === true) {
        const { upsertedId } = this.updateFirst(txn, filter, update, options, false);
        return { acknowledged: true, matchedCount: 0, modifiedCount: 0, upsertedCount: 1, upsertedId };
      }
      return {
        acknowledged: true,
        matchedCount: matches.length,
        modifiedCount,
        upsertedCount: 0,
        upsertedId: null,
      };
    });
  }

  async replaceOne(filter: Filter, replacement: Doc, options?: OperationOptions) {
    if (Object.keys(replacement).some((key) => key.startsWith("$"))) {
      throw new MongoInvalidArgumentError("Replacement document must not contain atomic operators");
    }
    return this.exec(`replaceOne ${this.collectionName}`, options, (txn) => {
      this.route(txn, "singleWrite", filter, options);
      const { matched, modified, upsertedId } = this.updateFirst(txn, filter, replacement, options, true);
      return {
        acknowledged: true,
        matchedCount: matched === undefined ? 0 : 1,
        modifiedCount: modified ? 1 : 0,
        upsertedCount: upsertedId === undefined ? 0 : 1,
        upsertedId: upsertedId ?? null,
      };
    });
  }

  /** Returns the document before (the default) or after the update, or null; as driver 7 does. */
  async findOneAndUpdate(filter: Filter, update: Update, options?: OperationOptions) {
    checkUpdate(update);
    return this.exec(`findOneAndUpdate ${this.collectionName}`, options, (txn) => {
      this.route(txn, "findAndModify", filter, options);
      const { matched, after } = this.updateFirst(txn, filter, update, options, false);
      const doc = options?.returnDocument === "after" ? after : matched;
      return doc === undefined ? null : project(this.copy(doc), options?.projection);
    });
  }

  async deleteOne(filter: Filter = {}, options?: OperationOptions) {
    return this.exec(`deleteOne ${this.collectionName}`, options, (txn) => {
      this.route(txn, "singleWrite", filter, options);
      const found = this.select(txn, filter, options?.sort)[0];
      if (found !== undefined) this.write(txn, null, this.locate(found), found);
      return { acknowledged: true, deletedCount: found === undefined ? 0 : 1 };
    });
  }

  async deleteMany(filter: Filter = {}, options?: OperationOptions) {
    return this.exec(`deleteMany ${this.collectionName}`, options, (txn) => {
      this.route(txn, "multiWrite", filter, options);
      const found = this.select(txn, filter);
      for (const doc of found) this.write(txn, null, this.locate(doc), doc);
      return { acknowledged: true, deletedCount: found.length };
    });
  }

  async createIndex(
    key: Record<string, number>,
    options: Omit<IndexDescription, "key"> & OperationOptions = {},
  ) {
    const { maxTimeMS, session, ...description } = options;
    const [name] = await this.createIndexes([{ key, ...description }], { maxTimeMS, session });
    return name as string;
  }

  /**
   * Creates indexes as MongoDB does: an identical index again is a no-op; the same name with another
   * definition, or the same keys under another name, is refused; a unique index over duplicates too.
   */
  async createIndexes(descriptions: IndexDescription[], options?: OperationOptions) {
    return this.exec(`createIndexes ${this.collectionName}`, options, () => {
      const data = this.db.collection(this.collectionName);
      data.created = true;
      return descriptions.map((description) => {
        const key = description.key as Record<string, number>;
        const name =
          description.name ??
          Object.entries(key)
            .map(([f, d]) => `${f}_${d}`)
            .join("_");
        const spec: IndexSpec = {
          name,
          key,
          unique: description.unique === true,
          partial:
            description.partialFilterExpression === undefined
              ? undefined
              : new Query(description.partialFilterExpression, {}),
          description: { ...description, name },
        };
        const sameName = data.indexes.find((i) => i.name === name);
        if (sameName !== undefined) {
          if (keyOf(sameName.description) === keyOf(spec.description)) return name;
          throw serverError(86, "IndexKeySpecsConflict", `An index named ${name} exists with other options.`);
        }
        if (data.indexes.some((i) => keyOf(i.key) === keyOf(key))) {
          throw serverError(85, "IndexOptionsConflict", `An index with the keys of ${name} exists.`);
        }
        if (spec.unique && data.shardKey !== undefined && !uniqueIndexAllowed(key, data.shardKey)) {
          throw serverError(
            67,
            "CannotCreateIndex",
            `cannot create unique index over ${JSON.stringify(key)} with shard key pattern ${JSON.stringify(data.shardKey)}`,
          );
        }
        if (spec.unique) {
          // Each shard builds its own part of the index: duplicates on two shards go unnoticed.
          const seen = new Set<string>();
          for (const [location, doc] of data.docs) {
            const entry = indexKey(spec, doc);
            if (entry === undefined) continue;
            const onShard = `${shardPart(location) ?? ""}|${entry}`;
            if (seen.has(onShard)) throw duplicateKey(spec, doc);
            seen.add(onShard);
          }
        }
        data.indexes.push(spec);
        return name;
      });
    });
  }

  /** Drops an index by name; `_id_`, and the last index supporting a shard key, cannot be dropped. */
  async dropIndex(name: string, options?: OperationOptions) {
    return this.exec(`dropIndex ${this.collectionName}`, options, () => {
      const data = this.db.collection(this.collectionName);
      const at = data.indexes.findIndex((index) => index.name === name);
      if (at < 0) throw serverError(27, "IndexNotFound", `index not found with name [${name}]`);
      if (name === "_id_") throw serverError(72, "InvalidOptions", "cannot drop _id index");
      const shardKey = data.shardKey;
      const supports = (key: Record<string, unknown>) =>
        shardKey !== undefined &&
        Object.entries(shardKey).every(([f, k], i) => Object.entries(key)[i]?.join() === [f, k].join());
      const others = data.indexes.filter((index, i) => i !== at && supports(index.key));
      if (supports((data.indexes[at] as IndexSpec).key) && others.length === 0) {
        throw serverError(
          72,
          "InvalidOptions",
          `cannot drop index ${name}: it is the last one supporting the shard key`,
        );
      }
      data.indexes.splice(at, 1);
      return { ok: 1 };
    });
  }

  listIndexes(options?: OperationOptions): FakeFindCursor {
    return new FakeFindCursor(options, () =>
      this.exec(`listIndexes ${this.collectionName}`, options, () => {
        const data = this.db.collection(this.collectionName);
        if (!data.created)
          throw serverError(26, "NamespaceNotFound", `ns does not exist: ${this.collectionName}`);
        return data.indexes.map((index) => ({ v: 2, ...index.description }));
      }),
    );
  }

  /** The documents matching `filter`, in natural (insertion) order or sorted. */
  private select(txn: Transaction | undefined, filter: Filter, sort?: Sort): Doc[] {
    const query = new Query(filter, {});
    const found = this.docs(txn).filter((doc) => query.test(doc));
    const router = txn === undefined ? undefined : this.router;
    for (const doc of router === undefined ? [] : found) router?.touched(txn, doc, false);
    return sort === undefined ? found : found.sort(comparator(sort));
  }

  /**
   * Updates (or replaces) the first match, or inserts when nothing matches and `upsert` is set: the
   * new document is built from the filter's equality fields, then the update with `$setOnInsert`.
   */
  private updateFirst(
    txn: Transaction | undefined,
    filter: Filter,
    update: Update,
    options: OperationOptions | undefined,
    replace: boolean,
  ): { matched?: Doc; after?: Doc; modified: boolean; upsertedId?: unknown } {
    const matched = this.select(txn, filter, options?.sort)[0];
    if (matched !== undefined) {
      const after = replace
        ? this.copy({ _id: matched._id, ...(update as Doc) })
        : this.applied(matched, update, false, options);
      if (keyOf(after._id) !== keyOf(matched._id)) {
        throw serverError(
          66,
          "ImmutableField",
          "Performing an update would modify the immutable field '_id'.",
        );
      }
      this.router?.updating(matched, after);
      const modified = keyOf(after) !== keyOf(matched);
      if (modified) this.write(txn, after, this.locate(matched), matched);
      return { matched, after: modified ? after : matched, modified };
    }
    if (options?.upsert !== true) return { modified: false };
    const base: Doc = {};
    for (const [field, value] of Object.entries(filter)) {
      if (field.startsWith("$") || field.includes(".") || isOperatorObject(value)) continue;
      base[field] = value;
    }
    let inserted = replace
      ? this.copy({ ...base, ...(update as Doc) })
      : this.applied(base, update, true, options);
    if (inserted._id === undefined) inserted = { _id: base._id ?? new ObjectId(), ...inserted };
    this.router?.inserting(txn, inserted, options);
    this.write(txn, inserted, this.locate(inserted), inserted);
    return { after: inserted, modified: false, upsertedId: inserted._id };
  }

  /** A new document: `doc` with `update` applied (operators or a pipeline). */
  private applied(doc: Doc, update: Update, inserting: boolean, options?: OperationOptions): Doc {
    const target = this.copy(doc);
    if (Array.isArray(update)) {
      const docs = [target];
      mingoUpdateOne(docs, {}, update as never, { cloneMode: "deep" });
      return this.copy(docs[0] as Doc);
    }
    const { $setOnInsert, ...operators } = update as Record<string, Record<string, unknown>>;
    if (inserting && $setOnInsert !== undefined) operators.$set = { ...operators.$set, ...$setOnInsert };
    if (Object.keys(operators).length > 0) {
      mingoUpdate(target, operators as never, options?.arrayFilters as never, undefined, {
        cloneMode: "deep",
      });
    }
    return this.copy(target);
  }
}

/** A driver `FindCursor`: chain `sort`, `limit`, `skip`, `project`, then read; runs when read. */
export class FakeFindCursor {
  private readonly spec: { sort?: Sort; limit: number; skip: number; projection?: Document };
  private results: Promise<Doc[]> | undefined;
  private position = 0;

  constructor(
    options: OperationOptions | undefined,
    private readonly execute: (spec: FakeFindCursor["spec"]) => Promise<Doc[]>,
  ) {
    this.spec = { limit: options?.limit ?? 0, skip: options?.skip ?? 0 };
    if (options?.sort !== undefined) this.spec.sort = options.sort;
    if (options?.projection !== undefined) this.spec.projection = options.projection;
  }

  sort(sort: Sort): this {
    this.spec.sort = sort;
    return this;
  }

  limit(limit: number): this {
    this.spec.limit = limit;
    return this;
  }

  skip(skip: number): this {
    this.spec.skip = skip;
    return this;
  }

  project(projection: Document): this {
    this.spec.projection = projection;
    return this;
  }

  toArray(): Promise<Doc[]> {
    return this.all().then((docs) => docs.slice(this.position));
  }

  async next(): Promise<Doc | null> {
    const docs = await this.all();
    return docs[this.position++] ?? null;
  }

  /** Runs the query on first read; later reads share its result. */
  private all(): Promise<Doc[]> {
    this.results ??= this.execute(this.spec);
    return this.results;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<Doc> {
    for (let doc = await this.next(); doc !== null; doc = await this.next()) yield doc;
  }

  async close(): Promise<void> {}
}

function comparator(sort: Sort): (a: Doc, b: Doc) => number {
  const fields = Object.entries(sort);
  return (a, b) => {
    for (const [path, direction] of fields) {
      const order = compareValues(valueAt(a, path), valueAt(b, path));
      if (order !== 0) return order * direction;
    }
    return 0;
  };
}

/** Applies a top-level projection: inclusion (`{a: 1}`, `_id` kept unless `_id: 0`) or exclusion. */
function project(doc: Doc, projection: Document | undefined): Doc {
  if (projection === undefined) return doc;
  const entries = Object.entries(projection);
  const including = entries.some(([field, value]) => field !== "_id" && value === 1);
  if (!including) {
    for (const [field, value] of entries) if (value === 0) delete doc[field];
    return doc;
  }
  const out: Doc = {};
  if (projection._id !== 0 && doc._id !== undefined) out._id = doc._id;
  for (const [field, value] of entries) if (value === 1 && field in doc) out[field] = doc[field];
  return out;
}

/** The driver refuses an update document without operators before sending it. */
function checkUpdate(update: Update): void {
  if (Array.isArray(update)) return;
  const keys = Object.keys(update);
  if (keys.length === 0 || !keys.every((key) => key.startsWith("$"))) {
    throw new MongoInvalidArgumentError("Update document requires atomic operators");
  }
}
