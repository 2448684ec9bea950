import type { ApiKeyRecord, ApiKeyStore } from "../types.js";
import { declareCollection } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey } from "./errors.js";

/** API keys, unique by `id` and by `keyHash`. */
export const API_KEYS = declareCollection({
  name: "apiKeys",
  indexes: [
    { key: { id: 1 }, name: "uniq_id", unique: true },
    { key: { keyHash: 1 }, name: "uniq_keyHash", unique: true },
    { key: { createdAt: 1, id: 1 }, name: "list" },
  ],
  shardKey: { key: "unsharded", why: "One document per API key: thousands, read through a cache." },
});

/** API keys in the `apiKeys` collection, unique by `id` and by `keyHash`. */
export class MongoApiKeys implements ApiKeyStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [API_KEYS] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<ApiKeyRecord>(API_KEYS.name);
  }

  insert(record: ApiKeyRecord): Promise<boolean> {
    return this.ctx.run(async () => {
      try {
        // A copy: the driver adds `_id` to the document it is given.
        await this.collection.insertOne({ ...record }, this.ctx.limit);
        return true;
      } catch (err) {
        if (isDuplicateKey(err)) return false;
        throw err;
      }
    });
  }

  findByHash(keyHash: string): Promise<ApiKeyRecord | undefined> {
    return this.ctx.run(
      async () => (await this.collection.findOne<ApiKeyRecord>({ keyHash }, this.ctx.read)) ?? undefined,
    );
  }

  /** Every key (or every key of one tenant), oldest first (then by id). */
  list(tenantId?: string): Promise<ApiKeyRecord[]> {
    const filter = tenantId === undefined ? {} : { tenantId };
    return this.ctx.run(() =>
      this.collection.find<ApiKeyRecord>(filter, this.ctx.read).sort({ createdAt: 1, id: 1 }).toArray(),
    );
  }

  revoke(id: string, at: Date): Promise<boolean> {
    return this.ctx.run(async () => {
      // One atomic update that keeps an earlier revocation time: revoking twice keeps the first.
      const result = await this.collection.updateOne(
        { id },
        [{ $set: { revokedAt: { $ifNull: ["$revokedAt", at] } } }],
        this.ctx.limit,
      );
      return result.matchedCount === 1;
    });
  }
}
