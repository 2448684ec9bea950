import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { IDEMPOTENCY_LEASE_MS, type IdempotentCall, withIdempotency } from "../../src/domain/idempotency.js";
import { type DomainFixture, domainFixture, rejection } from "../support/domain.js";

/** `withIdempotency` on its own: replay, conflict, and no request hashing when no key was sent. */

describe("withIdempotency", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    await f.close();
  });

  /** A call whose request hash is `hash`, counting how often it was computed. */
  function call(key: string | null, hash: string, hashed: { count: number }): IdempotentCall<string> {
    return {
      key,
      scope: "key_1",
      hashRequest: () => {
        hashed.count += 1;
        return hash;
      },
      encode: (value) => Buffer.from(value),
      decode: (bytes) => bytes.toString(),
    };
  }

  it("runs a call without a key every time and never hashes its request", async () => {
    const hashed = { count: 0 };
    let runs = 0;
    for (let i = 0; i < 2; i++) {
      expect(await withIdempotency(f.deps, call(null, "h", hashed), async () => `run ${++runs}`)).toBe(
        `run ${runs}`,
      );
    }
    expect(runs).toBe(2);
    expect(hashed.count).toBe(0);
  });

  it("refuses an empty key as it does any other bad one, running nothing (it is not the absence of one)", async () => {
    const hashed = { count: 0 };
    let runs = 0;
    for (const key of ["", " ", "k".repeat(256)]) {
      const err = await rejection(
        withIdempotency(f.deps, call(key, "h", hashed), async () => `run ${++runs}`),
      );
      expect(err.code).toBe("invalid_request");
    }
    expect(runs).toBe(0);
    expect(hashed.count).toBe(0);
  });

  it("replays the first answer for the same key and request, and refuses another request", async () => {
    const hashed = { count: 0 };
    let runs = 0;
    const run = async () => `answer ${++runs}`;
    expect(await withIdempotency(f.deps, call("k-1", "h1", hashed), run)).toBe("answer 1");
    expect(await withIdempotency(f.deps, call("k-1", "h1", hashed), run)).toBe("answer 1");
    const err = await rejection(withIdempotency(f.deps, call("k-1", "h2", hashed), run));
    expect(err.code).toBe("conflict");
    expect(runs).toBe(1);
    expect(hashed.count).toBe(3);
  });

  it("lets a call that outlived its lease fail without freeing the key its retry took over", async () => {
    const hashed = { count: 0 };
    let failFirst: (err: Error) => void = () => undefined;
    const first = withIdempotency(
      f.deps,
      call("k-2", "h", hashed),
      () => new Promise<string>((_, reject) => (failFirst = reject)),
    ).catch((err: unknown) => err);
    await new Promise((resolve) => setImmediate(resolve));
    // The first call is taken for dead: a retry takes the key over and is still running.
    f.clock.advance(IDEMPOTENCY_LEASE_MS);
    let finishRetry: (value: string) => void = () => undefined;
    const retry = withIdempotency(
      f.deps,
      call("k-2", "h", hashed),
      () => new Promise<string>((resolve) => (finishRetry = resolve)),
    );
    await new Promise((resolve) => setImmediate(resolve));
    failFirst(new Error("the first call failed late"));
    expect(await first).toBeInstanceOf(Error);
    // The retry still holds the key: a third call finds it in progress, not free.
    const now = f.clock.now();
    const third = await f.store.idempotency.begin("key_1:k-2", "h", new Date(now.getTime() + 1e6), now, now);
    expect(third).toEqual({ kind: "in_progress", requestHash: "h" });
    finishRetry("the retry's answer");
    expect(await retry).toBe("the retry's answer");
  });
});
