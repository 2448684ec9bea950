import type { ClientSession, FindOptions, UpdateOptions } from "mongodb";
import { RSA_OAEP_256 } from "../../crypto/suites.js";
import type { EventRecord } from "../event-types.js";
import type { KtIntakeRefusal, KtPendingInput } from "../kt-types.js";
import {
  inputRefsOf,
  ownUserOf,
  planRegister,
  planTransfer,
  type RegisterInput,
  type TransferInput,
  type TransferOutcome,
} from "../register.js";
import type { KeyRecord, RegisterOutcome, UserRecord, UserStore } from "../types.js";
import { declareCollection, TTL_INDEX } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey, storeUnavailable } from "./errors.js";
import { announceEvents, insertEventsIn } from "./events.js";
import { ktIntakeIn } from "./kt-log.js";

/** Cardholders, unique by `userId` and by card reference. */
export const USERS = declareCollection({
  name: "users",
  indexes: [
    { key: { userId: 1 }, name: "uniq_userId", unique: true },
    { key: { panHash: 1 }, name: "uniq_panHash", unique: true },
    // A card's second reference (hashed PAN beside PAR): unique, and found like a panHash.
    {
      key: { aliasPanHash: 1 },
      name: "uniq_aliasPanHash",
      unique: true,
      partialFilterExpression: { aliasPanHash: { $exists: true } },
    },
  ],
  shardKey: {
    key: "unsharded",
    why:
      "One document per cardholder (about 250 B: 50 million fit in tens of GB with indexes); registration " +
      "reads and writes users and keys in one transaction, on one shard while both stay whole.",
  },
});

/** Cardholders' public keys, unique by `keyId`. */
export const KEYS = declareCollection({
  name: "keys",
  indexes: [
    { key: { keyId: 1 }, name: "uniq_keyId", unique: true },
    // A user's keys: listKeys, and erasure's deleteMany({userId}).
    { key: { userId: 1 }, name: "byUser" },
  ],
  shardKey: {
    key: "unsharded",
    why: "One document per key (under 700 B), written with users in registration's one-shard transaction.",
  },
});

/**
 * One short-lived document per card reference being registered (`_id` the keyed reference): the
 * write conflict that keeps a reference from going to two users, one as a panHash and one as an
 * alias (see `MongoUsers.register`). Expires a minute after.
 */
export const CARD_REF_LOCKS = declareCollection({
  name: "cardRefLocks",
  indexes: [TTL_INDEX],
  shardKey: {
    key: "unsharded",
    why:
      "Written in registration's transaction beside users (the primary shard), and gone a minute later: " +
      "as many documents as registrations in the last minute.",
  },
});

/** How often `register` starts over after losing a race on a unique index to a concurrent call. */
const REGISTER_ATTEMPTS = 5;

/** Users in `users` (unique userId and panHash) and their keys in `keys` (unique keyId). */
export class MongoUsers implements UserStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [USERS, KEYS, CARD_REF_LOCKS] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get users() {
    return this.ctx.collection<UserRecord>(USERS.name);
  }

  private get keys() {
    return this.ctx.collection<KeyRecord>(KEYS.name);
  }

  findById(userId: string): Promise<UserRecord | undefined> {
    return this.ctx.run(
      async () => (await this.users.findOne<UserRecord>({ userId }, this.ctx.read)) ?? undefined,
    );
  }

  /** The user holding the card reference, as its panHash or as its alias (two unique indexes). */
  findByPanHash(panHash: string): Promise<UserRecord | undefined> {
    return this.ctx.run(() => this.holderOf(panHash, this.ctx.read));
  }

  /**
   * The user holding `ref`: by panHash, then by alias (each read seeks its own unique index, so every
   * filter this store sends stays on one index).
   */
  private async holderOf(ref: string, read: FindOptions): Promise<UserRecord | undefined> {
    return (
      (await this.users.findOne<UserRecord>({ panHash: ref }, read)) ??
      (await this.users.findOne<UserRecord>({ aliasPanHash: ref }, read)) ??
      undefined
    );
  }

  insertPendingKey(key: KeyRecord): Promise<boolean> {
    return this.ctx.run(async () => {
      try {
        await this.keys.insertOne({ ...key }, this.ctx.limit);
        return true;
      } catch (err) {
        if (isDuplicateKey(err)) return false;
        throw err;
      }
    });
  }

  findKey(keyId: string): Promise<KeyRecord | undefined> {
    return this.ctx.run(async () => {
      const key = await this.keys.findOne<KeyRecord>({ keyId }, this.ctx.read);
      return key === null ? undefined : withAlgorithm(key);
    });
  }

  listKeys(userId: string): Promise<KeyRecord[]> {
    return this.ctx.run(async () =>
      (
        await this.keys
          .find<KeyRecord>({ userId }, this.ctx.read)
          .sort({ registeredAt: 1, createdAt: 1, keyId: 1 })
          .toArray()
      ).map(withAlgorithm),
    );
  }

  /**
   * Deletes the keys, then the user with its events in one transaction (`users.erase`): a retry after
   * a failure in between finds the user and finishes, and the events exist once the user is gone.
   * With revocations (`kt`), the keys go inside that transaction too, after the statements' check, so
   * that a refused statement leaves everything as it was.
   */
  erase(
    userId: string,
    events?: readonly EventRecord[],
    kt?: readonly KtPendingInput[],
  ): Promise<{ user: UserRecord; deletedKeys: number } | KtIntakeRefusal | undefined> {
    return this.ctx.run(async () => {
      const user = await this.users.findOne<UserRecord>({ userId }, this.ctx.read);
      if (user === null) return undefined;
      const logged = kt !== undefined && kt.length > 0;
      let deletedKeys = logged ? 0 : (await this.keys.deleteMany({ userId }, this.ctx.limit)).deletedCount;
      const removed = await this.ctx.transaction("users.erase", async (session) => {
        const intake = await ktIntakeIn(this.ctx, session, kt);
        if ("kind" in intake) return intake;
        if (logged)
          deletedKeys = (await this.keys.deleteMany({ userId }, this.ctx.writeIn(session))).deletedCount;
        const { deletedCount: users } = await this.users.deleteOne({ userId }, this.ctx.writeIn(session));
        if (users !== 1) return false;
        await intake.write();
        await insertEventsIn(this.ctx, session, events);
        return true;
      });
      if (removed !== true) return removed === false ? undefined : removed;
      announceEvents(this.ctx, events);
      return { user, deletedKeys };
    });
  }

  /**
   * Reads the user, decides with `planTransfer`, and writes both users (the superseded one first, which
   * frees the references) and the events in one transaction (`users.transfer`), with the references'
   * locks, so that a registration racing for the card reads one state or the other.
   */
  transfer(input: TransferInput): Promise<TransferOutcome> {
    return this.ctx.run(async () => {
      const { outcome, events } = await this.ctx.transaction("users.transfer", async (session) => {
        const read = this.ctx.readIn(session);
        const user = (await this.users.findOne<UserRecord>({ userId: input.userId }, read)) ?? undefined;
        const plan = planTransfer(input, user);
        // The log entries are checked before anything is written: a refusal leaves the transaction empty.
        const intake =
          plan.outcome.kind === "transferred" ? await ktIntakeIn(this.ctx, session, input.kt) : undefined;
        if (intake !== undefined && "kind" in intake) return { outcome: intake, events: undefined };
        const write = { ...this.ctx.writeIn(session), upsert: true };
        if (plan.outcome.kind === "transferred") {
          await this.lockRefs({ ...plan.outcome.user, now: input.now }, write);
        }
        for (const u of plan.users) await this.users.replaceOne({ userId: u.userId }, u, write);
        await intake?.write();
        const events = input.events?.(plan.outcome);
        await insertEventsIn(this.ctx, session, events);
        return { outcome: plan.outcome, events };
      });
      announceEvents(this.ctx, events);
      return outcome;
    });
  }

  /**
   * Reads the user and the keys, decides with `planRegister`, and writes, in one transaction. Two
   * concurrent calls that touch the same user or key conflict (the transaction retries and re-reads);
   * two that both create a user for one panHash collide on the unique panHash index, and the loser
   * starts over and finds the winner's user. So one panHash always gets exactly one user.
   */
  register(input: RegisterInput): Promise<RegisterOutcome> {
    return this.ctx.run(async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          const { outcome, events } = await this.ctx.transaction("users.register", (session) =>
            this.registerIn(session, input),
          );
          announceEvents(this.ctx, events);
          return outcome;
        } catch (err) {
          if (!isDuplicateKey(err)) throw err;
          if (attempt < REGISTER_ATTEMPTS) continue;
          // Contention, not a bug: a 503 the client retries.
          throw storeUnavailable(err);
        }
      }
    });
  }

  private async registerIn(
    session: ClientSession,
    input: RegisterInput,
  ): Promise<{ outcome: RegisterOutcome; events: EventRecord[] | undefined }> {
    const read = this.ctx.readIn(session);
    const user = await this.holderOf(input.panHash, read);
    const aliasUser =
      input.aliasPanHash === undefined ? undefined : await this.holderOf(input.aliasPanHash, read);
    const key = (await this.keys.findOne<KeyRecord>({ keyId: input.key.keyId }, read)) ?? undefined;
    const kept = ownUserOf(input, [user, aliasUser]);
    const activeKey =
      kept !== undefined && kept.activeKeyId !== input.key.keyId
        ? ((await this.keys.findOne<KeyRecord>({ keyId: kept.activeKeyId }, read)) ?? undefined)
        : undefined;
    const plan = planRegister(input, { user, aliasUser, key, activeKey });
    const writes =
      plan.outcome.kind === "created" ||
      plan.outcome.kind === "superseded" ||
      plan.outcome.kind === "rotated" ||
      plan.outcome.kind === "unchanged";
    // The statements are checked before anything is written: a refusal leaves the transaction empty.
    const intake = writes ? await ktIntakeIn(this.ctx, session, input.kt) : undefined;
    if (intake !== undefined && "kind" in intake) return { outcome: intake, events: undefined };

    const write = { ...this.ctx.writeIn(session), upsert: true };
    if (plan.users.length > 0) await this.lockRefs(input, write);
    // In the plan's order: a superseded user gives up the panHash before the new user takes it.
    for (const u of plan.users) await this.users.replaceOne({ userId: u.userId }, u, write);
    for (const k of plan.keys) await this.keys.replaceOne({ keyId: k.keyId }, k, write);
    await intake?.write();
    const events = input.events?.(plan.outcome);
    await insertEventsIn(this.ctx, session, events);
    return { outcome: plan.outcome, events };
  }

  /**
   * Writes one lock document per card reference of the call, in its transaction: two registrations
   * naming one reference, one as a panHash and the other as an alias (two fields, so no unique index
   * sees both), then write the same document, and MongoDB lets only one of them commit; the other
   * retries and reads the winner's user. Locks expire after a minute: only concurrent calls need them.
   */
  private async lockRefs(
    input: Pick<RegisterInput, "panHash" | "aliasPanHash" | "now">,
    write: UpdateOptions,
  ): Promise<void> {
    const locks = this.ctx.collection<{ _id: string; expiresAt: Date }>(CARD_REF_LOCKS.name);
    const expiresAt = new Date(input.now.getTime() + CARD_REF_LOCK_MS);
    for (const ref of inputRefsOf(input)) await locks.updateOne({ _id: ref }, { $set: { expiresAt } }, write);
  }
}

/** How long a card reference's lock document outlives its registration (TTL). */
const CARD_REF_LOCK_MS = 60_000;

/** A stored key with its suite: keys stored before there were two suites have none, and are RSA. */
function withAlgorithm(key: KeyRecord): KeyRecord {
  key.algorithm ??= RSA_OAEP_256;
  return key;
}
