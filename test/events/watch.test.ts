import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { type ClientReadableStream, Metadata, type ServiceError, status } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventsService, type WatchEventsResponse } from "../../gen/receipts/v1/events_pb.js";
import { newEvent } from "../../src/domain/event-types.js";
import type { EventRecord } from "../../src/store/event-types.js";
import { rawGrpcClient } from "../hardening/support.js";
import { grpcClient } from "../support/grpc.js";
import { startService, type TestService } from "../support/harness.js";
import { FAST_EVENTS, until } from "./support.js";

/**
 * WatchEvents (docs/events.md): a server stream on gRPC (a real grpc-js client), gRPC-Web and Connect
 * (HTTP/2 and HTTP/1.1), on the service's one port. Resumable after any event id without gaps or
 * duplicates; flow-controlled, so a reader that stops reading never makes the server read ahead more
 * than a bounded amount; each tenant sees its own events only.
 */

let svc: TestService;
let issuer2: string;
const fetched = { count: 0 };

beforeAll(async () => {
  svc = await startService({
    env: { ...FAST_EVENTS, WATCH_HEARTBEAT_MS: "200", WATCH_STREAMS_PER_KEY: "3" },
    shutdownGraceMs: 2_000,
  });
  issuer2 = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "issuer-2" });
  // Counts the events the streams read from the store, to see how far a server reads ahead.
  const events = svc.store.events;
  const list = events.listForTenant.bind(events);
  events.listForTenant = async (tenantId, afterSeq, limit) => {
    const page = await list(tenantId, afterSeq, limit);
    fetched.count += page.length;
    return page;
  };
});
afterAll(async () => {
  await svc?.close();
});

/** Writes `n` events for `tenantId` (as the store operations would) and wakes the worker. */
async function write(n: number, tenantId = "issuer-1"): Promise<EventRecord[]> {
  const events = Array.from({ length: n }, (_, i) =>
    newEvent("receipt.created", tenantId, new Date(), {
      userId: `usr_${i}`,
      receiptId: `r-${i}`,
      merchantId: "m",
    }),
  );
  for (let i = 0; i < events.length; i += 500) await svc.store.events.append(events.slice(i, i + 500));
  svc.app.events.deps.hub.written();
  return events;
}

const connect = (httpVersion: "1.1" | "2") =>
  createClient(EventsService, createConnectTransport({ baseUrl: svc.baseUrl, httpVersion }));

/** Reads a stream until it has `n` events (heartbeats skipped), then stops. */
async function take(
  stream: AsyncIterable<WatchEventsResponse>,
  n: number,
  seen: string[] = [],
): Promise<string[]> {
  for await (const message of stream) {
    if (message.event !== undefined) seen.push(message.event.id);
    if (seen.length >= n) break;
  }
  return seen;
}

describe("WatchEvents over Connect", () => {
  for (const httpVersion of ["2", "1.1"] as const) {
    it(`opens at once with a heartbeat, then streams new events in order (HTTP/${httpVersion})`, async () => {
      const abort = new AbortController();
      const stream = connect(httpVersion).watchEvents(
        {},
        { headers: { "x-api-key": svc.issuerKey }, signal: abort.signal },
      );
      const it = stream[Symbol.asyncIterator]();
      const first = await it.next();
      expect(first.value?.heartbeat).toBeDefined();
      expect(first.value?.event).toBeUndefined();
      const written = await write(5);
      const seen: string[] = [];
      while (seen.length < 5) {
        const next = await it.next();
        if (next.value?.event !== undefined) seen.push(next.value.event.id);
      }
      expect(seen).toEqual(written.map((e) => e.id));
      abort.abort();
    });
  }

  it("resumes after a disconnect with no gap and no duplicate, while events keep coming", async () => {
    const client = connect("2");
    const headers = { "x-api-key": svc.issuerKey };
    const seen: string[] = [];
    // The first connection starts from now; it is open (its heartbeat came) before anything is written.
    let abort = new AbortController();
    let stream = client.watchEvents({}, { headers, signal: abort.signal })[Symbol.asyncIterator]();
    expect((await stream.next()).value?.heartbeat).toBeDefined();
    const all: EventRecord[] = [];
    let writing = true;
    const writer = (async () => {
      for (let round = 0; round < 20; round++) {
        all.push(...(await write(10)));
        await new Promise((r) => setTimeout(r, 5));
      }
      writing = false;
    })();
    // Each connection is cut off after a few events; the next resumes after the last id it saw.
    for (;;) {
      let taken = 0;
      while (taken < 7) {
        const next = await stream.next();
        if (next.done) break;
        if (next.value.event === undefined) {
          if (!writing && seen.length >= all.length) break;
          continue;
        }
        seen.push(next.value.event.id);
        taken++;
      }
      abort.abort();
      if (!writing && seen.length >= all.length) break;
      abort = new AbortController();
      const after = seen.at(-1) ?? "";
      stream = client.watchEvents({ after }, { headers, signal: abort.signal })[Symbol.asyncIterator]();
    }
    await writer;
    expect(seen).toEqual(all.map((e) => e.id));
  });

  it("streams over gRPC-Web too", async () => {
    const client = createClient(
      EventsService,
      createGrpcWebTransport({ baseUrl: svc.baseUrl, httpVersion: "1.1" }),
    );
    const abort = new AbortController();
    const stream = client.watchEvents({}, { headers: { "x-api-key": svc.issuerKey }, signal: abort.signal });
    const reading = take(stream, 3);
    await new Promise((r) => setTimeout(r, 100));
    const written = await write(3);
    expect(await reading).toEqual(written.map((e) => e.id));
    abort.abort();
  });
});

/** Opens WatchEvents on a grpc-js client and collects what arrives. */
function grpcWatch(request: { after?: string; types?: string[] }, apiKey: string) {
  const client = grpcClient(EventsService, svc.port);
  const metadata = new Metadata();
  metadata.set("x-api-key", apiKey);
  const call = (client.watchEvents as (r: unknown, m: Metadata) => ClientReadableStream<WatchEventsResponse>)(
    request,
    metadata,
  );
  const messages: WatchEventsResponse[] = [];
  const ended = new Promise<ServiceError | undefined>((resolve) => {
    call.on("data", (m: WatchEventsResponse) => messages.push(m));
    call.on("error", (err: ServiceError) => resolve(err));
    call.on("end", () => resolve(undefined));
  });
  return {
    client,
    call,
    messages,
    ended,
    events: () => messages.flatMap((m) => (m.event ? [m.event.id] : [])),
  };
}

describe("WatchEvents over gRPC with grpc-js", () => {
  it("streams the tenant's events and nothing of another tenant's", async () => {
    const mine = grpcWatch({}, svc.issuerKey);
    const theirs = grpcWatch({}, issuer2);
    await until(() => mine.messages.length > 0 && theirs.messages.length > 0, 5_000, "both streams open");
    const written = await write(4);
    const other = await write(2, "issuer-2");
    await until(() => mine.events().length >= 4 && theirs.events().length >= 2, 5_000, "the events");
    await new Promise((r) => setTimeout(r, 200));
    expect(mine.events()).toEqual(written.map((e) => e.id));
    expect(theirs.events()).toEqual(other.map((e) => e.id));
    // Another tenant's event id is no place to resume from.
    const stranger = grpcWatch({ after: written[0]?.id ?? "" }, issuer2);
    expect((await stranger.ended)?.code).toBe(status.NOT_FOUND);
    for (const s of [mine, theirs, stranger]) {
      s.call.cancel();
      s.client.close();
    }
  });

  it("filters by type, and refuses an unknown type, a type of the other role, or one repeated", async () => {
    const filtered = grpcWatch({ types: ["user.erased"] }, svc.issuerKey);
    await until(() => filtered.messages.length > 0);
    await write(3);
    await svc.store.events.append([newEvent("user.erased", "issuer-1", new Date(), { userId: "usr_gone" })]);
    svc.app.events.deps.hub.written();
    await until(() => filtered.events().length === 1);
    filtered.call.cancel();
    filtered.client.close();
    // As when subscribing an endpoint: a merchant never gets issuer events, nor an issuer payments.
    for (const [types, key, field, says] of [
      [["receipt.deleted"], svc.issuerKey, "types[0]", "is not an event type"],
      [["receipt.created"], svc.merchantKey, "types[0]", "is not sent to merchant tenants"],
      [["user.erased", "payment.created"], svc.issuerKey, "types[1]", "is not sent to issuer tenants"],
      [["user.erased", "user.erased"], svc.issuerKey, "types", "must not repeat a type"],
    ] as const) {
      const bad = grpcWatch({ types: [...types] }, key);
      const open = new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 3_000));
      const error = await Promise.race([bad.ended, open]);
      bad.call.cancel();
      expect(error?.code, `${types.join()}: refused, not a stream kept open`).toBe(status.INVALID_ARGUMENT);
      const details = error?.metadata.get("grpc-status-details-bin")[0] as Buffer | undefined;
      expect(details?.toString("latin1")).toContain(field);
      expect(details?.toString("latin1")).toContain(says);
      bad.client.close();
    }
  });

  it("never reads ahead without bound for a reader that stops reading, and loses nothing when it reads again", async () => {
    const slow = grpcWatch({}, svc.issuerKey);
    await until(() => slow.messages.length > 0);
    slow.call.pause();
    const start = fetched.count;
    const written = await write(20_000);
    await new Promise((r) => setTimeout(r, 2_000));
    const readAhead = fetched.count - start;
    console.log(
      `flow control: ${readAhead} of ${written.length} events read from the store while the reader paused`,
    );
    // What the transport's windows and buffers hold, and one page: a few thousand, whatever was written.
    expect(readAhead).toBeLessThan(5_000);
    slow.call.resume();
    await until(() => slow.events().length >= written.length, 40_000, "every event after the reader resumed");
    expect(slow.events()).toEqual(written.map((e) => e.id));
    slow.call.cancel();
    slow.client.close();
  }, 90_000);

  it("caps the streams one API key keeps open at once", async () => {
    const open = [grpcWatch({}, issuer2), grpcWatch({}, issuer2), grpcWatch({}, issuer2)];
    await until(() => open.every((s) => s.messages.length > 0), 5_000, "three open streams");
    const fourth = grpcWatch({}, issuer2);
    expect((await fourth.ended)?.code).toBe(status.RESOURCE_EXHAUSTED);
    for (const s of [...open, fourth]) {
      s.call.cancel();
      s.client.close();
    }
  });

  it("answers INVALID_ARGUMENT to request bytes that do not decode, and UNAUTHENTICATED without a key", async () => {
    const raw = rawGrpcClient(svc.port);
    const outcome = (payload: Uint8Array, key?: string) =>
      new Promise<ServiceError | undefined>((resolve) => {
        const metadata = new Metadata();
        if (key !== undefined) metadata.set("x-api-key", key);
        const call = raw.makeServerStreamRequest<Uint8Array, Buffer>(
          "/receipts.v1.EventsService/WatchEvents",
          (b) => Buffer.from(b),
          (b) => b,
          payload,
          metadata,
          { deadline: Date.now() + 5_000 },
        );
        call.on("data", () => {
          call.cancel();
          resolve(undefined);
        });
        call.on("error", (err: ServiceError) => resolve(err));
      });
    for (const bytes of [
      [0xff, 0xff, 0xff],
      [0x0a, 0x05, 0x41],
      [0x12, 0x02, 0xc3, 0x28],
    ]) {
      const err = await outcome(Uint8Array.from(bytes), svc.issuerKey);
      expect(err?.code, Buffer.from(bytes).toString("hex")).toBe(status.INVALID_ARGUMENT);
    }
    expect((await outcome(new Uint8Array(), undefined))?.code).toBe(status.UNAUTHENTICATED);
    raw.close();
  });
});

describe("WatchEvents and shutdown", () => {
  it("ends open streams with UNAVAILABLE when the service stops, so clients resume elsewhere", async () => {
    const other = await startService({ env: FAST_EVENTS, shutdownGraceMs: 5_000 });
    const client = grpcClient(EventsService, other.port);
    const metadata = new Metadata();
    metadata.set("x-api-key", other.issuerKey);
    const call = (
      client.watchEvents as (r: unknown, m: Metadata) => ClientReadableStream<WatchEventsResponse>
    )({}, metadata);
    let opened = false;
    call.on("data", () => {
      opened = true;
    });
    const ended = new Promise<ServiceError>((resolve) => call.on("error", resolve));
    await until(() => opened);
    const started = performance.now();
    await other.close();
    expect((await ended).code).toBe(status.UNAVAILABLE);
    expect(performance.now() - started).toBeLessThan(4_000);
    client.close();
  });
});
