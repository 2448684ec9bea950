/* Over 400 lines on purpose: sequencing, fan-out, the fair start of due deliveries, the attempt and
 * what it changes (retries, disabling) are the one lease holder's loop, each step fenced by its token. */
import { createSecretKey } from "node:crypto";
import { LeaseRunner } from "../background/lease-runner.js";
import { EVENT_TYPES } from "../domain/event-types.js";
import { randomId } from "../ids.js";
import {
  type DeliveryRecord,
  FENCED_OUT,
  type Fence,
  type SequencedEvent,
  type WebhookEndpointRecord,
} from "../store/event-types.js";
import { allowsPrivateReceivers, type EventsDeps } from "./deps.js";
import { keyContext, secretContext } from "./endpoints.js";
import { webhookBodyOf } from "./messages.js";
import { nextAttemptAt } from "./retry.js";
import { type SendResult, WebhookSender } from "./sender.js";
import { ed25519KeyOf, hmacKeyOf, type SigningKeys, signWebhook } from "./signing.js";

/**
 * The event worker: on the one instance holding the `events` lease (LeaseRunner), it
 * 1. sequences: gives events written by any instance their feed positions (the store does it in one
 *    atomic, fenced step per batch), and wakes the local streams;
 * 2. fans out: creates a delivery per event and subscribed endpoint of its tenant (created before the
 *    event), idempotently, then advances the fan-out mark;
 * 3. delivers: claims due deliveries (fenced), signs and sends them, at most `concurrency` at a time,
 *    and records each attempt: delivered, or the next attempt on the retry schedule, or failed after
 *    the last. An endpoint failing without a success for `disableAfterMs` (or answering 410 Gone) is
 *    disabled and the change audited.
 * Every write names the lease's fencing token, so a holder that paused past its lease cannot undo the
 * work of the one that took over. A delivery claimed by a holder that died is due again once its claim
 * runs out, and the new holder sends it: at least once, never lost.
 */

/** Events sequenced, and events fanned out, per store call. */
const BATCH = 200;
/**
 * How long past the attempt's own time limit a claim lasts, at most: room for the store's writes after
 * the attempt. A claim of a holder that died runs out after both, and the delivery is due again.
 */
const CLAIM_MARGIN_MS = 5_000;
/**
 * A tenant with a share of the slots (the concurrency divided by this) or more in flight waits behind
 * the other tenants' due deliveries.
 */
const TENANT_SHARE_DIVISOR = 4;
/** Store calls a round spends, at most, holding back tenants over their share. */
const FAIR_PASSES = 4;
/** How often retention runs. */
const PRUNE_EVERY_MS = 3_600_000;
/** Signing keys opened per endpoint are kept this long (a rotation elsewhere shows within it). */
const KEY_CACHE_MS = 5_000;
/**
 * After a wake-up, the worker waits this long before its round, so that the events written and the
 * attempts finished meanwhile share one round (one store call each for sequencing, fan-out and the due
 * deliveries) instead of a round each: under load every encrypt writes an event and every attempt
 * wakes the worker, and a round per wake-up cost more than the few milliseconds of delay.
 */
const GATHER_MS = 5;

export class EventWorker {
  private readonly runner: LeaseRunner;
  private readonly sender: WebhookSender;
  private readonly inFlight = new Map<string, Promise<void>>();
  /** Attempts in flight per tenant. */
  private readonly tenantSlots = new Map<string, number>();
  private readonly keyCache = new Map<string, { at: number; updatedAt: number; keys: SigningKeys }>();
  private lastPruneMs = Number.NEGATIVE_INFINITY;
  /**
   * Whether the last round left due deliveries unstarted for want of a free slot: only then does a
   * finished attempt wake the worker for another round. Otherwise a round per delivery was spent finding
   * nothing (a timer, sequencing, fan-out and a scan of the due deliveries), and the next events, new
   * retries and deliveries of other instances are found by their own wake-up or the poll anyway.
   */
  private slotBound = false;

  constructor(private readonly deps: EventsDeps) {
    this.sender = new WebhookSender({
      allowPrivate: allowsPrivateReceivers(deps),
      timeoutMs: deps.config.timeoutMs,
      responseLimitBytes: deps.config.responseLimitBytes,
      ...(deps.resolve === undefined ? {} : { resolve: deps.resolve }),
    });
    this.runner = new LeaseRunner({
      leases: deps.store.leases,
      name: "events",
      holder: randomId("inst", 9),
      ttlMs: deps.config.leaseMs,
      clock: deps.clock,
      logger: deps.logger,
      job: (lease, signal) => this.run(lease, signal),
    });
  }

  start(): void {
    this.runner.start();
  }

  /** Stops taking work, lets attempts in flight finish (each is time-limited), releases the lease. */
  async stop(): Promise<void> {
    await this.runner.stop();
    this.sender.close();
  }

  /** The job while the lease is held: ticks until the lease is lost or the worker stops. */
  private async run(fence: Fence, signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const busy = await this.tick(fence, signal);
      if (!busy) await this.deps.hub.untilWritten(this.deps.config.pollMs, signal);
      if (!signal.aborted) await new Promise((resolve) => setTimeout(resolve, GATHER_MS));
    }
    await Promise.allSettled([...this.inFlight.values()]);
  }

  /** One round: sequence, fan out, start due deliveries, prune now and then. True when there is more. */
  private async tick(fence: Fence, signal: AbortSignal): Promise<boolean> {
    try {
      const sequenced = await this.sequence(fence);
      if (sequenced === FENCED_OUT) return false;
      const fannedOut = await this.fanOut(fence);
      const started = signal.aborted ? 0 : await this.startDue(fence);
      await this.prune();
      return (
        sequenced === BATCH || fannedOut === BATCH || (started > 0 && this.slotBound && this.hasFreeSlot())
      );
    } catch (err) {
      this.deps.logger.warn({ err }, "event worker: the store failed; trying again");
      return false;
    }
  }

  /** Sequences one batch; the number sequenced, or {@link FENCED_OUT}. */
  private async sequence(fence: Fence): Promise<number | typeof FENCED_OUT> {
    const done = await this.deps.store.events.sequence(fence, BATCH);
    if (done === FENCED_OUT) {
      this.deps.logger.warn({ token: fence.token }, "event worker: a newer lease holder sequences now");
      return FENCED_OUT;
    }
    if (done.length > 0) this.deps.hub.sequenced();
    return done.length;
  }

  /** Creates the deliveries of one batch of events not fanned out yet; the number of events. */
  private async fanOut(fence: Fence): Promise<number> {
    const { store } = this.deps;
    const events = await store.events.listAfter(await store.events.fannedOut(), BATCH);
    const last = events.at(-1);
    if (last === undefined) return 0;
    const endpointsOf = new Map<string, WebhookEndpointRecord[]>();
    const deliveries: DeliveryRecord[] = [];
    for (const event of events) {
      let endpoints = endpointsOf.get(event.tenantId);
      if (endpoints === undefined) {
        endpoints = (await store.webhookEndpoints.listForTenant(event.tenantId)).filter(
          (e) => e.status === "active",
        );
        endpointsOf.set(event.tenantId, endpoints);
      }
      for (const endpoint of endpoints) {
        if (subscribes(endpoint, event)) deliveries.push(newDelivery(endpoint, event));
      }
    }
    await store.deliveries.createMissing(deliveries);
    await store.events.markFannedOut(fence, last.seq);
    return events.length;
  }

  private hasFreeSlot(): boolean {
    return this.inFlight.size < this.deps.config.concurrency;
  }

  /**
   * Claims and starts due deliveries up to the free slots; the number started. Fair between tenants:
   * a tenant gets at most its share of the slots while another tenant's deliveries are due, so a tenant
   * whose receivers never answer (each attempt holding a slot for the whole time limit) cannot make
   * the others' deliveries wait behind its backlog; slots nobody else needs are still its.
   */
  private async startDue(fence: Fence): Promise<number> {
    const free = this.deps.config.concurrency - this.inFlight.size;
    if (free <= 0) {
      this.slotBound = true;
      return 0;
    }
    const share = Math.max(1, Math.floor(this.deps.config.concurrency / TENANT_SHARE_DIVISOR));
    const held = [...this.tenantSlots].filter(([, n]) => n >= share).map(([tenant]) => tenant);
    let started = 0;
    let waiting = false;
    // Each pass leaves out the tenants that reached their share, until none is held back.
    for (let pass = 0; pass < FAIR_PASSES && started < free; pass++) {
      const pick = await this.startSome(fence, free - started, held, share);
      started += pick.started;
      waiting ||= pick.waiting;
      if (pick.capped.length === 0) break;
      held.push(...pick.capped);
    }
    // Slots nobody else needs: the deliveries of the tenants held back, earliest due first.
    if (started < free && held.length > 0) {
      const pick = await this.startSome(fence, free - started, [], Number.POSITIVE_INFINITY);
      started += pick.started;
      waiting = pick.waiting;
    }
    this.slotBound = waiting;
    return started;
  }

  /**
   * Starts up to `free` due deliveries of tenants not in `except`, at most `share` in flight per tenant:
   * the number started, the tenants that reached their share with more due (`capped`), and whether
   * any due delivery was left unstarted.
   */
  private async startSome(fence: Fence, free: number, except: string[], share: number) {
    // One more than could start: whether any is left waiting for a slot.
    const due = await this.deps.store.deliveries.due(
      this.deps.clock.now(),
      free + this.inFlight.size + 1,
      except,
    );
    const capped = new Set<string>();
    let started = 0;
    let waiting = false;
    for (const delivery of due) {
      const key = `${delivery.endpointId}\u0000${delivery.eventSeq}`;
      if (this.inFlight.has(key)) continue;
      const tenant = delivery.tenantId;
      if (started >= free || (this.tenantSlots.get(tenant) ?? 0) >= share) {
        if (started < free) capped.add(tenant);
        waiting = true;
        continue;
      }
      this.tenantSlots.set(tenant, (this.tenantSlots.get(tenant) ?? 0) + 1);
      const attempt = this.attempt(fence, delivery).finally(() => {
        this.inFlight.delete(key);
        const left = (this.tenantSlots.get(tenant) ?? 1) - 1;
        if (left > 0) this.tenantSlots.set(tenant, left);
        else this.tenantSlots.delete(tenant);
        if (this.slotBound) this.deps.hub.written();
      });
      this.inFlight.set(key, attempt);
      started++;
    }
    return { started, capped: [...capped], waiting };
  }

  /** One attempt of one delivery: claim, sign, send, record. Never throws. */
  private async attempt(fence: Fence, delivery: DeliveryRecord): Promise<void> {
    const { store, clock, config, logger } = this.deps;
    try {
      const key = { endpointId: delivery.endpointId, eventSeq: delivery.eventSeq };
      const now = clock.now();
      const margin = Math.min(CLAIM_MARGIN_MS, config.timeoutMs);
      const claimUntil = new Date(now.getTime() + config.timeoutMs + margin);
      if (!(await store.deliveries.claim(key, fence, claimUntil))) return;
      const endpoint = await store.webhookEndpoints.find(delivery.endpointId);
      const event = await store.events.findForTenant(delivery.tenantId, delivery.eventId);
      const result: SendResult =
        endpoint === undefined || endpoint.status !== "active"
          ? skipped("endpoint disabled or deleted")
          : event === undefined
            ? skipped("event no longer kept")
            : await this.send(endpoint, event);
      const at = clock.now();
      await store.deliveries.record(key, fence, this.outcome(delivery, result, at));
      // An event past the retention fails its delivery alone: the receiver was never asked.
      if (endpoint !== undefined && endpoint.status === "active" && event !== undefined)
        await this.afterAttempt(endpoint, result, at);
    } catch (err) {
      logger.warn({ err, endpointId: delivery.endpointId }, "event worker: a delivery attempt failed");
    }
  }

  /**
   * Signs the event with the endpoint's live secrets and keys and sends it. A secret that does not open
   * (an instance configured with another WEBHOOK_SECRET_KEY) fails the attempt, retried on the schedule,
   * with the reason in the log: an operator's mistake, never a silent stall.
   */
  private async send(endpoint: WebhookEndpointRecord, event: SequencedEvent): Promise<SendResult> {
    let keys: SigningKeys;
    try {
      keys = this.keysOf(endpoint);
    } catch (err) {
      this.deps.logger.error({ err, endpointId: endpoint.endpointId }, "a webhook secret does not open");
      return { ...skipped("cannot sign: the secret does not open with WEBHOOK_SECRET_KEY"), gone: false };
    }
    const body = webhookBodyOf(event);
    const timestamp = Math.floor(this.deps.clock.now().getTime() / 1000);
    const headers = signWebhook(event.id, timestamp, body, keys);
    return this.sender.send({ url: endpoint.url, headers: { ...headers }, body });
  }

  /** The endpoint's secrets and keys that sign now (current, and a previous one within its overlap). */
  private keysOf(endpoint: WebhookEndpointRecord): SigningKeys {
    const nowMs = this.deps.clock.now().getTime();
    const cached = this.keyCache.get(endpoint.endpointId);
    if (
      cached !== undefined &&
      cached.updatedAt === endpoint.updatedAt.getTime() &&
      nowMs - cached.at < KEY_CACHE_MS
    ) {
      return cached.keys;
    }
    const live = <T extends { expiresAt?: Date }>(items: T[]) =>
      items.filter((i) => i.expiresAt === undefined || i.expiresAt.getTime() > nowMs);
    const { box } = this.deps;
    const keys: SigningKeys = {
      hmacKeys: live(endpoint.secrets).map((s) =>
        createSecretKey(hmacKeyOf(box.open(s.sealed, secretContext(endpoint.endpointId)))),
      ),
      ed25519Keys: live(endpoint.signingKeys).map((k) =>
        ed25519KeyOf(box.open(k.sealedPrivateKey, keyContext(endpoint.endpointId)), k.publicKey),
      ),
    };
    this.keyCache.set(endpoint.endpointId, { at: nowMs, updatedAt: endpoint.updatedAt.getTime(), keys });
    return keys;
  }

  /** What an attempt changes: delivered; or the next attempt on the schedule; or failed after the last. */
  private outcome(delivery: DeliveryRecord, result: SendResult, at: Date) {
    const attempt = { at, statusCode: result.statusCode, error: result.error, durationMs: result.durationMs };
    if (result.ok) return { attempt, status: "delivered" as const, deliveredAt: at };
    const next = nextAttemptAt(
      this.deps.config.retryScheduleMs,
      { attemptsBefore: delivery.attempts, gone: result.gone, retryAfterSeconds: result.retryAfterSeconds },
      at,
      this.deps.random,
    );
    if (next === undefined) return { attempt, status: "failed" as const };
    return { attempt, status: "pending" as const, nextAttemptAt: next };
  }

  /** Tracks the endpoint's failures and disables it after failing for days, or at once on 410 Gone. */
  private async afterAttempt(endpoint: WebhookEndpointRecord, result: SendResult, at: Date): Promise<void> {
    const { store, config } = this.deps;
    if (result.ok && endpoint.failingSince === undefined) return;
    const updated = await store.webhookEndpoints.recordOutcome(endpoint.endpointId, result.ok, at);
    const since = updated?.failingSince;
    const failingTooLong = since !== undefined && at.getTime() - since.getTime() >= config.disableAfterMs;
    if (!result.gone && !failingTooLong) return;
    const reason = result.gone
      ? "the receiver answered 410 Gone"
      : `failing for ${spell(config.disableAfterMs)} without a success`;
    await this.disable(endpoint, reason, at);
  }

  private async disable(endpoint: WebhookEndpointRecord, reason: string, at: Date): Promise<void> {
    const { store, logger } = this.deps;
    if (!(await store.webhookEndpoints.disable(endpoint.endpointId, reason, at))) return;
    const failed = await store.deliveries.failPending(endpoint.endpointId, at, "endpoint disabled");
    await store.audit.append({
      at,
      action: "webhook.endpoint_disabled",
      tenantId: endpoint.tenantId,
      requestId: "events-worker",
      sourceIp: "",
      subject: `${endpoint.endpointId}: ${reason}; ${failed} pending deliveries failed`,
    });
    logger.warn(
      { endpointId: endpoint.endpointId, tenant: endpoint.tenantId, reason },
      "webhook endpoint disabled",
    );
  }

  /** Deletes events and finished deliveries past the retention, about once an hour. */
  private async prune(): Promise<void> {
    const nowMs = this.deps.clock.now().getTime();
    if (nowMs - this.lastPruneMs < PRUNE_EVERY_MS) return;
    this.lastPruneMs = nowMs;
    const before = new Date(nowMs - this.deps.config.retentionDays * 86_400_000);
    await this.deps.store.events.prune(before);
    await this.deps.store.deliveries.prune(before);
  }
}

/** Whether `endpoint` receives `event`: subscribed to its type, and created before it happened. */
function subscribes(endpoint: WebhookEndpointRecord, event: SequencedEvent): boolean {
  if (endpoint.createdAt.getTime() > event.createdAt.getTime()) return false;
  if (endpoint.events.includes("*")) return EVENT_TYPES[event.type].role === endpoint.role;
  return endpoint.events.includes(event.type);
}

function newDelivery(endpoint: WebhookEndpointRecord, event: SequencedEvent): DeliveryRecord {
  return {
    endpointId: endpoint.endpointId,
    eventId: event.id,
    tenantId: event.tenantId,
    eventType: event.type,
    eventSeq: event.seq,
    status: "pending",
    attempts: 0,
    createdAt: event.createdAt,
    nextAttemptAt: event.createdAt,
    log: [],
    fence: 0,
  };
}

/** The result of an attempt not made (the endpoint or the event is gone). */
function skipped(reason: string): SendResult {
  return { ok: false, statusCode: 0, error: reason, durationMs: 0, gone: true };
}

/** A duration in the largest whole unit it fills: `5 days`, `2 hours`, `400 ms`. */
function spell(ms: number): string {
  const units: [number, string][] = [
    [86_400_000, "day"],
    [3_600_000, "hour"],
    [60_000, "minute"],
    [1_000, "second"],
  ];
  for (const [size, name] of units) {
    if (ms >= size) {
      const n = Math.floor(ms / size);
      return `${n} ${name}${n === 1 ? "" : "s"}`;
    }
  }
  return `${ms} ms`;
}
