import { fileURLToPath } from "node:url";
import { parseDevKeys, RECEIPT_SIZES, seedService } from "./fixtures.js";
import { type GrpcTarget, grpcTarget, sizedReceipts } from "./grpc.js";
import { type Measurement, measure, runCalls, type Sample } from "./load.js";
import { freePort, startNode, stopAll, waitReady } from "./processes.js";
import { START_NODE_FLAGS } from "./targets.js";

/**
 * `npm run bench:grpc-handlers`: the question of issue 36, whether the hand-written unary gRPC server
 * (src/fast, `grpc-server`) still earns its place against connect-node's own HTTP/2 handler. One
 * service process serves both (bench/grpc-handler-server.ts: the same store, routes and interceptor
 * instances), so the only difference is the code between the HTTP/2 stream and the chain. gRPC
 * encrypt calls at 2, 12 and 50 line items, the two sides in alternating slices of the same run;
 * the answer is the ratio of their calls per second.
 *
 * Options: `--seconds N` per side and size (default 8), `--rounds N` slices per side (default 4),
 * `--concurrency N` calls in flight (default 16).
 */
const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? fallback : Number(process.argv[i + 1]);
};
const seconds = arg("seconds", 8);
const rounds = arg("rounds", 4);
const concurrency = arg("concurrency", 16);

const port = await freePort();
const connectNodePort = await freePort();
const script = fileURLToPath(new URL("./grpc-handler-server.js", import.meta.url));
const child = startNode(
  "grpc-handlers",
  script,
  {
    PORT: String(port),
    CONNECT_NODE_PORT: String(connectNodePort),
    HOST: "127.0.0.1",
    RECEIPTS_ENV: "dev",
    STORE: "memory",
    LOG_LEVEL: "warn",
    RATE_LIMIT_TIERS: JSON.stringify({
      standard: { requestsPerMinute: 1_000_000_000, generateKeysPerMinute: 1_000_000_000 },
    }),
  },
  [...START_NODE_FLAGS],
);
try {
  const base = `http://127.0.0.1:${port}`;
  const keys = await waitReady(child, `${base}/healthz`, parseDevKeys);
  const seed = await seedService(base, keys, 16, 1);
  const decrypt = () => ({ paymentId: "", tokenId: "", privateKey: "" });
  const rows: { items: number; handWritten: Measurement; connectNode: Measurement; gain: number }[] = [];
  for (const items of RECEIPT_SIZES) {
    const make = sizedReceipts(items);
    const sides: GrpcTarget[] = [
      grpcTarget(base, keys, seed.cardholders, decrypt, make),
      grpcTarget(`http://127.0.0.1:${connectNodePort}`, keys, seed.cardholders, decrypt, make),
    ];
    const run = (target: GrpcTarget, s: number) =>
      runCalls({ call: () => target.encrypt(), concurrency, seconds: s });
    for (const side of sides) await run(side, 2); // warm-up
    const samples: Sample[][] = [[], []];
    for (let r = 0; r < rounds; r++)
      for (const [i, side] of sides.entries()) samples[i]?.push(await run(side, seconds / rounds));
    for (const side of sides) side.close();
    const [handWritten, connectNode] = samples.map((list) => measure(...list)) as [Measurement, Measurement];
    const gain = handWritten.rps / connectNode.rps - 1;
    rows.push({ items, handWritten, connectNode, gain });
    process.stdout.write(
      `gRPC encrypt, ${items} items: hand-written ${handWritten.rps.toFixed(0)}/s (failed ${handWritten.failed}), ` +
        `connect-node ${connectNode.rps.toFixed(0)}/s (failed ${connectNode.failed}), ` +
        `hand-written ${(gain * 100).toFixed(1)}% ${gain >= 0 ? "faster" : "slower"}\n`,
    );
  }
  const keep = rows.filter((row) => row.gain >= 0.1).map((row) => row.items);
  process.stdout.write(
    `${JSON.stringify(rows.map(({ items, gain, handWritten, connectNode }) => ({ items, gain, handWritten: handWritten.rps, connectNode: connectNode.rps })))}\n` +
      `hand-written gRPC server buys >= 10% at: ${keep.length === 0 ? "no size" : keep.join(", ")} items\n`,
  );
} finally {
  await stopAll();
}
