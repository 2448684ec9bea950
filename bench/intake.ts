import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { hashPan, sizedReceiptText } from "./fixtures.js";

/**
 * The receipt intake of the encrypt path in one process, without crypto, store or HTTP: the REST
 * body read into a `Receipt` (the compiled JSON reader), the receipt rules, mock items, and the
 * sealed plaintext's JSON, for receipts of N line items. Two builds side by side, in alternating
 * slices of the same process (so a busy machine weighs on both), to see what a change to the receipt
 * fields costs where the service spends its own CPU on every receipt.
 *
 *   node dist/bench/intake.js --before /path/to/other/dist [--items 12] [--rounds 10] [--ms 1500]
 *
 * `--before` is the `dist` directory of the other build; this build is the "after".
 */

const { values: args } = parseArgs({
  options: {
    before: { type: "string" },
    items: { type: "string", default: "12" },
    rounds: { type: "string", default: "10" },
    ms: { type: "string", default: "1500" },
  },
});

/** One build's intake of a REST body: read, checked, mock items, sealed plaintext text. */
type Intake = (body: string) => string;

async function intakeOf(dist: string): Promise<Intake> {
  const load = (path: string) => import(pathToFileURL(join(dist, path)).href);
  // The compiled reader moved from src/fast to src/rpc: a build from before the move has it there.
  const compiledReader = () => load("src/rpc/json-input.js").catch(() => load("src/fast/json-input.js"));
  const [reader, schema, rules, mock, sealing] = await Promise.all([
    compiledReader(),
    load("gen/receipts/v1/receipt_pb.js"),
    load("src/domain/receipt-rules.js"),
    load("src/domain/mock-items.js"),
    load("src/domain/sealing.js"),
  ]);
  const now = new Date("2026-01-02T00:00:00Z");
  return (body) => {
    const message = reader.compiledMessageFromJson(schema.ReceiptSchema, JSON.parse(body));
    const valid = mock.withMockItems(rules.validateReceipt(message, { mode: "encrypt", now }));
    return sealing.plaintextTextOf(valid);
  };
}

/**
 * CPU microseconds (user and system, of this process: GC included) per call of `intake`, over about
 * `ms` milliseconds of wall time. CPU time, not calls per second: on a machine shared with other
 * work, the wall clock mostly measures the others.
 */
function cpuPerCall(intake: Intake, bodies: readonly string[], ms: number): number {
  let calls = 0;
  let sink = 0;
  const start = performance.now();
  const cpu = process.cpuUsage();
  while (performance.now() - start < ms) {
    for (const body of bodies) sink += intake(body).length;
    calls += bodies.length;
  }
  const used = process.cpuUsage(cpu);
  if (sink === 0) throw new Error("nothing was sealed");
  return (used.user + used.system) / calls;
}

const median = (values: number[]) => [...values].sort((x, y) => x - y)[Math.floor(values.length / 2)] ?? 0;
const percent = (after: number, before: number) => `${(((after - before) / before) * 100).toFixed(1)}%`;

async function main(): Promise<void> {
  if (args.before === undefined) throw new Error("--before <dist of the other build> is required");
  const items = Number(args.items);
  const rounds = Number(args.rounds);
  const ms = Number(args.ms);
  const sides = {
    before: await intakeOf(resolve(args.before)),
    after: await intakeOf(resolve(import.meta.dirname, "..")),
  };
  const bodies = Array.from({ length: 64 }, (_, i) => sizedReceiptText(hashPan(String(i)), items));
  // The same plaintext from both: a change that sealed something else would not be comparable.
  if (sides.before(bodies[0] as string) !== sides.after(bodies[0] as string)) {
    console.warn("note: the two builds seal different plaintexts for the same body");
  }
  for (const intake of Object.values(sides)) cpuPerCall(intake, bodies, ms);
  const samples: { before: number[]; after: number[] } = { before: [], after: [] };
  for (let round = 0; round < rounds; round++) {
    // Each side first in every other round, so that neither always runs after the other's garbage.
    const order = round % 2 === 0 ? (["before", "after"] as const) : (["after", "before"] as const);
    for (const side of order) samples[side].push(cpuPerCall(sides[side], bodies, ms));
  }
  const [b, a] = [median(samples.before), median(samples.after)];
  const rounds_ = samples.after.map((x, i) => percent(x, samples.before[i] ?? x));
  console.log(`receipt intake, ${items} line items, ${rounds} rounds of ${ms} ms per side`);
  console.log(
    `CPU per receipt, median: before ${b.toFixed(1)} µs, after ${a.toFixed(1)} µs (${percent(a, b)})`,
  );
  console.log(`after against before, per round: ${rounds_.join(", ")}`);
}

await main();
