import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type TestService } from "../support/harness.js";
import { H2_ERROR, RawH2Connection, SETTINGS_INITIAL_WINDOW_SIZE } from "./h2-raw.js";

/**
 * HTTP/2 from the attacker's side: one connection opening thousands of streams it never finishes,
 * clients resetting streams as fast as they can write (CVE-2023-44487), streams left open on an idle
 * connection or one the client said GOAWAY on. The server must advertise and enforce a stream limit,
 * reset what it will not wait for, and close the connections of rapid resetters; meanwhile another
 * client's `/healthz` stays fast and memory stays bounded. Bounds are generous (machines are noisy):
 * what fails without the limits is that streams stay open and connections are never closed.
 */

const GRANT = "/receipts.v1.KeysService/GrantAccess";

/** The server's open HTTP/2 streams. */
const openStreams = (svc: TestService): number => svc.app.server.openHttp2Streams();

/** Streams of `connection` neither answered nor reset while the connection is open: held by the server. */
const stillOpen = (connection: RawH2Connection): number =>
  connection.isClosed ? 0 : connection.opened - connection.resets.size - connection.answered.size;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Probes `/healthz` over HTTP/1.1 every 50 ms while `work` runs; returns the slowest answer in ms. */
async function healthzWhile(
  svc: TestService,
  work: Promise<unknown>,
): Promise<{ maxMs: number; count: number }> {
  let done = false;
  let maxMs = 0;
  let count = 0;
  const probing = (async () => {
    while (!done) {
      const started = performance.now();
      const res = await fetch(`${svc.baseUrl}/healthz`, { signal: AbortSignal.timeout(10_000) });
      await res.text();
      expect(res.status).toBe(200);
      maxMs = Math.max(maxMs, performance.now() - started);
      count++;
      await sleep(50);
    }
  })();
  try {
    await work;
  } finally {
    done = true;
    await probing;
  }
  return { maxMs, count };
}

/** Samples the server's open HTTP/2 streams and the heap while `work` runs; returns the peaks. */
async function peaksWhile(svc: TestService, work: Promise<unknown>) {
  const heapBefore = process.memoryUsage().heapUsed;
  let streams = 0;
  let heap = heapBefore;
  const timer = setInterval(() => {
    streams = Math.max(streams, openStreams(svc));
    heap = Math.max(heap, process.memoryUsage().heapUsed);
  }, 10);
  try {
    await work;
  } finally {
    clearInterval(timer);
  }
  return { streams, heapGrowthMb: (heap - heapBefore) / 2 ** 20 };
}

/** Resolves once `condition` holds, or after `ms`; returns whether it held. */
async function eventually(condition: () => boolean, ms: number): Promise<boolean> {
  const deadline = performance.now() + ms;
  while (performance.now() < deadline) {
    if (condition()) return true;
    await sleep(20);
  }
  return condition();
}

describe("HTTP/2 floods and rapid resets", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService({
      listener: {
        requestTimeoutMs: 1_000,
        timeoutCheckIntervalMs: 100,
        http2CloseGraceMs: 500,
      },
      shutdownGraceMs: 500,
    });
  });
  afterAll(async () => {
    await svc.close();
  });

  it("advertises 100 streams, refuses a flood of 5,000 half-open streams beyond it, and stays responsive", async () => {
    const attacker = new RawH2Connection(svc.port);
    await attacker.connected;
    const flood = (async () => {
      for (let i = 0; i < 5_000 && !attacker.isClosed; i++) {
        if (i % 2 === 0) attacker.open(GRANT, { "content-type": "application/grpc", te: "trailers" });
        else attacker.open("/api/v1/keys/grant-access", { "content-type": "application/json" });
        if (i % 200 === 199) await attacker.flushed();
        // A pause after the first streams, so the server's count of open streams can be seen.
        if (i === 299) await sleep(300);
      }
      // Every stream the server took is reset by the request timeout, or the connection is closed.
      await eventually(() => attacker.isClosed || openStreams(svc) === 0, 5_000);
    })();
    const [health, peaks] = await Promise.all([healthzWhile(svc, flood), peaksWhile(svc, flood)]);
    const refused = [...attacker.resets.values()].filter((code) => code === H2_ERROR.REFUSED_STREAM).length;
    console.log(
      `h2 flood: ${attacker.opened} streams sent; advertised limit ${attacker.maxConcurrentStreams}; ` +
        `peak open on the server ${peaks.streams}; refused ${refused}; ` +
        `GOAWAY ${attacker.goaway === undefined ? "none" : `code ${attacker.goaway.code}`}; ` +
        `connection closed ${attacker.isClosed}; open streams after ${openStreams(svc)} ` +
        `(client side: ${stillOpen(attacker)}); ` +
        `heap growth ${peaks.heapGrowthMb.toFixed(1)} MB; slowest /healthz ${health.maxMs.toFixed(0)} ms ` +
        `of ${health.count}`,
    );
    attacker.destroy();
    expect(attacker.maxConcurrentStreams).toBe(100);
    expect(peaks.streams).toBeLessThanOrEqual(100);
    expect(refused > 0 || attacker.goaway !== undefined).toBe(true);
    expect(openStreams(svc)).toBe(0);
    expect(peaks.heapGrowthMb).toBeLessThan(150);
    expect(health.maxMs).toBeLessThan(3_000);
  });

  it("resets a stream whose request has not fully arrived within the request timeout, and keeps the connection", async () => {
    const client = new RawH2Connection(svc.port);
    await client.connected;
    const ids = Array.from({ length: 50 }, () => client.open(GRANT, { "content-type": "application/grpc" }));
    await client.flushed();
    expect(await eventually(() => ids.every((id) => client.resets.has(id)), 4_000)).toBe(true);
    expect(new Set(ids.map((id) => client.resets.get(id)))).toEqual(new Set([H2_ERROR.CANCEL]));
    // The connection still serves a request that does arrive whole.
    const health = client.open("/healthz", {}, true);
    expect(await eventually(() => client.answered.has(health), 3_000)).toBe(true);
    expect(client.isClosed).toBe(false);
    client.destroy();
  });

  it("answers a rapid-reset burst on 3 connections with GOAWAY ENHANCE_YOUR_CALM and closes them", async () => {
    const attackers = Array.from({ length: 3 }, () => new RawH2Connection(svc.port));
    await Promise.all(attackers.map((a) => a.connected));
    const burst = Promise.all(
      attackers.map(async (attacker) => {
        for (let i = 0; i < 3_000 && !attacker.isClosed; i++) {
          const id =
            i % 2 === 0
              ? attacker.open(GRANT, { "content-type": "application/grpc" })
              : attacker.open("/api/v1/keys/grant-access", { "content-type": "application/json" });
          attacker.reset(id);
          if (i % 100 === 99) await attacker.flushed();
        }
        await Promise.race([attacker.closed, sleep(5_000)]);
      }),
    );
    const [health, peaks] = await Promise.all([healthzWhile(svc, burst), peaksWhile(svc, burst)]);
    console.log(
      `h2 rapid reset: ${attackers.map((a) => a.opened).join("/")} streams opened and reset; GOAWAY codes ` +
        `${attackers.map((a) => a.goaway?.code ?? "none").join("/")}; closed ${attackers.map((a) => a.isClosed).join("/")}; ` +
        `heap growth ${peaks.heapGrowthMb.toFixed(1)} MB; slowest /healthz ${health.maxMs.toFixed(0)} ms of ${health.count}`,
    );
    for (const attacker of attackers) {
      expect(attacker.goaway?.code).toBe(H2_ERROR.ENHANCE_YOUR_CALM);
      expect(attacker.isClosed).toBe(true);
      attacker.destroy();
    }
    expect(health.maxMs).toBeLessThan(3_000);
    expect(peaks.heapGrowthMb).toBeLessThan(150);
  });
});

describe("HTTP/2 streams left open on an idle connection, or after the client's GOAWAY", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService({
      listener: {
        // Long enough that the request timeout is not what closes the streams here.
        requestTimeoutMs: 60_000,
        http2IdleTimeoutMs: 500,
        http2CloseGraceMs: 500,
      },
      shutdownGraceMs: 500,
    });
  });
  afterAll(async () => {
    await svc.close();
  });

  it("closes the streams of a connection that goes idle", async () => {
    const client = new RawH2Connection(svc.port);
    await client.connected;
    for (let i = 0; i < 20; i++) client.open(GRANT, { "content-type": "application/grpc" });
    await client.flushed();
    expect(await eventually(() => openStreams(svc) === 20, 2_000)).toBe(true);
    expect(await eventually(() => client.isClosed, 4_000)).toBe(true);
    expect(client.goaway).toBeDefined();
    expect(openStreams(svc)).toBe(0);
  });

  it("closes the streams of a connection the client sent GOAWAY on", async () => {
    const client = new RawH2Connection(svc.port);
    await client.connected;
    for (let i = 0; i < 20; i++) client.open(GRANT, { "content-type": "application/grpc" });
    await client.flushed();
    expect(await eventually(() => openStreams(svc) === 20, 2_000)).toBe(true);
    client.sendGoaway();
    // Sooner than the idle timeout would, though that is short here too: within the grace period.
    expect(await eventually(() => openStreams(svc) === 0, 3_000)).toBe(true);
    client.destroy();
  });
});

describe("HTTP/2 answers a client never lets through", () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startService({
      listener: { requestTimeoutMs: 500, timeoutCheckIntervalMs: 100 },
      shutdownGraceMs: 500,
    });
  });
  afterAll(async () => {
    await svc.close();
  });

  it("resets streams whose answer a zero flow-control window holds, though the client keeps pinging", async () => {
    // Each held answer is a copy in memory (the OpenAPI document is over 200 KB); without a bound, a
    // few hundred such streams per connection, kept alive by pings, hold gigabytes for good.
    const client = new RawH2Connection(svc.port, [[SETTINGS_INITIAL_WINDOW_SIZE, 0]]);
    await client.connected;
    const ids = Array.from({ length: 10 }, () => client.open("/openapi.json", {}, true));
    const pinging = setInterval(() => client.ping(), 100);
    try {
      expect(await eventually(() => ids.every((id) => client.answered.has(id)), 2_000)).toBe(true);
      expect(await eventually(() => ids.every((id) => client.resets.has(id)), 5_000)).toBe(true);
      expect(ids.map((id) => client.resets.get(id))).toEqual(ids.map(() => H2_ERROR.CANCEL));
      expect(client.isClosed).toBe(false);
    } finally {
      clearInterval(pinging);
      client.destroy();
    }
  });
});
