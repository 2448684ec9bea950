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
import { copy } from "./copy.js";
import { compare } from "./listing.js";

/** Webhook endpoints held in memory. */
export class MemoryWebhookEndpoints implements WebhookEndpointStore {
  private readonly byId = new Map<string, WebhookEndpointRecord>();

  async insert(endpoint: WebhookEndpointRecord, max: number): Promise<boolean> {
    if (this.byId.has(endpoint.endpointId)) return false;
    if (this.ofTenant(endpoint.tenantId).length >= max) return false;
    this.byId.set(endpoint.endpointId, copy(endpoint));
    return true;
  }

  async find(endpointId: string): Promise<WebhookEndpointRecord | undefined> {
    return copy(this.byId.get(endpointId));
  }

  async listForTenant(tenantId: string): Promise<WebhookEndpointRecord[]> {
    return copy(this.ofTenant(tenantId));
  }

  async replaceKeys(
    endpointId: string,
    keys: { secrets: SealedSecret[]; signingKeys: SealedSigningKey[] },
    now: Date,
    readSecret?: string,
  ): Promise<WebhookEndpointRecord | undefined> {
    const endpoint = this.byId.get(endpointId);
    if (endpoint === undefined) return undefined;
    // secret-compare: sealed (encrypted) secrets the service read from this store, never sent by a caller.
    if (readSecret !== undefined && endpoint.secrets[0]?.sealed !== readSecret) return undefined;
    endpoint.secrets = copy(keys.secrets);
    endpoint.signingKeys = copy(keys.signingKeys);
    endpoint.updatedAt = new Date(now);
    return copy(endpoint);
  }

  async recordOutcome(endpointId: string, ok: boolean, at: Date): Promise<WebhookEndpointRecord | undefined> {
    const endpoint = this.byId.get(endpointId);
    if (endpoint === undefined) return undefined;
    if (ok) delete endpoint.failingSince;
    else endpoint.failingSince ??= new Date(at);
    return copy(endpoint);
  }

  async disable(endpointId: string, reason: string, at: Date): Promise<boolean> {
    const endpoint = this.byId.get(endpointId);
    if (endpoint === undefined || endpoint.status === "disabled") return false;
    endpoint.status = "disabled";
    endpoint.disabledAt = new Date(at);
    endpoint.disabledReason = reason;
    endpoint.updatedAt = new Date(at);
    return true;
  }

  async delete(endpointId: string): Promise<boolean> {
    return this.byId.delete(endpointId);
  }

  /** A tenant's endpoints, oldest first (then by id). A scan: tenants have a handful. */
  private ofTenant(tenantId: string): WebhookEndpointRecord[] {
    return [...this.byId.values()]
      .filter((e) => e.tenantId === tenantId)
      .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || compare(a.endpointId, b.endpointId));
  }
}

/** Deliveries held in memory, by endpoint and event, with the pending ones indexed for the worker. */
export class MemoryDeliveries implements DeliveryStore {
  /** Per endpoint, its deliveries by event position. */
  private readonly byEndpoint = new Map<string, Map<number, DeliveryRecord>>();
  private readonly pending = new Set<DeliveryRecord>();

  async createMissing(deliveries: readonly DeliveryRecord[]): Promise<void> {
    for (const delivery of deliveries) {
      const ofEndpoint = this.endpoint(delivery.endpointId);
      if (ofEndpoint.has(delivery.eventSeq)) continue;
      const kept = copy(delivery);
      ofEndpoint.set(kept.eventSeq, kept);
      if (kept.status === "pending") this.pending.add(kept);
    }
  }

  /**
   * The `limit` earliest due deliveries, earliest first. One pass that keeps only the best `limit` so
   * far: under load the worker asks after every attempt while thousands wait, and sorting them all
   * each time made the worker's cost grow with its backlog.
   */
  async due(now: Date, limit: number, exceptTenants: readonly string[] = []): Promise<DeliveryRecord[]> {
    const nowMs = now.getTime();
    const best: DeliveryRecord[] = [];
    if (limit <= 0) return best;
    for (const d of this.pending) {
      if ((d.nextAttemptAt?.getTime() ?? 0) > nowMs || exceptTenants.includes(d.tenantId)) continue;
      if (best.length === limit && !earlier(d, best[limit - 1] as DeliveryRecord)) continue;
      let at = best.length;
      while (at > 0 && earlier(d, best[at - 1] as DeliveryRecord)) at--;
      best.splice(at, 0, d);
      if (best.length > limit) best.pop();
    }
    return copy(best);
  }

  async claim(key: DeliveryKey, fence: Fence, until: Date): Promise<boolean> {
    const d = this.byEndpoint.get(key.endpointId)?.get(key.eventSeq);
    if (d === undefined || d.status !== "pending" || d.fence > fence.token) return false;
    d.fence = fence.token;
    d.nextAttemptAt = new Date(until);
    return true;
  }

  async record(key: DeliveryKey, fence: Fence, update: DeliveryUpdate): Promise<boolean> {
    const d = this.byEndpoint.get(key.endpointId)?.get(key.eventSeq);
    // secret-compare: a delivery's fencing token, handed out by the store, never sent by a caller.
    if (d === undefined || d.fence !== fence.token) return false;
    d.attempts += 1;
    d.log = [...d.log, copy(update.attempt)].slice(-DELIVERY_LOG_MAX);
    d.status = update.status;
    if (update.nextAttemptAt === undefined) delete d.nextAttemptAt;
    else d.nextAttemptAt = new Date(update.nextAttemptAt);
    if (update.deliveredAt !== undefined) d.deliveredAt = new Date(update.deliveredAt);
    if (d.status === "pending") this.pending.add(d);
    else this.pending.delete(d);
    return true;
  }

  async replay(delivery: DeliveryRecord, now: Date): Promise<DeliveryRecord> {
    const ofEndpoint = this.endpoint(delivery.endpointId);
    let d = ofEndpoint.get(delivery.eventSeq);
    if (d === undefined) {
      d = copy(delivery);
      ofEndpoint.set(d.eventSeq, d);
    }
    d.status = "pending";
    d.attempts = 0;
    d.nextAttemptAt = new Date(now);
    this.pending.add(d);
    return copy(d);
  }

  async find(key: DeliveryKey): Promise<DeliveryRecord | undefined> {
    return copy(this.byEndpoint.get(key.endpointId)?.get(key.eventSeq));
  }

  async listForEndpoint(endpointId: string, limit: number, cursor?: string): Promise<DeliveryPage> {
    const beforeSeq = cursor === undefined ? Number.POSITIVE_INFINITY : decodeDeliveryCursor(cursor);
    const newestFirst = [...(this.byEndpoint.get(endpointId)?.values() ?? [])]
      .filter((d) => d.eventSeq < beforeSeq)
      .sort((a, b) => b.eventSeq - a.eventSeq);
    const deliveries = copy(newestFirst.slice(0, limit));
    const last = deliveries.at(-1);
    if (newestFirst.length <= limit || last === undefined) return { deliveries };
    return { deliveries, nextCursor: encodeDeliveryCursor(last.eventSeq) };
  }

  async failPending(endpointId: string, at: Date, reason: string): Promise<number> {
    let failed = 0;
    for (const d of this.byEndpoint.get(endpointId)?.values() ?? []) {
      if (d.status !== "pending") continue;
      d.status = "failed";
      delete d.nextAttemptAt;
      d.log = [...d.log, { at: new Date(at), statusCode: 0, error: reason, durationMs: 0 }].slice(
        -DELIVERY_LOG_MAX,
      );
      this.pending.delete(d);
      failed++;
    }
    return failed;
  }

  async deleteForEndpoint(endpointId: string): Promise<number> {
    const ofEndpoint = this.byEndpoint.get(endpointId);
    if (ofEndpoint === undefined) return 0;
    for (const d of ofEndpoint.values()) this.pending.delete(d);
    this.byEndpoint.delete(endpointId);
    return ofEndpoint.size;
  }

  async prune(before: Date): Promise<number> {
    const cutoff = before.getTime();
    let removed = 0;
    for (const ofEndpoint of this.byEndpoint.values()) {
      for (const [eventSeq, d] of ofEndpoint) {
        if (d.status === "pending" || d.createdAt.getTime() >= cutoff) continue;
        ofEndpoint.delete(eventSeq);
        removed++;
      }
    }
    return removed;
  }

  private endpoint(endpointId: string): Map<number, DeliveryRecord> {
    let ofEndpoint = this.byEndpoint.get(endpointId);
    if (ofEndpoint === undefined) {
      ofEndpoint = new Map();
      this.byEndpoint.set(endpointId, ofEndpoint);
    }
    return ofEndpoint;
  }
}

/** Whether `a` is due before `b`: by next attempt, then by event position. */
function earlier(a: DeliveryRecord, b: DeliveryRecord): boolean {
  const byTime = (a.nextAttemptAt?.getTime() ?? 0) - (b.nextAttemptAt?.getTime() ?? 0);
  return byTime < 0 || (byTime === 0 && a.eventSeq < b.eventSeq);
}
