import { parseArgs } from "node:util";
import { pino } from "pino";
import type { ApiKeyRecord } from "../src/store/types.js";
import { cpuSeconds, initClockTicks } from "./targets.js";
import { startReceiverProcess } from "./webhook-receiver.js";

/**
 * What the events worker alone costs per event (issue 34), without HTTP requests, the load generator
 * or the crypto threads around it: `--events` `receipt.created` events appended to an in-memory store
 * at `--rate` per second, sequenced, fanned out and (with `--endpoints 1`) signed and delivered to the
 * bench's receiver (bench/webhook-receiver.ts, its own process). Prints this process's CPU per event
 * (the worker, the appends, and the pacing loop, which the same run with `--endpoints 0` measures
 * alone) and the receiver's. `--dist <dir>` runs another build's `src` (a copy of `dist/`).
 *
 *   node dist/bench/events-worker.js --endpoints 1 --events 15000 --rate 2000 [--dist <dir>]
 */

const { values: args } = parseArgs({
  options: {
    endpoints: { type: "string", default: "1" },
    events: { type: "string", default: "15000" },
    rate: { type: "string", default: "2000" },
    dist: { type: "string" },
  },
});

const WARMUP = 2_000;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  const [endpoints, count, rate] = [args.endpoints, args.events, args.rate].map(Number) as [
    number,
    number,
    number,
  ];
  const src = args.dist === undefined ? new URL("../src/", import.meta.url).href : `file://${args.dist}/src/`;
  const load = <T>(path: string) => import(`${src}${path}`) as Promise<T>;
  const { createMemoryStore } =
    await load<typeof import("../src/store/memory/index.js")>("store/memory/index.js");
  const { createEvents } = await load<typeof import("../src/events/index.js")>("events/index.js");
  const { loadConfig } = await load<typeof import("../src/config.js")>("config.js");
  const { createEndpoint } = await load<typeof import("../src/events/endpoints.js")>("events/endpoints.js");
  const { newEvent } = await load<typeof import("../src/domain/event-types.js")>("domain/event-types.js");
  await initClockTicks();
  const config = loadConfig({ RECEIPTS_ENV: "dev", STORE: "memory", LOG_LEVEL: "warn" });
  const store = createMemoryStore();
  const events = createEvents({
    store,
    clock: { now: () => new Date() },
    logger: pino({ level: "warn" }),
    config,
  });
  const receiver = await startReceiverProcess();
  const principal = { id: "key_b", tenantId: "iss_bench", role: "issuer", env: "dev" } as ApiKeyRecord;
  for (let i = 0; i < endpoints; i++) {
    const input = { url: receiver.url, events: ["*"], description: "" };
    await createEndpoint(events.deps, principal, input, { requestId: "bench", sourceIp: "" });
  }
  events.start();
  const event = () =>
    newEvent("receipt.created", "iss_bench", new Date(), {
      userId: "usr_abcdefghijkl",
      receiptId: "rcp_abcdefghijklmnop",
      merchantId: "m_shop_1",
      createdAt: new Date(),
    });
  // Appends in steps of 5 ms, as encrypts would write them.
  const append = async (n: number) => {
    const step = Math.max(1, Math.round(rate / 200));
    for (let i = 0; i < n; i += step) {
      for (let j = 0; j < step && i + j < n; j++) await store.events.append([event()]);
      await sleep(5);
    }
  };
  const settled = async (total: number) => {
    if (endpoints === 0) while ((await store.events.fannedOut()) < total) await sleep(20);
    else while ((await receiver.count()) < total * endpoints) await sleep(20);
  };
  await append(WARMUP);
  await settled(WARMUP);
  await sleep(500);
  const [cpu0, receiver0, started] = [process.cpuUsage(), cpuSeconds(receiver.pid), performance.now()];
  await append(count);
  await settled(WARMUP + count);
  const cpu = process.cpuUsage(cpu0);
  const seconds = (performance.now() - started) / 1000;
  const receiverUs = ((cpuSeconds(receiver.pid) - receiver0) * 1e6) / count;
  const { repeats, rejected } = await receiver.dump();
  const per = (us: number) => (us / count).toFixed(1);
  process.stdout.write(
    `${endpoints} endpoint(s), ${count} events in ${seconds.toFixed(1)} s: this process ${per(cpu.user + cpu.system)} us/event (user ${per(cpu.user)}, system ${per(cpu.system)}); receiver ${receiverUs.toFixed(1)} us/event, ${repeats} repeats, ${rejected} refused\n`,
  );
  await events.stop();
  receiver.close();
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(
      `events-worker bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exit(1);
  },
);
