import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type IdempotentCall, withIdempotency } from "../../src/domain/idempotency.js";
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
    for (const key of [null, ""]) {
      expect(await withIdempotency(f.deps, call(key, "h", hashed), async () => `run ${++runs}`)).toBe(
        `run ${runs}`,
      );
    }
    expect(runs).toBe(2);
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
});
