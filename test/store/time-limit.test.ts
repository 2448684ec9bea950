import { describe, expect, it } from "vitest";
import { AppError } from "../../src/errors.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { withTimeLimit } from "../../src/store/time-limit.js";
import type { ApiKeyRecord, Store } from "../../src/store/types.js";
import { startService } from "../support/harness.js";

const LIMIT_MS = 60;

/** A memory store whose `apiKeys.findByHash` waits for the test (or forever) before answering. */
function storeWithGate() {
  const inner = createMemoryStore();
  const gates: (() => void)[] = [];
  const findByHash = inner.apiKeys.findByHash.bind(inner.apiKeys);
  inner.apiKeys.findByHash = (hash) =>
    new Promise<void>((resolve) => gates.push(resolve)).then(() => findByHash(hash));
  const open = () => {
    for (const resolve of gates.splice(0)) resolve();
  };
  return { inner, open };
}

/**
 * How `call` settles, and after how long. The clock starts before the call is made: the store call's
 * deadline is set while it is made, so a clock started after it (a GC pause in between) would see a
 * call that kept its limit as one that ended early.
 */
async function outcome(
  call: () => Promise<unknown>,
): Promise<{ code?: string; value?: unknown; ms: number }> {
  const started = performance.now();
  try {
    const value = await call();
    return { value, ms: performance.now() - started };
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    return { code: err.code, ms: performance.now() - started };
  }
}

const record: ApiKeyRecord = {
  id: "key_1",
  keyHash: "h".repeat(64),
  prefix: "rk_dev_1234",
  env: "dev",
  tenantId: "t1",
  role: "merchant",
  tier: "standard",
  merchantIds: [],
  name: "",
  createdAt: new Date(0),
};

describe("withTimeLimit", () => {
  it("answers service_unavailable for a call that does not settle in time", async () => {
    const { inner } = storeWithGate();
    const store = withTimeLimit(inner, LIMIT_MS);
    const result = await outcome(() => store.apiKeys.findByHash("nope"));
    expect(result.code).toBe("service_unavailable");
    expect(result.ms).toBeGreaterThanOrEqual(LIMIT_MS - 1);
  });

  it("times out every stalled call, also those started after others settled, and passes prompt ones through", async () => {
    const { inner, open } = storeWithGate();
    const store: Store = withTimeLimit(inner, LIMIT_MS);
    await store.apiKeys.insert(record);
    const first = outcome(() => store.apiKeys.findByHash(record.keyHash));
    open();
    expect((await first).value).toEqual(record);
    // Calls started at different times, none settling: each gets its own full limit, then a 503.
    const stalled = [outcome(() => store.apiKeys.findByHash("a"))];
    await new Promise((resolve) => setTimeout(resolve, LIMIT_MS / 2));
    stalled.push(outcome(() => store.apiKeys.findByHash("b")));
    for (const result of await Promise.all(stalled)) {
      expect(result.code).toBe("service_unavailable");
      expect(result.ms).toBeGreaterThanOrEqual(LIMIT_MS - 1);
    }
    // A call that settles after its deadline changes nothing for its caller, and later calls work.
    open();
    expect((await outcome(() => store.apiKeys.list())).value).toEqual([record]);
  });

  it("times out a stalled call however many calls settle around it, and only that call", async () => {
    const { inner, open } = storeWithGate();
    const store = withTimeLimit(inner, LIMIT_MS);
    const first = outcome(() => store.apiKeys.findByHash("a"));
    const settled = async () => {
      for (let i = 0; i < 500; i++) expect(await store.users.findById("usr_none")).toBeUndefined();
    };
    await settled();
    const second = outcome(() => store.apiKeys.findByHash("b"));
    await settled();
    for (const result of [await first, await second]) {
      expect(result.code).toBe("service_unavailable");
      expect(result.ms).toBeGreaterThanOrEqual(LIMIT_MS - 1);
    }
    open();
    await settled();
  });

  it("turns a synchronous throw into a rejection and keeps the repository's own errors", async () => {
    const inner = createMemoryStore();
    inner.users.findById = () => {
      throw new Error("boom");
    };
    const store = withTimeLimit(inner, LIMIT_MS);
    await expect(store.users.findById("usr_1")).rejects.toThrow("boom");
    inner.users.findById = async () => {
      throw new AppError("service_unavailable", "down");
    };
    await expect(store.users.findById("usr_1")).rejects.toMatchObject({ code: "service_unavailable" });
  });

  it("refuses a limit that is not a positive integer", () => {
    expect(() => withTimeLimit(createMemoryStore(), 0)).toThrow(RangeError);
    expect(() => withTimeLimit(createMemoryStore(), 1.5)).toThrow(RangeError);
  });
});

describe("which stores the service bounds", () => {
  it("uses the memory store itself and bounds any other store, a copy of one included", async () => {
    const memory = await startService();
    const other = await startService({ store: { ...createMemoryStore() } });
    try {
      expect(memory.app.domain.store).toBe(memory.store);
      expect(other.app.domain.store).not.toBe(other.store);
      expect(await other.app.domain.store.users.findById("usr_none")).toBeUndefined();
    } finally {
      await memory.close();
      await other.close();
    }
  });

  it("can leave the memory store unbounded: every call of it has settled before a timer could fire", async () => {
    const store = createMemoryStore();
    let calls = 0;
    for (const [name, repository] of Object.entries(store)) {
      if (typeof repository !== "object" || repository === null) continue;
      const prototype = Object.getPrototypeOf(repository) as object;
      for (const method of Object.getOwnPropertyNames(prototype)) {
        const fn = (repository as Record<string, unknown>)[method];
        if (method === "constructor" || typeof fn !== "function") continue;
        // Arguments the method does not expect: it answers or refuses at once all the same.
        let result: unknown;
        try {
          result = fn.call(repository);
        } catch {
          result = undefined;
        }
        const call = Promise.resolve(result).then(
          () => "settled",
          () => "settled",
        );
        const timer = new Promise((resolve) => setImmediate(() => resolve("timer fired")));
        expect(await Promise.race([call, timer]), `${name}.${method}`).toBe("settled");
        calls++;
      }
    }
    expect(calls).toBeGreaterThan(30);
  });
});
