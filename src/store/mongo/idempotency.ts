import type { IdempotencyBegin, IdempotencyStore } from "../types.js";
import { declareCollection, TTL_INDEX } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey, storeUnavailable } from "./errors.js";

/** One idempotency key: `_id` is the key itself, so the primary index makes claiming it atomic. */
interface IdempotencyDoc {
  _id: string;
  requestHash: string;
  expiresAt: Date;
  /** Until when the call that started the key is presumed alive; absent on records from before leases. */
  leaseUntil?: Date;
  /** Set by `complete`; absent while the first call runs. */
  response?: string;
}

/** How often `begin` re-tries when the record it collided with vanished or expired meanwhile. */
const BEGIN_ATTEMPTS = 5;

/** Idempotency records, `_id` the key. */
export const IDEMPOTENCY = declareCollection({
  name: "idempotency",
  indexes: [TTL_INDEX],
  shardKey: {
    key: { _id: 1 },
    why:
      "The claim of a key is its `_id` (`<apiKeyId>:<Idempotency-Key>`), unique only with `_id` as a " +
      "ranged key; the API key id in front spreads tenants over chunks. Kept 24 h: its size follows " +
      "the rate of creates.",
  },
});

/** Idempotency records in the `idempotency` collection; TTL on `expiresAt`. */
export class MongoIdempotency implements IdempotencyStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [IDEMPOTENCY] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<IdempotencyDoc>(IDEMPOTENCY.name);
  }

  /**
   * Claims the key by inserting it; on a duplicate, reads the record that won. An expired record
   * (not yet deleted by the TTL monitor), or a started one of the same request whose lease has run
   * out, is taken over with a conditional replace, so that only one concurrent caller can take it over.
   */
  begin(
    key: string,
    requestHash: string,
    expiresAt: Date,
    now: Date,
    leaseUntil: Date,
  ): Promise<IdempotencyBegin> {
    return this.ctx.run(async () => {
      const claim = { requestHash, expiresAt, leaseUntil };
      for (let attempt = 1; attempt <= BEGIN_ATTEMPTS; attempt++) {
        try {
          await this.collection.insertOne({ _id: key, ...claim }, this.ctx.limit);
          return { kind: "started" };
        } catch (err) {
          if (!isDuplicateKey(err)) throw err;
        }
        const existing = await this.collection.findOne({ _id: key }, this.ctx.limit);
        if (existing === null) continue;
        const expired = existing.expiresAt <= now;
        if (!expired && existing.response !== undefined) {
          return { kind: "completed", requestHash: existing.requestHash, response: existing.response };
        }
        const stale =
          existing.requestHash === requestHash && !(existing.leaseUntil && existing.leaseUntil > now);
        if (!expired && !stale) return { kind: "in_progress", requestHash: existing.requestHash };
        const replaced = await this.collection.replaceOne(
          expired
            ? { _id: key, expiresAt: { $lte: now } }
            : {
                _id: key,
                requestHash,
                response: { $exists: false },
                leaseUntil: { $not: { $gt: now } },
              },
          claim,
          this.ctx.limit,
        );
        if (replaced.matchedCount === 1) return { kind: "started" };
      }
      // Contention, not a bug: a 503 the client retries, like the other stores' contention limits.
      throw storeUnavailable(new Error(`Idempotency key contended ${BEGIN_ATTEMPTS} times in a row.`));
    });
  }

  /** Records the response of a started key; a completed or unknown key is left as it is. */
  complete(key: string, response: string): Promise<void> {
    return this.ctx.run(async () => {
      await this.collection.updateOne(
        { _id: key, response: { $exists: false } },
        { $set: { response } },
        this.ctx.limit,
      );
    });
  }

  /** Forgets a key its caller still holds; a completed key keeps its response, so a retry still gets it. */
  abandon(key: string, leaseUntil: Date): Promise<void> {
    return this.ctx.run(async () => {
      await this.collection.deleteOne({ _id: key, response: { $exists: false }, leaseUntil }, this.ctx.limit);
    });
  }
}
