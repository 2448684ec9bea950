import cluster, { type Worker } from "node:cluster";
import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import type { Logger } from "pino";
import { type Config, ConfigError, loadConfig } from "./config.js";
import { generateRsaKeyPair } from "./crypto/keys.js";
import { DEV_KEYS_ENV, type DevKeys, devKeysBanner } from "./dev-keys.js";
import { randomId } from "./ids.js";
import { createLogger } from "./logging.js";

/**
 * `npm run start:cluster`: the service as `CLUSTER_WORKERS` processes (default: one per core), each
 * running `main.js`, all sharing one listening port through node:cluster, so a machine's cores all
 * serve requests. Configuration is the same as for `main.js`; workers inherit this process's Node flags.
 *
 * Secrets a lone process would generate for itself when they are not configured (the hashed-PAN
 * pepper, the escrow key and, in development with the embedded store, the two API keys) are generated
 * once here and handed to every worker, so every worker hashes, seals and authenticates alike. Data is
 * only shared through a shared store: with the embedded store each worker has its own (a receipt
 * stored by one worker is unknown to the others), which suits load tests of stateless calls; use
 * MongoDB otherwise. Unless `CRYPTO_THREADS` is set, each process gets an equal share of the cores
 * for its crypto worker threads (at least one). A worker that dies after it started listening is
 * replaced; SIGTERM or SIGINT stops the workers gracefully, then the primary.
 */

/** Largest accepted `CLUSTER_WORKERS`. */
const MAX_WORKERS = 256;

/** How long the workers get to finish in-flight calls on shutdown before they are killed. */
const SHUTDOWN_LIMIT_MS = 20_000;

async function primary(): Promise<void> {
  const env = process.env;
  const config = configOrExit(env);
  const count = workerCountOrExit(env);
  const logger = createLogger(config.logLevel);
  const { shared, devKeys } = await workerEnvironment(config, env, count, logger);
  startWorkers(count, shared, devKeys, logger);
}

/** The configuration, as `main.js` reads it; a bad one is printed and exits 78 (EX_CONFIG). */
function configOrExit(env: NodeJS.ProcessEnv): Config {
  try {
    return loadConfig(env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${err.message}\n`);
    process.exit(78);
  }
}

/** `CLUSTER_WORKERS`, one per core by default; a bad value is printed and exits 78 (EX_CONFIG). */
function workerCountOrExit(env: NodeJS.ProcessEnv): number {
  const rawCount = env.CLUSTER_WORKERS ?? "";
  const count = rawCount === "" ? availableParallelism() : Number(rawCount);
  if (!Number.isInteger(count) || count < 1 || count > MAX_WORKERS) {
    process.stderr.write(
      `Invalid configuration:\n  - CLUSTER_WORKERS must be an integer from 1 to ${MAX_WORKERS}\n`,
    );
    process.exit(78);
  }
  return count;
}

/**
 * The variables added to every worker's environment: the secrets a lone process would generate for
 * itself, generated once here, and each process's share of the crypto threads. Also returns the
 * development API keys among them, which the primary prints once every worker listens.
 */
async function workerEnvironment(
  config: Config,
  env: NodeJS.ProcessEnv,
  count: number,
  logger: Logger,
): Promise<{ shared: Record<string, string>; devKeys: DevKeys | undefined }> {
  const shared: Record<string, string> = {};
  if (config.pepperGenerated) {
    shared.HASHED_PAN_PEPPER = config.hashedPanPepper;
    logger.warn(
      "HASHED_PAN_PEPPER not set: the workers share a pepper generated for this run (development only)",
    );
  }
  if (config.escrowPrivateKeys.length === 0) {
    shared.ESCROW_PRIVATE_KEY = (await generateRsaKeyPair()).privateKey;
    logger.warn(
      "ESCROW_PRIVATE_KEY not set: the workers share an escrow key generated for this run (development only)",
    );
  }
  if (config.events.secretKeyGenerated) {
    shared.WEBHOOK_SECRET_KEY = config.events.secretKeys.map((key) => key.toString("base64")).join(",");
    logger.warn(
      "WEBHOOK_SECRET_KEY not set: the workers share a key generated for this run (development only)",
    );
  }
  // Each process has its own crypto worker threads: together one per core, not one per core each
  // (on two cores, two processes with two threads each served encrypt 9% slower than one process).
  if ((env.CRYPTO_THREADS ?? "") === "") {
    shared.CRYPTO_THREADS = String(Math.max(1, Math.floor(availableParallelism() / count)));
  }
  const devKeys =
    config.env === "dev" && config.store === "memory"
      ? { issuer: randomId("rk_dev", 32), merchant: randomId("rk_dev", 32) }
      : undefined;
  if (devKeys !== undefined) shared[DEV_KEYS_ENV] = JSON.stringify(devKeys);
  return { shared, devKeys };
}

/**
 * Forks `count` workers running `main.js` with `shared` added to their environment. A worker that dies
 * after it listened is replaced; one that dies before stops the cluster with exit status 1. SIGTERM and
 * SIGINT stop the workers gracefully (SIGKILL after {@link SHUTDOWN_LIMIT_MS}), then the primary.
 */
function startWorkers(
  count: number,
  shared: Record<string, string>,
  devKeys: DevKeys | undefined,
  logger: Logger,
): void {
  cluster.setupPrimary({ exec: fileURLToPath(new URL("./main.js", import.meta.url)) });
  let stopping = false;
  let listening = 0;
  const fork = (): Worker => {
    const worker = cluster.fork(shared);
    let started = false;
    worker.once("listening", () => {
      started = true;
      listening++;
      if (listening === count && devKeys !== undefined) process.stdout.write(devKeysBanner(devKeys));
    });
    worker.once("exit", (code, signal) => {
      if (stopping) return;
      if (!started) {
        logger.error({ code, signal }, "a cluster worker failed to start; stopping");
        stop(1);
        return;
      }
      logger.error({ code, signal, pid: worker.process.pid }, "a cluster worker died; starting another");
      fork();
    });
    return worker;
  };
  for (let i = 0; i < count; i++) fork();
  logger.info({ workers: count }, "cluster started");

  function stop(exitCode: number): void {
    if (stopping) return;
    stopping = true;
    stopWorkers(exitCode);
  }
  process.on("SIGTERM", () => stop(0));
  process.on("SIGINT", () => stop(0));
}

/**
 * Sends SIGTERM to every worker and exits with `exitCode` once all have exited, or with 1 after
 * {@link SHUTDOWN_LIMIT_MS}, killing the ones left.
 */
function stopWorkers(exitCode: number): void {
  const workers = Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined);
  const timer = setTimeout(() => {
    for (const w of workers) w.process.kill("SIGKILL");
    process.exit(1);
  }, SHUTDOWN_LIMIT_MS);
  timer.unref();
  let left = workers.length;
  if (left === 0) process.exit(exitCode);
  for (const w of workers) {
    w.once("exit", () => {
      left--;
      if (left === 0) process.exit(exitCode);
    });
    w.process.kill("SIGTERM");
  }
}

if (cluster.isPrimary) {
  primary().catch((err: unknown) => {
    process.stderr.write(`cluster failed to start: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
