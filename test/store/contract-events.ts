import { describe, expect, it } from "vitest";
import {
  type DeliveryRecord,
  type EventRecord,
  FENCED_OUT,
  type Fence,
  type SequencedEvent,
  type WebhookEndpointRecord,
} from "../../src/store/event-types.js";
import type { Store } from "../../src/store/types.js";
import { at, escrowedReceipt, hex64, payment, pendingKey, receipt, uid } from "./fixtures.js";

/** An event for `tenantId`, created at `seconds` after T0. */
export function event(tenantId: string, seconds = 0, overrides: Partial<EventRecord> = {}): EventRecord {
  return {
    id: uid("evt"),
    type: "receipt.created",
    tenantId,
    createdAt: at(seconds),
    data: { userId: uid("usr"), receiptId: uid("r"), merchantId: "m-1", createdAt: at(seconds) },
    ...overrides,
  };
}

export function endpoint(
  tenantId: string,
  seconds = 0,
  overrides: Partial<WebhookEndpointRecord> = {},
): WebhookEndpointRecord {
  return {
    endpointId: uid("we"),
    tenantId,
    role: "issuer",
    url: "https://hooks.example/receipts",
    events: ["*"],
    description: "",
    status: "active",
    secrets: [{ sealed: `v1.sealed.${uid("s")}`, createdAt: at(seconds) }],
    signingKeys: [
      { publicKey: `whpk_${uid("k")}`, sealedPrivateKey: "v1.sealed.pk", createdAt: at(seconds) },
    ],
    createdAt: at(seconds),
    updatedAt: at(seconds),
    ...overrides,
  };
}

export function delivery(
  endpointId: string,
  e: SequencedEvent,
  overrides: Partial<DeliveryRecord> = {},
): DeliveryRecord {
  return {
    endpointId,
    eventId: e.id,
    tenantId: e.tenantId,
    eventType: e.type,
    eventSeq: e.seq,
    status: "pending",
    attempts: 0,
    createdAt: e.createdAt,
    nextAttemptAt: e.createdAt,
    log: [],
    fence: 0,
    ...overrides,
  };
}

const fence = (token: number): Fence => ({ lease: "events", token });

/** Sequences everything waiting, in batches of `batch`, and returns it all. */
async function sequenceAll(store: Store, token = 1, batch = 100): Promise<SequencedEvent[]> {
  const all: SequencedEvent[] = [];
  for (;;) {
    const done = await store.events.sequence(fence(token), batch);
    if (done === FENCED_OUT) throw new Error("fenced out");
    if (done.length === 0) return all;
    all.push(...done);
  }
}

/** The store rules of events, endpoints, deliveries and leases (src/store/event-types.ts). */
export function eventsContract(store: () => Store): void {
  outboxContract(store);
  describe("events: outbox and feed", () => {
    it("shows an appended event only once it is sequenced, with increasing positions", async () => {
      const [a, b, c] = [event("t1", 0), event("t2", 1), event("t1", 2)];
      await store().events.append([a, b]);
      await store().events.append([c]);
      expect(await store().events.listForTenant("t1", 0, 10)).toEqual([]);
      expect(await store().events.lastSeq()).toBe(0);
      const done = await sequenceAll(store(), 1, 2);
      expect(done.map((e) => e.id)).toEqual([a.id, b.id, c.id]);
      expect(done.map((e) => e.seq)).toEqual([1, 2, 3]);
      expect(await store().events.lastSeq()).toBe(3);
      expect(await store().events.listForTenant("t1", 0, 10)).toEqual([
        { ...a, seq: 1 },
        { ...c, seq: 3 },
      ]);
      expect(await store().events.listForTenant("t1", 1, 10)).toEqual([{ ...c, seq: 3 }]);
      expect(await store().events.listForTenant("t3", 0, 10)).toEqual([]);
      expect(await store().events.listAfter(1, 1)).toEqual([{ ...b, seq: 2 }]);
      expect(await store().events.sequence(fence(1), 10)).toEqual([]);
    });

    it("finds a sequenced event only for its own tenant", async () => {
      const e = event("t1");
      await store().events.append([e]);
      expect(await store().events.findForTenant("t1", e.id)).toBeUndefined();
      await sequenceAll(store());
      expect(await store().events.findForTenant("t1", e.id)).toEqual({ ...e, seq: 1 });
      expect(await store().events.findForTenant("t2", e.id)).toBeUndefined();
      expect(await store().events.findForTenant("t1", uid("evt"))).toBeUndefined();
    });

    it("refuses a sequencer whose token a larger one has used, and changes nothing then", async () => {
      await store().events.append([event("t1")]);
      expect(await store().events.sequence(fence(5), 10)).toHaveLength(1);
      await store().events.append([event("t1")]);
      expect(await store().events.sequence(fence(4), 10)).toBe(FENCED_OUT);
      expect(await store().events.lastSeq()).toBe(1);
      expect(await store().events.markFannedOut(fence(4), 1)).toBe(false);
      expect(await store().events.fannedOut()).toBe(0);
      expect(await store().events.markFannedOut(fence(5), 1)).toBe(true);
      expect(await store().events.fannedOut()).toBe(1);
      // A takeover's larger token sequences what waits.
      expect(await store().events.sequence(fence(6), 10)).toHaveLength(1);
      expect(await store().events.markFannedOut(fence(5), 2)).toBe(false);
    });

    it("sequences every event once under concurrent writers and two racing sequencers", async () => {
      const written: EventRecord[] = [];
      const writers = Array.from({ length: 4 }, async (_, w) => {
        for (let i = 0; i < 10; i++) {
          const e = event(`t${w % 2}`, i);
          written.push(e);
          await store().events.append([e]);
        }
      });
      const seen: SequencedEvent[] = [];
      let writing = true;
      const sequencer = async (token: number) => {
        while (writing || (await store().events.lastSeq()) < written.length) {
          const done = await store().events.sequence(fence(token), 3);
          if (done === FENCED_OUT) return;
          seen.push(...done);
          if (done.length === 0 && !writing) return;
        }
      };
      const running = [sequencer(1), sequencer(2)];
      await Promise.all(writers);
      writing = false;
      await Promise.all(running);
      seen.push(...(await sequenceAll(store(), 2)));
      expect(seen.map((e) => e.id).sort()).toEqual(written.map((e) => e.id).sort());
      expect(seen.map((e) => e.seq).sort((a, b) => a - b)).toEqual(written.map((_, i) => i + 1));
    });

    it("never lets a reader skip an event: every page continues after the last one it saw", async () => {
      const written = new Set<string>();
      let writing = true;
      const writer = (async () => {
        for (let i = 0; i < 30; i++) {
          const e = event("t1", i);
          written.add(e.id);
          await store().events.append([e]);
        }
        writing = false;
      })();
      const sequencer = (async () => {
        for (;;) {
          const done = await store().events.sequence(fence(1), 4);
          if (done === FENCED_OUT) throw new Error("fenced out");
          if (done.length === 0 && !writing) return;
        }
      })();
      const read: SequencedEvent[] = [];
      let after = 0;
      while (read.length < 30) {
        const page = await store().events.listForTenant("t1", after, 5);
        read.push(...page);
        after = page.at(-1)?.seq ?? after;
        if (page.length === 0) await new Promise((r) => setTimeout(r, 1));
      }
      await Promise.all([writer, sequencer]);
      expect(read.map((e) => e.id).sort()).toEqual([...written].sort());
      expect(read.map((e) => e.seq)).toEqual([...read.map((e) => e.seq)].sort((a, b) => a - b));
    });

    it("prunes sequenced events created before a time", async () => {
      await store().events.append([event("t1", 0), event("t1", 10), event("t1", 20)]);
      await sequenceAll(store());
      expect(await store().events.prune(at(15))).toBe(2);
      expect((await store().events.listForTenant("t1", 0, 10)).map((e) => e.seq)).toEqual([3]);
    });

    it("returns copies: changing a returned event changes nothing stored", async () => {
      const e = event("t1");
      await store().events.append([e]);
      const [got] = await sequenceAll(store());
      if (got === undefined) throw new Error("nothing sequenced");
      got.data.userId = "usr_evil";
      expect((await store().events.findForTenant("t1", e.id))?.data.userId).toBe(e.data.userId);
    });
  });

  describe("leases", () => {
    it("gives one holder at a time, renews with the same token, and a larger token on takeover", async () => {
      const leases = store().leases;
      const a = await leases.acquire("events", "A", at(0), 10_000);
      expect(a?.holder).toBe("A");
      expect(await leases.acquire("events", "B", at(5), 10_000)).toBeUndefined();
      const renewed = await leases.acquire("events", "A", at(8), 10_000);
      expect(renewed).toEqual({ ...a, expiresAt: at(18) });
      expect(await leases.acquire("events", "B", at(17), 10_000)).toBeUndefined();
      const b = await leases.acquire("events", "B", at(18), 10_000);
      expect(b?.holder).toBe("B");
      expect(b?.token).toBeGreaterThan(a?.token ?? Number.POSITIVE_INFINITY);
      // The old holder, back from a pause, cannot renew what another took.
      expect(await leases.acquire("events", "A", at(19), 10_000)).toBeUndefined();
      // Another lease is independent.
      expect((await leases.acquire("kt", "A", at(19), 10_000))?.holder).toBe("A");
    });

    it("lets another take over at once after a release, with a larger token still", async () => {
      const leases = store().leases;
      const a = await leases.acquire("events", "A", at(0), 60_000);
      if (a === undefined) throw new Error("no lease");
      await leases.release({ ...a, token: a.token + 100 });
      expect(await leases.acquire("events", "B", at(1), 60_000)).toBeUndefined();
      await leases.release(a);
      const b = await leases.acquire("events", "B", at(1), 60_000);
      expect(b?.token).toBeGreaterThan(a.token);
    });

    it("gives the lease to exactly one of many concurrent takers", async () => {
      const taken = await Promise.all(
        Array.from({ length: 8 }, (_, i) => store().leases.acquire("events", `H${i}`, at(0), 60_000)),
      );
      expect(taken.filter((l) => l !== undefined)).toHaveLength(1);
    });
  });

  describe("webhook endpoints", () => {
    it("stores, finds and lists a tenant's endpoints up to a cap", async () => {
      const [e1, e2] = [endpoint("t1", 0), endpoint("t1", 5)];
      expect(await store().webhookEndpoints.insert(e2, 2)).toBe(true);
      expect(await store().webhookEndpoints.insert(e1, 2)).toBe(true);
      expect(await store().webhookEndpoints.insert(endpoint("t1"), 2)).toBe(false);
      expect(await store().webhookEndpoints.insert(endpoint("t2"), 2)).toBe(true);
      expect(await store().webhookEndpoints.insert({ ...endpoint("t3"), endpointId: e1.endpointId }, 2)).toBe(
        false,
      );
      expect(await store().webhookEndpoints.listForTenant("t1")).toEqual([e1, e2]);
      expect(await store().webhookEndpoints.find(e1.endpointId)).toEqual(e1);
      expect(await store().webhookEndpoints.find(uid("we"))).toBeUndefined();
    });

    it("replaces keys, tracks failing since the first failure, disables once and deletes", async () => {
      const e = endpoint("t1");
      await store().webhookEndpoints.insert(e, 10);
      const keys = {
        secrets: [
          { sealed: "new", createdAt: at(10) },
          { sealed: e.secrets[0]?.sealed ?? "", createdAt: at(0), expiresAt: at(86_410) },
        ],
        signingKeys: e.signingKeys,
      };
      const replaced = await store().webhookEndpoints.replaceKeys(e.endpointId, keys, at(10));
      expect(replaced).toEqual({ ...e, ...keys, updatedAt: at(10) });
      expect(await store().webhookEndpoints.replaceKeys(uid("we"), keys, at(10))).toBeUndefined();
      // Over the secret read only: a rotation made meanwhile is not overwritten.
      const stale = e.secrets[0]?.sealed;
      expect(await store().webhookEndpoints.replaceKeys(e.endpointId, e, at(11), stale)).toBeUndefined();
      expect((await store().webhookEndpoints.find(e.endpointId))?.secrets).toEqual(keys.secrets);
      const read = keys.secrets[0]?.sealed;
      expect((await store().webhookEndpoints.replaceKeys(e.endpointId, keys, at(10), read))?.secrets).toEqual(
        keys.secrets,
      );

      expect(
        (await store().webhookEndpoints.recordOutcome(e.endpointId, false, at(20)))?.failingSince,
      ).toEqual(at(20));
      expect(
        (await store().webhookEndpoints.recordOutcome(e.endpointId, false, at(30)))?.failingSince,
      ).toEqual(at(20));
      expect(
        (await store().webhookEndpoints.recordOutcome(e.endpointId, true, at(40)))?.failingSince,
      ).toBeUndefined();

      expect(await store().webhookEndpoints.disable(e.endpointId, "failing for 5 days", at(50))).toBe(true);
      expect(await store().webhookEndpoints.disable(e.endpointId, "again", at(60))).toBe(false);
      const disabled = await store().webhookEndpoints.find(e.endpointId);
      expect(disabled).toMatchObject({
        status: "disabled",
        disabledAt: at(50),
        disabledReason: "failing for 5 days",
      });
      expect(await store().webhookEndpoints.delete(e.endpointId)).toBe(true);
      expect(await store().webhookEndpoints.delete(e.endpointId)).toBe(false);
      expect(await store().webhookEndpoints.find(e.endpointId)).toBeUndefined();
    });
  });

  describe("deliveries", () => {
    /** Two sequenced events of t1. */
    async function twoEvents(): Promise<[SequencedEvent, SequencedEvent]> {
      await store().events.append([event("t1", 0), event("t1", 1)]);
      const [first, second] = await sequenceAll(store());
      if (first === undefined || second === undefined) throw new Error("not sequenced");
      return [first, second];
    }

    it("creates each delivery once, however often the fan-out runs", async () => {
      const [e1, e2] = await twoEvents();
      await store().deliveries.createMissing([delivery("we_1", e1), delivery("we_1", e2)]);
      await store().deliveries.createMissing([delivery("we_1", e1, { status: "delivered" })]);
      const page = await store().deliveries.listForEndpoint("we_1", 10);
      expect(page.deliveries.map((d) => [d.eventId, d.status])).toEqual([
        [e2.id, "pending"],
        [e1.id, "pending"],
      ]);
    });

    it("lists the due deliveries of every tenant but those it is told to leave out", async () => {
      await store().events.append([event("t1", 0), event("t2", 1), event("t3", 2)]);
      const [e1, e2, e3] = await sequenceAll(store());
      if (e1 === undefined || e2 === undefined || e3 === undefined) throw new Error("not sequenced");
      await store().deliveries.createMissing([
        delivery("we_1", e1),
        delivery("we_2", e2),
        delivery("we_3", e3),
      ]);
      const due = async (except: string[]) =>
        (await store().deliveries.due(at(10), 10, except)).map((d) => d.tenantId);
      expect(await due([])).toEqual(["t1", "t2", "t3"]);
      expect(await due(["t1", "t3"])).toEqual(["t2"]);
    });

    it("lists due deliveries earliest first, claims with a fence, records and reschedules", async () => {
      const [e1, e2] = await twoEvents();
      await store().deliveries.createMissing([
        delivery("we_1", e1, { nextAttemptAt: at(10) }),
        delivery("we_1", e2, { nextAttemptAt: at(5) }),
      ]);
      expect((await store().deliveries.due(at(7), 10)).map((d) => d.eventId)).toEqual([e2.id]);
      expect((await store().deliveries.due(at(10), 10)).map((d) => d.eventId)).toEqual([e2.id, e1.id]);
      const key = { endpointId: "we_1", eventSeq: e2.seq };
      expect(await store().deliveries.claim(key, fence(2), at(40))).toBe(true);
      // Claimed: not due again before the claim runs out.
      expect((await store().deliveries.due(at(10), 10)).map((d) => d.eventId)).toEqual([e1.id]);
      // A smaller token can neither claim nor record it now.
      expect(await store().deliveries.claim(key, fence(1), at(40))).toBe(false);
      const failed = { at: at(11), statusCode: 500, error: "HTTP 500", durationMs: 12 };
      expect(
        await store().deliveries.record(key, fence(1), {
          attempt: failed,
          status: "pending",
          nextAttemptAt: at(60),
        }),
      ).toBe(false);
      expect(
        await store().deliveries.record(key, fence(2), {
          attempt: failed,
          status: "pending",
          nextAttemptAt: at(60),
        }),
      ).toBe(true);
      expect(await store().deliveries.find(key)).toMatchObject({
        status: "pending",
        attempts: 1,
        nextAttemptAt: at(60),
        log: [failed],
        fence: 2,
      });
      // A takeover's larger token claims it.
      expect(await store().deliveries.claim(key, fence(3), at(90))).toBe(true);
      const ok = { at: at(61), statusCode: 204, error: "", durationMs: 3 };
      expect(await store().deliveries.record(key, fence(2), { attempt: ok, status: "delivered" })).toBe(
        false,
      );
      expect(
        await store().deliveries.record(key, fence(3), {
          attempt: ok,
          status: "delivered",
          deliveredAt: at(61),
        }),
      ).toBe(true);
      const done = await store().deliveries.find(key);
      expect(done).toMatchObject({
        status: "delivered",
        attempts: 2,
        deliveredAt: at(61),
        log: [failed, ok],
      });
      expect(done?.nextAttemptAt).toBeUndefined();
      expect(await store().deliveries.claim(key, fence(3), at(90))).toBe(false);
      expect((await store().deliveries.due(at(1_000), 10)).map((d) => d.eventId)).toEqual([e1.id]);
    });

    it("keeps the newest attempts only", async () => {
      const [e1] = await twoEvents();
      await store().deliveries.createMissing([delivery("we_1", e1)]);
      const key = { endpointId: "we_1", eventSeq: e1.seq };
      await store().deliveries.claim(key, fence(1), at(1));
      for (let i = 0; i < 25; i++) {
        const attempt = { at: at(i), statusCode: 500, error: `HTTP 500 #${i}`, durationMs: 1 };
        await store().deliveries.record(key, fence(1), { attempt, status: "pending", nextAttemptAt: at(i) });
      }
      const d = await store().deliveries.find(key);
      expect(d?.attempts).toBe(25);
      expect(d?.log.map((a) => a.error)).toEqual(Array.from({ length: 20 }, (_, i) => `HTTP 500 #${i + 5}`));
    });

    it("replays a finished delivery and creates a missing one", async () => {
      const [e1, e2] = await twoEvents();
      await store().deliveries.createMissing([delivery("we_1", e1)]);
      const key = { endpointId: "we_1", eventSeq: e1.seq };
      await store().deliveries.claim(key, fence(1), at(1));
      const ok = { at: at(2), statusCode: 200, error: "", durationMs: 1 };
      await store().deliveries.record(key, fence(1), {
        attempt: ok,
        status: "delivered",
        deliveredAt: at(2),
      });
      const replayed = await store().deliveries.replay(delivery("we_1", e1), at(100));
      expect(replayed).toMatchObject({ status: "pending", attempts: 0, nextAttemptAt: at(100), log: [ok] });
      const created = await store().deliveries.replay(delivery("we_1", e2, { status: "failed" }), at(100));
      expect(created).toMatchObject({
        eventId: e2.id,
        status: "pending",
        attempts: 0,
        nextAttemptAt: at(100),
      });
      expect((await store().deliveries.due(at(100), 10)).map((d) => d.eventId).sort()).toEqual(
        [e1.id, e2.id].sort(),
      );
    });

    it("pages an endpoint's log newest first, and refuses a foreign page token", async () => {
      const events: EventRecord[] = Array.from({ length: 5 }, (_, i) => event("t1", i));
      await store().events.append(events);
      const sequenced = await sequenceAll(store());
      await store().deliveries.createMissing(sequenced.map((e) => delivery("we_1", e)));
      await store().deliveries.createMissing(sequenced.map((e) => delivery("we_2", e)));
      const first = await store().deliveries.listForEndpoint("we_1", 2);
      const second = await store().deliveries.listForEndpoint("we_1", 2, first.nextCursor);
      const third = await store().deliveries.listForEndpoint("we_1", 2, second.nextCursor);
      expect([...first.deliveries, ...second.deliveries, ...third.deliveries].map((d) => d.eventSeq)).toEqual(
        [5, 4, 3, 2, 1],
      );
      expect(third.nextCursor).toBeUndefined();
      expect(third.deliveries.every((d) => d.endpointId === "we_1")).toBe(true);
      await expect(store().deliveries.listForEndpoint("we_1", 2, "bm9wZQ")).rejects.toMatchObject({
        code: "invalid_request",
      });
    });

    it("fails an endpoint's pending deliveries, deletes them, and prunes finished old ones", async () => {
      const [e1, e2] = await twoEvents();
      await store().deliveries.createMissing([
        delivery("we_1", e1),
        delivery("we_1", e2),
        delivery("we_2", e1),
      ]);
      expect(await store().deliveries.failPending("we_1", at(30), "endpoint disabled")).toBe(2);
      expect(await store().deliveries.find({ endpointId: "we_1", eventSeq: e1.seq })).toMatchObject({
        status: "failed",
        log: [{ at: at(30), statusCode: 0, error: "endpoint disabled", durationMs: 0 }],
      });
      expect((await store().deliveries.due(at(1_000), 10)).map((d) => d.endpointId)).toEqual(["we_2"]);
      expect(await store().deliveries.prune(at(1_000))).toBe(2);
      expect(await store().deliveries.deleteForEndpoint("we_2")).toBe(1);
      expect(await store().deliveries.due(at(1_000), 10)).toEqual([]);
    });
  });
}

/**
 * The outbox: each operation that causes events writes them in its own atomic step, only when its
 * change is made (docs/events.md). What was written is what the sequencer then finds.
 */
function outboxContract(store: () => Store): void {
  /** Every event written so far, as the sequencer finds it. */
  const written = async (): Promise<string[]> => (await sequenceAll(store())).map((e) => e.id);

  describe("events: written with the change that causes them", () => {
    it("writes a receipt's events when the receipt is stored, and none when it is refused", async () => {
      const r = receipt("usr_1");
      const [e1, e2] = [event("t1"), event("t1")];
      expect(await store().receipts.insert(r, [e1])).toBe(true);
      expect(
        await store().receipts.insert(
          { ...receipt("usr_2"), merchantId: r.merchantId, receiptId: r.receiptId },
          [e2],
        ),
      ).toBe(false);
      expect(await written()).toEqual([e1.id]);
    });

    it("writes a payment's events with the payment, and none for a duplicate", async () => {
      const p = payment();
      const r = receipt("usr_1", { paymentId: p.paymentId, receiptId: p.receiptId });
      const [e1, e2, e3] = [event("tnt_merchant"), event("tnt_issuer"), event("tnt_merchant")];
      expect(await store().payments.createWithReceipt(p, r, [e1, e2])).toEqual({ kind: "created" });
      const again = payment({ merchantId: p.merchantId, transactionId: p.transactionId });
      expect((await store().payments.createWithReceipt(again, receipt("usr_1"), [e3])).kind).toBe(
        "duplicate_transaction",
      );
      // Events of one change share their time: the feed may give them in either order.
      expect((await written()).sort()).toEqual([e1.id, e2.id].sort());
    });

    it("writes a decline's event with the declined payment, and none when the transaction was charged", async () => {
      const declined = { ...payment(), status: "declined" as const };
      const [e1, e2, e3] = [event("t1"), event("t1"), event("t1")];
      expect(await store().payments.recordDecline(declined, [e1])).toBe("recorded");
      const charged = payment({ merchantId: declined.merchantId, transactionId: declined.transactionId });
      const r = receipt("usr_1", { paymentId: charged.paymentId, receiptId: charged.receiptId });
      expect(await store().payments.createWithReceipt(charged, r, [e2])).toEqual({ kind: "created" });
      const again = { ...payment({ merchantId: charged.merchantId, transactionId: charged.transactionId }) };
      expect(await store().payments.recordDecline({ ...again, status: "declined" }, [e3])).toBe(
        "duplicate_transaction",
      );
      expect((await written()).sort()).toEqual([e1.id, e2.id].sort());
    });

    it("writes a refund's events when it completes, once, and none for a released one", async () => {
      const p = payment({ amount: 1000 });
      const r = receipt("usr_1", { paymentId: p.paymentId, receiptId: p.receiptId });
      expect(await store().payments.createWithReceipt(p, r)).toEqual({ kind: "created" });
      const refundReceipt = () => receipt("usr_1", { merchantId: p.merchantId, receiptId: uid("R-refund") });
      const [a, b] = [refundReceipt(), refundReceipt()];
      const refundOf = (amount: number, rec: typeof a) => ({
        refundId: uid("ref"),
        amount,
        status: "pending" as const,
        receiptId: rec.receiptId,
        createdAt: at(60),
      });
      const [first, second] = [refundOf(400, a), refundOf(100, b)];
      expect((await store().payments.holdRefund(p, first, a)).kind).toBe("held");
      expect((await store().payments.holdRefund(p, second, b)).kind).toBe("held");
      const [e1, e2, e3] = [event("t1"), event("t1"), event("t1")];
      await store().payments.completeRefund(p, first.refundId, "re_1", [e1]);
      await store().payments.completeRefund(p, first.refundId, "re_1", [e2]);
      await store().payments.releaseRefund(p, second.refundId, b);
      await store().payments.completeRefund(p, second.refundId, "re_2", [e3]);
      expect(await written()).toEqual([e1.id]);
    });

    it("writes a release's events only for the call that released the receipt", async () => {
      const r = escrowedReceipt(hex64(), at(86_400), {
        escrowOwnerTenantId: "t1",
        escrowCardBin: "41111111",
      });
      await store().receipts.insert(r);
      const to = { userId: "usr_1", issuerTenantId: "t1", keyBundle: { ...r.keyBundle, keyId: "k-2" } };
      const [e1, e2] = [event("t1"), event("t1")];
      expect(await store().receipts.release(r, to, undefined, [e1])).toBe(true);
      expect(await store().receipts.release(r, to, undefined, [e2])).toBe(false);
      expect(await written()).toEqual([e1.id]);
      const released = await store().receipts.findByMerchantReceipt(r.merchantId, r.receiptId);
      expect(released?.escrowCardBin).toBeUndefined();
    });

    it("writes a second release's events only when it released again", async () => {
      const r = escrowedReceipt(hex64(), at(86_400), { escrowKeyId: "iek_1", escrowOwnerTenantId: "t1" });
      await store().receipts.insert(r);
      const to = { userId: "usr_1", issuerTenantId: "t1", keyBundle: { ...r.keyBundle, keyId: "k-2" } };
      expect(await store().receipts.release(r, to, "iek_1", [], true)).toBe(true);
      const again = { userId: "usr_1", keyBundle: { ...r.keyBundle, keyId: "k-3" } };
      const [e1, e2, e3] = [event("t1"), event("t1"), event("t1")];
      expect(await store().receipts.releaseAgain(r, { ...again, userId: "usr_2" }, "t1", at(10), [e1])).toBe(
        false,
      );
      expect(await store().receipts.releaseAgain(r, again, "t2", at(10), [e2])).toBe(false);
      expect(await store().receipts.releaseAgain(r, again, "t1", at(10), [e3])).toBe(true);
      expect(await written()).toEqual([e3.id]);
    });

    it("keeps an escrowed receipt's card BIN while it is escrowed", async () => {
      const r = escrowedReceipt(hex64(), at(86_400), {
        escrowOwnerTenantId: "t1",
        escrowCardBin: "41111111",
      });
      await store().receipts.insert(r);
      expect((await store().receipts.findByMerchantReceipt(r.merchantId, r.receiptId))?.escrowCardBin).toBe(
        "41111111",
      );
    });

    it("writes the events a registration's outcome calls for, and none for a refused one", async () => {
      const panHash = hex64();
      const outcomes: string[] = [];
      const events = (outcome: { kind: string }) => {
        outcomes.push(outcome.kind);
        return outcome.kind === "created" || outcome.kind === "rotated" ? [event("tnt_issuer")] : [];
      };
      const input = (key = pendingKey(), tenantId = "tnt_issuer") => ({
        panHash,
        tenantId,
        newUserId: uid("usr"),
        key: { ...key, tenantId, status: "active" as const },
        now: at(1),
        events,
      });
      await store().users.register(input());
      await store().users.register(input());
      await store().users.register(input(pendingKey(), "tnt_other"));
      expect(outcomes).toEqual(["created", "rotated", "pan_taken"]);
      expect(await written()).toHaveLength(2);
    });

    it("writes an erasure's events once, with the user's deletion", async () => {
      const created = await store().users.register({
        panHash: hex64(),
        tenantId: "tnt_issuer",
        newUserId: uid("usr"),
        key: { ...pendingKey(), status: "active" },
        now: at(0),
      });
      if (created.kind !== "created") throw new Error(created.kind);
      const [e1, e2] = [event("tnt_issuer"), event("tnt_issuer")];
      expect(await store().users.erase(created.user.userId, [e1])).toBeDefined();
      expect(await store().users.erase(created.user.userId, [e2])).toBeUndefined();
      expect(await written()).toEqual([e1.id]);
    });
  });
}
