import { createContextValues } from "@connectrpc/connect";
import fastify, { type FastifyInstance } from "fastify";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { FakeClock } from "../../src/clock.js";
import { registerAdminRoutes } from "../../src/http/admin.js";
import { createLogger } from "../../src/logging.js";
import { kRemoteAddress } from "../../src/rpc/context.js";
import { operatorCheck } from "../../src/rpc/operator-access.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/types.js";

/**
 * The operator token, attacked in process through Fastify's inject (no socket): every
 * near miss an attacker would try (a prefix, an extension, another case, another scheme, the token
 * with a space) is 401 and audited as a failed login without the token; the token itself is 200; the
 * limit counts guesses before the token is read, so the right token after the limit is 429 too.
 * Constant time itself is enforced by scripts/secret-compare.mjs (test/structure/secret-compare.test.ts).
 */
const TOKEN = "operator-token-0123456789-abcdefghij";

describe("the operator token", () => {
  let app: FastifyInstance;
  let store: Store;
  let clock: FakeClock;
  let logged: string[];
  beforeEach(async () => {
    store = createMemoryStore();
    clock = new FakeClock("2026-03-01T12:00:10Z");
    logged = [];
    app = fastify({
      loggerInstance: createLogger("error", { write: (line: string) => logged.push(line) }),
    }) as unknown as FastifyInstance;
    await registerAdminRoutes(app, { token: TOKEN, store, env: "dev", clock, requestsPerMinute: 20 });
    await app.ready();
  });
  afterEach(async () => {
    await app.close();
  });

  const listKeys = (authorization?: string, remoteAddress = "192.0.2.1", url = "/admin/v1/api-keys") =>
    app.inject({
      method: "GET",
      url,
      remoteAddress,
      headers: authorization === undefined ? {} : { authorization },
    });

  it("answers 401 to every near miss and 200 to the token", async () => {
    const misses = [
      undefined,
      "",
      "Bearer",
      "Bearer ",
      `Bearer ${TOKEN.slice(0, -1)}`,
      `Bearer ${TOKEN}x`,
      `Bearer ${TOKEN.toUpperCase()}`,
      `Bearer  ${TOKEN}`,
      `Bearer ${TOKEN} `,
      `bearer ${TOKEN}`,
      `Basic ${TOKEN}`,
      TOKEN,
      `Bearer ${"x".repeat(TOKEN.length)}`,
    ];
    for (const authorization of misses) {
      const res = await listKeys(authorization);
      expect([authorization, res.statusCode, res.json().error?.code, res.json().error?.message]).toEqual([
        authorization,
        401,
        "unauthorized",
        "The operator API needs Authorization: Bearer <ADMIN_TOKEN>.",
      ]);
    }
    // A query string is not written down (it could hold anything).
    const queried = await listKeys(`Bearer ${TOKEN}?`, "192.0.2.1", "/admin/v1/api-keys?tenant=t&note=x");
    expect(queried.statusCode).toBe(401);
    const ok = await listKeys(`Bearer ${TOKEN}`);
    expect(ok.statusCode, ok.body).toBe(200);
    expect(ok.json().data).toEqual({ apiKeys: [] });

    const failed = (await store.audit.list(100)).filter((e) => e.action === "admin.login_failed");
    expect(failed).toHaveLength(misses.length + 1);
    expect(failed.filter((e) => e.subject === "GET /admin/v1/api-keys: no token")).toHaveLength(2);
    expect(failed.filter((e) => e.subject === "GET /admin/v1/api-keys: wrong token")).toHaveLength(
      misses.length - 1,
    );
    expect(failed.every((e) => e.sourceIp === "192.0.2.1" && e.tenantId === "")).toBe(true);
    expect(JSON.stringify(failed)).not.toContain(TOKEN.slice(0, 12));
    // A 401 carries the limit's headers too: a guesser sees how many guesses it has left.
    const guess = await listKeys("Bearer not-the-token");
    expect([guess.headers["x-ratelimit-limit"], guess.headers["x-ratelimit-remaining"]]).toEqual(["20", "4"]);
  });

  it("counts guesses before the token: past the limit the token itself is 429", async () => {
    for (let i = 0; i < 20; i++) expect((await listKeys(`Bearer guess-${i}`)).statusCode).toBe(401);
    const limited = await listKeys(`Bearer ${TOKEN}`);
    expect(limited.statusCode).toBe(429);
    expect(limited.headers["retry-after"]).toBe("50");
    expect(limited.headers["x-ratelimit-remaining"]).toBe("0");
    expect(limited.json().error).toMatchObject({
      code: "rate_limit_exceeded",
      message: "Too many operator calls: wait and try again.",
    });
    // The limit is per client address: another address is not limited by these guesses.
    expect((await listKeys(`Bearer ${TOKEN}`, "198.51.100.7")).statusCode).toBe(200);
    clock.advance(60_000);
    const next = await listKeys(`Bearer ${TOKEN}`);
    expect([next.statusCode, next.headers["x-ratelimit-remaining"]]).toEqual([200, "19"]);
  });

  it("keeps each counter for two windows, so a sweep never resets one that is still counting", async () => {
    const increment = vi.spyOn(store.rateLimits, "increment");
    await listKeys(`Bearer ${TOKEN}`);
    expect(increment.mock.calls).toEqual([
      ["admin:ip:192.0.2.1", new Date("2026-03-01T12:00:00Z"), new Date("2026-03-01T12:02:00Z")],
    ]);
  });

  it("answers 401 when the failed login cannot be audited, and logs that instead", async () => {
    vi.spyOn(store.audit, "append").mockRejectedValue(new Error("audit store down"));
    const res = await listKeys(`Bearer not-the-token?x=1`, "192.0.2.1", "/admin/v1/api-keys?tenant=t");
    expect(res.statusCode).toBe(401);
    const line = JSON.parse(logged.find((l) => l.includes("audit log")) ?? "{}");
    expect(line).toMatchObject({
      msg: "a failed operator login could not be written to the audit log",
      err: { message: "audit store down" },
    });
  });
  it("answers every call unauthorized when the service has no operator token, a bearer of nothing included", async () => {
    const check = operatorCheck({ store, clock }, undefined);
    for (const authorization of ["Bearer x", "Bearer ", `Bearer ${TOKEN}`, ""]) {
      const contextValues = createContextValues().set(kRemoteAddress, "192.0.2.9");
      const req = { header: new Headers(authorization === "" ? {} : { authorization }), contextValues };
      await expect(check(req as unknown as Parameters<typeof check>[0])).rejects.toMatchObject({
        code: "unauthorized",
      });
    }
  });
});
