import { randomBytes } from "node:crypto";
import { Webhook } from "standardwebhooks";
import { afterEach, describe, expect, it } from "vitest";
import { newEvent } from "../../src/domain/event-types.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { get, post, startService, type TestService } from "../support/harness.js";
import { FAST_EVENTS, freezableStore, type Receiver, startReceiver, until } from "./support.js";
import { createEndpoint, encryptFor, idsOf, registerCard } from "./support-flow.js";

/**
 * Nothing is lost when a receiver or an instance is down (docs/events.md): retries on the schedule
 * (compressed here by WEBHOOK_RETRY_SCHEDULE), an endpoint disabled after failing for too long, and a
 * second instance on the same store taking the delivery over from one killed mid-delivery.
 */

const CARD = "4000000000000010";
const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

/** The secrets every instance of one deployment shares (docs/scaling.md). */
const SHARED = {
  HASHED_PAN_PEPPER: randomBytes(32).toString("base64url"),
  WEBHOOK_SECRET_KEY: randomBytes(32).toString("base64"),
};

async function service(env: NodeJS.ProcessEnv = {}, store = createMemoryStore()): Promise<TestService> {
  const svc = await startService({ store, env: { ...FAST_EVENTS, ...SHARED, ...env }, shutdownGraceMs: 500 });
  cleanup.push(() => svc.close());
  return svc;
}

async function receiver(): Promise<Receiver> {
  const r = await startReceiver();
  cleanup.push(() => r.close());
  return r;
}

/** Deliveries of an endpoint, as its tenant reads the log. */
async function deliveries(svc: TestService, key: string, endpointId: string) {
  const res = await get(svc, `/api/v1/webhooks/deliveries?endpointId=${endpointId}&pageSize=200`, key);
  return res.body.data.deliveries as {
    eventId: string;
    status: string;
    attempts: number;
    attemptLog: { statusCode: number; error: string }[];
  }[];
}

describe("a receiver that is down", () => {
  it("gets each event once after it comes back, however many attempts failed meanwhile", async () => {
    // Three quick retries, then one a second for twenty seconds: on a loaded machine the poll below can
    // come seconds after the third attempt, and a schedule that ran out by then (6.4 s in all, as this
    // test once had) marks the deliveries failed before the receiver is back.
    const schedule = ["50ms", "100ms", "200ms", ...Array.from({ length: 20 }, () => "1s")].join(",");
    const svc = await service({ WEBHOOK_RETRY_SCHEDULE: schedule });
    const r = await receiver();
    const endpoint = await createEndpoint(svc, svc.issuerKey, r.url);
    const port = r.port;
    await r.close(); // down: connections are refused
    await registerCard(svc, svc.issuerKey, CARD);
    for (let i = 0; i < 3; i++) await encryptFor(svc, svc.merchantKey, CARD);
    // Three attempts of each of the four events fail while it is down.
    await until(
      async () => (await deliveries(svc, svc.issuerKey, endpoint.endpointId)).every((d) => d.attempts >= 3),
      15_000,
      "three failed attempts each",
    );
    const failing = await deliveries(svc, svc.issuerKey, endpoint.endpointId);
    expect(failing).toHaveLength(4);
    for (const d of failing) {
      expect(d.status).toBe("pending");
      expect(d.attemptLog[0]).toMatchObject({ statusCode: 0, error: "connection refused" });
    }
    // Back, on the same port.
    await new Promise<void>((resolve) => r.server.listen(port, "127.0.0.1", resolve));
    await until(() => r.received.length >= 4, 15_000, "the events after the receiver is back");
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(r.received).toHaveLength(4);
    expect(new Set(idsOf(r.received)).size).toBe(4);
    for (const got of r.received) {
      expect(
        new Webhook(endpoint.secret).verify(got.body, got.headers as Record<string, string>),
      ).toBeTruthy();
    }
    const after = await deliveries(svc, svc.issuerKey, endpoint.endpointId);
    expect(after.every((d) => d.status === "delivered")).toBe(true);
  });

  it("is retried after error answers and a receiver's 503, and the log shows every attempt", async () => {
    const svc = await service();
    const r = await receiver();
    r.answer = (n) => (n < 3 ? (n === 1 ? 503 : 500) : 204);
    const endpoint = await createEndpoint(svc, svc.issuerKey, r.url);
    await registerCard(svc, svc.issuerKey, CARD);
    await until(() => r.received.length === 4, 10_000, "four attempts");
    const [d] = await deliveries(svc, svc.issuerKey, endpoint.endpointId);
    expect(d).toMatchObject({ status: "delivered", attempts: 4 });
    expect(d?.attemptLog.map((a) => [a.statusCode, a.error])).toEqual([
      [500, "HTTP 500"],
      [503, "HTTP 503"],
      [500, "HTTP 500"],
      [204, ""],
    ]);
    expect(new Set(idsOf(r.received)).size).toBe(1);
  });

  it("fails a delivery after the last attempt of the schedule, and keeps the event for replay", async () => {
    const svc = await service({ WEBHOOK_RETRY_SCHEDULE: "20ms,20ms" });
    const r = await receiver();
    r.answer = () => 500;
    const endpoint = await createEndpoint(svc, svc.issuerKey, r.url);
    await registerCard(svc, svc.issuerKey, CARD);
    await until(
      async () => (await deliveries(svc, svc.issuerKey, endpoint.endpointId))[0]?.status === "failed",
    );
    expect(r.received).toHaveLength(3);
    r.answer = () => 204;
    const eventId = String(r.received[0]?.headers["webhook-id"]);
    const replay = await post(
      svc,
      `/api/v1/webhooks/endpoints/${endpoint.endpointId}/replay`,
      svc.issuerKey,
      {
        eventId,
      },
    );
    expect(replay.status).toBe(200);
    await until(() => r.received.length === 4);
    expect(r.received[3]?.headers["webhook-id"]).toBe(eventId);
  });
});

describe("an endpoint failing for too long", () => {
  it("is disabled, audited, and its pending deliveries failed; nothing more is sent to it", async () => {
    const svc = await service({
      WEBHOOK_DISABLE_AFTER: "400ms",
      WEBHOOK_RETRY_SCHEDULE: "100ms,100ms,100ms,100ms,100ms,100ms,100ms,100ms",
    });
    const r = await receiver();
    r.answer = () => 500;
    const endpoint = await createEndpoint(svc, svc.issuerKey, r.url);
    await registerCard(svc, svc.issuerKey, CARD);
    const listed = async () =>
      (await get(svc, "/api/v1/webhooks/endpoints", svc.issuerKey)).body.data.endpoints[0] as Record<
        string,
        unknown
      >;
    await until(async () => (await listed()).status === "disabled", 10_000, "the endpoint disabled");
    expect(await listed()).toMatchObject({
      status: "disabled",
      disabledReason: "failing for 400 ms without a success",
      disabledAt: expect.any(String),
    });
    const audit = await svc.store.audit.list(50, { tenantId: "issuer-1" });
    expect(audit.find((e) => e.action === "webhook.endpoint_disabled")?.subject).toMatch(endpoint.endpointId);
    const [d] = await deliveries(svc, svc.issuerKey, endpoint.endpointId);
    expect(d?.status).toBe("failed");
    expect(d?.attemptLog.at(-1)?.error).toBe("endpoint disabled");
    const seen = r.received.length;
    await encryptFor(svc, svc.merchantKey, CARD);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(r.received).toHaveLength(seen);
    const replay = await post(
      svc,
      `/api/v1/webhooks/endpoints/${endpoint.endpointId}/replay`,
      svc.issuerKey,
      {
        eventId: r.received[0]?.headers["webhook-id"],
      },
    );
    expect(replay.status).toBe(400);
  });

  it("is not disabled when an event it still owed is past the retention: that delivery alone fails", async () => {
    const store = createMemoryStore();
    const svc = await service({}, store);
    const r = await receiver();
    // Down at the first attempt; meanwhile the event passes the retention (a replay of an old event
    // retried past its seventh day, or EVENTS_RETENTION_DAYS shorter than the retry schedule).
    r.answer = async (n) => {
      if (n === 0) await store.events.prune(new Date(Date.now() + 86_400_000));
      return 503;
    };
    const endpoint = await createEndpoint(svc, svc.issuerKey, r.url);
    await registerCard(svc, svc.issuerKey, CARD);
    await until(
      async () => (await deliveries(svc, svc.issuerKey, endpoint.endpointId))[0]?.status === "failed",
    );
    const [d] = await deliveries(svc, svc.issuerKey, endpoint.endpointId);
    expect(d?.attemptLog.at(-1)?.error).toBe("event no longer kept");
    const [e] = (await get(svc, "/api/v1/webhooks/endpoints", svc.issuerKey)).body.data.endpoints;
    expect(e.status).toBe("active");
    const audit = await store.audit.list(50, { tenantId: "issuer-1" });
    expect(audit.filter((a) => a.action === "webhook.endpoint_disabled")).toEqual([]);
  });

  it("is disabled at once when the receiver answers 410 Gone", async () => {
    const svc = await service();
    const r = await receiver();
    r.answer = () => 410;
    await createEndpoint(svc, svc.issuerKey, r.url);
    await registerCard(svc, svc.issuerKey, CARD);
    await until(async () => {
      const [e] = (await get(svc, "/api/v1/webhooks/endpoints", svc.issuerKey)).body.data.endpoints;
      return e.status === "disabled" && e.disabledReason === "the receiver answered 410 Gone";
    });
    expect(r.received).toHaveLength(1);
  });
});

describe("a receiver that never answers", () => {
  it("does not hold up another tenant's deliveries behind its backlog", async () => {
    // Four slots and attempts of 3 s: served first come, first served, a rival's 60 events to a
    // receiver that never answers keep every slot busy for 45 s, and the issuer's event waits behind them.
    const store = createMemoryStore();
    const svc = await service({ WEBHOOK_CONCURRENCY: "4", WEBHOOK_TIMEOUT_MS: "3000" }, store);
    const silent = await receiver();
    silent.answer = () => new Promise<number>(() => {});
    const honest = await receiver();
    await createEndpoint(svc, svc.merchantKey, silent.url);
    await createEndpoint(svc, svc.issuerKey, honest.url);
    const data = { paymentId: "pay_1", merchantId: "m-1", transactionId: "t-1", receiptId: "r-1" };
    await store.events.append(
      Array.from({ length: 60 }, () => newEvent("payment.created", "merchant-1", new Date(), data)),
    );
    await until(() => silent.received.length >= 4, 10_000, "the rival's deliveries in every slot");
    await registerCard(svc, svc.issuerKey, CARD);
    // A slot frees within one attempt's time limit, and goes to the tenant waiting with none in flight
    // (room for a loaded machine: still far below the 45 s of the rival's backlog).
    await until(() => honest.received.length === 1, 10_000, "the issuer's delivery");
  }, 40_000);
});

describe("an instance killed mid-delivery", () => {
  it("loses nothing: a second instance on the same store takes the lease and delivers everything", async () => {
    const shared = createMemoryStore();
    const a = freezableStore(shared);
    cleanup.push(async () => a.abandon());
    // A lease of 3 s: a loaded machine must not hand the lease over before the kill. Attempts of 6 s,
    // so that the held ones are still in flight when the last of the five arrives.
    const lease = { EVENTS_LEASE_MS: "3000", WEBHOOK_TIMEOUT_MS: "6000" };
    const first = await service(lease, a.store);
    // Let the first instance take the lease before the second one starts.
    await until(async () => (await shared.leases.acquire("events", "probe", new Date(), 1)) === undefined);
    const second = await service(lease, shared);
    const r = await receiver();
    const held: (() => void)[] = [];
    let killed = false;
    // The first instance's deliveries reach the receiver and hang there; after the kill, it answers.
    r.answer = () => (killed ? 204 : new Promise<number>((resolve) => held.push(() => resolve(204))));
    const endpoint = await createEndpoint(first, first.issuerKey, r.url);
    await registerCard(first, first.issuerKey, CARD);
    for (let i = 0; i < 4; i++) await encryptFor(first, first.merchantKey, CARD);
    // Each of the five events reached the receiver (a slow machine may have timed one out and sent it
    // again: still not delivered).
    await until(
      () => new Set(idsOf(r.received)).size === 5,
      20_000,
      "five deliveries in flight on the first instance",
    );

    // Kill: its store stops answering for good, and its connections die with it.
    a.freeze();
    killed = true;
    const atKill = r.received.length;
    r.server.closeAllConnections();
    held.length = 0;
    const tokenBefore = (await shared.leases.acquire("events", "probe", new Date(), 1)) === undefined;
    expect(tokenBefore).toBe(true);

    // Events written meanwhile through the second instance are delivered too.
    await encryptFor(second, second.merchantKey, CARD);
    await until(
      async () => {
        const delivered = (await deliveries(second, second.issuerKey, endpoint.endpointId)).filter(
          (d) => d.status === "delivered",
        );
        return delivered.length === 6;
      },
      30_000,
      "six deliveries after the takeover",
    ).catch(async (err) => {
      console.log(JSON.stringify(await deliveries(second, second.issuerKey, endpoint.endpointId), null, 1));
      console.log(await shared.events.lastSeq(), await shared.events.fannedOut());
      throw err;
    });
    const answered = r.received.slice(atKill);
    const ids = new Set(idsOf(answered));
    expect(ids.size).toBe(6);
    // Each of the five in flight at the kill came again, with the same webhook-id.
    for (const id of idsOf(r.received.slice(0, atKill))) expect(ids.has(id)).toBe(true);
    expect(answered).toHaveLength(6);
  }, 60_000);
});
