import { cpus, loadavg } from "node:os";
import type { OpenOnDevice } from "./device.js";
import type { Measurement } from "./load.js";
import { START_NODE_FLAGS } from "./targets.js";

/**
 * The benchmark's results: the comparison table (service against baseline, measured in the same run),
 * the extra measurements, and the targets of the performance issue, each PASS or FAIL with the numbers
 * that decided it. Rendered as Markdown for the README and kept as JSON for tooling.
 */

/** One operation measured on the service and on the baseline. */
export interface Comparison {
  surface: "REST" | "gRPC";
  operation: string;
  service: Measurement;
  baseline: Measurement;
  /** `raw`: the baseline is the bare crypto call rate, not an HTTP endpoint (no latency). */
  baselineKind?: "raw";
  /** service req/s divided by baseline req/s. */
  ratio: number;
  /** CPU used by the service process during its phase, in cores (1 = one core fully busy). */
  serviceCores: number;
  /** CPU used by the load generator (this process) during the service phase, in cores. */
  loaderCores: number;
  /**
   * CPU the rest of the machine used (other processes, and steal) during the slices of each side, in
   * cores: load that was not the bench's own. Absent in results written before it was measured.
   */
  otherCores?: { service: number; baseline: number };
}

/** The measurements that are not service-versus-baseline comparisons. */
export interface Extras {
  /** REST encrypt at a fixed rate of half the measured maximum. */
  halfRate?: { rate: number; measured: Measurement };
  /** REST encrypt at a fixed rate, alone and while generate-keys runs at full load. */
  keygenInterference?: { rate: number; without: Measurement; with: Measurement; keygen: Measurement };
  /** Service RSS sampled once a second during a sustained run. */
  rss?: {
    seconds: number;
    workload: string;
    samplesMiB: number[];
    startMiB: number;
    endMiB: number;
    growth: number;
  };
  /** REST encrypt (escrowed recipients) on one process and on a node:cluster of `workers`. */
  cluster?: { workers: number; single: Measurement; cluster: Measurement };
  /**
   * REST encrypt on the hand-written floor (the bare route plus the bookkeeping of a real encrypt,
   * sealing on the service's worker threads, bench/floor.ts) and on the bare route, alternating: how
   * far an implementation with the service's design can get.
   */
  floor?: { floor: Measurement; baseline: Measurement };
  /** REST encrypt with LOG_LEVEL=warn (the bench default) and LOG_LEVEL=info (one line per request). */
  logging?: { warn: Measurement; info: Measurement };
  /**
   * Encrypt and create payment per receipt size (line items with taxes, full merchant address), on a
   * service with FAST_PATHS on, one with it off, and the bare route, alternating three ways.
   */
  sizes?: SizedComparison[];
  /** The fast-path review: each operation with every fast path on, and with each that serves it off. */
  fastPaths?: FastPathRow[];
  /**
   * The client library's `openReceipt` in this process, receipts a second with a P-256 key against an
   * RSA-2048 key over a listing's receipts (bench/device.ts); no server in what is timed.
   */
  openOnDevice?: OpenOnDevice;
}

/** One operation at one receipt size: the service with and without its fast paths, and the bare route. */
export interface SizedComparison {
  surface: "REST" | "gRPC";
  operation: string;
  items: number;
  on: Measurement;
  off: Measurement;
  baseline: Measurement;
}

/**
 * One operation (at one receipt size, for encrypt and create payment) on services with different
 * fast paths: `on` has all of them, `-name` all but that one (and what only serves it).
 */
export interface FastPathRow {
  surface: "REST" | "gRPC";
  operation: string;
  items?: number;
  variants: Record<string, Measurement>;
  baseline: Measurement;
}

/** The minimum ratio to the bare route for encrypt and create payment at every receipt size (issue 25). */
export const SIZED_TARGET = 0.75;

/** One target of the issue. */
export interface TargetResult {
  name: string;
  goal: string;
  measured: string;
  pass: boolean;
}

/** Everything a run produced; written to `bench/results/latest.json`. */
export interface Results {
  date: string;
  machine: {
    cpu: string;
    cores: number;
    node: string;
    platform: string;
    loadAverage: { start: number; end: number };
  };
  mode: string;
  settings: Record<string, number | string | boolean>;
  comparisons: Comparison[];
  extras: Extras;
  targets: TargetResult[];
}

/** The machine description of the report; `startLoad` is the 1-minute load average when the run began. */
export function machine(startLoad: number): Results["machine"] {
  return {
    cpu: cpus()[0]?.model.trim() ?? "unknown",
    cores: cpus().length,
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    loadAverage: { start: round(startLoad, 2), end: round(loadavg()[0] ?? 0, 2) },
  };
}

function round(n: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

/** The CPU the rest of the machine used during a comparison, service slices then baseline slices. */
export function otherLoad(c: Comparison): string {
  if (c.otherCores === undefined) return "not measured";
  return `${c.otherCores.service.toFixed(2)} / ${c.otherCores.baseline.toFixed(2)} cores`;
}

const pct = (n: number) => `${Math.round(n * 100)}%`;
const ms = (n: number) => (n >= 100 ? n.toFixed(0) : n.toFixed(1));
const rps = (n: number) => (n >= 100 ? n.toFixed(0) : n.toFixed(1));

/** Evaluates the targets of the issue against the results gathered so far. */
export function evaluateTargets(comparisons: Comparison[], extras: Extras): TargetResult[] {
  const targets: TargetResult[] = [];
  const find = (surface: string, operation: string) =>
    comparisons.find((c) => c.surface === surface && c.operation === operation);
  const ratioTarget = (surface: string, operation: string, min: number, name?: string) => {
    const c = find(surface, operation);
    if (c === undefined) return;
    targets.push({
      name: name ?? `${operation} (${surface}) throughput`,
      goal: `>= ${pct(min)} of baseline`,
      measured:
        `${pct(c.ratio)} (${rps(c.service.rps)} vs ${rps(c.baseline.rps)} req/s; service ` +
        `${c.serviceCores.toFixed(2)} cores, load generator ${c.loaderCores.toFixed(2)}; rest of the machine ` +
        `${otherLoad(c)})`,
      pass: c.ratio >= min,
    });
  };
  for (const surface of ["REST", "gRPC"]) {
    ratioTarget(surface, "encrypt", 0.7);
    ratioTarget(surface, "create payment", 0.7);
    ratioTarget(surface, "decrypt", 0.85);
  }
  for (const z of extras.sizes ?? []) {
    const ratio = z.on.rps / z.baseline.rps;
    targets.push({
      name: `${z.operation} (${z.surface}), ${z.items} items, throughput`,
      goal: `>= ${pct(SIZED_TARGET)} of baseline`,
      measured: `${pct(ratio)} (${rps(z.on.rps)} vs ${rps(z.baseline.rps)} req/s; FAST_PATHS=off ${pct(z.off.rps / z.baseline.rps)})`,
      pass: ratio >= SIZED_TARGET,
    });
  }
  const decrypt = find("REST", "decrypt");
  if (decrypt !== undefined) {
    targets.push({
      name: "decrypt (REST): one process beats the synchronous baseline",
      goal: "> 100% of baseline",
      measured: `${pct(decrypt.ratio)} (service ${decrypt.serviceCores.toFixed(2)} cores)`,
      pass: decrypt.ratio > 1,
    });
  }
  ratioTarget("REST", "generate-keys", 0.9, "generate-keys (REST) vs raw async generateKeyPair");
  const k = extras.keygenInterference;
  if (k !== undefined) {
    const factor = k.with.p99 / Math.max(k.without.p99, 0.001);
    targets.push({
      name: `encrypt p99 at ${rps(k.rate)} req/s while generate-keys runs at full load`,
      goal: "<= 2x the p99 without",
      measured: `${factor.toFixed(2)}x (${ms(k.with.p99)} vs ${ms(k.without.p99)} ms; keygen ${rps(k.keygen.rps)}/s)`,
      pass: factor <= 2 && k.with.failed === 0,
    });
  }
  const h = extras.halfRate;
  if (h !== undefined) {
    targets.push({
      name: `encrypt (REST) p99 at half its max throughput (${rps(h.rate)} req/s)`,
      goal: "< 10 ms",
      measured: `${ms(h.measured.p99)} ms (${rps(h.measured.rps)} req/s achieved)`,
      pass: h.measured.p99 < 10 && h.measured.rps >= h.rate * 0.9,
    });
  }
  const r = extras.rss;
  if (r !== undefined) {
    targets.push({
      name: `service RSS flat during a ${r.seconds} s sustained run`,
      goal: "within 20%",
      measured: `${r.growth >= 0 ? "+" : ""}${pct(r.growth)} (${r.startMiB.toFixed(0)} -> ${r.endMiB.toFixed(0)} MiB)`,
      pass: Math.abs(r.growth) <= 0.2,
    });
  }
  return targets;
}

function latency(m: Measurement, kind?: "raw"): [string, string] {
  return kind === "raw" ? ["-", "-"] : [ms(m.p50), ms(m.p99)];
}

function failures(m: Measurement): string {
  if (m.failed === 0) return "";
  const kinds = Object.entries(m.failures)
    .map(([kind, count]) => `${kind} x${count}`)
    .join(", ");
  return ` (${m.failed} failed: ${kinds})`;
}

/** The results as Markdown: machine, comparison table, extras, targets. */
export function renderMarkdown(results: Results): string {
  const m = results.machine;
  const lines = [
    `Measured ${results.date} on ${m.cpu}, ${m.cores} cores, Node ${m.node} (${m.platform}); ` +
      `load average ${m.loadAverage.start} at start, ${m.loadAverage.end} at end; mode: ${results.mode}. ` +
      "Service: one process, embedded store, LOG_LEVEL=warn, rate limits out of reach. Baseline: the same " +
      "crypto in a bare Fastify route (gRPC: a bare node:http2 handler). Both run with the Node flags of " +
      `npm start (${START_NODE_FLAGS.join(" ") || "none"}). Ratios compare the two in this run. ` +
      `Full load: ${results.settings.connections} REST connections, ${results.settings.grpcConcurrency} ` +
      "concurrent gRPC calls. The targets show the CPU the rest of the machine used (other processes, " +
      "steal) during the service's slices and the baseline's: the service needs more than one core, the " +
      "baseline one, so CPU taken by others lowers the ratio.",
    "",
    "| surface | operation | service req/s | p50 ms | p99 ms | baseline req/s | p50 ms | p99 ms | ratio |",
    "|---|---|--:|--:|--:|--:|--:|--:|--:|",
  ];
  for (const c of results.comparisons) {
    const [sp50, sp99] = latency(c.service);
    const [bp50, bp99] = latency(c.baseline, c.baselineKind);
    const baselineLabel = c.baselineKind === "raw" ? `${rps(c.baseline.rps)} (raw)` : rps(c.baseline.rps);
    lines.push(
      `| ${c.surface} | ${c.operation}${failures(c.service)} | ${rps(c.service.rps)} | ${sp50} | ${sp99} | ` +
        `${baselineLabel} | ${bp50} | ${bp99} | ${pct(c.ratio)} |`,
    );
  }
  const e = results.extras;
  const extra: string[] = [];
  if (e.halfRate) {
    extra.push(
      `- REST encrypt at half its max (${rps(e.halfRate.rate)} req/s): p50 ${ms(e.halfRate.measured.p50)} ms, ` +
        `p99 ${ms(e.halfRate.measured.p99)} ms${failures(e.halfRate.measured)}.`,
    );
  }
  if (e.keygenInterference) {
    const k = e.keygenInterference;
    extra.push(
      `- REST encrypt at ${rps(k.rate)} req/s: p99 ${ms(k.without.p99)} ms alone, ${ms(k.with.p99)} ms while ` +
        `generate-keys runs at full load (${rps(k.keygen.rps)} keys/s)${failures(k.with)}.`,
    );
  }
  if (e.rss) {
    extra.push(
      `- RSS during ${e.rss.seconds} s of ${e.rss.workload}: ${e.rss.startMiB.toFixed(0)} MiB -> ` +
        `${e.rss.endMiB.toFixed(0)} MiB (min ${Math.min(...e.rss.samplesMiB).toFixed(0)}, ` +
        `max ${Math.max(...e.rss.samplesMiB).toFixed(0)}).`,
    );
  }
  if (e.floor) {
    const f = e.floor;
    extra.push(
      `- Floor of REST encrypt (bench/floor.ts: the bare route plus key lookup, rate count, field checks, ` +
        `recipient lookup, duplicate check and storing, by hand; sealing on the service's worker threads): ` +
        `${rps(f.floor.rps)} req/s vs ` +
        `${rps(f.baseline.rps)} for the bare route (${pct(f.floor.rps / f.baseline.rps)}).`,
    );
  }
  if (e.cluster) {
    const c = e.cluster;
    extra.push(
      `- node:cluster, ${c.workers} processes on one port, REST encrypt: ${rps(c.cluster.rps)} req/s vs ` +
        `${rps(c.single.rps)} on one process (${pct(c.cluster.rps / c.single.rps)}); p99 ` +
        `${ms(c.cluster.p99)} vs ${ms(c.single.p99)} ms.`,
    );
  }
  if (e.logging) {
    const l = e.logging;
    extra.push(
      `- LOG_LEVEL=info (one line per request) vs warn, REST encrypt: ${rps(l.info.rps)} vs ${rps(l.warn.rps)} ` +
        `req/s (${pct(l.info.rps / l.warn.rps)}); p99 ${ms(l.info.p99)} vs ${ms(l.warn.p99)} ms.`,
    );
  }
  if (e.openOnDevice) {
    const d = e.openOnDevice;
    extra.push(
      `- Open on device (the client library's openReceipt, WebCrypto, in-process, one receipt at a time ` +
        `over a listing of ${d.receipts}, key imported once): P-256 ${rps(d.p256.opsPerSecond)} receipts/s vs ` +
        `RSA-2048 ${rps(d.rsa.opsPerSecond)} (${pct(d.ratio)}).`,
    );
  }
  if (extra.length > 0) lines.push("", ...extra);
  if (e.sizes !== undefined && e.sizes.length > 0) {
    lines.push(
      "",
      "Per receipt size (line items with taxes, full merchant address), the service with FAST_PATHS=on, " +
        "with FAST_PATHS=off and the bare route in alternating slices:",
      "",
      "| surface | operation | items | on req/s | on ratio | off req/s | off ratio | bare route req/s |",
      "|---|---|--:|--:|--:|--:|--:|--:|",
    );
    for (const z of e.sizes) {
      lines.push(
        `| ${z.surface} | ${z.operation} | ${z.items} | ${rps(z.on.rps)}${failures(z.on)} | ` +
          `${pct(z.on.rps / z.baseline.rps)} | ${rps(z.off.rps)}${failures(z.off)} | ` +
          `${pct(z.off.rps / z.baseline.rps)} | ${rps(z.baseline.rps)}${failures(z.baseline)} |`,
      );
    }
  }
  if (e.fastPaths !== undefined && e.fastPaths.length > 0) lines.push("", ...fastPathTable(e.fastPaths));
  lines.push("", "| target | goal | measured | result |", "|---|---|---|---|");
  for (const t of results.targets) {
    lines.push(`| ${t.name} | ${t.goal} | ${t.measured} | ${t.pass ? "PASS" : "FAIL"} |`);
  }
  return `${lines.join("\n")}\n`;
}

/**
 * The fast-path review as a table: per fast path and operation, the ratio to the bare route with
 * every fast path on and with this one off, and what it buys (on / off - 1). Issue 25 keeps a fast
 * path that buys 10% or more on some operation.
 */
function fastPathTable(rows: FastPathRow[]): string[] {
  const lines = [
    "Fast-path review: each operation on a service with every fast path on, on one with each fast path " +
      "that serves it off, and on the bare route, in rotating slices (ratios to the bare route):",
    "",
    "| fast path | surface | operation | items | all on | without it | it buys |",
    "|---|---|---|--:|--:|--:|--:|",
  ];
  for (const row of rows) {
    const on = row.variants.on;
    if (on === undefined) continue;
    for (const [label, m] of Object.entries(row.variants)) {
      if (label === "on") continue;
      lines.push(
        `| ${label.slice(1)} | ${row.surface} | ${row.operation} | ${row.items ?? "-"} | ` +
          `${pct(on.rps / row.baseline.rps)}${failures(on)} | ${pct(m.rps / row.baseline.rps)}${failures(m)} | ` +
          `${signedPct(on.rps / m.rps - 1)} |`,
      );
    }
  }
  return lines;
}

function signedPct(x: number): string {
  return `${x >= 0 ? "+" : ""}${(x * 100).toFixed(0)}%`;
}
