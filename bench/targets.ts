import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { type ApiKeys, parseDevKeys } from "./fixtures.js";
import type { Sample } from "./load.js";
import type { Phase } from "./phases.js";
import { type Child, freePort, startNode, waitReady } from "./processes.js";

/**
 * The processes a run measures: the service as `npm start` runs it (built `dist/src/main.js`, embedded
 * store, the Node flags of the start script) or as a node:cluster (`dist/src/cluster.js`, as
 * `npm run start:cluster`), and the baseline. All listen on 127.0.0.1 only.
 */

/**
 * The Node flags `npm start` gives the service (package.json's start script, e.g.
 * `--max-semi-space-size=64`). The baseline runs with them too, so that a ratio compares code with
 * code, not one runtime setting with another.
 */
export const START_NODE_FLAGS: readonly string[] = startFlags(
  (
    JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
      scripts: Record<string, string>;
    }
  ).scripts.start ?? "",
);

/** The flags between `node` and `dist/src/main.js` in a start script. */
function startFlags(script: string): string[] {
  const run = /(?:^|&& )node ((?:--\S+ )*)dist\/src\/main\.js/.exec(script);
  if (run === null) throw new Error(`package.json's start script does not run dist/src/main.js: ${script}`);
  return (run[1] ?? "").split(" ").filter((flag) => flag !== "");
}

/** A running service: where it listens and the development API keys it printed. */
export interface Service {
  child: Child;
  url: string;
  keys: ApiKeys;
}

/** A running baseline: its HTTP/1.1 and its gRPC (h2c) addresses. */
export interface Baseline {
  child: Child;
  url: string;
  grpcUrl: string;
}

/** Limits the bench cannot reach: every call must measure the service, never a 429. */
const UNREACHABLE_LIMITS = JSON.stringify({
  standard: { requestsPerMinute: 1_000_000_000, generateKeysPerMinute: 1_000_000_000 },
});

/** Options of {@link startService}. */
export interface ServiceOptions {
  logLevel: string;
  /** Run `cluster.js` with this many workers instead of one `main.js` process. */
  clusterWorkers?: number;
  /** Write a V8 CPU profile into this directory when the process exits. */
  cpuProfileDir?: string;
  /** Extra Node/V8 flags for the service process (e.g. to measure one with `bench/ab.js`). */
  nodeFlags?: string[];
  /** `FAST_PATHS` of the service (src/config.ts); unset, the service's default (on). */
  fastPaths?: string;
}

/** Starts the service from `dist/` and waits until it answers and has printed its API keys. */
export async function startService(name: string, distSrc: URL, options: ServiceOptions): Promise<Service> {
  const port = await freePort();
  const clustered = options.clusterWorkers !== undefined;
  const script = new URL(clustered ? "cluster.js" : "main.js", distSrc);
  const env: Record<string, string> = {
    PORT: String(port),
    HOST: "127.0.0.1",
    RECEIPTS_ENV: "dev",
    STORE: "memory",
    LOG_LEVEL: options.logLevel,
    RATE_LIMIT_TIERS: UNREACHABLE_LIMITS,
    // The key log's public reads are limited per client address: the bench is one address.
    KT_READS_PER_MINUTE: "1000000",
  };
  if (clustered) env.CLUSTER_WORKERS = String(options.clusterWorkers);
  if (options.fastPaths !== undefined) env.FAST_PATHS = options.fastPaths;
  const execArgv = [
    ...START_NODE_FLAGS,
    // Later flags win: a side of bench/ab.ts may set another value.
    ...(options.nodeFlags ?? []),
    ...(options.cpuProfileDir === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${options.cpuProfileDir}`]),
  ];
  const child = startNode(name, script.pathname, env, execArgv);
  const url = `http://127.0.0.1:${port}`;
  const keys = await waitReady(child, `${url}/healthz`, parseDevKeys);
  return { child, url, keys };
}

/** Starts the baseline server (`dist/bench/baseline.js`), writing a V8 CPU profile into `cpuProfileDir` if given. */
export async function startBaseline(distBench: URL, cpuProfileDir?: string): Promise<Baseline> {
  const [port, grpcPort] = [await freePort(), await freePort()];
  const execArgv = [
    ...START_NODE_FLAGS,
    ...(cpuProfileDir === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${cpuProfileDir}`]),
  ];
  const env = { BASELINE_PORT: String(port), BASELINE_GRPC_PORT: String(grpcPort) };
  const child = startNode("baseline", new URL("baseline.js", distBench).pathname, env, execArgv);
  const url = `http://127.0.0.1:${port}`;
  await waitReady(child, `${url}/receipts/ping`, (log) =>
    log.includes("baseline ready") ? true : undefined,
  );
  return { child, url, grpcUrl: `http://127.0.0.1:${grpcPort}` };
}

/**
 * CPU time used so far by process `pid`, in seconds: all its threads, or with `mainThread` only the
 * thread that runs its event loop (its task of the same id); NaN where /proc is missing.
 */
export function cpuSeconds(pid: number, mainThread = false): number {
  if (process.platform !== "linux") return Number.NaN;
  const stat = readFileSync(mainThread ? `/proc/${pid}/task/${pid}/stat` : `/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / clockTicks;
}

/**
 * CPU time the whole machine has spent busy so far, and the part of it the hypervisor gave to others
 * (steal), in seconds, from the first line of /proc/stat; NaN where /proc is missing.
 */
export function machineCpuSeconds(): { busy: number; steal: number } {
  if (process.platform !== "linux") return { busy: Number.NaN, steal: Number.NaN };
  const line = readFileSync("/proc/stat", "utf8").split("\n", 1)[0] ?? "";
  // cpu user nice system idle iowait irq softirq steal ...
  const [user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
  const ticks = (n: number | undefined) => (n ?? Number.NaN) / clockTicks;
  return {
    busy: ticks(user) + ticks(nice) + ticks(system) + ticks(irq) + ticks(softirq),
    steal: ticks(steal),
  };
}

let clockTicks = 100;
/** Reads the kernel's clock tick rate once (`getconf CLK_TCK`), used by {@link cpuSeconds}. */
export async function initClockTicks(): Promise<void> {
  if (process.platform !== "linux") return;
  const out = await new Promise<string>((resolve) => {
    const child = spawn("getconf", ["CLK_TCK"]);
    let text = "";
    child.stdout.on("data", (chunk: Buffer) => {
      text += chunk.toString();
    });
    child.on("close", () => resolve(text));
    child.on("error", () => resolve(""));
  });
  const ticks = Number(out.trim());
  if (Number.isFinite(ticks) && ticks > 0) clockTicks = ticks;
}

/**
 * Waits until process `pid` is idle (under a tenth of a core over 100 ms), at most `maxMs`: work a load
 * left queued when it stopped (key generations take half a second each) must not run during the
 * next slice, which would charge it to the other side of a comparison.
 */
export async function waitIdle(pid: number, maxMs = 5_000): Promise<void> {
  const deadline = Date.now() + maxMs;
  while (Date.now() < deadline) {
    const before = cpuSeconds(pid);
    await sleep(100);
    const used = cpuSeconds(pid) - before;
    if (!(used > 0.01)) return;
  }
}

/**
 * Runs `load` while measuring the CPU seconds used by process `pid`, by this process (the load
 * generator) and by the rest of the machine: other processes, and the time the hypervisor gave to
 * other guests (steal). The service needs more than one core (its crypto runs on worker threads)
 * where the baseline needs one, so CPU taken by others weighs more on the service and lowers the
 * ratio: the report shows how much there was.
 */
async function withCpu(pid: number, load: () => Promise<Sample>) {
  const [process0, self0, machine0] = [cpuSeconds(pid), process.cpuUsage(), machineCpuSeconds()];
  const sample = await load();
  const self = process.cpuUsage(self0);
  const machine = machineCpuSeconds();
  const processCpu = cpuSeconds(pid) - process0;
  const loaderCpu = (self.user + self.system) / 1e6;
  const otherCpu = machine.busy - machine0.busy - processCpu - loaderCpu + (machine.steal - machine0.steal);
  return { sample, processCpu, loaderCpu, otherCpu: Math.max(0, otherCpu) };
}

/**
 * `phase`, run against process `pid`, adding up the CPU figures of {@link withCpu} over its calls but
 * the first `skip`, and waiting after each call until the process is idle.
 */
export function metered(pid: number, phase: Phase, skip: number) {
  const cpu = { process: 0, loader: 0, other: 0 };
  let calls = 0;
  const run: Phase = async (seconds, rate) => {
    const s = await withCpu(pid, () => phase(seconds, rate));
    await waitIdle(pid);
    if (calls++ >= skip) {
      cpu.process += s.processCpu;
      cpu.loader += s.loaderCpu;
      cpu.other += s.otherCpu;
    }
    return s.sample;
  };
  return { phase: run, cpu };
}
