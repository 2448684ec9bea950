import { type Db, MongoServerError } from "mongodb";
import { describe, expect, it } from "vitest";
import { type ClusterDeclarations, ClusterPolicyError, FakeMongo } from "./fake-mongo/index.js";

/**
 * The driver fake's cluster mode, where it stands in for a sharded MongoDB cluster: the store contract
 * run under it proves the adapter's cluster use only as far as these hold.
 */
describe("driver fake of MongoDB, cluster mode", () => {
  const limit = { maxTimeMS: 1000 };
  const declarations: ClusterDeclarations = {
    scatterGather: {
      "orders.report": { collection: "orders", reason: "an operator's report over every customer" },
      "events.none": { collection: "events", reason: "" },
    },
    transactions: { "orders.place": { maxShards: 2 }, "orders.tight": { maxShards: 1 } },
  };
  const cluster = (shards = 4) => {
    const fake = new FakeMongo({ maxLatencyMs: 1, cluster: { shards, declarations } });
    const client = fake.createClient("mongodb://fake.invalid/", { ignoreUndefined: true });
    return { fake, client, db: client.db("t") as Db };
  };
  const failure = (promise: Promise<unknown>) =>
    promise.then(
      () => undefined,
      (err: unknown) => err,
    );
  const codeOf = (err: unknown) => (err instanceof MongoServerError ? err.code : err);

  describe("shardCollection and unique indexes", () => {
    it("catches a deliberately wrong declaration: a unique index that does not start with the shard key", async () => {
      const { fake, db } = cluster();
      // The wrong declaration: orders sharded by customer, yet unique by order number.
      await fake.shardCollection("t.orders", { customerId: 1 });
      const refused = await failure(
        db
          .collection("orders")
          .createIndexes([{ key: { orderNo: 1 }, name: "uniq_orderNo", unique: true }], limit),
      );
      expect(codeOf(refused)).toBe(67);
      expect(String(refused)).toMatch(/cannot create unique index/);
      // Sharding after the index was made is refused the same way.
      await db
        .collection("carts")
        .createIndexes([{ key: { cartNo: 1 }, name: "uniq_cartNo", unique: true }], limit);
      expect(codeOf(await failure(fake.shardCollection("t.carts", { customerId: 1 })))).toBe(72);
      // A hashed key backs no unique index at all, and cannot be sharded unique.
      await fake.shardCollection("t.logs", { _id: "hashed" });
      const hashedUnique = db
        .collection("logs")
        .createIndexes([{ key: { _id: 1, n: 1 }, unique: true }], limit);
      expect(codeOf(await failure(hashedUnique))).toBe(67);
      expect(codeOf(await failure(fake.shardCollection("t.more", { a: "hashed" }, { unique: true })))).toBe(
        2,
      );
    });

    it("accepts a unique index that starts with a ranged key, and enforces it across shards", async () => {
      const { fake, db } = cluster();
      await fake.shardCollection("t.orders", { customerId: 1 });
      const orders = db.collection("orders");
      await orders.createIndexes(
        [{ key: { customerId: 1, orderNo: 1 }, name: "uniq_customer_order", unique: true }],
        limit,
      );
      await orders.insertOne({ customerId: "c1", orderNo: 1 }, limit);
      expect(codeOf(await failure(orders.insertOne({ customerId: "c1", orderNo: 1 }, limit)))).toBe(11000);
      await orders.insertOne({ customerId: "c2", orderNo: 1 }, limit);
    });

    it("lets what a shard cannot see through: `_id` and unique values on two shards", async () => {
      // Sharded by `k`, `_id` is unique per shard only: the same `_id` under keys on two shards is kept twice.
      const { fake, db } = cluster(16);
      await fake.shardCollection("t.items", { k: 1 });
      const items = db.collection<{ _id: string; k: number }>("items");
      await items.insertOne({ _id: "same", k: 0 }, limit);
      let onAnotherShard = 1;
      for (; onAnotherShard < 50; onAnotherShard++) {
        const kept = await failure(items.insertOne({ _id: "same", k: onAnotherShard }, limit));
        if (kept === undefined) break;
        expect(codeOf(kept)).toBe(11000);
      }
      expect(onAnotherShard).toBeLessThan(50);
      expect(
        await items.find({ _id: "same", k: { $in: [0, onAnotherShard] } }, limit).toArray(),
      ).toHaveLength(2);
    });

    it("creates the key's index on an empty collection under MongoDB's default name, unique when asked", async () => {
      const { fake, db } = cluster();
      await fake.shardCollection("t.pay", { m: 1, t: 1 }, { unique: true });
      await fake.shardCollection("t.pay", { m: 1, t: 1 }, { unique: true });
      expect(codeOf(await failure(fake.shardCollection("t.pay", { m: 1 })))).toBe(20);
      const indexes = await db.collection("pay").listIndexes(limit).toArray();
      expect(indexes.map((i) => [i.name, i.unique === true])).toEqual([
        ["_id_", false],
        ["m_1_t_1", true],
      ]);
      // A collection with documents and no index on the key cannot be sharded.
      await db.collection("full").insertOne({ x: 1 }, limit);
      expect(codeOf(await failure(fake.shardCollection("t.full", { x: 1 })))).toBe(72);
    });

    it("is the admin command too; a replica set does not know it", async () => {
      const { client, db } = cluster();
      const admin = client.db("admin") as Db;
      await admin.command({ enableSharding: "t", maxTimeMS: 1000 });
      await admin.command({ shardCollection: "t.orders", key: { customerId: 1 }, maxTimeMS: 1000 });
      const orders = db.collection("orders");
      expect(await failure(orders.findOne({ total: 5 }, limit))).toBeInstanceOf(ClusterPolicyError);

      const replicaSet = new FakeMongo({ maxLatencyMs: 1 });
      const refused = replicaSet.createClient("mongodb://fake.invalid/", {}).db("admin") as Db;
      const answer = failure(refused.command({ shardCollection: "t.o", key: { a: 1 }, maxTimeMS: 1000 }));
      expect(codeOf(await answer)).toBe(59);
    });
  });

  describe("routing", () => {
    const sharded = async () => {
      const made = cluster();
      await made.fake.shardCollection("t.orders", { customerId: 1, orderNo: 1 });
      await made.fake.shardCollection("t.events", { _id: "hashed" });
      return made;
    };

    it("answers queries that name a prefix of a ranged key or a hashed key's value", async () => {
      const { db } = await sharded();
      const orders = db.collection("orders");
      await orders.insertOne({ customerId: "c1", orderNo: 1, total: 5 }, limit);
      expect(await orders.find({ customerId: "c1" }, limit).toArray()).toHaveLength(1);
      expect(await orders.countDocuments({ customerId: { $in: ["c1", "c2"] }, total: 5 }, limit)).toBe(1);
      expect(await orders.findOne({ $and: [{ customerId: "c1" }, { orderNo: 1 }] }, limit)).not.toBeNull();
      const first = await orders.aggregate([{ $match: { customerId: "c1" } }], limit).toArray();
      expect(first).toHaveLength(1);
      await db.collection("events").insertOne({ _id: "e1" } as never, limit);
      expect(await db.collection("events").findOne({ _id: "e1" } as never, limit)).not.toBeNull();
    });

    it("fails an undeclared scatter-gather, and runs a declared one", async () => {
      const { db } = await sharded();
      const orders = db.collection("orders");
      // The second field of the key alone, and a range on a hashed key, pin no chunk.
      expect(await failure(orders.find({ orderNo: 1 }, limit).toArray())).toBeInstanceOf(ClusterPolicyError);
      const events = db.collection("events");
      expect(await failure(events.findOne({ _id: { $gt: "a" } } as never, limit))).toBeInstanceOf(
        ClusterPolicyError,
      );
      expect(await failure(orders.deleteMany({ total: 5 }, limit))).toBeInstanceOf(ClusterPolicyError);
      const report = { ...limit, comment: { scatterGather: "orders.report" } };
      await expect(orders.countDocuments({ total: 5 }, report)).resolves.toBe(0);
      // A declaration of another collection, or one without a reason, does not count.
      const elsewhere = { ...limit, comment: { scatterGather: "orders.report" } };
      expect(await failure(events.findOne({}, elsewhere))).toBeInstanceOf(ClusterPolicyError);
      const reasonless = { ...limit, comment: { scatterGather: "events.none" } };
      expect(await failure(events.findOne({}, reasonless))).toBeInstanceOf(ClusterPolicyError);
    });

    it("refuses single-document writes and upserts that a cluster refuses", async () => {
      const { db } = await sharded();
      const orders = db.collection("orders");
      await orders.insertOne({ _id: "o1", customerId: "c1", orderNo: 1, n: 0 } as never, limit);
      const set = { $set: { n: 1 } };
      // The whole key: one chunk.
      await orders.updateOne({ customerId: "c1", orderNo: 1 }, set, limit);
      await orders.updateOne({ customerId: "c1", orderNo: 2 }, set, { ...limit, upsert: true });
      // A prefix is not enough for one document, nor for an upsert or a findOneAndUpdate.
      expect(codeOf(await failure(orders.updateOne({ customerId: "c1" }, set, limit)))).toBe(72);
      expect(codeOf(await failure(orders.deleteOne({ customerId: "c1" }, limit)))).toBe(72);
      const upsert = orders.updateOne({ customerId: "c9" }, set, { ...limit, upsert: true });
      expect(codeOf(await failure(upsert))).toBe(61);
      expect(codeOf(await failure(orders.findOneAndUpdate({ customerId: "c1" }, set, limit)))).toBe(61);
      // `_id` alone reaches every shard: a broadcast that must be declared.
      expect(await failure(orders.updateOne({ _id: "o1" } as never, set, limit))).toBeInstanceOf(
        ClusterPolicyError,
      );
      await orders.updateOne({ _id: "o1" } as never, set, {
        ...limit,
        comment: { scatterGather: "orders.report" },
      });
      // Moving a document to another chunk, and a document without its key, are refused.
      const move = orders.updateOne({ customerId: "c1", orderNo: 1 }, { $set: { orderNo: 3 } }, limit);
      expect(codeOf(await failure(move))).toBe(66);
      const replaced = orders.replaceOne({ customerId: "c1", orderNo: 1 }, { n: 9 }, limit);
      expect(codeOf(await failure(replaced))).toBe(66);
      expect(await failure(orders.insertOne({ customerId: "c1" }, limit))).toBeInstanceOf(ClusterPolicyError);
    });
  });

  describe("transactions", () => {
    const place = { ...limit, comment: { transaction: "orders.place" } };

    it("counts the shard key values a transaction touches against its declared maximum", async () => {
      const { fake, client, db } = cluster();
      await fake.shardCollection("t.orders", { customerId: 1 });
      const orders = db.collection("orders");
      const session = client.startSession();
      // Two customers and an unsharded collection (the primary shard): three, over the two declared.
      await session.withTransaction(async () => {
        await orders.insertOne({ customerId: "c1" }, { ...place, session });
        await orders.insertOne({ customerId: "c1" }, { ...place, session });
        await db
          .collection("stock")
          .updateOne({ _id: "s" } as never, { $inc: { n: 1 } }, { ...place, session, upsert: true });
      });
      expect(fake.transactions).toEqual([{ name: "orders.place", targets: 2, shards: expect.any(Number) }]);
      const over = session.withTransaction(async () => {
        await orders.insertOne({ customerId: "c1" }, { ...place, session });
        await orders.insertOne({ customerId: "c2" }, { ...place, session });
        await db
          .collection("stock")
          .updateOne({ _id: "s" } as never, { $inc: { n: 1 } }, { ...place, session });
      });
      expect(String(await failure(over))).toMatch(/"orders.place" reaches 3 shards/);
      // Nothing of the refused transaction was kept.
      expect(await orders.countDocuments({ customerId: { $in: ["c1", "c2"] } }, limit)).toBe(2);
      await session.endSession();
    });

    it("counts a transaction's reads, and a broadcast as every shard", async () => {
      const { fake, client, db } = cluster();
      await fake.shardCollection("t.orders", { customerId: 1 });
      const orders = db.collection("orders");
      const session = client.startSession();
      const tight = { ...limit, comment: { transaction: "orders.tight" } };
      const reads = session.withTransaction(async () => {
        await orders.findOne({ customerId: "c1" }, { ...tight, session });
        await orders.findOne({ customerId: "c2" }, { ...tight, session });
      });
      expect(String(await failure(reads))).toMatch(/reaches 2 shards/);
      session.startTransaction({ maxCommitTimeMS: 1000 });
      const broadcast = orders.findOne(
        {},
        { ...place, session, comment: { transaction: "orders.place", scatterGather: "orders.report" } },
      );
      expect(String(await failure(broadcast))).toMatch(/reaches 3 shards/);
      await session.endSession();
    });

    it("refuses a transaction that names no declaration, or two", async () => {
      const { client, db } = cluster();
      const session = client.startSession();
      session.startTransaction({ maxCommitTimeMS: 1000 });
      const unnamed = db.collection("stock").insertOne({ n: 1 }, { ...limit, session });
      expect(await failure(unnamed)).toBeInstanceOf(ClusterPolicyError);
      await session.abortTransaction();
      session.startTransaction({ maxCommitTimeMS: 1000 });
      await db.collection("stock").insertOne({ n: 1 }, { ...place, session });
      const other = db
        .collection("stock")
        .insertOne({ n: 2 }, { ...limit, session, comment: { transaction: "orders.tight" } });
      expect(await failure(other)).toBeInstanceOf(ClusterPolicyError);
      await session.endSession();
    });
  });
});
