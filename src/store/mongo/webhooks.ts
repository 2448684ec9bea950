import { decodeDeliveryCursor, encodeDeliveryCursor } from "../cursor.js";
import {
  DELIVERY_LOG_MAX,
  type DeliveryKey,
  type DeliveryPage,
  type DeliveryRecord,
  type DeliveryStore,
  type DeliveryUpdate,
  type Fence,
  type SealedSecret,
  type SealedSigningKey,
  type WebhookEndpointRecord,
  type WebhookEndpointStore,
} from "../event-types.js";
import { declareCollection } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { isDuplicateKey } from "./errors.js";
import { scatterGather } from "./sharding.js";

/** Webhook endpoints, unique by `endpointId`. */
export const WEBHOOK_ENDPOINTS = declareCollection({
  name: "webhookEndpoints",
  indexes: [
    { key: { endpointId: 1 }, name: "uniq_endpointId", unique: true },
    { key: { tenantId: 1, createdAt: 1 }, name: "listForTenant" },
  ],
  shardKey: { key: "unsharded", why: "A few endpoints per tenant." },
});

/** One document per event and endpoint: its status, next attempt and the log of its attempts. */
export const DELIVERIES = declareCollection({
  name: "deliveries",
  indexes: [
    // The shard key's index, and the rule that an event is delivered to an endpoint once.
    { key: { endpointId: 1, eventSeq: 1 }, name: "uniq_endpointId_eventSeq", unique: true },
    {
      key: { status: 1, nextAttemptAt: 1, eventSeq: 1 },
      name: "due",
      partialFilterExpression: { status: "pending" },
    },
    { key: { createdAt: 1 }, name: "prune" },
  ],
  shardKey: {
    key: { endpointId: 1, eventSeq: 1 },
    unique: true,
    why:
      "One document per event and endpoint: it grows with events times endpoints. Every write names the " +
      "endpoint and the event's position, and carries the rule that an event reaches an endpoint once; " +
      "an endpoint's log reads its own chunks.",
  },
});

/** Webhook endpoints in `webhookEndpoints` (unsharded; unique `endpointId`). */
export class MongoWebhookEndpoints implements WebhookEndpointStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [WEBHOOK_ENDPOINTS] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get endpoints() {
    return this.ctx.collection<WebhookEndpointRecord>(WEBHOOK_ENDPOINTS.name);
  }

  /**
   * Counts, then inserts: two creates racing past the count can leave the tenant one endpoint over
   * the cap, which only bounds the work an endpoint list costs, so a transaction is not spent on it.
   */
  insert(endpoint: WebhookEndpointRecord, max: number): Promise<boolean> {
    return this.ctx.run(async () => {
      const count = await this.endpoints.countDocuments({ tenantId: endpoint.tenantId }, this.ctx.limit);
      if (count >= max) return false;
      try {
        await this.endpoints.insertOne({ ...endpoint }, this.ctx.limit);
        return true;
      } catch (err) {
        if (isDuplicateKey(err)) return false;
        throw err;
      }
    });
  }

  find(endpointId: string): Promise<WebhookEndpointRecord | undefined> {
    return this.ctx.run(
      async () =>
        (await this.endpoints.findOne<WebhookEndpointRecord>({ endpointId }, this.ctx.read)) ?? undefined,
    );
  }

  listForTenant(tenantId: string): Promise<WebhookEndpointRecord[]> {
    return this.ctx.run(() =>
      this.endpoints
        .find<WebhookEndpointRecord>({ tenantId }, this.ctx.read)
        .sort({ createdAt: 1, endpointId: 1 })
        .toArray(),
    );
  }

  replaceKeys(
    endpointId: string,
    keys: { secrets: SealedSecret[]; signingKeys: SealedSigningKey[] },
    now: Date,
    readSecret?: string,
  ): Promise<WebhookEndpointRecord | undefined> {
    const unchanged = readSecret === undefined ? {} : { "secrets.0.sealed": readSecret };
    return this.update(
      endpointId,
      { $set: { secrets: keys.secrets, signingKeys: keys.signingKeys, updatedAt: now } },
      unchanged,
    );
  }

  recordOutcome(endpointId: string, ok: boolean, at: Date): Promise<WebhookEndpointRecord | undefined> {
    if (ok) return this.update(endpointId, { $unset: { failingSince: "" } });
    // `failingSince` only when unset: a pipeline keeps the first failure's time.
    return this.update(endpointId, [{ $set: { failingSince: { $ifNull: ["$failingSince", at] } } }]);
  }

  disable(endpointId: string, reason: string, at: Date): Promise<boolean> {
    return this.ctx.run(async () => {
      const result = await this.endpoints.updateOne(
        { endpointId, status: "active" },
        { $set: { status: "disabled", disabledAt: at, disabledReason: reason, updatedAt: at } },
        this.ctx.limit,
      );
      return result.modifiedCount === 1;
    });
  }

  delete(endpointId: string): Promise<boolean> {
    return this.ctx.run(
      async () => (await this.endpoints.deleteOne({ endpointId }, this.ctx.limit)).deletedCount === 1,
    );
  }

  private update(
    endpointId: string,
    update: Record<string, unknown> | Record<string, unknown>[],
    also: Record<string, unknown> = {},
  ): Promise<WebhookEndpointRecord | undefined> {
    return this.ctx.run(
      async () =>
        (await this.endpoints.findOneAndUpdate({ endpointId, ...also }, update, {
          ...this.ctx.limit,
          projection: { _id: 0 },
          returnDocument: "after",
        })) ?? undefined,
    );
  }
}

/**
 * Deliveries in `deliveries`, sharded by `{endpointId, eventSeq}` (the pair is unique: an event has one
 * position). Every write names the whole shard key; only the worker's search for due deliveries goes
 * to every shard (declared).
 */
export class MongoDeliveries implements DeliveryStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [DELIVERIES] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get deliveries() {
    return this.ctx.collection<DeliveryRecord>(DELIVERIES.name);
  }

  createMissing(deliveries: readonly DeliveryRecord[]): Promise<void> {
    return this.ctx.run(async () => {
      for (const d of deliveries) {
        try {
          await this.deliveries.updateOne(
            { endpointId: d.endpointId, eventSeq: d.eventSeq },
            { $setOnInsert: { ...d } },
            { ...this.ctx.limit, upsert: true },
          );
        } catch (err) {
          // A concurrent fan-out inserted it first: it exists, which is what was asked.
          if (!isDuplicateKey(err)) throw err;
        }
      }
    });
  }

  due(now: Date, limit: number, exceptTenants: readonly string[] = []): Promise<DeliveryRecord[]> {
    const others = exceptTenants.length === 0 ? {} : { tenantId: { $nin: [...exceptTenants] } };
    return this.ctx.run(() =>
      this.deliveries
        .find<DeliveryRecord>(
          { status: "pending", nextAttemptAt: { $lte: now }, ...others },
          { ...this.ctx.read, ...scatterGather("deliveries.due") },
        )
        .sort({ nextAttemptAt: 1, eventSeq: 1 })
        .limit(Math.max(1, limit))
        .toArray(),
    );
  }

  claim(key: DeliveryKey, fence: Fence, until: Date): Promise<boolean> {
    return this.ctx.run(async () => {
      const result = await this.deliveries.updateOne(
        {
          endpointId: key.endpointId,
          eventSeq: key.eventSeq,
          status: "pending",
          fence: { $lte: fence.token },
        },
        { $set: { fence: fence.token, nextAttemptAt: until } },
        this.ctx.limit,
      );
      return result.matchedCount === 1;
    });
  }

  record(key: DeliveryKey, fence: Fence, update: DeliveryUpdate): Promise<boolean> {
    return this.ctx.run(async () => {
      const set: Record<string, unknown> = { status: update.status };
      if (update.nextAttemptAt !== undefined) set.nextAttemptAt = update.nextAttemptAt;
      if (update.deliveredAt !== undefined) set.deliveredAt = update.deliveredAt;
      const result = await this.deliveries.updateOne(
        { endpointId: key.endpointId, eventSeq: key.eventSeq, fence: fence.token },
        {
          $set: set,
          $inc: { attempts: 1 },
          $push: { log: { $each: [update.attempt], $slice: -DELIVERY_LOG_MAX } },
          ...(update.nextAttemptAt === undefined ? { $unset: { nextAttemptAt: "" } } : {}),
        },
        this.ctx.limit,
      );
      return result.matchedCount === 1;
    });
  }

  replay(delivery: DeliveryRecord, now: Date): Promise<DeliveryRecord> {
    return this.ctx.run(async () => {
      const { status: _s, attempts: _a, nextAttemptAt: _n, ...rest } = delivery;
      const replayed = await this.deliveries.findOneAndUpdate(
        { endpointId: delivery.endpointId, eventSeq: delivery.eventSeq },
        { $set: { status: "pending", attempts: 0, nextAttemptAt: now }, $setOnInsert: rest },
        { ...this.ctx.limit, upsert: true, returnDocument: "after", projection: { _id: 0 } },
      );
      if (replayed === null) throw new Error("An upsert returned no document.");
      return replayed;
    });
  }

  find(key: DeliveryKey): Promise<DeliveryRecord | undefined> {
    return this.ctx.run(
      async () =>
        (await this.deliveries.findOne<DeliveryRecord>(
          { endpointId: key.endpointId, eventSeq: key.eventSeq },
          this.ctx.read,
        )) ?? undefined,
    );
  }

  listForEndpoint(endpointId: string, limit: number, cursor?: string): Promise<DeliveryPage> {
    return this.ctx.run(async () => {
      const filter =
        cursor === undefined
          ? { endpointId }
          : { endpointId, eventSeq: { $lt: decodeDeliveryCursor(cursor) } };
      const found = await this.deliveries
        .find<DeliveryRecord>(filter, this.ctx.read)
        .sort({ eventSeq: -1 })
        .limit(limit + 1)
        .toArray();
      const deliveries = found.slice(0, limit);
      const last = deliveries.at(-1);
      if (found.length <= limit || last === undefined) return { deliveries };
      return { deliveries, nextCursor: encodeDeliveryCursor(last.eventSeq) };
    });
  }

  failPending(endpointId: string, at: Date, reason: string): Promise<number> {
    return this.ctx.run(
      async () =>
        (
          await this.deliveries.updateMany(
            { endpointId, status: "pending" },
            {
              $set: { status: "failed" },
              $unset: { nextAttemptAt: "" },
              $push: {
                log: {
                  $each: [{ at, statusCode: 0, error: reason, durationMs: 0 }],
                  $slice: -DELIVERY_LOG_MAX,
                },
              },
            },
            this.ctx.limit,
          )
        ).modifiedCount,
    );
  }

  deleteForEndpoint(endpointId: string): Promise<number> {
    return this.ctx.run(
      async () => (await this.deliveries.deleteMany({ endpointId }, this.ctx.limit)).deletedCount,
    );
  }

  prune(before: Date): Promise<number> {
    return this.ctx.run(
      async () =>
        (
          await this.deliveries.deleteMany(
            { status: { $ne: "pending" }, createdAt: { $lt: before } },
            { ...this.ctx.limit, ...scatterGather("deliveries.prune") },
          )
        ).deletedCount,
    );
  }
}
