import { createServer, type Server, type Socket } from "node:net";
import { MongoServerSelectionError } from "mongodb";
import { afterEach, describe, expect, it } from "vitest";
import { AppError } from "../../src/errors.js";
import { createMongoStore } from "../../src/store/mongo/index.js";
import type { Store } from "../../src/store/types.js";
import { grant, hex64, owner, payment, pendingKey, receipt } from "./fixtures.js";

/**
 * The MongoDB store with nothing listening on its port (no server needed): every call must fail fast
 * with `service_unavailable`, never with a driver error, and keep trying to connect on later calls.
 */
describe("MongoDB store, database unreachable", () => {
  const timeoutMs = 300;
  let store: Store | undefined;

  const unreachable = async (): Promise<Store> => {
    store = await createMongoStore({
      uri: "mongodb://127.0.0.1:1/",
      dbName: "receipts_down",
      operationTimeoutMs: timeoutMs,
    });
    return store;
  };

  /** Awaits `call`, expecting `service_unavailable` within a few seconds; returns the error. */
  const expectUnavailable = async (call: Promise<unknown>): Promise<AppError> => {
    const started = performance.now();
    const failure = await call.then(
      () => new Error("expected the call to fail"),
      (err: unknown) => err,
    );
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(failure).toBeInstanceOf(AppError);
    const appError = failure as AppError;
    expect(appError.code).toBe("service_unavailable");
    expect(appError.message).toBe("The store is unavailable.");
    return appError;
  };

  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it("fails ping and reads with service_unavailable, keeping the driver error only as the cause", async () => {
    const s = await unreachable();
    const error = await expectUnavailable(s.ping());
    expect(error.cause).toBeInstanceOf(MongoServerSelectionError);
    await expectUnavailable(s.users.findById("usr_1"));
    await expectUnavailable(s.receipts.listByUser(owner("usr_1"), 10));
  });

  it("fails writes, transactions and init with service_unavailable", async () => {
    const s = await unreachable();
    await expectUnavailable(s.init());
    await expectUnavailable(s.receipts.insert(receipt("usr_1")));
    await expectUnavailable(s.grants.create(grant("usr_1", new Date()), 5, new Date()));
    await expectUnavailable(s.payments.createWithReceipt(payment(), receipt("usr_1")));
    const key = pendingKey();
    await expectUnavailable(
      s.users.register({
        panHash: hex64(),
        tenantId: "tnt_issuer",
        newUserId: "usr_1",
        key,
        now: new Date(),
      }),
    );
    await expectUnavailable(s.rateLimits.increment("key_1", new Date(), new Date(Date.now() + 60_000)));
  });

  it("tries to connect again on every call after a failed one, so it recovers when the database returns", async () => {
    const s = await unreachable();
    const first = await expectUnavailable(s.ping());
    // The driver's client stays closed after a failed first connection ("Topology is closed", at once)
    // unless the store connects again: a new server-selection failure, after waiting, proves it did.
    const started = performance.now();
    const second = await expectUnavailable(s.users.findById("usr_1"));
    expect(performance.now() - started).toBeGreaterThanOrEqual(timeoutMs * 0.8);
    expect(second.cause).toBeInstanceOf(MongoServerSelectionError);
    expect(second.cause).not.toBe(first.cause);
  });

  it("fails with service_unavailable when the database accepts connections but never answers", async () => {
    const sockets: Socket[] = [];
    const silent: Server = createServer((socket) => sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const address = silent.address();
    const port = typeof address === "object" && address !== null ? address.port : 0;
    try {
      store = await createMongoStore({
        uri: `mongodb://127.0.0.1:${port}/`,
        dbName: "receipts_hung",
        operationTimeoutMs: timeoutMs,
      });
      await expectUnavailable(store.ping());
      await expectUnavailable(store.apiKeys.findByHash("0".repeat(64)));
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it("fails every call with service_unavailable once closed, without reconnecting", async () => {
    const s = await unreachable();
    await s.close();
    const started = performance.now();
    await expectUnavailable(s.ping());
    expect(performance.now() - started).toBeLessThan(timeoutMs);
  });
});
