import { availableParallelism } from "node:os";
import { parseArgs } from "node:util";
import { FULL_LOAD_CONNECTIONS, P256_GROUP, P256_MEASUREMENTS } from "./phases.js";

/**
 * The options of `npm run bench` (see `run.ts`) and the settings they give: durations, load shape,
 * which measurements to run and where the results go.
 */

const USAGE = `usage: npm run bench -- [options]
  --quick                  about a minute, for a smoke test (writes *.tmp)
  --seconds N              seconds per measured phase (default 8)
  --rounds N               alternating service/baseline slices per phase (default 8)
  --warmup N               warm-up seconds before each phase (default 2)
  --rss-seconds N          length of the sustained-load memory phase (default 120, at most 170)
  --connections N          REST connections at full load (default 64)
  --grpc-concurrency N     gRPC calls in flight (default 16)
  --no-cluster             skip the two-process cluster phase
  --no-logging             skip the LOG_LEVEL=info phase
  --size-seconds N         seconds per side per receipt size in the sizes phase (default 4)
  --only a,b               run only these measurements (--only help lists them; p256 for all the
                           P-256 ones; writes *.tmp)
  --profile                V8 CPU profiles of the service processes, summarised at the end
  -h, --help               this text
`;

function parseOptions() {
  try {
    return parseArgs({
      options: {
        help: { type: "boolean", short: "h", default: false },
        quick: { type: "boolean", default: false },
        seconds: { type: "string" },
        rounds: { type: "string" },
        warmup: { type: "string" },
        "rss-seconds": { type: "string" },
        connections: { type: "string" },
        "grpc-concurrency": { type: "string" },
        "no-cluster": { type: "boolean", default: false },
        "no-logging": { type: "boolean", default: false },
        "size-seconds": { type: "string" },
        profile: { type: "boolean", default: false },
        only: { type: "string" },
      },
    });
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n\n${USAGE}`);
    process.exit(2);
  }
}

const { values: args } = parseOptions();
if (args.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}

/** A numeric option's value: a positive number, or the usage and exit status 2. */
function num(value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n <= 0) {
    process.stderr.write(`not a positive number: ${value}\n\n${USAGE}`);
    process.exit(2);
  }
  return n;
}
/**
 * generate-keys is measured three times as long as the other loads (in a full run): the time to find
 * an RSA key's primes varies widely from key to key, and a rate of about a dozen keys a second needs a
 * few hundred keys before it means anything.
 */
export const KEYGEN_SCALE = args.quick ? 1 : 3;
/** Grants live 180 s; the sustained run must end before the grants it uses expire. */
const MAX_RSS_SECONDS = 170;

export const settings = {
  mode: args.quick ? "quick" : "full",
  seconds: num(args.seconds, args.quick ? 0.8 : 8),
  /** Slices per comparison, alternating service and baseline. */
  rounds: num(args.rounds, args.quick ? 1 : 8),
  warmup: num(args.warmup, args.quick ? 0.3 : 2),
  rssSeconds: Math.min(MAX_RSS_SECONDS, num(args["rss-seconds"], args.quick ? 4 : 120)),
  connections: num(args.connections, FULL_LOAD_CONNECTIONS),
  grpcConcurrency: num(args["grpc-concurrency"], 16),
  keygenConnections: 8,
  /** Concurrent `generateKeyPair` calls of the raw baseline: one per core ("on both cores"). */
  rawKeygenConcurrency: availableParallelism(),
  cardholders: args.quick ? 2 : 4,
  listCount: args.quick ? 5 : 20,
  clusterWorkers: 2,
  cluster: !args["no-cluster"],
  logging: !args["no-logging"],
  profile: args.profile,
  /**
   * The sizes phase (encrypt and create payment, REST and gRPC, 2, 12 and 50 items, FAST_PATHS on and
   * off and the bare route): seconds per side per size, in `sizeRounds` slices. Shorter than the main
   * comparisons, which it would otherwise multiply by 18.
   */
  sizeSeconds: num(args["size-seconds"], args.quick ? 0.6 : 4),
  sizeRounds: args.quick ? 1 : 4,
};

/**
 * Measurements a run makes only when named in `--only`: the fast-path review (about ten minutes,
 * 14 services) answers a question about the code, not about this build's speed.
 */
const ON_REQUEST = ["fast-paths"];

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
  "floor",
  "logging",
  "rss",
  "cluster",
  "sizes",
  "fast-paths",
  // The P-256 suite; `--only p256` selects all of these.
  ...P256_MEASUREMENTS,
];
if (only?.has("help")) {
  process.stdout.write(
    `measurements: ${MEASUREMENTS.join(", ")} (half-rate and keygen-load need rest-encrypt; ` +
      `${P256_GROUP} selects every p256-* one; ${ON_REQUEST.join(", ")} runs only when named)\n`,
  );
  process.exit(0);
}
const unknown = [...(only ?? [])].filter((name) => name !== P256_GROUP && !MEASUREMENTS.includes(name));
if (unknown.length > 0) {
  process.stderr.write(`unknown measurement: ${unknown.join(", ")} (--only help lists them)\n`);
  process.exit(2);
}
export const wanted = (name: string) =>
  only === undefined
    ? !ON_REQUEST.includes(name)
    : only.has(name) || (only.has(P256_GROUP) && P256_MEASUREMENTS.includes(name));
/** Only a complete full run replaces the committed `latest.*`; quick and partial runs write `*.tmp`. */
export const outputName =
  settings.mode === "full" && only === undefined ? "latest" : `${settings.mode}-partial`;
export const outputSuffix = outputName === "latest" ? "" : ".tmp";
