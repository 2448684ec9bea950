import cluster from "node:cluster";
import { buildApp } from "./app.js";
import { ConfigError, loadConfig } from "./config.js";
import { createDevKeys, devKeysBanner, devKeysFromEnv } from "./dev-keys.js";
import { createLogger } from "./logging.js";
import { createStore } from "./store/index.js";
import { openStore } from "./store/startup.js";

/** How long shutdown waits for in-flight calls before closing connections. */
const SHUTDOWN_GRACE_MS = 10_000;

/** The oldest Node.js line the service supports (package.json `engines`); older ones are past their end of life. */
const OLDEST_NODE_MAJOR = 22;

/** Reads the configuration, builds the service, listens, and shuts down cleanly on SIGTERM/SIGINT. */
async function main(): Promise<void> {
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      process.exit(78);
    }
    throw err;
  }
  const logger = createLogger(config.logLevel);
  if (Number(process.versions.node.split(".")[0]) < OLDEST_NODE_MAJOR) {
    logger.warn(
      { node: process.version },
      `Node.js ${process.version} is past its end of life and not supported: use 22 or 24 (npm start uses the Node 24 that npm ci installs on Linux and Windows)`,
    );
  }
  // A database store initialises in the background: the service starts (and answers /healthz) while
  // the database is down; /readyz and every request say 503 until it is reachable and its indexes
  // exist, then the service is ready by itself.
  const store = await openStore(await createStore(config, logger), { logger });
  if (store.kind === "memory") {
    logger.warn("STORE=memory: the embedded in-memory store is in use; all data is lost on restart");
  }
  if (config.pepperGenerated) {
    logger.warn("HASHED_PAN_PEPPER not set: using a pepper generated for this process (development only)");
  }
  if (config.events.secretKeyGenerated) {
    logger.warn(
      "WEBHOOK_SECRET_KEY not set: webhook secrets are sealed with a key generated for this process (development only)",
    );
  }

  // Created before listening, so that no request (on any cluster worker) can arrive before its key.
  const devKeys =
    config.env === "dev" && store.kind === "memory"
      ? await createDevKeys(store, new Date(), devKeysFromEnv(process.env))
      : undefined;

  const app = await buildApp({ config, store, logger, shutdownGraceMs: SHUTDOWN_GRACE_MS });
  const address = await app.server.listen(config.port, config.host);
  logger.info(
    { address, env: config.env, store: store.kind, node: process.version },
    "receipts service listening",
  );
  // Printed to the terminal, not logged: keys never go to the log stream. A cluster primary prints
  // the keys it handed to its workers, once.
  if (devKeys !== undefined && !cluster.isWorker) process.stdout.write(devKeysBanner(devKeys));

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "shutting down: finishing in-flight calls");
    const timer = setTimeout(() => {
      logger.error("shutdown took too long; exiting");
      process.exit(1);
    }, SHUTDOWN_GRACE_MS + 5_000);
    timer.unref();
    app.close().then(
      () => {
        logger.info("stopped");
        process.exit(0);
      },
      (err: unknown) => {
        logger.error({ err }, "error during shutdown");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", () => stop("SIGTERM"));
  process.on("SIGINT", () => stop("SIGINT"));
}

main().catch((err: unknown) => {
  process.stderr.write(
    `receipts service failed to start: ${err instanceof Error ? err.message : String(err)}\n`,
  );
  process.exit(1);
});
