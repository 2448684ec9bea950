import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { seedService } from "./fixtures.js";
import { measure, type Sample } from "./load.js";
import {
  FULL_LOAD_CONNECTIONS,
  LOADS,
  type Loads,
  loadName,
  type Phase,
  SIZED_LOADS,
  serviceLoads,
  sizedLoads,
} from "./phases.js";
import { stopAll } from "./processes.js";
import { initClockTicks, metered, startService } from "./targets.js";

/**
 * Before/after figures of a change: the same loads against two builds of the service, started side
 * by side, in alternating slices (so the background load of a shared machine weighs on both), with
 * the CPU each process spent per request, which contention changes much less than throughput.
 *
 *   node dist/bench/ab.js --before /path/to/other/dist [--only rest-encrypt,grpc-decrypt]
 *     [--items 50] [--seconds 12] [--rounds 6] [--warmup 2] [--log-level warn]
 *     [--before-flags=...] [--after-flags="--max-semi-space-size=64 --v8-pool-size=1"]
 *
 * `--before` is the `dist` directory of the other build (e.g. a copy made before the change); this
 * build is the "after". `--before` may be this build's own `dist` to compare Node flags alone. The
 * flags take the `=` form: `parseArgs` refuses a separate value that starts with a dash. Both sides
 * start with the flags of this checkout's `npm start` first, so a side's own flag overrides one of
 * them (`--before-flags=--max-semi-space-size=16` measures Node's default young generation).
 * `--items N` runs the sized loads instead (encrypt and create payment, REST and gRPC, with receipts
 * of N line items, as the bench's sizes phase sends them).
 * Exits 0 unless something crashed.
 */

const { values: args } = parseArgs({
  options: {
    before: { type: "string" },
    only: { type: "string" },
    items: { type: "string" },
    seconds: { type: "string", default: "12" },
    rounds: { type: "string", default: "6" },
    warmup: { type: "string", default: "2" },
    "log-level": { type: "string", default: "warn" },
    "before-flags": { type: "string", default: "" },
    "after-flags": { type: "string", default: "" },
  },
});

/** Space-separated Node flags of one side (`--after-flags="--max-semi-space-size=64"`). */
const flagsOf = (value: string | undefined) => (value ?? "").split(" ").filter((flag) => flag !== "");

const settings = {
  connections: FULL_LOAD_CONNECTIONS,
  grpcConcurrency: 16,
  keygenConnections: 8,
  rawKeygenConcurrency: 4,
  seconds: Number(args.seconds),
  rounds: Number(args.rounds),
  warmup: Number(args.warmup),
};

/** `after` against `before` as a signed whole percentage: `+12%`, `-3%`. */
function percentChange(before: number, after: number): string {
  const change = ((after - before) / before) * 100;
  return `${change >= 0 ? "+" : ""}${change.toFixed(0)}%`;
}

async function main(): Promise<void> {
  if (args.before === undefined) throw new Error("--before <dist directory of the other build> is required");
  await initClockTicks();
  const logLevel = args["log-level"];
  const beforeSrc = new URL("src/", pathToFileURL(`${args.before.replace(/\/$/, "")}/`));
  const afterSrc = new URL("../src/", import.meta.url);
  const [before, after] = await Promise.all([
    startService("before", beforeSrc, { logLevel, nodeFlags: flagsOf(args["before-flags"]) }),
    startService("after", afterSrc, { logLevel, nodeFlags: flagsOf(args["after-flags"]) }),
  ]);
  const [beforeSeed, afterSeed] = await Promise.all([
    seedService(before.url, before.keys, 4, 20),
    seedService(after.url, after.keys, 4, 20),
  ]);
  const items = args.items === undefined ? undefined : Number(args.items);
  if (items !== undefined && !(Number.isInteger(items) && items > 0))
    throw new Error("--items takes a count");
  const loadsOf = (svc: typeof before, seed: typeof beforeSeed): Loads =>
    items === undefined ? serviceLoads(svc, seed, settings) : sizedLoads(svc, seed, settings, items);
  const beforeLoads = loadsOf(before, beforeSeed);
  const afterLoads = loadsOf(after, afterSeed);
  const only = args.only === undefined ? undefined : new Set(args.only.split(","));
  const rows = [
    "| load | before req/s | p50 ms | p99 ms | CPU µs/req | after req/s | p50 ms | p99 ms | CPU µs/req | req/s change | CPU change |",
    "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
  ];
  for (const [surface, operation] of items === undefined ? LOADS : SIZED_LOADS) {
    const name = loadName(surface, operation);
    if (only !== undefined && !only.has(name)) continue;
    // The first call of each is its warm-up, left out of the CPU figures.
    const a = metered(before.child.pid, beforeLoads[name] as Phase, 1);
    const b = metered(after.child.pid, afterLoads[name] as Phase, 1);
    await a.phase(settings.warmup);
    await b.phase(settings.warmup);
    const samplesA: Sample[] = [];
    const samplesB: Sample[] = [];
    const slice = settings.seconds / settings.rounds;
    // ABBA order: whichever build runs second in a round does not always run second.
    for (let round = 0; round < settings.rounds; round++) {
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
    const row =
      `| ${surface} ${operation} | ${ma.rps.toFixed(0)} | ${ma.p50.toFixed(1)} | ${ma.p99.toFixed(1)} | ${cpuA.toFixed(0)} ` +
      `| ${mb.rps.toFixed(0)} | ${mb.p50.toFixed(1)} | ${mb.p99.toFixed(1)} | ${cpuB.toFixed(0)} ` +
      `| ${percentChange(ma.rps, mb.rps)} | ${percentChange(cpuA, cpuB)} |`;
    rows.push(row);
    process.stdout.write(`${row}\n`);
  }
  await stopAll();
  process.stdout.write(
    `\n${items === undefined ? "" : `${items} line items, `}LOG_LEVEL=${logLevel}, ${settings.seconds} s each in ${settings.rounds} alternating slices\n${rows.join("\n")}\n`,
  );
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`ab failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    void stopAll().finally(() => process.exit(1));
  },
);
process.once("SIGINT", () => {
  void stopAll().finally(() => process.exit(130));
});
