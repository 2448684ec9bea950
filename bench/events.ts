import { readdirSync } from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { postJson, receiptJson, rotation, seedService } from "./fixtures.js";
import { measure, quantile, runHttp, type Sample } from "./load.js";
import { FULL_LOAD_CONNECTIONS } from "./phases.js";
import { stopAll } from "./processes.js";
import { summariseProfile } from "./profile.js";
import { cpuSeconds, initClockTicks, metered, type Service, startService } from "./targets.js";
import { type ReceiverProcess, startReceiverProcess } from "./webhook-receiver.js";

/**
 * What events cost and how fast they arrive (issue 34): REST encrypt against two services started
 * side by side from this build, one with no webhook endpoint and one whose issuer subscribed one
 * endpoint to every event (each encrypt to a registered card writes a `receipt.created` event in the
 * same store step, and the worker delivers it to a receiver in a process of its own, bench/webhook-receiver.ts:
 * a raw HTTP/1.1 receiver that frames each request, counts event ids and answers 204, as cheap as a
 * receiver gets, because one elsewhere would cost this machine nothing). Measured in alternating
 * slices, so the background load of a shared machine weighs on both: throughput of the subscribed
 * service as a ratio to the other (goal: at least 0.9), the CPU each service process spent per request
 * and the ratio of those (the service's own share, whatever the load generator and the receiver
 * cost), the receiver's CPU per event apart, and the
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

type Receiver = ReceiverProcess;

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
async function quiet(receiver: Receiver): Promise<void> {
  const deadline = Date.now() + 30_000;
  let size = -1;
  for (
    let now = await receiver.count();
    now !== size && Date.now() < deadline;
    now = await receiver.count()
  ) {
    size = now;
    await new Promise((r) => setTimeout(r, 1_000));
  }
}

/** Waits until `count` events have arrived, or `ms` pass; the number that arrived. */
async function arrivals(receiver: Receiver, count: number, ms: number): Promise<number> {
  const deadline = Date.now() + ms;
  let got = await receiver.count();
  while (got < count && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50));
    got = await receiver.count();
  }
  return got;
}

/** Latencies of the events that arrived, but those in `before`. */
async function latenciesSince(receiver: Receiver, before: Set<string>): Promise<number[]> {
  return (await receiver.dump()).events.filter(([id]) => !before.has(id)).map(([, ms]) => ms);
}

/** The ids of the events that arrived so far. */
async function idsOf(receiver: Receiver): Promise<Set<string>> {
  return new Set((await receiver.dump()).events.map(([id]) => id));
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
  const known = (await s.receiver?.count()) ?? 0;
  const sample = await s.phase.phase(seconds);
  s.samples.push(sample);
  if (s.receiver === undefined) {
    s.sustained.push(sample.seconds);
    return;
  }
  await arrivals(s.receiver, known + sample.ok, 30_000);
  const last = Math.max(started, await s.receiver.last());
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
  const [receiver, beforeReceiver] = await Promise.all([startReceiverProcess(), startReceiverProcess()]);
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
  for (const r of [receiver, beforeReceiver]) await quiet(r);
  const before = await idsOf(receiver);
  const receiverCpu0 = cpuSeconds(receiver.pid);
  for (let round = 0; round < rounds; round++) {
    // Each side leads in turn, so none always follows the same one.
    for (let i = 0; i < sides.length; i++)
      await slice(sides[(round + i) % sides.length] as Side, seconds / rounds);
  }
  const expected = before.size + measure(...(sides[1] as Side).samples).ok;
  const got = await arrivals(receiver, expected, 60_000);
  const receiverCpu = ((cpuSeconds(receiver.pid) - receiverCpu0) / Math.max(1, got - before.size)) * 1e6;
  const loaded = await latenciesSince(receiver, before);
  // CPU per request at a fixed rate, rotating too: throughput on a shared machine moves with everyone
  // else's load, the service's own CPU per request much less. Its difference is what an event costs.
  for (let round = 0; round < Math.min(rounds, 4); round++) {
    for (let i = 0; i < sides.length; i++) {
      const s = sides[(round + i) % sides.length] as Side;
      const known = (await s.receiver?.count()) ?? 0;
      const sample = await s.paced.phase(Math.max(3, seconds / rounds), rate);
      s.pacedOk = (s.pacedOk ?? 0) + sample.ok;
      if (s.receiver !== undefined) await arrivals(s.receiver, known + sample.ok, 30_000);
    }
  }
  // A fixed moderate rate on the subscribed service alone: latency without a saturated machine.
  await quiet(receiver);
  const seen = await idsOf(receiver);
  const steady = await (sides[1] as Side).phase.phase(Math.max(5, seconds / rounds), rate);
  await arrivals(receiver, seen.size + steady.ok, 30_000);
  const calm = await latenciesSince(receiver, seen);
  const { repeats, rejected } = await receiver.dump();
  await stopAll();
  for (const r of [receiver, beforeReceiver]) r.close();
  const lines = [
    `REST encrypt, ${FULL_LOAD_CONNECTIONS} connections, ${seconds} s each in ${rounds} rotating slices, LOG_LEVEL=${logLevel}, node ${process.version}, load average ${load0.toFixed(1)} at start, ${(loadavg()[0] as number).toFixed(1)} at end`,
    ...report(sides),
    `delivery latency at full load: ${latencyLine(loaded)}`,
    `delivery latency at ${rate} req/s: ${latencyLine(calm)}`,
    // The load generator counts the answers it saw; a slice's last requests are answered after it
    // stops listening (up to one per connection), so a few more events than counted arrive.
    `events delivered: ${got - before.size}, encrypts counted: ${expected - before.size}${got < expected ? `, ${expected - got} missing after 60 s` : ", none missing"}; the receiver saw ${repeats} repeated deliveries and refused ${rejected} requests, and spent ${receiverCpu.toFixed(0)} us of CPU per event at full load (its own process)`,
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
  const loadedCpu = (s: Side) => s.phase.cpu.process / Math.max(1, measure(...s.samples).ok);
  for (const s of others) {
    const perRound = s.samples.map(
      (x, i) =>
        x.ok / x.seconds / ((base.samples[i] as Sample).ok / (base.samples[i] as Sample).seconds || 1),
    );
    const ok = s.samples.reduce((n, x) => n + x.ok, 0);
    const sustained = ok / s.sustained.reduce((n, x) => n + x, 0);
    lines.push(
      `throughput ratio (${s.name} / no endpoint): ${(measure(...s.samples).rps / baseRps).toFixed(3)} (goal >= 0.9); per round ${perRound.map((r) => r.toFixed(2)).join(" ")}; sustained (until each slice's events arrived) ${(sustained / baseRps).toFixed(3)}; service CPU per request, no endpoint's / this: at full load ${(loadedCpu(base) / loadedCpu(s)).toFixed(3)}, at the fixed rate ${(pacedCpu(base) / pacedCpu(s)).toFixed(3)}`,
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
