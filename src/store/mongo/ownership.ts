import type { Filter } from "mongodb";
import { binsOverlapping } from "../bins.js";
import type { KtIntakeRefusal, KtPendingInput } from "../kt-types.js";
import type {
  BinStore,
  IssuerEscrowKeyRecord,
  IssuerEscrowKeyStore,
  MerchantOwnerRecord,
  MerchantOwnerStore,
  SetBinsOutcome,
} from "../types.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey } from "./errors.js";
import { COLLECTIONS } from "./indexes.js";
import { ktIntakeIn } from "./kt-docs.js";

/** Issuer escrow keys in `issuerEscrowKeys`. */
export class MongoIssuerEscrowKeys implements IssuerEscrowKeyStore {
  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<IssuerEscrowKeyRecord>(COLLECTIONS.issuerEscrowKeys);
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

/** A BIN prefix as stored in `bins`: the prefix is the `_id`, so a prefix has one owner. */
interface BinDoc {
  _id: string;
  tenantId: string;
  setAt: Date;
}

/** BIN prefixes in `bins`. */
export class MongoBins implements BinStore {
  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<BinDoc>(COLLECTIONS.bins);
  }

  private get locks() {
    return this.ctx.collection<{ _id: string; writes: number }>(COLLECTIONS.binLocks);
  }

  /**
   * In one transaction: checks every prefix (and the prefixes overlapping it) against other tenants,
   * then replaces the tenant's list. A concurrent insert of the same prefix by another tenant collides
   * on `_id` and aborts the transaction (nothing changed).
   */
  set(
    tenantId: string,
    bins: readonly string[],
    now: Date,
    kt?: readonly KtPendingInput[],
  ): Promise<SetBinsOutcome | KtIntakeRefusal> {
    return this.ctx.run(async () => {
      try {
        return await this.ctx.transaction("bins.set", async (session) => {
          const read = this.ctx.readIn(session);
          for (const bin of bins) {
            const others = await this.collection
              .find<BinDoc>(
                {
                  tenantId: { $ne: tenantId },
                  $or: [
                    { _id: { $in: binsOverlapping(bin) } },
                    ...(bin.length === 6 ? [{ _id: { $regex: `^${bin}` } }] : []),
                  ],
                },
                read,
              )
              .limit(1)
              .toArray();
            if (others.length > 0) return { kind: "conflict", bin } as const;
          }
          const intake = await ktIntakeIn(this.ctx, session, kt);
          if ("kind" in intake) return intake;
          const write = this.ctx.writeIn(session);
          // Overlapping prefixes of two tenants are different documents, so inserting both would not
          // collide: every set also writes the lock of each 6-digit prefix it touches, and two
          // transactions writing one document conflict (one retries, and then sees the other's BIN).
          for (const prefix of new Set(bins.map((bin) => bin.slice(0, 6)))) {
            await this.locks.updateOne({ _id: prefix }, { $inc: { writes: 1 } }, { ...write, upsert: true });
          }
          await this.collection.deleteMany({ tenantId }, write);
          if (bins.length > 0) {
            await this.collection.insertMany(
              bins.map((bin) => ({ _id: bin, tenantId, setAt: now })),
              write,
            );
          }
          await intake.write();
          return { kind: "set" } as const;
        });
      } catch (err) {
        if (isDuplicateKey(err)) return { kind: "conflict", bin: bins[0] ?? "" };
        throw err;
      }
    });
  }

  list(tenantId: string): Promise<string[]> {
    return this.ctx.run(async () =>
      (await this.collection.find<BinDoc>({ tenantId }, this.ctx.limit).sort({ _id: 1 }).toArray()).map(
        (doc) => doc._id,
      ),
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
  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<MerchantDoc>(COLLECTIONS.merchants);
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
