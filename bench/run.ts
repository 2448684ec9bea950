import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { type Cardholder, hashPan, postJson, receiptJson, seedService } from "./fixtures.js";
import { type Measurement, measure, type Sample } from "./load.js";
import {
  baselineLoads,
  escrowEncrypt,
  http,
  LOADS,
  type Loads,
  loadName,
  type Phase,
  serviceLoads,
} from "./phases.js";
import { sampleRss, stopAll } from "./processes.js";
import { summariseProfile } from "./profile.js";
import {
  type Comparison,
  type Extras,
  evaluateTargets,
  machine,
  type Results,
  renderMarkdown,
} from "./report.js";
import { cpuSeconds, initClockTicks, type Service, startBaseline, startService } from "./targets.js";

/**
 * `npm run bench`: measures the service against a baseline doing the same cryptography with no
 * framework, in one run on this machine, and writes `bench/results/latest.{json,md}`.
 *
 * Options: `--quick` (about 30 s, for smoke tests), `--seconds N` per measured phase, `--warmup N`,
 * `--rss-seconds N`, `--connections N`, `--no-cluster`, `--no-logging`, `--only a,b` (a subset; `--only
 * help` lists the names), `--profile` (V8 CPU profile of the service; prints the top self-time
 * functions). Only a complete full run writes `latest.*`; quick and partial runs write `*.tmp` files. Everything it starts is stopped at the end, on
 * error, on SIGINT/SIGTERM, and after a time limit. It exits 0 unless something crashed: the targets
 * are reported, not enforced.
 */

const { values: args } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    seconds: { type: "string" },
    rounds: { type: "string" },
    warmup: { type: "string" },
    "rss-seconds": { type: "string" },
    connections: { type: "string" },
    "no-cluster": { type: "boolean", default: false },
    "no-logging": { type: "boolean", default: false },
    profile: { type: "boolean", default: false },
    only: { type: "string" },
  },
});

const num = (value: string | undefined, fallback: number) => (value === undefined ? fallback : Number(value));
/**
 * generate-keys is measured three times as long as the other loads: the time to find an RSA key's
 * primes varies widely from key to key, and a rate of about a dozen keys a second needs a few hundred
 * keys before it means anything.
 */
const KEYGEN_SCALE = 3;
/** Grants live 180 s; the sustained run must end before the grants it uses expire. */
const MAX_RSS_SECONDS = 170;

const settings = {
  mode: args.quick ? "quick" : "full",
  seconds: num(args.seconds, args.quick ? 1 : 8),
  /** Slices per comparison, alternating service and baseline. */
  rounds: num(args.rounds, args.quick ? 1 : 4),
  warmup: num(args.warmup, args.quick ? 0.3 : 2),
  rssSeconds: Math.min(MAX_RSS_SECONDS, num(args["rss-seconds"], args.quick ? 5 : 120)),
  connections: num(args.connections, 16),
  grpcConcurrency: 16,
  keygenConnections: 8,
  /** Concurrent `generateKeyPair` calls of the raw baseline: one per core ("on both cores"). */
  rawKeygenConcurrency: availableParallelism(),
  cardholders: 4,
  listCount: 20,
  clusterWorkers: 2,
  cluster: !args["no-cluster"],
  logging: !args["no-logging"],
  profile: args.profile,
};

/** `--only a,b`: run only these measurements (names as printed by `--only help`). */
const only = args.only === undefined ? undefined : new Set(args.only.split(","));
const MEASUREMENTS = [
  "rest-encrypt",
  "rest-create-payment",
  "rest-decrypt",
  "rest-list-receipts",
  "rest-generate-keys",
  "grpc-encrypt",
  "grpc-create-payment",
  "grpc-decrypt",
  "half-rate",
  "keygen-load",
  "logging",
  "rss",
  "cluster",
];
if (only?.has("help")) {
  process.stdout.write(
    `measurements: ${MEASUREMENTS.join(", ")} (half-rate and keygen-load need rest-encrypt)\n`,
  );
  process.exit(0);
}
const wanted = (name: string) => only === undefined || only.has(name);
/** Only a complete full run replaces the committed `latest.*`; quick and partial runs write `*.tmp`. */
const outputName = settings.mode === "full" && only === undefined ? "latest" : `${settings.mode}-partial`;
const outputSuffix = outputName === "latest" ? "" : ".tmp";

const distBench = new URL("./", import.meta.url);
const distSrc = new URL("../src/", import.meta.url);
const resultsDir = fileURLToPath(new URL("../../bench/results/", import.meta.url));
const profileDir = join(resultsDir, "profile");

/** Runs `load` while measuring the CPU seconds used by process `pid` and by this process (the load generator). */
async function withCpu(pid: number, load: () => Promise<Sample>) {
  const [service0, self0] = [cpuSeconds(pid), process.cpuUsage()];
  const sample = await load();
  const self = process.cpuUsage(self0);
  return { sample, serviceCpu: cpuSeconds(pid) - service0, loaderCpu: (self.user + self.system) / 1e6 };
}

function log(line: string): void {
  process.stdout.write(`${line}\n`);
}

function describe(m: Measurement): string {
  const failed = m.failed > 0 ? `, ${m.failed} failed ${JSON.stringify(m.failures)}` : "";
  return `${m.rps.toFixed(1)} req/s, p50 ${m.p50.toFixed(2)} ms, p99 ${m.p99.toFixed(2)} ms${failed}`;
}

async function main(): Promise<void> {
  const startLoad = loadavg()[0] ?? 0;
  await initClockTicks();
  log(
    `receipts bench (${settings.mode}): ${settings.seconds} s per phase after ${settings.warmup} s warm-up`,
  );
  if (settings.profile) mkdirSync(profileDir, { recursive: true });
  const [svc, base] = await Promise.all([
    startService("service", distSrc, {
      logLevel: "warn",
      ...(settings.profile ? { cpuProfileDir: profileDir } : {}),
    }),
    startBaseline(distBench),
  ]);
  const seed = await seedService(svc.url, svc.keys, settings.cardholders, settings.listCount);
  await postJson(`${base.url}/setup`, "", {
    publicKeys: seed.cardholders.map((c) => c.publicKey),
    receipt: receiptJson(hashPan("baseline-card")),
    listCount: settings.listCount,
  });
  const comparisons: Comparison[] = [];
  const extras: Extras = {};
  const loads = serviceLoads(svc, seed, settings);
  const baselines = baselineLoads(base, svc, seed, settings);
  const load = (name: string): Phase => {
    const phase = loads[name];
    if (phase === undefined) throw new Error(`no load ${name}`);
    return phase;
  };

  const compare = async (surface: Comparison["surface"], operation: string) => {
    const name = loadName(surface, operation);
    const raw = name === "rest-generate-keys";
    let serviceCpu = 0;
    let loaderCpu = 0;
    let warmedUp = false;
    const measured = async (seconds: number) => {
      const s = await withCpu(svc.child.pid, () => load(name)(seconds));
      // The first call is the warm-up, which the measurement leaves out.
      if (warmedUp) {
        serviceCpu += s.serviceCpu;
        loaderCpu += s.loaderCpu;
      }
      warmedUp = true;
      return s.sample;
    };
    const [service, baseline] = await alternate(measured, baselines[name] as Phase, {
      warmB: !raw,
      scale: raw ? KEYGEN_SCALE : 1,
    });
    const c: Comparison = {
      surface,
      operation,
      service,
      baseline,
      ratio: service.rps / baseline.rps,
      serviceCores: serviceCpu / service.seconds,
      loaderCores: loaderCpu / service.seconds,
      ...(raw ? { baselineKind: "raw" as const } : {}),
    };
    comparisons.push(c);
    log(`${surface} ${operation}: service ${describe(c.service)} (${c.serviceCores.toFixed(2)} cores)`);
    log(`${surface} ${operation}: baseline ${describe(c.baseline)} -> ratio ${(c.ratio * 100).toFixed(0)}%`);
  };
  for (const [surface, operation] of LOADS) {
    if (wanted(loadName(surface, operation))) await compare(surface, operation);
  }

  const encryptMax = comparisons.find((c) => c.surface === "REST" && c.operation === "encrypt")?.service.rps;
  if (encryptMax !== undefined && (wanted("half-rate") || wanted("keygen-load"))) {
    const rate = Math.max(1, Math.round(encryptMax / 2));
    const atRate: Phase = (seconds) => load("rest-encrypt")(seconds, rate);
    if (wanted("keygen-load")) {
      const keygen: Sample[] = [];
      const duringKeygen: Phase = async (seconds) => {
        const generating = load("rest-generate-keys")(seconds + 1);
        await sleep(500);
        const sample = await atRate(seconds);
        keygen.push(await generating);
        return sample;
      };
      const [alone, during] = await alternate(atRate, duringKeygen);
      // The first keygen sample is the warm-up's.
      const keygenRate = measure(...keygen.slice(1));
      extras.halfRate = { rate, measured: alone };
      extras.keygenInterference = { rate, without: alone, with: during, keygen: keygenRate };
      log(`encrypt at ${rate} req/s during keygen: ${describe(during)}; keygen ${describe(keygenRate)}`);
    } else {
      await atRate(settings.warmup);
      extras.halfRate = { rate, measured: measure(await atRate(settings.seconds)) };
    }
    log(`encrypt at ${rate} req/s: ${describe(extras.halfRate.measured)}`);
  }

  if (settings.logging && wanted("logging")) extras.logging = await loggingCost(load("rest-encrypt"));

  if (wanted("rss")) {
    extras.rss = await sustainedRss(svc, loads);
    log(`RSS ${extras.rss.startMiB.toFixed(0)} -> ${extras.rss.endMiB.toFixed(0)} MiB`);
  }

  if (settings.cluster && wanted("cluster")) {
    const cluster = await startService("cluster", distSrc, {
      logLevel: "warn",
      clusterWorkers: settings.clusterWorkers,
    });
    // Two processes to warm up (their JIT compilers each see half of the warm-up load): at least 2 s.
    const [single, clustered] = await alternate(
      escrowEncrypt(svc, settings.connections),
      escrowEncrypt(cluster, settings.connections),
      { warmup: Math.max(settings.warmup, 2) },
    );
    await cluster.child.stop();
    extras.cluster = { workers: settings.clusterWorkers, single, cluster: clustered };
    log(`cluster: ${describe(clustered)} vs one process ${describe(single)}`);
  }
  await stopAll();

  const results: Results = {
    date: new Date().toISOString(),
    machine: machine(startLoad),
    mode: settings.mode,
    settings: { ...settings },
    comparisons,
    extras,
    targets: evaluateTargets(comparisons, extras),
  };
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(
    join(resultsDir, `${outputName}.json${outputSuffix}`),
    `${JSON.stringify(results, null, 2)}\n`,
  );
  const markdown = renderMarkdown(results);
  writeFileSync(join(resultsDir, `${outputName}.md${outputSuffix}`), markdown);
  log(`\n${markdown}\nwritten to bench/results/${outputName}.{json,md}${outputSuffix}`);
  if (settings.profile) {
    for (const file of readdirSync(profileDir).filter((f) => f.endsWith(".cpuprofile"))) {
      log(`CPU profile ${file}:\n${summariseProfile(join(profileDir, file), 30)}`);
    }
  }
}

/** REST encrypt on the service (LOG_LEVEL=warn) and on a second one at LOG_LEVEL=info, alternating. */
async function loggingCost(encrypt: Phase): Promise<NonNullable<Extras["logging"]>> {
  const chatty = await startService("service-info", distSrc, { logLevel: "info" });
  try {
    const seed = await seedService(chatty.url, chatty.keys, 1, 1);
    const pan = (seed.cardholders[0] as Cardholder).hashedPan;
    const infoEncrypt = http(
      {
        url: `${chatty.url}/api/v1/receipts/encrypt`,
        method: "POST",
        headers: { "x-api-key": chatty.keys.merchant },
        body: () => JSON.stringify(receiptJson(pan)),
      },
      settings.connections,
    );
    const [warn, info] = await alternate(encrypt, infoEncrypt);
    log(`LOG_LEVEL=info: ${describe(info)} vs warn ${describe(warn)}`);
    return { warn, info };
  } finally {
    await chatty.child.stop();
  }
}

/**
 * Measures two loads in alternating slices (`rounds` of each, after a warm-up of each), so a change
 * in the machine's background load during the phase (other users of a shared machine) weighs on both
 * sides of the comparison alike.
 */
async function alternate(
  a: Phase,
  b: Phase,
  { warmB = true, scale = 1, warmup = settings.warmup } = {},
): Promise<[Measurement, Measurement]> {
  await a(warmup);
  if (warmB) await b(warmup);
  const slice = (settings.seconds * scale) / settings.rounds;
  const samplesA: Sample[] = [];
  const samplesB: Sample[] = [];
  for (let round = 0; round < settings.rounds; round++) {
    samplesA.push(await a(slice));
    samplesB.push(await b(slice));
  }
  return [measure(...samplesA), measure(...samplesB)];
}

/** Decrypts per second during the sustained run: each one adds an audit event to the embedded store. */
const RSS_DECRYPT_RATE = 200;

/**
 * RSS of the service, sampled once a second for `rssSeconds` of list receipts at full load (the
 * read path: authentication, rate limiting, store reads, rendering) with decrypts at a fixed
 * {@link RSS_DECRYPT_RATE} (the private-key pool). The embedded store keeps every receipt, payment and
 * audit event in memory by design, so loads that create data would measure the data; these create
 * only one audit event (a few hundred bytes) per decrypt. The first tenth of the samples is left out
 * (the heap growing to its working size); growth compares the medians of the next tenth and the last.
 */
async function sustainedRss(svc: Service, loads: Loads): Promise<NonNullable<Extras["rss"]>> {
  const sampler = sampleRss(svc.child.pid);
  const decrypt = loads["rest-decrypt"] as Phase;
  const list = loads["rest-list-receipts"] as Phase;
  await Promise.all([decrypt(settings.rssSeconds, RSS_DECRYPT_RATE), list(settings.rssSeconds)]);
  const samplesMiB = sampler.stop().map((bytes) => bytes / 1_048_576);
  const skip = Math.max(1, Math.floor(samplesMiB.length * 0.1));
  const window = Math.max(1, Math.floor(samplesMiB.length * 0.1));
  const startMiB = median(samplesMiB.slice(skip, skip + window));
  const endMiB = median(samplesMiB.slice(-window));
  return {
    seconds: settings.rssSeconds,
    workload: `REST list receipts at full load and REST decrypt at ${RSS_DECRYPT_RATE} req/s`,
    samplesMiB: samplesMiB.map((m) => Math.round(m * 10) / 10),
    startMiB,
    endMiB,
    growth: endMiB / startMiB - 1,
  };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? 0;
}

const deadlineMs = (settings.seconds + settings.warmup) * 60_000 + settings.rssSeconds * 1000 + 180_000;
const watchdog = setTimeout(() => {
  process.stderr.write(`bench: still running after ${deadlineMs / 1000} s; stopping\n`);
  void stopAll().finally(() => process.exit(2));
}, deadlineMs);
watchdog.unref();
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    process.stderr.write(`bench: ${signal}, stopping everything it started\n`);
    void stopAll().finally(() => process.exit(130));
  });
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(
      `bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    void stopAll().finally(() => process.exit(1));
  },
);
