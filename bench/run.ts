import { mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { FAST_PATH_NEEDS, FAST_PATHS } from "../src/fast-paths.js";
import { openOnDevice } from "./device.js";
import {
  hashPan,
  type KeyAlgorithm,
  P256_SUITE,
  postJson,
  RECEIPT_SIZES,
  RSA_SUITE,
  receiptJson,
  type Seed,
  seedService,
} from "./fixtures.js";
import { type Measurement, measure, type Sample } from "./load.js";
import {
  baselineLoads,
  escrowEncrypt,
  LOADS,
  type Loads,
  loadName,
  P256_LOADS,
  type Phase,
  p256BaselineLoads,
  p256ServiceLoads,
  SIZED_LOADS,
  serviceLoads,
  sizedLoads,
} from "./phases.js";
import { sampleRss, stopAll } from "./processes.js";
import { summariseProfile } from "./profile.js";
import {
  type Comparison,
  type Extras,
  evaluateTargets,
  type FastPathRow,
  machine,
  otherLoad,
  type Results,
  renderMarkdown,
  type SizedComparison,
} from "./report.js";
import { KEYGEN_SCALE, outputName, outputSuffix, settings, wanted } from "./settings.js";
import {
  type Baseline,
  initClockTicks,
  metered,
  type Service,
  startBaseline,
  startService,
  waitIdle,
} from "./targets.js";

/**
 * `npm run bench`: measures the service against a baseline doing the same cryptography with no
 * framework, in one run on this machine, and writes `bench/results/latest.{json,md}`.
 *
 * Options: `--quick` (about a minute, for smoke tests), `--seconds N` per measured phase, `--rounds N`
 * alternating slices per phase, `--warmup N`, `--rss-seconds N`, `--connections N` (REST),
 * `--grpc-concurrency N` (calls in flight in the gRPC phases, default 16), `--no-cluster`,
 * `--no-logging`, `--only a,b` (a subset; `--only help` lists the names), `--profile` (V8 CPU profiles
 * of the service processes, summarised at the end). Only a complete full run writes `latest.*`; quick
 * and partial runs write `*.tmp` files. Everything it starts is stopped at the end, on error, on
 * SIGINT/SIGTERM, and after a time limit. It exits 0 unless something crashed: the targets are
 * reported, not enforced.
 */

const distBench = new URL("./", import.meta.url);
const distSrc = new URL("../src/", import.meta.url);
const resultsDir = fileURLToPath(new URL("../../bench/results/", import.meta.url));
const profileDir = join(resultsDir, "profile");

function log(line: string): void {
  process.stdout.write(`${line}\n`);
}

function describe(m: Measurement): string {
  const failed = m.failed > 0 ? `, ${m.failed} failed ${JSON.stringify(m.failures)}` : "";
  return `${m.rps.toFixed(1)} req/s, p50 ${m.p50.toFixed(2)} ms, p99 ${m.p99.toFixed(2)} ms${failed}`;
}

/** A fresh service with its seed and loads, for one measurement. */
interface Fresh {
  svc: Service;
  seed: Seed;
  loads: Loads;
}

let serviceCount = 0;
let shared: Promise<Fresh> | undefined;
let sharedP256: Promise<Fresh> | undefined;

/**
 * Runs `fn` against a service started for it and stopped after it. Every measurement gets a fresh
 * process: the embedded store keeps all data in memory, so a process that served the earlier phases
 * would carry their hundreds of thousands of receipts into the heap (and the garbage collector's
 * work) of the later ones, and production keeps that data in MongoDB, out of the process. `--quick`
 * (a smoke test) shares one process instead, to stay short.
 */
async function withService<T>(
  logLevel: string,
  fn: (fresh: Fresh) => Promise<T>,
  clusterWorkers?: number,
): Promise<T> {
  if (settings.mode === "quick" && logLevel === "warn" && clusterWorkers === undefined) {
    shared ??= startSeeded(logLevel);
    return fn(await shared);
  }
  const fresh = await startSeeded(logLevel, clusterWorkers);
  try {
    return await fn(fresh);
  } finally {
    await fresh.svc.child.stop();
  }
}

/** {@link withService} on a service whose cardholders hold P-256 keys. */
async function withP256Service<T>(fn: (fresh: Fresh) => Promise<T>): Promise<T> {
  if (settings.mode === "quick") {
    sharedP256 ??= startSeeded("warn", undefined, undefined, P256_SUITE);
    return fn(await sharedP256);
  }
  const fresh = await startSeeded("warn", undefined, undefined, P256_SUITE);
  try {
    return await fn(fresh);
  } finally {
    await fresh.svc.child.stop();
  }
}

async function startSeeded(
  logLevel: string,
  clusterWorkers?: number,
  fastPaths?: string,
  algorithm: KeyAlgorithm = RSA_SUITE,
): Promise<Fresh> {
  const name = `service-${++serviceCount}`;
  const svc = await startService(name, distSrc, {
    logLevel,
    ...(clusterWorkers === undefined ? {} : { clusterWorkers }),
    ...(fastPaths === undefined ? {} : { fastPaths }),
    ...(settings.profile ? { cpuProfileDir: profileDir } : {}),
  });
  if (settings.profile) log(`(${name} is pid ${svc.child.pid})`);
  const seed = await seedService(svc.url, svc.keys, settings.cardholders, settings.listCount, algorithm);
  const loads =
    algorithm === RSA_SUITE ? serviceLoads(svc, seed, settings) : p256ServiceLoads(svc, seed, settings);
  return { svc, seed, loads };
}

function loadOf(loads: Loads, name: string): Phase {
  const phase = loads[name];
  if (phase === undefined) throw new Error(`no load ${name}`);
  return phase;
}

async function main(): Promise<void> {
  const startLoad = loadavg()[0] ?? 0;
  await initClockTicks();
  log(
    `receipts bench (${settings.mode}): ${settings.seconds} s per phase after ${settings.warmup} s warm-up`,
  );
  if (settings.profile) {
    // Profiles of an earlier run would be summarised with this one's.
    rmSync(profileDir, { recursive: true, force: true });
    mkdirSync(profileDir, { recursive: true });
  }
  const base = await startBaseline(distBench, settings.profile ? profileDir : undefined);
  const comparisons: Comparison[] = [];
  const extras: Extras = {};

  for (const [surface, operation] of LOADS) {
    if (!wanted(loadName(surface, operation))) continue;
    const c = await withService("warn", (fresh) => compare(fresh, base, surface, operation));
    comparisons.push(c);
    log(`${surface} ${operation}: service ${describe(c.service)} (${c.serviceCores.toFixed(2)} cores)`);
    log(`${surface} ${operation}: baseline ${describe(c.baseline)} -> ratio ${(c.ratio * 100).toFixed(0)}%`);
    log(`${surface} ${operation}: rest of the machine ${otherLoad(c)}`);
  }

  for (const [surface, operation, name] of P256_LOADS) {
    if (!wanted(name)) continue;
    const c = await withP256Service((fresh) => compare(fresh, base, surface, operation, name));
    comparisons.push(c);
    log(`${surface} ${operation}: service ${describe(c.service)} (${c.serviceCores.toFixed(2)} cores)`);
    log(`${surface} ${operation}: baseline ${describe(c.baseline)} -> ratio ${(c.ratio * 100).toFixed(0)}%`);
    log(`${surface} ${operation}: rest of the machine ${otherLoad(c)}`);
  }
  if (wanted("p256-open-on-device")) {
    const device = await withService("warn", ({ svc }) =>
      openOnDevice(svc.url, svc.keys, {
        listCount: settings.listCount,
        seconds: settings.seconds,
        rounds: settings.rounds,
        warmup: settings.warmup,
      }),
    );
    extras.openOnDevice = device;
    log(
      `open on device: P-256 ${device.p256.opsPerSecond.toFixed(1)}/s vs RSA-2048 ` +
        `${device.rsa.opsPerSecond.toFixed(1)}/s -> ratio ${(device.ratio * 100).toFixed(0)}%`,
    );
  }

  const encryptMax = comparisons.find((c) => c.surface === "REST" && c.operation === "encrypt")?.service.rps;
  if (encryptMax !== undefined && (wanted("half-rate") || wanted("keygen-load"))) {
    Object.assign(extras, await withService("warn", (fresh) => atHalfRate(fresh, encryptMax)));
  }
  if (wanted("floor")) extras.floor = await withService("warn", (fresh) => floorVsBaseline(fresh, base));
  if (settings.logging && wanted("logging")) extras.logging = await loggingCost();
  if (wanted("rss")) extras.rss = await withService("warn", sustainedRss);
  if (settings.cluster && wanted("cluster")) {
    // Two processes to warm up (their JIT compilers each see half of the warm-up load): at least 2 s
    // in a full run.
    const [single, clustered] = await withService("warn", (one) =>
      withService(
        "warn",
        (many) =>
          alternate(
            escrowEncrypt(one.svc, settings.connections),
            escrowEncrypt(many.svc, settings.connections),
            {
              warmup: settings.mode === "quick" ? settings.warmup : Math.max(settings.warmup, 2),
            },
          ),
        settings.clusterWorkers,
      ),
    );
    extras.cluster = { workers: settings.clusterWorkers, single, cluster: clustered };
    log(`cluster: ${describe(clustered)} vs one process ${describe(single)}`);
  }
  if (wanted("sizes")) extras.sizes = await sizes(base);
  if (wanted("fast-paths")) extras.fastPaths = await fastPathReview(base);
  await stopAll();
  report(startLoad, comparisons, extras);
}

/**
 * Encrypt and create payment, REST and gRPC, with receipts of 2, 12 and 50 line items: per operation
 * and size a fresh service with FAST_PATHS=on and one with FAST_PATHS=off (as every measurement gets
 * a fresh process: the embedded store keeps the receipts of earlier sizes in the heap), each measured
 * with the bare route in alternating slices (three ways), smallest receipts first.
 */
async function sizes(base: Baseline): Promise<SizedComparison[]> {
  const rows: SizedComparison[] = [];
  for (const [surface, operation] of SIZED_LOADS) {
    const name = loadName(surface, operation);
    for (const items of RECEIPT_SIZES) {
      const on = await startSeeded("warn", undefined, "on");
      const off = await startSeeded("warn", undefined, "off");
      try {
        await setUpBaseline(base, on.svc, on.seed);
        const [onSide, offSide, bare] = await alternateAll(
          [
            loadOf(sizedLoads(on.svc, on.seed, settings, items), name),
            loadOf(sizedLoads(off.svc, off.seed, settings, items), name),
            loadOf(sizedLoads(on.svc, on.seed, settings, items, base), name),
          ],
          settings.sizeSeconds,
          settings.sizeRounds,
        );
        const row = {
          surface,
          operation,
          items,
          on: onSide,
          off: offSide,
          baseline: bare,
        } as SizedComparison;
        rows.push(row);
        log(
          `${surface} ${operation}, ${items} items: on ${describe(row.on)} (${pct(row.on, row.baseline)}), ` +
            `off ${describe(row.off)} (${pct(row.off, row.baseline)}), bare ${describe(row.baseline)}`,
        );
      } finally {
        await on.svc.child.stop();
        await off.svc.child.stop();
      }
    }
  }
  return rows;
}

/** `FAST_PATHS` with `path` off, and with it whatever only serves it. */
function without(path: string): string {
  const serving = FAST_PATH_NEEDS.filter(([, needs]) => needs === path).map(([p]) => p as string);
  return FAST_PATHS.filter((p) => p !== path && !serving.includes(p)).join(",");
}

/**
 * The fast-path review of issue 25: per operation, a service with every fast path on, one per fast
 * path that serves the operation with that path off (and what only serves it), and the bare route,
 * in rotating slices, at each receipt size for encrypt and create payment; once for listing receipts
 * (where the JSON writer does most) and for decrypt (where the DER reader works).
 */
async function fastPathReview(base: Baseline): Promise<FastPathRow[]> {
  const rows: FastPathRow[] = [];
  for (const [surface, operation, paths] of REVIEWED) {
    const variants = [["on", "on"], ...paths.map((p) => [`-${p}`, without(p)])] as const;
    for (const items of UNSIZED.has(operation) ? [undefined] : RECEIPT_SIZES) {
      // Fresh services for each size, as in the sizes phase.
      const started: [string, Fresh][] = [];
      try {
        for (const [label, fastPaths] of variants)
          started.push([label, await startSeeded("warn", undefined, fastPaths)]);
        rows.push(await reviewRow(base, surface, operation, items, started));
      } finally {
        for (const [, f] of started) await f.svc.child.stop();
      }
    }
  }
  return rows;
}

/** One row of the fast-path review: the started variants and the bare route, in rotating slices. */
async function reviewRow(
  base: Baseline,
  surface: FastPathRow["surface"],
  operation: FastPathRow["operation"],
  items: number | undefined,
  started: [string, Fresh][],
): Promise<FastPathRow> {
  const name = loadName(surface, operation);
  const first = (started[0] as [string, Fresh])[1];
  await setUpBaseline(base, first.svc, first.seed);
  const loads = (f: Fresh, bare?: Baseline): Phase =>
    items === undefined
      ? loadOf(bare === undefined ? f.loads : baselineLoads(bare, f.svc, f.seed, settings), name)
      : loadOf(sizedLoads(f.svc, f.seed, settings, items, bare), name);
  const measured = await alternateAll(
    [...started.map(([, f]) => loads(f)), loads(first, base)],
    settings.sizeSeconds,
    settings.sizeRounds,
  );
  const row: FastPathRow = {
    surface,
    operation,
    ...(items === undefined ? {} : { items }),
    variants: Object.fromEntries(started.map(([label], i) => [label, measured[i] as Measurement])),
    baseline: measured.at(-1) as Measurement,
  };
  log(
    `fast paths, ${surface} ${operation}${items === undefined ? "" : `, ${items} items`}: ` +
      started.map(([label], i) => `${label} ${pct(measured[i] as Measurement, row.baseline)}`).join(", ") +
      ` of bare ${describe(row.baseline)}`,
  );
  return row;
}

/** The operations of the fast-path review and the fast paths that work on each. */
const REVIEWED = [
  ["REST", "encrypt", ["json-reader", "one-pass", "json-writer"]],
  ["REST", "create payment", ["json-reader", "one-pass", "json-writer"]],
  ["gRPC", "encrypt", ["grpc-server"]],
  ["gRPC", "create payment", ["grpc-server"]],
  ["REST", "list receipts", ["json-writer"]],
  ["REST", "decrypt", ["der"]],
  ["gRPC", "decrypt", ["der"]],
] as const;

/** Operations of the review measured at one size: their requests carry no receipt. */
const UNSIZED = new Set(["decrypt", "list receipts"]);

function pct(a: Measurement, b: Measurement): string {
  return `${((a.rps / b.rps) * 100).toFixed(0)}%`;
}

/**
 * Measures several loads in rotating slices (after a warm-up of each, half the usual length), `seconds`
 * per load in `rounds` slices each, so the machine's background load weighs on all of them alike.
 */
async function alternateAll(phases: Phase[], seconds: number, rounds: number): Promise<Measurement[]> {
  for (const phase of phases) await phase(Math.max(0.3, settings.warmup / 2));
  const samples: Sample[][] = phases.map(() => []);
  for (let round = 0; round < rounds; round++) {
    for (const [i, phase] of phases.entries()) samples[i]?.push(await phase(seconds / rounds));
  }
  return samples.map((list) => measure(...list));
}

/** One load on the service and on the baseline, alternating, with the CPU the service used. */
async function compare(
  { svc, seed, loads }: Fresh,
  base: Baseline,
  surface: Comparison["surface"],
  operation: string,
  name = loadName(surface, operation),
): Promise<Comparison> {
  await setUpBaseline(base, svc, seed);
  const baseLoads = seed.algorithm === RSA_SUITE ? baselineLoads : p256BaselineLoads;
  const raw = name === "rest-generate-keys";
  // The first call of each side is its warm-up (the raw baseline has none), left out of the CPU figures.
  const serviceSide = metered(svc.child.pid, loadOf(loads, name), 1);
  const baselineSide = metered(
    base.child.pid,
    loadOf(baseLoads(base, svc, seed, settings), name),
    raw ? 0 : 1,
  );
  const [service, baseline] = await alternate(serviceSide.phase, baselineSide.phase, {
    warmB: !raw,
    scale: raw ? KEYGEN_SCALE : 1,
  });
  return {
    surface,
    operation,
    service,
    baseline,
    ratio: service.rps / baseline.rps,
    serviceCores: serviceSide.cpu.process / service.seconds,
    loaderCores: serviceSide.cpu.loader / service.seconds,
    otherCores: {
      service: serviceSide.cpu.other / service.seconds,
      baseline: baselineSide.cpu.other / baseline.seconds,
    },
    ...(raw ? { baselineKind: "raw" as const } : {}),
  };
}

/** Gives the baseline the run's cardholders and their suite (and the floor route the merchant key). */
async function setUpBaseline(base: Baseline, svc: Service, seed: Seed): Promise<void> {
  await postJson(`${base.url}/setup`, "", {
    algorithm: seed.algorithm,
    publicKeys: seed.cardholders.map((c) => c.publicKey),
    receipt: receiptJson(hashPan("baseline-card")),
    listCount: settings.listCount,
    floor: { apiKey: svc.keys.merchant, hashedPans: seed.cardholders.map((c) => c.hashedPan) },
  });
}

/** The hand-written floor of REST encrypt (bench/floor.ts) against the bare crypto route, alternating. */
async function floorVsBaseline({ svc, seed }: Fresh, base: Baseline): Promise<NonNullable<Extras["floor"]>> {
  await setUpBaseline(base, svc, seed);
  const loads = baselineLoads(base, svc, seed, settings);
  const [floor, baseline] = await alternate(
    loadOf(loads, "rest-encrypt-floor"),
    loadOf(loads, "rest-encrypt"),
  );
  log(`floor of REST encrypt: ${describe(floor)} vs baseline ${describe(baseline)}`);
  return { floor, baseline };
}

/** REST encrypt at half its measured maximum, alone and (alternating) while keygen runs at full load. */
async function atHalfRate({ svc, loads }: Fresh, encryptMax: number): Promise<Extras> {
  const rate = Math.max(1, Math.round(encryptMax / 2));
  const atRate: Phase = (seconds) => loadOf(loads, "rest-encrypt")(seconds, rate);
  if (!wanted("keygen-load")) {
    await atRate(settings.warmup);
    const measured = measure(await atRate(settings.seconds));
    log(`encrypt at ${rate} req/s: ${describe(measured)}`);
    return { halfRate: { rate, measured } };
  }
  const keygen: Sample[] = [];
  const duringKeygen: Phase = async (seconds) => {
    const generating = loadOf(loads, "rest-generate-keys")(seconds + 1);
    await sleep(500);
    const sample = await atRate(seconds);
    keygen.push(await generating);
    await waitIdle(svc.child.pid);
    return sample;
  };
  const [alone, during] = await alternate(atRate, duringKeygen);
  // The first keygen sample is the warm-up's.
  const keygenRate = measure(...keygen.slice(1));
  log(`encrypt at ${rate} req/s: ${describe(alone)}`);
  log(`encrypt at ${rate} req/s during keygen: ${describe(during)}; keygen ${describe(keygenRate)}`);
  return {
    halfRate: { rate, measured: alone },
    keygenInterference: { rate, without: alone, with: during, keygen: keygenRate },
  };
}

/** Writes and prints the results (and the CPU profiles' summaries with `--profile`). */
function report(startLoad: number, comparisons: Comparison[], extras: Extras): void {
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

/** REST encrypt on a service at LOG_LEVEL=warn and one at LOG_LEVEL=info, both fresh, alternating. */
async function loggingCost(): Promise<NonNullable<Extras["logging"]>> {
  const [warn, info] = await withService("warn", (quiet) =>
    withService("info", (chatty) =>
      alternate(loadOf(quiet.loads, "rest-encrypt"), loadOf(chatty.loads, "rest-encrypt")),
    ),
  );
  log(`LOG_LEVEL=info: ${describe(info)} vs warn ${describe(warn)}`);
  return { warn, info };
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
 * RSS of the service, sampled once a second for `rssSeconds` of list receipts at full load (the read
 * path: authentication, rate limiting, store reads, rendering) with decrypts at a fixed
 * {@link RSS_DECRYPT_RATE} (the crypto worker pool). The embedded store keeps every receipt, payment and
 * audit event in memory by design, so loads that create data would measure the data; these add only an
 * audit event (about 540 bytes) per decrypt. The first tenth of the samples is left out (the heap
 * growing to its working size); growth compares the medians of the first and the last third of the
 * rest. RSS rises and falls by about 30% with each full garbage collection (every 20 to 30 s here), so
 * windows shorter than that would compare the phase of that cycle rather than the trend.
 */
async function sustainedRss({ svc, loads }: Fresh): Promise<NonNullable<Extras["rss"]>> {
  const decrypt = loadOf(loads, "rest-decrypt");
  const list = loadOf(loads, "rest-list-receipts");
  const sampler = sampleRss(svc.child.pid);
  await Promise.all([decrypt(settings.rssSeconds, RSS_DECRYPT_RATE), list(settings.rssSeconds)]);
  const samplesMiB = sampler.stop().map((bytes) => bytes / 1_048_576);
  const settled = samplesMiB.slice(Math.max(1, Math.floor(samplesMiB.length * 0.1)));
  const third = Math.max(1, Math.floor(settled.length / 3));
  const startMiB = median(settled.slice(0, third));
  const endMiB = median(settled.slice(-third));
  log(`RSS ${startMiB.toFixed(0)} -> ${endMiB.toFixed(0)} MiB`);
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

const deadlineMs =
  (settings.seconds + settings.warmup) * 60_000 +
  settings.rssSeconds * 1000 +
  // The sizes phase: 12 three-way comparisons, their warm-ups, and 24 services started and seeded.
  12 * (3 * settings.sizeSeconds + 3 * settings.warmup) * 1000 +
  24 * 30_000 +
  // The fast-path review: 12 sized rows of 4-5 sides, 2 of 3, 42 services started and seeded.
  (12 * 5 + 2 * 3) * (settings.sizeSeconds + settings.warmup) * 1000 +
  42 * 30_000 +
  // The P-256 phases: five comparisons and the device phase, a service started and seeded for each.
  6 * (2 * settings.seconds + 2 * settings.warmup) * 1000 +
  6 * 30_000 +
  180_000;
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
