import { readdirSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { postJson, receiptJson, rotation, seedService } from "./fixtures.js";
import { measure, quantile, runHttp, type Sample } from "./load.js";
import { FULL_LOAD_CONNECTIONS } from "./phases.js";
import { stopAll } from "./processes.js";
import { summariseProfile } from "./profile.js";
import { initClockTicks, metered, type Service, startService } from "./targets.js";

/**
 * What events cost and how fast they arrive (issue 34): REST encrypt against two services started
 * side by side from this build, one with no webhook endpoint and one whose issuer subscribed one
 * endpoint to every event (each encrypt to a registered card writes a `receipt.created` event in the
 * same store step, and the worker delivers it to a receiver in this process). Measured in alternating
 * slices, so the background load of a shared machine weighs on both: throughput of the subscribed
 * service as a ratio to the other (goal: at least 0.9), the CPU each spent per request, and the
 * delivery latency from the change (the event's timestamp) to the receiver, p50 and p99, at full load
 * and at a fixed moderate rate. Every event the subscribed service accepted must arrive: any missing
 * after the run is reported.
 *
 *   npm run bench:events [-- --seconds 24 --rounds 6 --rate 200 --log-level warn --profile <dir>]
 *
 * `--profile <dir>` writes the subscribed service's V8 CPU profile there and prints its summary.
 */

const { values: args } = parseArgs({
  options: {
    seconds: { type: "string", default: "24" },
    rounds: { type: "string", default: "6" },
    warmup: { type: "string", default: "2" },
    rate: { type: "string", default: "200" },
    "log-level": { type: "string", default: "warn" },
    profile: { type: "string" },
  },
});

/** A receiver of webhooks: each event id with the time it arrived, less the event's own time. */
async function startReceiver() {
  const latencies = new Map<string, number>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const arrived = Date.now();
      const event = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { id: string; timestamp: string };
      if (!latencies.has(event.id)) latencies.set(event.id, arrived - Date.parse(event.timestamp));
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
  return { url, latencies, close: () => server.close() };
}

/** The encrypt load of one service, to its seeded cardholders in turn. */
async function encryptLoad(svc: Service, connections: number) {
  const seed = await seedService(svc.url, svc.keys, 8, 1);
  const next = rotation(seed.cardholders);
  return (seconds: number, rate?: number): Promise<Sample> =>
    runHttp({
      url: `${svc.url}/api/v1/receipts/encrypt`,
      method: "POST",
      headers: { "x-api-key": svc.keys.merchant },
      body: () => JSON.stringify(receiptJson(next().hashedPan)),
      connections,
      seconds,
      ...(rate === undefined ? {} : { rate }),
    });
}

/** Waits until no event has arrived for a second (at most 30 s): what was sent before is in. */
async function quiet(latencies: Map<string, number>): Promise<void> {
  const deadline = Date.now() + 30_000;
  let size = -1;
  while (latencies.size !== size && Date.now() < deadline) {
    size = latencies.size;
    await new Promise((r) => setTimeout(r, 1_000));
  }
}

/** Waits until `count` events have arrived, or `ms` pass; the number that arrived. */
async function arrivals(latencies: Map<string, number>, count: number, ms: number): Promise<number> {
  const deadline = Date.now() + ms;
  while (latencies.size < count && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  return latencies.size;
}

function latencyLine(values: number[]): string {
  const sorted = [...values].sort((a, b) => a - b);
  return `p50 ${quantile(sorted, 0.5).toFixed(0)} ms, p99 ${quantile(sorted, 0.99).toFixed(0)} ms, max ${(sorted.at(-1) ?? 0).toFixed(0)} ms (${sorted.length} events)`;
}

async function main(): Promise<void> {
  const [seconds, rounds, warmup, rate] = [args.seconds, args.rounds, args.warmup, args.rate].map(Number) as [
    number,
    number,
    number,
    number,
  ];
  await initClockTicks();
  const logLevel = String(args["log-level"]);
  const src = new URL("../src/", import.meta.url);
  const receiver = await startReceiver();
  const [none, subscribed] = await Promise.all([
    startService("no-endpoint", src, { logLevel }),
    startService("one-endpoint", src, {
      logLevel,
      ...(args.profile === undefined ? {} : { cpuProfileDir: args.profile }),
    }),
  ]);
  await postJson(`${subscribed.url}/api/v1/webhooks/endpoints`, subscribed.keys.issuer, {
    url: receiver.url,
    events: ["*"],
  });
  const a = metered(none.child.pid, await encryptLoad(none, FULL_LOAD_CONNECTIONS), 1);
  const b = metered(subscribed.child.pid, await encryptLoad(subscribed, FULL_LOAD_CONNECTIONS), 1);
  await a.phase(warmup);
  await b.phase(warmup);
  // The seeding's and the warm-up's events: the figures start after them.
  await quiet(receiver.latencies);
  const before = new Set(receiver.latencies.keys());
  const samplesA: Sample[] = [];
  const samplesB: Sample[] = [];
  const slice = seconds / rounds;
  for (let round = 0; round < rounds; round++) {
    if (round % 2 === 0) {
      samplesA.push(await a.phase(slice));
      samplesB.push(await b.phase(slice));
    } else {
      samplesB.push(await b.phase(slice));
      samplesA.push(await a.phase(slice));
    }
  }
  const [ma, mb] = [measure(...samplesA), measure(...samplesB)];
  const cpuA = (a.cpu.process / Math.max(1, ma.ok)) * 1e6;
  const cpuB = (b.cpu.process / Math.max(1, mb.ok)) * 1e6;
  const expected = before.size + mb.ok;
  const got = await arrivals(receiver.latencies, expected, 60_000);
  const loaded = [...receiver.latencies].filter(([id]) => !before.has(id)).map(([, ms]) => ms);
  // A fixed moderate rate on the subscribed service alone: latency without a saturated machine.
  await quiet(receiver.latencies);
  const seen = new Set(receiver.latencies.keys());
  const steady = await b.phase(Math.max(5, slice), rate);
  await arrivals(receiver.latencies, seen.size + steady.ok, 30_000);
  const calm = [...receiver.latencies].filter(([id]) => !seen.has(id)).map(([, ms]) => ms);
  await stopAll();
  receiver.close();
  const lines = [
    `REST encrypt, ${FULL_LOAD_CONNECTIONS} connections, ${seconds} s each in ${rounds} alternating slices, LOG_LEVEL=${logLevel}, node ${process.version}`,
    `no endpoint:  ${ma.rps.toFixed(0)} req/s, p50 ${ma.p50.toFixed(1)} ms, p99 ${ma.p99.toFixed(1)} ms, CPU ${cpuA.toFixed(0)} us/req, ${ma.failed} failed`,
    `one endpoint: ${mb.rps.toFixed(0)} req/s, p50 ${mb.p50.toFixed(1)} ms, p99 ${mb.p99.toFixed(1)} ms, CPU ${cpuB.toFixed(0)} us/req, ${mb.failed} failed`,
    `throughput ratio (one endpoint / none): ${(mb.rps / ma.rps).toFixed(3)} (goal >= 0.9)`,
    `delivery latency at full load: ${latencyLine(loaded)}`,
    `delivery latency at ${rate} req/s: ${latencyLine(calm)}`,
    // The load generator counts the answers it saw; a slice's last requests are answered after it
    // stops listening (up to one per connection), so a few more events than counted arrive.
    `events delivered: ${got - before.size}, encrypts counted: ${mb.ok}${got < expected ? `, ${expected - got} missing after 60 s` : ", none missing"}`,
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
  if (args.profile !== undefined) {
    for (const file of readdirSync(args.profile).filter((f) => f.endsWith(".cpuprofile"))) {
      process.stdout.write(
        `\nthe subscribed service's CPU profile (${file}):\n${summariseProfile(join(args.profile, file))}\n`,
      );
    }
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(
      `events bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    void stopAll().finally(() => process.exit(1));
  },
);
process.once("SIGINT", () => {
  void stopAll().finally(() => process.exit(130));
});
