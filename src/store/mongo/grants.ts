import type { GrantOutcome, GrantRecord, GrantStore } from "../types.js";
import { declareCollection, TTL_INDEX } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey, storeUnavailable } from "./errors.js";

/** One live grant of a user, as held in its slots document. */
interface Slot {
  tokenHash: string;
  expiresAt: Date;
}

/**
 * The grant cap of one user: `_id` is the userId, `slots` its grants not yet pruned, `expiresAt` the
 * latest expiry ever pushed (so the TTL index deletes the document only when every slot is expired).
 */
interface SlotsDoc {
  _id: string;
  slots?: Slot[];
  expiresAt?: Date;
}

/** How often `create` re-tries when its view of the slots changed under it (pruned or deleted). */
const CREATE_ATTEMPTS = 5;

/** Decrypt grants, each found by the hash of its token. */
export const GRANTS = declareCollection({
  name: "grants",
  indexes: [
    { key: { tokenHash: 1 }, name: "uniq_tokenHash", unique: true },
    // Erasure's deleteMany({userId}): live grants are the decrypts of the last three minutes, which at a
    // peak of hundreds a second is too many to read through for each erasure.
    { key: { userId: 1 }, name: "byUser" },
    TTL_INDEX,
  ],
  shardKey: {
    key: "unsharded",
    why: "Grants live three minutes (TTL): a few thousand at any time, whatever the number of receipts.",
  },
});

/** One document per user holding the hashes and expiries of its live grants (the cap's slots). */
export const GRANT_SLOTS = declareCollection({
  name: "grantSlots",
  indexes: [TTL_INDEX],
  shardKey: { key: "unsharded", why: "One small document per user with live grants, as grants." },
});

/**
 * Decrypt grants in the `grants` collection (TTL on `expiresAt`), with the per-user cap enforced on a
 * slots document in `grantSlots`.
 *
 * Why a slots document: counting a user's grants and then inserting is a check-then-act race, even in
 * a transaction (two snapshot reads both see `cap - 1`). A single-document update is atomic, so the
 * cap is taken by a `$push` guarded by `"slots.<cap-1>": {$exists: false}` (the array has fewer than
 * `cap` elements), after a `$pull` of the slots expired at `now`.
 */
export class MongoGrants implements GrantStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [GRANTS, GRANT_SLOTS] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get grants() {
    return this.ctx.collection<GrantRecord>(GRANTS.name);
  }

  private get slots() {
    return this.ctx.collection<SlotsDoc>(GRANT_SLOTS.name);
  }

  async create(grant: GrantRecord, cap: number, now: Date): Promise<GrantOutcome> {
    if (!Number.isInteger(cap) || cap < 1) throw new RangeError("The grant cap must be a positive integer.");
    return this.ctx.run(async () => {
      for (let attempt = 1; attempt <= CREATE_ATTEMPTS; attempt++) {
        const outcome = await this.takeSlot(grant, cap, now);
        if (outcome === "retry") continue;
        if (outcome.kind === "created") await this.insertGrant(grant);
        return outcome;
      }
      throw storeUnavailable(new Error(`Grant slots of a user contended ${CREATE_ATTEMPTS} times in a row.`));
    });
  }

  /** Deletes the user's grants and its slots document. */
  deleteByUser(userId: string): Promise<number> {
    return this.ctx.run(async () => {
      const { deletedCount } = await this.grants.deleteMany({ userId }, this.ctx.limit);
      await this.slots.deleteOne({ _id: userId }, this.ctx.limit);
      return deletedCount;
    });
  }

  findByHash(tokenHash: string): Promise<GrantRecord | undefined> {
    return this.ctx.run(
      async () => (await this.grants.findOne<GrantRecord>({ tokenHash }, this.ctx.read)) ?? undefined,
    );
  }

  /** Takes one of the user's `cap` slots, or reports when the oldest one frees up. */
  private async takeSlot(grant: GrantRecord, cap: number, now: Date): Promise<GrantOutcome | "retry"> {
    const userId = grant.userId;
    // Prune the expired slots, creating the document on first use. The server itself retries an upsert
    // on `_id` alone that loses a race to insert; should one still fail, the next attempt finds the doc.
    try {
      await this.slots.updateOne(
        { _id: userId },
        { $pull: { slots: { expiresAt: { $lte: now } } } },
        { ...this.ctx.limit, upsert: true },
      );
    } catch (err) {
      if (isDuplicateKey(err)) return "retry";
      throw err;
    }
    const pushed = await this.slots.updateOne(
      { _id: userId, [`slots.${cap - 1}`]: { $exists: false } },
      {
        $push: { slots: { tokenHash: grant.tokenHash, expiresAt: grant.expiresAt } },
        $max: { expiresAt: grant.expiresAt },
      },
      this.ctx.limit,
    );
    if (pushed.matchedCount === 1) return { kind: "created" };

    const doc = await this.slots.findOne({ _id: userId }, this.ctx.limit);
    const live = (doc?.slots ?? []).filter((slot) => slot.expiresAt > now);
    if (live.length < cap) return "retry";
    const oldest = Math.min(...live.map((slot) => slot.expiresAt.getTime()));
    return { kind: "cap_reached", oldestExpiresAt: new Date(oldest) };
  }

  /** Stores the grant whose slot was taken; if that fails, frees the slot again (best effort). */
  private async insertGrant(grant: GrantRecord): Promise<void> {
    try {
      await this.grants.insertOne({ ...grant }, this.ctx.limit);
    } catch (err) {
      // If this cleanup fails too, the slot stays taken until it expires: the cap errs on the safe side.
      await this.slots
        .updateOne(
          { _id: grant.userId },
          { $pull: { slots: { tokenHash: grant.tokenHash } } },
          this.ctx.limit,
        )
        .catch(() => undefined);
      throw err;
    }
  }
}
