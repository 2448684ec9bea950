import type { Lease, LeaseStore } from "../lease-types.js";
import { declareCollection } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey } from "./errors.js";

/** A lease as stored: `_id` its name. */
interface LeaseDoc {
  _id: string;
  holder: string;
  token: number;
  expiresAt: Date;
}

/** Leases of background jobs (`_id` the job's name), with their fencing tokens. */
export const LEASES = declareCollection({
  name: "leases",
  indexes: [],
  shardKey: { key: "unsharded", why: "One document per background job." },
});

/** Leases in `leases` (unsharded). Each step is one atomic single-document write. */
export class MongoLeases implements LeaseStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [LEASES] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get leases() {
    return this.ctx.collection<LeaseDoc>(LEASES.name);
  }

  acquire(name: string, holder: string, now: Date, ttlMs: number): Promise<Lease | undefined> {
    const expiresAt = new Date(now.getTime() + ttlMs);
    const options = { ...this.ctx.limit, returnDocument: "after" as const };
    return this.ctx.run(async () => {
      const renewed = await this.leases.findOneAndUpdate(
        { _id: name, holder, expiresAt: { $gt: now } },
        { $set: { expiresAt } },
        options,
      );
      if (renewed !== null) return leaseOf(renewed);
      const taken = await this.leases.findOneAndUpdate(
        { _id: name, expiresAt: { $lte: now } },
        { $set: { holder, expiresAt }, $inc: { token: 1 } },
        options,
      );
      if (taken !== null) return leaseOf(taken);
      try {
        await this.leases.insertOne({ _id: name, holder, token: 1, expiresAt }, this.ctx.limit);
        return { lease: name, holder, token: 1, expiresAt };
      } catch (err) {
        // Held by another instance (or created by one a moment ago).
        if (isDuplicateKey(err)) return undefined;
        throw err;
      }
    });
  }

  release(lease: Lease): Promise<void> {
    return this.ctx.run(async () => {
      await this.leases.updateOne(
        { _id: lease.lease, holder: lease.holder, token: lease.token },
        { $set: { expiresAt: new Date(0) } },
        this.ctx.limit,
      );
    });
  }
}

function leaseOf(doc: LeaseDoc): Lease {
  return { lease: doc._id, holder: doc.holder, token: doc.token, expiresAt: doc.expiresAt };
}
