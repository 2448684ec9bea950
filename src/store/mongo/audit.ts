import type { Filter } from "mongodb";
import type { AuditEvent, AuditQuery, AuditStore } from "../types.js";
import type { MongoContext } from "./connection.js";
import { COLLECTIONS } from "./indexes.js";
import { scatterGather } from "./sharding.js";

/** The audit log in the `audit` collection. */
export class MongoAudit implements AuditStore {
  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<AuditEvent>(COLLECTIONS.audit);
  }

  append(event: AuditEvent): Promise<void> {
    return this.ctx.run(async () => {
      await this.collection.insertOne({ ...event }, this.ctx.limit);
    });
  }

  /** Newest first by `at`; events with the same time, the last inserted first (ObjectIds grow). */
  list(limit: number, query: AuditQuery = {}): Promise<AuditEvent[]> {
    if (limit < 1) return Promise.resolve([]);
    const filter: Filter<AuditEvent> = {};
    if (query.tenantId !== undefined) filter.tenantId = query.tenantId;
    if (query.after !== undefined) filter.at = { $gt: query.after };
    return this.ctx.run(() =>
      this.collection
        .find<AuditEvent>(filter, { ...this.ctx.read, ...scatterGather("audit.list") })
        .sort({ at: -1, _id: -1 })
        .limit(limit)
        .toArray(),
    );
  }
}
