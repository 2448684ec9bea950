import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";
import { FakeClock } from "../../src/clock.js";
import { countInWindow } from "../../src/domain/rate-limit.js";
import { AppError } from "../../src/errors.js";
import { createMemoryStore } from "../../src/store/memory/index.js";

/**
 * The service's one rate limiter (issue 36): the API's calls on every protocol, the operator API, the
 * key log's reads and escrow intake all count through `countInWindow`, and nothing else in src/
 * touches the counters.
 */

const SRC = join(import.meta.dirname, "../../src");

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sourceFiles(join(dir, entry.name))
      : entry.name.endsWith(".ts")
        ? [join(dir, entry.name)]
        : [],
  );
}

async function refusal(run: () => Promise<unknown>): Promise<AppError> {
  try {
    await run();
  } catch (err) {
    if (err instanceof AppError) return err;
    throw err;
  }
  throw new Error("not refused");
}

describe("the one rate limiter", () => {
  it("counts calls in fixed windows, with the headers, then refuses with Retry-After and the same headers", async () => {
    const deps = { store: createMemoryStore(), clock: new FakeClock("2026-03-01T00:00:45Z") };
    const window = { counter: "k1:all", limit: 2 };
    expect(await countInWindow(deps, window)).toEqual({
      "x-ratelimit-limit": "2",
      "x-ratelimit-remaining": "1",
      "x-ratelimit-reset": String(Date.parse("2026-03-01T00:01:00Z") / 1000),
    });
    expect((await countInWindow(deps, window))["x-ratelimit-remaining"]).toBe("0");
    const refused = await refusal(() => countInWindow(deps, window));
    expect(refused.code).toBe("rate_limit_exceeded");
    expect(refused.message).toBe("Rate limit of 2 requests per minute exceeded.");
    expect(refused.retryAfterSeconds).toBe(15);
    expect(refused.headers["x-ratelimit-remaining"]).toBe("0");
    // Another counter is not touched; the next window starts again.
    expect((await countInWindow(deps, { counter: "k2:all", limit: 2 }))["x-ratelimit-remaining"]).toBe("1");
    deps.clock.advance(15_000);
    expect((await countInWindow(deps, window))["x-ratelimit-remaining"]).toBe("1");
  });

  it("takes a window of other length and a message of its own", async () => {
    const deps = { store: createMemoryStore(), clock: new FakeClock("2026-03-01T00:00:10Z") };
    const window = { counter: "escrow", limit: 1, windowSeconds: 3600, message: "Too many." };
    await countInWindow(deps, window);
    const refused = await refusal(() => countInWindow(deps, window));
    expect([refused.message, refused.retryAfterSeconds]).toEqual(["Too many.", 3590]);
  });

  it("is the only code in src/ that counts", () => {
    const counting = sourceFiles(SRC)
      .filter((file) => !relative(SRC, file).startsWith("store/"))
      .filter((file) => readFileSync(file, "utf8").includes("rateLimits.increment("))
      .map((file) => relative(SRC, file));
    expect(counting).toEqual(["domain/rate-limit.ts"]);
  });
});
