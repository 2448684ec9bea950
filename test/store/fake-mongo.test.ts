import { type Db, MongoNetworkError, MongoServerError } from "mongodb";
import { describe, expect, it } from "vitest";
import { FakeMongo } from "./fake-mongo/index.js";

/**
 * The driver fake's own behaviour, where it stands in for MongoDB's: a contract run on the fake
 * proves the adapter only as far as these hold. (What it cannot prove is listed in its header.)
 */
describe("driver fake of MongoDB", () => {
  const limit = { maxTimeMS: 1000 };
  const dbOf = (fake = new FakeMongo({ maxLatencyMs: 1 })) => {
    const client = fake.createClient("mongodb://fake.invalid/", { ignoreUndefined: true });
    return { fake, client, db: client.db("t") as Db };
  };
  const codeOf = (err: unknown) => (err instanceof MongoServerError ? err.code : err);

  it("refuses a duplicate on a unique index with a MongoServerError 11000, and honours partial indexes", async () => {
    const { db } = dbOf();
    const items = db.collection("items");
    await items.createIndexes(
      [
        { key: { a: 1 }, name: "uniq_a", unique: true },
        { key: { p: 1 }, name: "uniq_p", unique: true, partialFilterExpression: { p: { $exists: true } } },
      ],
      limit,
    );
    await items.insertOne({ a: 1 }, limit);
    await items.insertOne({ a: 2 }, limit);
    expect(codeOf(await items.insertOne({ a: 1 }, limit).catch((e: unknown) => e))).toBe(11000);
    expect(codeOf(await items.updateOne({ a: 2 }, { $set: { a: 1 } }, limit).catch((e: unknown) => e))).toBe(
      11000,
    );
    // Documents without `p` are outside the partial index: no duplicate.
    expect(await items.countDocuments({}, limit)).toBe(2);
  });

  it("applies update operators, $setOnInsert only on insert, and pipeline updates", async () => {
    const { db } = dbOf();
    const c = db.collection<{ _id: string; n?: number; first?: string; seen?: Date }>("c");
    await c.updateOne(
      { _id: "x" },
      { $inc: { n: 1 }, $setOnInsert: { first: "yes" } },
      { ...limit, upsert: true },
    );
    await c.updateOne(
      { _id: "x" },
      { $inc: { n: 1 }, $setOnInsert: { first: "no" } },
      { ...limit, upsert: true },
    );
    await c.updateOne({ _id: "x" }, [{ $set: { seen: { $ifNull: ["$seen", new Date(5)] } } }], limit);
    await c.updateOne({ _id: "x" }, [{ $set: { seen: { $ifNull: ["$seen", new Date(9)] } } }], limit);
    expect(await c.findOne({ _id: "x" }, limit)).toEqual({ _id: "x", n: 2, first: "yes", seen: new Date(5) });
  });

  it("rolls back an aborted transaction and isolates it from plain reads until commit", async () => {
    const { client, db } = dbOf();
    const c = db.collection("c");
    const session = client.startSession();
    session.startTransaction({ maxCommitTimeMS: 1000 });
    await c.insertOne({ _id: "a" } as never, { ...limit, session });
    expect(await c.findOne({ _id: "a" } as never, limit)).toBeNull();
    expect(await c.findOne({ _id: "a" } as never, { ...limit, session })).not.toBeNull();
    await session.abortTransaction();
    expect(await c.countDocuments({}, limit)).toBe(0);

    await session.withTransaction(async () => {
      await c.insertOne({ _id: "b" } as never, { ...limit, session });
    });
    expect(await c.countDocuments({}, limit)).toBe(1);
    await session.endSession();
  });

  it("gives the second of two transactions writing one document a transient WriteConflict", async () => {
    const { client, db } = dbOf();
    const c = db.collection("c");
    await c.insertOne({ _id: "d", v: 0 } as never, limit);
    const [s1, s2] = [client.startSession(), client.startSession()];
    s1.startTransaction({ maxCommitTimeMS: 1000 });
    s2.startTransaction({ maxCommitTimeMS: 1000 });
    await c.updateOne({ _id: "d" } as never, { $set: { v: 1 } }, { ...limit, session: s1 });
    const conflict = await c
      .updateOne({ _id: "d" } as never, { $set: { v: 2 } }, { ...limit, session: s2 })
      .catch((e: unknown) => e);
    expect(codeOf(conflict)).toBe(112);
    expect((conflict as MongoServerError).hasErrorLabel("TransientTransactionError")).toBe(true);
    await s1.commitTransaction();
    await s2.abortTransaction();
    expect(await c.findOne({ _id: "d" } as never, limit)).toEqual({ _id: "d", v: 1 });
  });

  it("fails with the driver's network error while down, and answers again once up", async () => {
    const { fake, db } = dbOf();
    fake.down();
    expect(await db.command({ ping: 1, maxTimeMS: 100 }).catch((e: unknown) => e)).toBeInstanceOf(
      MongoNetworkError,
    );
    fake.up();
    await expect(db.command({ ping: 1, maxTimeMS: 100 })).resolves.toEqual({ ok: 1 });
  });

  it("refuses an operation without a server-side time limit", async () => {
    const { db } = dbOf();
    await expect(db.collection("c").findOne({})).rejects.toThrow(/maxTimeMS/);
  });
});
