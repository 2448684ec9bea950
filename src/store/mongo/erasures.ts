import type { ErasureRecord, ErasureStore } from "../types.js";
import { declareCollection } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey } from "./errors.js";

/** Erasures begun and not finished, one document per user: what a retry finishes. */
export const ERASURES = declareCollection({
  name: "erasures",
  indexes: [{ key: { userId: 1 }, name: "uniq_userId", unique: true }],
  shardKey: {
    key: "unsharded",
    why: "One document per erasure in progress, removed when it finishes: a handful at any time.",
  },
});

/** Erasures in progress in the `erasures` collection, one document per user (unique `userId`). */
export class MongoErasures implements ErasureStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [ERASURES] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<ErasureRecord>(ERASURES.name);
  }

  /** An upsert that only inserts; two at once collide on the unique index, and the loser reads the winner's. */
  begin(record: ErasureRecord): Promise<ErasureRecord> {
    return this.ctx.run(async () => {
      try {
        await this.collection.updateOne(
          { userId: record.userId },
          { $setOnInsert: { ...record } },
          { ...this.ctx.limit, upsert: true },
        );
      } catch (err) {
        if (!isDuplicateKey(err)) throw err;
      }
      const kept = await this.collection.findOne<ErasureRecord>({ userId: record.userId }, this.ctx.read);
      return kept ?? record;
    });
  }

  find(userId: string): Promise<ErasureRecord | undefined> {
    return this.ctx.run(async () => {
      const kept = await this.collection.findOne<ErasureRecord>({ userId }, this.ctx.read);
      return kept ?? undefined;
    });
  }

  finish(userId: string): Promise<void> {
    return this.ctx.run(async () => {
      await this.collection.deleteOne({ userId }, this.ctx.limit);
    });
  }
}
