import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config.js";
import { newEvent } from "../../src/domain/event-types.js";
import { createEndpoint } from "../../src/events/endpoints.js";
import { createEvents, type Events } from "../../src/events/index.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { ApiKeyRecord } from "../../src/store/types.js";
import { type Receiver, startReceiver, until } from "./support.js";

/**
 * The worker's rounds (src/events/worker.ts): a finished attempt wakes the worker for another round only
 * when deliveries were left waiting for a free slot, so an event costs one round, not two.
 */

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const step of cleanup.splice(0).reverse()) await step();
});

async function worker(
  concurrency: number,
): Promise<{ events: Events; rounds: () => number; receiver: Receiver }> {
  const config = loadConfig({
    RECEIPTS_ENV: "dev",
    STORE: "memory",
    // No poll within the test: every round is a wake-up.
    EVENTS_POLL_MS: "60000",
    WEBHOOK_CONCURRENCY: String(concurrency),
  });
  const store = createMemoryStore();
  let rounds = 0;
  const due = store.deliveries.due.bind(store.deliveries);
  store.deliveries.due = (now, limit) => {
    rounds++;
    return due(now, limit);
  };
  const events = createEvents({
    store,
    clock: { now: () => new Date() },
    logger: pino({ level: "silent" }),
    config,
  });
  const receiver = await startReceiver();
  cleanup.push(() => receiver.close());
  const principal = { id: "key_t", tenantId: "iss_t", role: "issuer", env: "dev" } as ApiKeyRecord;
  await createEndpoint(
    events.deps,
    principal,
    { url: receiver.url, events: ["*"], description: "" },
    {
      requestId: "t",
      sourceIp: "",
    },
  );
  events.start();
  cleanup.push(() => events.stop());
  return { events, rounds: () => rounds, receiver };
}

const event = () => newEvent("receipt.created", "iss_t", new Date(), { userId: "usr_1", receiptId: "rcp_1" });

describe("the event worker's rounds", () => {
  it("spends one round per event when nothing waits for a slot", async () => {
    const { events, rounds, receiver } = await worker(32);
    await new Promise((r) => setTimeout(r, 200));
    for (let i = 0; i < 3; i++) {
      const before = rounds();
      await events.deps.store.events.append([event()]);
      await until(() => receiver.received.length === i + 1, 10_000, "the delivery");
      await new Promise((r) => setTimeout(r, 150));
      expect(rounds() - before).toBe(1);
    }
  });

  it("still starts deliveries that waited for a slot as soon as one frees", async () => {
    const { events, receiver } = await worker(1);
    await new Promise((r) => setTimeout(r, 200));
    await events.deps.store.events.append(Array.from({ length: 5 }, event));
    // One at a time, each started by the end of the one before, not by the poll a minute later.
    await until(() => receiver.received.length === 5, 5_000, "five deliveries one after another");
  });
});
