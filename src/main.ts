import { buildApp } from "./app.js";
import { ConfigError, loadConfig } from "./config.js";
import { createApiKey } from "./domain/api-keys.js";
import { createLogger } from "./logging.js";
import { createStore } from "./store/index.js";

/** How long shutdown waits for in-flight calls before closing connections. */
const SHUTDOWN_GRACE_MS = 10_000;

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
  const store = await createStore(config, logger);
  await store.init();
  if (store.kind === "memory") {
    logger.warn("STORE=memory: the embedded in-memory store is in use; all data is lost on restart");
  }
  if (config.pepperGenerated) {
    logger.warn("HASHED_PAN_PEPPER not set: using a pepper generated for this process (development only)");
  }

  const app = await buildApp({ config, store, logger });
  const address = await app.server.listen(config.port, config.host);
  logger.info({ address, env: config.env, store: store.kind }, "receipts service listening");

  if (config.env === "dev" && store.kind === "memory") {
    const now = new Date();
    const issuer = await createApiKey(
      store,
      "dev",
      { role: "issuer", tier: "standard", tenantId: "dev-issuer" },
      now,
    );
    const merchant = await createApiKey(
      store,
      "dev",
      { role: "merchant", tier: "standard", tenantId: "dev-merchant" },
      now,
    );
    // Printed to the terminal, not logged: keys never go to the log stream.
    process.stdout.write(
      [
        "",
        "Development API keys (embedded store, valid until the server stops):",
        `  issuer   (tenant dev-issuer):   ${issuer.key}`,
        `  merchant (tenant dev-merchant): ${merchant.key}`,
        "",
        "",
      ].join("\n"),
    );
  }

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
