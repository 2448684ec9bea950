import type { ClientSession, Filter } from "mongodb";
import { binsOverlapping } from "../bins.js";
import type { KtIntakeRefusal, KtPendingInput } from "../kt-types.js";
import type {
  BinKind,
  BinList,
  BinStore,
  IssuerEscrowKeyRecord,
  IssuerEscrowKeyStore,
  MerchantOwnerRecord,
  MerchantOwnerStore,
  SetBinsOutcome,
} from "../types.js";
import { declareCollection } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { duplicateId, isDuplicateKey } from "./errors.js";
import { ktIntakeIn } from "./kt-log.js";

/** Issuer tenants' escrow public keys. */
export const ISSUER_ESCROW_KEYS = declareCollection({
  name: "issuerEscrowKeys",
  indexes: [
    { key: { escrowKeyId: 1 }, name: "uniq_escrowKeyId", unique: true },
    { key: { tenantId: 1, createdAt: -1 }, name: "byTenant" },
  ],
  shardKey: { key: "unsharded", why: "A few keys per issuer tenant." },
});

/** BIN prefixes, `_id` the prefix, one owner each. */
export const BINS = declareCollection({
  name: "bins",
  indexes: [{ key: { tenantId: 1 }, name: "byTenant" }],
  shardKey: {
    key: "unsharded",
    why: "BIN prefixes, thousands; set in one transaction with binLocks, on one shard while both stay whole.",
  },
});

/** One document per 6-digit BIN prefix in use, written by every change of a BIN under it (see `MongoBins`). */
export const BIN_LOCKS = declareCollection({
  name: "binLocks",
  indexes: [],
  shardKey: { key: "unsharded", why: "One document per 6-digit prefix in use, as bins." },
});

/** MerchantIds, `_id` the merchantId, and the merchant tenant each belongs to. */
export const MERCHANTS = declareCollection({
  name: "merchants",
  indexes: [],
  shardKey: { key: "unsharded", why: "One document per merchantId." },
});

/** Issuer escrow keys in `issuerEscrowKeys`. */
export class MongoIssuerEscrowKeys implements IssuerEscrowKeyStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [ISSUER_ESCROW_KEYS] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<IssuerEscrowKeyRecord>(ISSUER_ESCROW_KEYS.name);
  }

  /**
   * A plain insert; with `kt`, one transaction with the key log's intake. The unique index on
   * `escrowKeyId` refuses an id any tenant holds (`id_taken`, the transaction aborted).
   */
  insert(
    key: IssuerEscrowKeyRecord,
    kt?: readonly KtPendingInput[],
  ): Promise<KtIntakeRefusal | { kind: "id_taken" } | undefined> {
    return this.ctx.run(async () => {
      try {
        if (kt === undefined || kt.length === 0) {
          await this.collection.insertOne({ ...key }, this.ctx.limit);
          return undefined;
        }
        return await this.ctx.transaction("issuerEscrowKeys.insert", async (session) => {
          const intake = await ktIntakeIn(this.ctx, session, kt);
          if ("kind" in intake) return intake;
          await this.collection.insertOne({ ...key }, this.ctx.writeIn(session));
          await intake.write();
          return undefined;
        });
      } catch (err) {
        if (isDuplicateKey(err)) return { kind: "id_taken" as const };
        throw err;
      }
    });
  }

  async current(tenantId: string): Promise<IssuerEscrowKeyRecord | undefined> {
    return (await this.newestFirst({ tenantId, revokedAt: { $exists: false } }, 1))[0];
  }

  list(tenantId: string): Promise<IssuerEscrowKeyRecord[]> {
    return this.newestFirst({ tenantId }, 0);
  }

  revoke(tenantId: string, escrowKeyId: string, at: Date): Promise<IssuerEscrowKeyRecord | undefined> {
    return this.ctx.run(async () => {
      await this.collection.updateOne(
        { tenantId, escrowKeyId, revokedAt: { $exists: false } },
        { $set: { revokedAt: at } },
        this.ctx.limit,
      );
      return (
        (await this.collection.findOne<IssuerEscrowKeyRecord>({ tenantId, escrowKeyId }, this.ctx.read)) ??
        undefined
      );
    });
  }

  /** The keys matching `filter` (one tenant's), newest first; `limit` 0 for all. */
  private newestFirst(
    filter: Filter<IssuerEscrowKeyRecord>,
    limit: number,
  ): Promise<IssuerEscrowKeyRecord[]> {
    return this.ctx.run(() =>
      this.collection
        .find<IssuerEscrowKeyRecord>(filter, this.ctx.read)
        .sort({ createdAt: -1, escrowKeyId: -1 })
        .limit(limit)
        .toArray(),
    );
  }
}

/**
 * A prefix as stored in `bins`: the prefix is the `_id`, so a prefix has one owner and one kind;
 * `kind` is absent for a card BIN (every document written before token BINs) and `token-bin` for one.
 */
interface BinDoc {
  _id: string;
  tenantId: string;
  kind?: "token-bin";
  setAt: Date;
}

/** The documents of one tenant's list of one kind (the `byTenant` index serves it). */
function listFilter(tenantId: string, kind: BinKind): Filter<BinDoc> {
  return kind === "token-bin" ? { tenantId, kind: "token-bin" } : { tenantId, kind: { $ne: "token-bin" } };
}

/** Thrown inside the transaction to abort it: `bin` would belong to two tenants. */
class BinTaken extends Error {
  constructor(readonly bin: string) {
    super("A BIN prefix belongs to another tenant.");
  }
}

/** BIN and token-BIN prefixes in `bins`. */
export class MongoBins implements BinStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [BINS, BIN_LOCKS] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<BinDoc>(BINS.name);
  }

  private get locks() {
    return this.ctx.collection<{ _id: string; writes: number }>(BIN_LOCKS.name);
  }

  set(
    tenantId: string,
    bins: readonly string[],
    now: Date,
    kt?: readonly KtPendingInput[],
  ): Promise<SetBinsOutcome | KtIntakeRefusal> {
    return this.setLists([{ tenantId, kind: "bin", bins }], now, kt);
  }

  /**
   * In one transaction: removes every list's documents, then checks each new prefix (and those
   * overlapping it) against the other tenants' documents left and inserted so far, and inserts it. A
   * prefix taken aborts the whole transaction (nothing changed); so does a concurrent insert of the
   * same prefix by another tenant, or a prefix the tenant holds as the other kind, which collide on
   * `_id` (the conflict names that prefix).
   */
  setLists(
    lists: readonly BinList[],
    now: Date,
    kt?: readonly KtPendingInput[],
  ): Promise<SetBinsOutcome | KtIntakeRefusal> {
    return this.ctx.run(async () => {
      try {
        return await this.ctx.transaction("bins.set", async (session) => {
          const intake = await ktIntakeIn(this.ctx, session, kt);
          if ("kind" in intake) return intake;
          const write = this.ctx.writeIn(session);
          // Overlapping prefixes of two tenants are different documents, so inserting both would not
          // collide: every set also writes the lock of each 6-digit prefix it touches, and two
          // transactions writing one document conflict (one retries, and then sees the other's BIN).
          const touched = new Set(lists.flatMap((l) => l.bins.map((bin) => bin.slice(0, 6))));
          for (const prefix of touched) {
            await this.locks.updateOne({ _id: prefix }, { $inc: { writes: 1 } }, { ...write, upsert: true });
          }
          for (const list of lists)
            await this.collection.deleteMany(listFilter(list.tenantId, list.kind), write);
          for (const { tenantId, kind, bins } of lists) {
            for (const bin of bins)
              if (await this.takenByOther(session, tenantId, bin)) throw new BinTaken(bin);
            if (bins.length === 0) continue;
            const docs = [...new Set(bins)].map((bin) => ({
              _id: bin,
              tenantId,
              ...(kind === "token-bin" ? { kind } : {}),
              setAt: now,
            }));
            await this.collection.insertMany(docs, write);
          }
          await intake.write();
          return { kind: "set" } as const;
        });
      } catch (err) {
        if (err instanceof BinTaken) return { kind: "conflict", bin: err.bin };
        // The prefix the index refused: one the tenant holds as the other kind, or another tenant's.
        if (isDuplicateKey(err)) return { kind: "conflict", bin: duplicateId(err) };
        throw err;
      }
    });
  }

  /** Whether another tenant holds `bin`, a 6-digit prefix of it, or (for 6 digits) an 8-digit one under it. */
  private async takenByOther(session: ClientSession, tenantId: string, bin: string): Promise<boolean> {
    const others = await this.collection
      .find<BinDoc>(
        {
          tenantId: { $ne: tenantId },
          $or: [
            { _id: { $in: binsOverlapping(bin) } },
            ...(bin.length === 6 ? [{ _id: { $regex: `^${bin}` } }] : []),
          ],
        },
        this.ctx.readIn(session),
      )
      .limit(1)
      .toArray();
    return others.length > 0;
  }

  list(tenantId: string, kind: BinKind = "bin"): Promise<string[]> {
    return this.ctx.run(async () =>
      (
        await this.collection
          .find<BinDoc>(listFilter(tenantId, kind), this.ctx.limit)
          .sort({ _id: 1 })
          .toArray()
      ).map((doc) => doc._id),
    );
  }

  ownerOf(cardBin: string): Promise<string | undefined> {
    return this.ctx.run(async () => {
      const found = await this.collection
        .find<BinDoc>({ _id: { $in: binsOverlapping(cardBin) } }, this.ctx.limit)
        .toArray();
      // The most specific prefix wins (8 digits before 6); `set` keeps them from disagreeing anyway.
      found.sort((a, b) => b._id.length - a._id.length);
      return found[0]?.tenantId;
    });
  }

  /** An anchored regex on `_id` (6 digits, checked by the domain) reads a range of the `_id` index. */
  hasOwnedPrefixUnder(bin: string): Promise<boolean> {
    if (!/^\d{6}$/.test(bin)) return Promise.resolve(false);
    return this.ctx.run(async () => {
      const found = await this.collection
        .find<BinDoc>({ _id: { $regex: `^${bin}\\d{2}$` } }, { ...this.ctx.limit, projection: { _id: 1 } })
        .limit(1)
        .toArray();
      return found.length > 0;
    });
  }
}

/** A merchantId's owner as stored in `merchants`: the merchantId is the `_id`. */
interface MerchantDoc {
  _id: string;
  tenantId: string;
  source: MerchantOwnerRecord["source"];
  at: Date;
}

function recordOf(doc: MerchantDoc): MerchantOwnerRecord {
  return { merchantId: doc._id, tenantId: doc.tenantId, source: doc.source, at: doc.at };
}

/** MerchantId owners in `merchants`. */
export class MongoMerchantOwners implements MerchantOwnerStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [MERCHANTS] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<MerchantDoc>(MERCHANTS.name);
  }

  /** An upsert that only inserts: the first claimant's document stays, and every claim returns it. */
  claim(merchantId: string, tenantId: string, now: Date): Promise<MerchantOwnerRecord> {
    return this.ctx.run(async () => {
      const doc = await this.collection.findOneAndUpdate(
        { _id: merchantId },
        { $setOnInsert: { tenantId, source: "first_use", at: now } },
        { ...this.ctx.limit, upsert: true, returnDocument: "after" },
      );
      return doc === null ? { merchantId, tenantId, source: "first_use", at: now } : recordOf(doc);
    });
  }

  /** One upsert that returns the document before it: the previous owner, read atomically. */
  assign(
    merchantId: string,
    tenantId: string,
    now: Date,
  ): Promise<{ record: MerchantOwnerRecord; previousTenantId?: string }> {
    return this.ctx.run(async () => {
      const before = await this.collection.findOneAndUpdate(
        { _id: merchantId },
        { $set: { tenantId, source: "operator", at: now } },
        { ...this.ctx.limit, upsert: true, returnDocument: "before" },
      );
      const record: MerchantOwnerRecord = { merchantId, tenantId, source: "operator", at: now };
      return before === null ? { record } : { record, previousTenantId: before.tenantId };
    });
  }

  find(merchantId: string): Promise<MerchantOwnerRecord | undefined> {
    return this.ctx.run(async () => {
      const doc = await this.collection.findOne<MerchantDoc>({ _id: merchantId }, this.ctx.limit);
      return doc === null ? undefined : recordOf(doc);
    });
  }
}
