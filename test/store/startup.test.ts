import { afterEach, describe, expect, it } from "vitest";
import { type App, buildApp } from "../../src/app.js";
import { loadConfig } from "../../src/config.js";
import { createApiKey } from "../../src/domain/api-keys.js";
import { AppError } from "../../src/errors.js";
import { createLogger } from "../../src/logging.js";
import { createMemoryStore, isMemoryStore } from "../../src/store/memory/index.js";
import { createMongoStore } from "../../src/store/mongo/index.js";
import { openStore, startStore } from "../../src/store/startup.js";
import { FakeMongo } from "./fake-mongo/index.js";
import { apiKey } from "./fixtures.js";

/**
 * Starting with MongoDB down (the service recovers by itself when the store is
 * back): the MongoDB adapter on the driver fake, switched off, then on.
 */
describe("store start-up while MongoDB is down", () => {
  const cleanups: Array<() => Promise<void>> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  const startDown = async () => {
    const fake = new FakeMongo();
    fake.down();
    const backend = await createMongoStore({
      uri: "mongodb://fake.invalid/",
      dbName: "receipts",
      operationTimeoutMs: 200,
      createClient: fake.createClient,
    });
    const warnings: unknown[] = [];
    const infos: unknown[] = [];
    const startup = startStore(backend, {
      logger: { warn: (obj: unknown) => warnings.push(obj), info: (obj: unknown) => infos.push(obj) },
      initialDelayMs: 10,
      maxDelayMs: 40,
    });
    cleanups.push(() => startup.store.close());
    return { fake, startup, warnings, infos };
  };

  const waitFor = async (condition: () => boolean | Promise<boolean>, ms = 5_000) => {
    const until = performance.now() + ms;
    while (!(await condition())) {
      if (performance.now() > until) throw new Error("condition not met in time");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };

  const unavailable = async (call: Promise<unknown>) => {
    const failure = await call.then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(failure).toBeInstanceOf(AppError);
    expect((failure as AppError).code).toBe("service_unavailable");
  };

  it("refuses calls with service_unavailable, retries init with backoff, and is ready once MongoDB is up", async () => {
    const { fake, startup, warnings, infos } = await startDown();
    await waitFor(() => warnings.length >= 3);
    expect(startup.isReady()).toBe(false);
    await unavailable(startup.store.ping());
    await unavailable(startup.store.apiKeys.findByHash("0".repeat(64)));
    // Backoff: the waits grow (10, 20, 40 ms before jitter) and stay within the cap.
    const waits = warnings.map((w) => (w as { retryInMs: number }).retryInMs);
    expect(Math.max(...waits)).toBeLessThanOrEqual(40);
    expect(waits[2]).toBeGreaterThanOrEqual(20);

    fake.up();
    await startup.whenReady();
    await expect(startup.store.ping()).resolves.toBeUndefined();
    const record = apiKey();
    expect(await startup.store.apiKeys.insert(record)).toBe(true);
    // The indexes exist: a second key with the same hash is refused by the unique index.
    expect(await startup.store.apiKeys.insert(apiKey({ keyHash: record.keyHash }))).toBe(false);
    expect(infos).toHaveLength(1);
  });

  it("opens a MongoDB store at once while the database is down, and the memory store as it is", async () => {
    const fake = new FakeMongo();
    fake.down();
    const backend = await createMongoStore({
      uri: "mongodb://fake.invalid/",
      dbName: "receipts",
      operationTimeoutMs: 200,
      createClient: fake.createClient,
    });
    const logger = { warn: () => {}, info: () => {} };
    const started = performance.now();
    const store = await openStore(backend, { logger, initialDelayMs: 10 });
    cleanups.push(() => store.close());
    expect(performance.now() - started).toBeLessThan(100);
    await unavailable(store.ping());
    fake.up();
    await waitFor(
      async () =>
        await store.ping().then(
          () => true,
          () => false,
        ),
    );

    const memory = createMemoryStore();
    const opened = await openStore(memory, { logger });
    expect(opened).toBe(memory);
    expect(isMemoryStore(opened)).toBe(true);
  });

  it("stops retrying on shutdown", async () => {
    const { fake, startup, warnings } = await startDown();
    await waitFor(() => warnings.length >= 1);
    await startup.store.close();
    const attempts = fake.operations.length;
    const failures = warnings.length;
    await new Promise((resolve) => setTimeout(resolve, 150));
    expect(warnings.length).toBeLessThanOrEqual(failures + 1);
    expect(fake.operations.length).toBe(attempts);
    expect(startup.isReady()).toBe(false);
  });

  it("serves /healthz, answers /readyz and requests with 503 until MongoDB is up, then becomes ready", async () => {
    const { fake, startup } = await startDown();
    const config = loadConfig({ RECEIPTS_ENV: "dev", LOG_LEVEL: "silent", STORE_TIMEOUT_MS: "1000" });
    const app: App = await buildApp({
      config,
      store: startup.store,
      logger: createLogger("silent"),
      workers: 1,
    });
    cleanups.push(() => app.close());
    const address = await app.server.listen(0, "127.0.0.1");
    const port = typeof address === "string" ? Number(new URL(address).port) : address.port;
    const base = `http://127.0.0.1:${port}`;

    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const readyz = await fetch(`${base}/readyz`);
    expect(readyz.status).toBe(503);
    expect(await readyz.json()).toMatchObject({ success: false, error: { code: "service_unavailable" } });
    const refused = await fetch(`${base}/api/v1/onboarding/generate-keys`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": `rk_dev_${"a".repeat(32)}` },
      body: "{}",
    });
    expect(refused.status).toBe(503);
    expect(await refused.json()).toMatchObject({ success: false, error: { code: "service_unavailable" } });

    fake.up();
    await waitFor(async () => (await fetch(`${base}/readyz`)).status === 200);
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const { key } = await createApiKey(
      startup.store,
      "dev",
      { role: "issuer", tier: "standard", tenantId: "issuer-1" },
      new Date(),
    );
    const served = await fetch(`${base}/api/v1/onboarding/generate-keys`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": key },
      body: "{}",
    });
    expect(served.status).toBe(200);
  });
});
