import {
  MERCHANT_KEY_HISTORY,
  type MerchantKeyPutOutcome,
  type MerchantKeyRecord,
  type MerchantKeyStore,
} from "../types.js";
import { declareCollection } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey, storeUnavailable } from "./errors.js";

/** How often `put` starts over after losing a race for a new merchantId to a concurrent put. */
const PUT_ATTEMPTS = 5;

/** Merchant signing keys (README, "Merchant signatures"), one document per merchantId. */
export const MERCHANT_KEYS = declareCollection({
  name: "merchantKeys",
  indexes: [{ key: { merchantId: 1 }, name: "uniq_merchantId", unique: true }],
  shardKey: { key: "unsharded", why: "One document per merchantId with a signing key." },
});

/**
 * Merchant signing keys in `merchantKeys`, one document per merchantId (unique index). A rotation is
 * one atomic update of the tenant's document that moves the current key into `previousKeys`; a first
 * registration is an insert, and losing that insert to another put means re-reading who won.
 */
export class MongoMerchantKeys implements MerchantKeyStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [MERCHANT_KEYS] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<MerchantKeyRecord>(MERCHANT_KEYS.name);
  }

  put(key: Omit<MerchantKeyRecord, "previousKeys">): Promise<MerchantKeyPutOutcome> {
    return this.ctx.run(async () => {
      for (let attempt = 1; attempt <= PUT_ATTEMPTS; attempt++) {
        const before = await this.collection.findOneAndUpdate(
          { merchantId: key.merchantId, tenantId: key.tenantId },
          rotateTo(key),
          { ...this.ctx.limit, returnDocument: "before", projection: { _id: 0, merchantKeyId: 1 } },
        );
        if (before !== null) return { kind: "replaced", previousKeyId: before.merchantKeyId };
        try {
          await this.collection.insertOne({ ...key, previousKeys: [] }, this.ctx.limit);
          return { kind: "created" };
        } catch (err) {
          if (!isDuplicateKey(err)) throw err;
        }
        const holder = await this.collection.findOne<Pick<MerchantKeyRecord, "tenantId">>(
          { merchantId: key.merchantId },
          { ...this.ctx.limit, projection: { _id: 0, tenantId: 1 } },
        );
        if (holder !== null && holder.tenantId !== key.tenantId) return { kind: "taken" };
        // The same tenant won the insert: rotate its fresh record on the next attempt.
      }
      throw storeUnavailable(new Error(`merchantKeys.put contended ${PUT_ATTEMPTS} times in a row.`));
    });
  }

  findByMerchantId(merchantId: string): Promise<MerchantKeyRecord | undefined> {
    return this.ctx.run(
      async () =>
        (await this.collection.findOne<MerchantKeyRecord>({ merchantId }, this.ctx.read)) ?? undefined,
    );
  }

  /** The current key, or the key in the history, whichever has the id; then the record as it is. */
  revoke(
    tenantId: string,
    merchantId: string,
    merchantKeyId: string,
    at: Date,
  ): Promise<MerchantKeyRecord | undefined> {
    return this.ctx.run(async () => {
      const unrevoked = { $exists: false };
      await this.collection.updateOne(
        { merchantId, tenantId, merchantKeyId, revokedAt: unrevoked },
        { $set: { revokedAt: at } },
        this.ctx.limit,
      );
      await this.collection.updateOne(
        { merchantId, tenantId },
        { $set: { "previousKeys.$[k].revokedAt": at } },
        { ...this.ctx.limit, arrayFilters: [{ "k.merchantKeyId": merchantKeyId, "k.revokedAt": unrevoked }] },
      );
      const record = await this.collection.findOne<MerchantKeyRecord>(
        { merchantId, tenantId },
        this.ctx.read,
      );
      const has =
        record !== null &&
        (record.merchantKeyId === merchantKeyId ||
          record.previousKeys.some((k) => k.merchantKeyId === merchantKeyId));
      return has ? record : undefined;
    });
  }

  removeUnlessOwnedBy(merchantId: string, keepTenantId: string): Promise<boolean> {
    return this.ctx.run(async () => {
      const result = await this.collection.deleteOne(
        { merchantId, tenantId: { $ne: keepTenantId } },
        this.ctx.limit,
      );
      return result.deletedCount === 1;
    });
  }
}

/**
 * The update pipeline of a rotation: the first stage reads the current key into `previousKeys`
 * (keeping the newest {@link MERCHANT_KEY_HISTORY}), the second sets the new one. Values are wrapped
 * in `$literal` so that no string of the request is ever read as a field path or an operator.
 */
function rotateTo(key: Omit<MerchantKeyRecord, "previousKeys">) {
  // A field path of a field the document lacks leaves the member out, as the memory store does.
  const replaced = {
    merchantKeyId: "$merchantKeyId",
    publicKey: "$publicKey",
    registeredAt: "$registeredAt",
    replacedAt: { $literal: key.registeredAt },
    allReceiptsSigned: "$allReceiptsSigned",
    revokedAt: "$revokedAt",
  };
  return [
    {
      $set: {
        previousKeys: {
          $slice: [
            { $concatArrays: [{ $ifNull: ["$previousKeys", []] }, [replaced]] },
            -MERCHANT_KEY_HISTORY,
          ],
        },
      },
    },
    // The new key is the whole current key: nothing of the replaced one (its revocation) stays.
    { $unset: ["allReceiptsSigned", "revokedAt"] },
    {
      $set: {
        merchantKeyId: { $literal: key.merchantKeyId },
        algorithm: { $literal: key.algorithm },
        publicKey: { $literal: key.publicKey },
        registeredAt: { $literal: key.registeredAt },
        ...(key.allReceiptsSigned === undefined
          ? {}
          : { allReceiptsSigned: { $literal: key.allReceiptsSigned } }),
      },
    },
  ];
}
