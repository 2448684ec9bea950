import type { RateLimitStore } from "../types.js";
import { declareCollection, TTL_INDEX } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey, storeUnavailable } from "./errors.js";

/** One fixed-window counter: `_id` names the key and the window. */
interface CounterDoc {
  _id: string;
  key: string;
  windowStart: Date;
  count: number;
  expiresAt: Date;
}

/** Rate-limit counters, `_id` the subject, bucket and window. */
export const RATE_LIMITS = declareCollection({
  name: "rateLimits",
  indexes: [TTL_INDEX],
  shardKey: {
    key: { _id: 1 },
    why:
      "Every request upserts one counter by `_id` (`<subject>:<bucket>:<window>`), which must be unique " +
      "(and an upsert must name the whole key); the subject in front spreads API keys over chunks. Request " +
      "counters live two minutes, escrow-intake counters (per merchant tenant and card) one intake window, " +
      "an hour by default.",
  },
});

/** Fixed-window counters in the `rateLimits` collection, shared by every instance; TTL on `expiresAt`. */
export class MongoRateLimits implements RateLimitStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [RATE_LIMITS] as const;

  constructor(private readonly ctx: MongoContext) {}

  increment(key: string, windowStart: Date, expiresAt: Date): Promise<number> {
    const counters = this.ctx.collection<CounterDoc>(RATE_LIMITS.name);
    const filter = { _id: `${key}|${windowStart.getTime()}` };
    const update = { $inc: { count: 1 }, $setOnInsert: { key, windowStart, expiresAt } };
    const options = { ...this.ctx.limit, upsert: true, returnDocument: "after" } as const;
    return this.ctx.run(async () => {
      // Two first increments can race to insert the counter; the server retries such an upsert on
      // `_id` by itself, and the loser of a rare remaining race retries here, finding the document.
      for (let attempt = 1; ; attempt++) {
        try {
          const counter = await counters.findOneAndUpdate(filter, update, options);
          if (counter === null) {
            throw storeUnavailable(new Error("An upsert with returnDocument 'after' returned nothing."));
          }
          return counter.count;
        } catch (err) {
          if (isDuplicateKey(err) && attempt < 3) continue;
          throw err;
        }
      }
    });
  }
}
