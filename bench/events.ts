import { readdirSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
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
 * `--before <dist/src of another build>` adds a third service, that build with one endpoint too (its own
 * receiver), to the rotation: how a change to delivery moves the ratio, measured in the same run.
 */

const { values: args } = parseArgs({
  options: {
    seconds: { type: "string", default: "24" },
    rounds: { type: "string", default: "6" },
    warmup: { type: "string", default: "2" },
    rate: { type: "string", default: "200" },
    "log-level": { type: "string", default: "warn" },
    profile: { type: "string" },
    before: { type: "string" },
  },
});

/**
 * A receiver of webhooks: a bare node:http server answering 204, as cheap as a receiver gets in Node
 * (it runs on the machine's two cores beside the service and the load generator). Per event id: the
 * time it arrived, and that less the event's own time.
 */
async function startReceiver() {
  const latencies = new Map<string, number>();
  const arrivedAt = new Map<string, number>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const arrived = Date.now();
      const event = JSON.parse(Buffer.concat(chunks).toString("utf8")) as { id: string; timestamp: string };
      if (!latencies.has(event.id)) {
        latencies.set(event.id, arrived - Date.parse(event.timestamp));
        arrivedAt.set(event.id, arrived);
      }
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`;
  return { url, latencies, arrivedAt, close: () => server.close() };
}

type Receiver = Awaited<ReturnType<typeof startReceiver>>;

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

/** One service in the rotation: its load, and the receiver of its endpoint (none for the baseline). */
interface Side {
  name: string;
  service: Service;
  phase: ReturnType<typeof metered>;
  /** The same load at a fixed rate, metered apart: CPU per request when the machine is not saturated. */
  paced: ReturnType<typeof metered>;
  receiver?: Receiver;
  samples: Sample[];
  /** Per slice: seconds from its start until its last event arrived (or the slice's length). */
  sustained: number[];
  /** Requests answered in the paced slices. */
  pacedOk?: number;
}

async function side(name: string, service: Service, receiver?: Receiver): Promise<Side> {
  if (receiver !== undefined) {
    await postJson(`${service.url}/api/v1/webhooks/endpoints`, service.keys.issuer, {
      url: receiver.url,
      events: ["*"],
    });
  }
  const load = await encryptLoad(service, FULL_LOAD_CONNECTIONS);
  const [phase, paced] = [metered(service.child.pid, load, 1), metered(service.child.pid, load, 0)];
  return {
    name,
    service,
    paced,
    phase,
    ...(receiver === undefined ? {} : { receiver }),
    samples: [],
    sustained: [],
  };
}

/**
 * One slice of `s` at full load. For a subscribed side, also how long until every event of the slice
 * had arrived: a service whose deliveries lag behind its encrypts has not sustained the slice's rate.
 */
async function slice(s: Side, seconds: number): Promise<void> {
  const started = Date.now();
  const known = s.receiver?.latencies.size ?? 0;
  const sample = await s.phase.phase(seconds);
  s.samples.push(sample);
  if (s.receiver === undefined) {
    s.sustained.push(sample.seconds);
    return;
  }
  await arrivals(s.receiver.latencies, known + sample.ok, 30_000);
  let last = started;
  for (const at of s.receiver.arrivedAt.values()) if (at > last) last = at;
  s.sustained.push(Math.max(sample.seconds, (last - started) / 1000));
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
  const load0 = loadavg()[0] as number;
  const src = new URL("../src/", import.meta.url);
  const [receiver, beforeReceiver] = await Promise.all([startReceiver(), startReceiver()]);
  const profile = args.profile === undefined ? {} : { cpuProfileDir: args.profile };
  const [none, subscribed, old] = await Promise.all([
    startService("no-endpoint", src, { logLevel }),
    startService("one-endpoint", src, { logLevel, ...profile }),
    args.before === undefined
      ? undefined
      : startService("before", pathToFileURL(`${resolve(args.before)}/`), { logLevel }),
  ]);
  const sides = [await side("no endpoint", none), await side("one endpoint", subscribed, receiver)];
  if (old !== undefined) sides.push(await side("one endpoint, --before build", old, beforeReceiver));
  for (const s of sides) await s.phase.phase(warmup);
  // The seeding's and the warm-up's events: the figures start after them.
  for (const r of [receiver, beforeReceiver]) await quiet(r.latencies);
  const before = new Set(receiver.latencies.keys());
  for (let round = 0; round < rounds; round++) {
    // Each side leads in turn, so none always follows the same one.
    for (let i = 0; i < sides.length; i++)
      await slice(sides[(round + i) % sides.length] as Side, seconds / rounds);
  }
  const expected = before.size + measure(...(sides[1] as Side).samples).ok;
  const got = await arrivals(receiver.latencies, expected, 60_000);
  const loaded = [...receiver.latencies].filter(([id]) => !before.has(id)).map(([, ms]) => ms);
  // CPU per request at a fixed rate, rotating too: throughput on a shared machine moves with everyone
  // else's load, the service's own CPU per request much less. Its difference is what an event costs.
  for (let round = 0; round < Math.min(rounds, 4); round++) {
    for (let i = 0; i < sides.length; i++) {
      const s = sides[(round + i) % sides.length] as Side;
      const known = s.receiver?.latencies.size ?? 0;
      const sample = await s.paced.phase(Math.max(3, seconds / rounds), rate);
      s.pacedOk = (s.pacedOk ?? 0) + sample.ok;
      if (s.receiver !== undefined) await arrivals(s.receiver.latencies, known + sample.ok, 30_000);
    }
  }
  // A fixed moderate rate on the subscribed service alone: latency without a saturated machine.
  await quiet(receiver.latencies);
  const seen = new Set(receiver.latencies.keys());
  const steady = await (sides[1] as Side).phase.phase(Math.max(5, seconds / rounds), rate);
  await arrivals(receiver.latencies, seen.size + steady.ok, 30_000);
  const calm = [...receiver.latencies].filter(([id]) => !seen.has(id)).map(([, ms]) => ms);
  await stopAll();
  for (const r of [receiver, beforeReceiver]) r.close();
  const lines = [
    `REST encrypt, ${FULL_LOAD_CONNECTIONS} connections, ${seconds} s each in ${rounds} rotating slices, LOG_LEVEL=${logLevel}, node ${process.version}, load average ${load0.toFixed(1)} at start, ${(loadavg()[0] as number).toFixed(1)} at end`,
    ...report(sides),
    `delivery latency at full load: ${latencyLine(loaded)}`,
    `delivery latency at ${rate} req/s: ${latencyLine(calm)}`,
    // The load generator counts the answers it saw; a slice's last requests are answered after it
    // stops listening (up to one per connection), so a few more events than counted arrive.
    `events delivered: ${got - before.size}, encrypts counted: ${expected - before.size}${got < expected ? `, ${expected - got} missing after 60 s` : ", none missing"}`,
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

/**
 * Per side: req/s, latency and CPU per request; for the subscribed sides the ratio to no endpoint over
 * the whole run, per round (the spread), and sustained (each slice's encrypts over the time until its
 * last event arrived).
 */
function report(sides: Side[]): string[] {
  const [base, ...others] = sides as [Side, ...Side[]];
  const lines: string[] = [];
  for (const s of sides) {
    const m = measure(...s.samples);
    const cpu = (s.phase.cpu.process / Math.max(1, m.ok)) * 1e6;
    lines.push(
      `${`${s.name}:`.padEnd(32)} ${m.rps.toFixed(0)} req/s, p50 ${m.p50.toFixed(1)} ms, p99 ${m.p99.toFixed(1)} ms, CPU ${cpu.toFixed(0)} us/req, ${m.failed} failed`,
    );
  }
  const pacedCpu = (s: Side) => (s.paced.cpu.process / Math.max(1, s.pacedOk ?? 0)) * 1e6;
  lines.push(
    `at a fixed rate, CPU per request (the service's process, all threads, delivery included): ${sides.map((s) => `${s.name} ${pacedCpu(s).toFixed(0)} us`).join(", ")}`,
  );
  const baseRps = measure(...base.samples).rps;
  for (const s of others) {
    const perRound = s.samples.map(
      (x, i) =>
        x.ok / x.seconds / ((base.samples[i] as Sample).ok / (base.samples[i] as Sample).seconds || 1),
    );
    const ok = s.samples.reduce((n, x) => n + x.ok, 0);
    const sustained = ok / s.sustained.reduce((n, x) => n + x, 0);
    lines.push(
      `throughput ratio (${s.name} / no endpoint): ${(measure(...s.samples).rps / baseRps).toFixed(3)} (goal >= 0.9); per round ${perRound.map((r) => r.toFixed(2)).join(" ")}; sustained (until each slice's events arrived) ${(sustained / baseRps).toFixed(3)}; CPU at the fixed rate: no endpoint's / this ${(pacedCpu(base) / pacedCpu(s)).toFixed(3)}`,
    );
  }
  return lines;
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
