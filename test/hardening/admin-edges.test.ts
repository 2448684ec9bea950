import { randomBytes } from "node:crypto";
import Fastify from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, loadConfig, MIN_ADMIN_TOKEN_DISTINCT } from "../../src/config.js";
import { registerAdminRoutes } from "../../src/http/admin.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { minuteStartClock } from "../support/clock.js";
import { type Envelope, startService, type TestService } from "../support/harness.js";
import { expectRestRefusal, send } from "./support.js";

/**
 * Issue 31, item 10, the transport edges of the operator API (`/admin/v1`), from the attacker's
 * side: a wrong Content-Type is 415 and a body over the limit 413, in the envelope, never 500; a
 * member named twice is refused as on /api/v1 and writes nothing; guesses of the token from one
 * address never lock the right token out from another; and a token that is long but not random is
 * refused at start.
 */

const TOKEN = `adm_${randomBytes(24).toString("base64url")}`;

describe("the operator API's transport edges", () => {
  let svc: TestService;
  const auth = { authorization: `Bearer ${TOKEN}` };

  beforeAll(async () => {
    svc = await startService({ env: { ADMIN_TOKEN: TOKEN } });
  });
  afterAll(async () => {
    await svc.close();
  });

  it("answers a wrong Content-Type with 415 in the envelope, on every operation with a body", async () => {
    const bodies: Array<[string, string]> = [
      ["POST", "/admin/v1/api-keys"],
      ["PUT", "/admin/v1/issuers/bank-x/bins"],
      ["PUT", "/admin/v1/merchants/shop-x"],
      ["DELETE", "/admin/v1/api-keys/key_x"],
    ];
    const types = [
      "text/plain",
      "application/x-www-form-urlencoded",
      "application/ld+json",
      "multipart/form-data; boundary=x",
      "application/xml",
      "",
    ];
    for (const [method, path] of bodies) {
      for (const type of types) {
        const answer = await send(svc, method, path, {
          body: '{"tenant":"bank-x","role":"issuer"}',
          headers: { ...auth, ...(type === "" ? {} : { "content-type": type }) },
        });
        const label = `${method} ${path} as ${type || "no type"}`;
        expect(answer.status, label).toBe(415);
        expect(expectRestRefusal(answer, label).code).toBe("unsupported_media_type");
      }
    }
    expect((await svc.store.apiKeys.list("bank-x")).length).toBe(0);
  });

  it("answers a body over the limit with 413 in the envelope, JSON or not", async () => {
    const big = `{"tenant":"${"x".repeat(svc.config.bodyLimitBytes)}","role":"issuer"}`;
    const answer = await send(svc, "POST", "/admin/v1/api-keys", {
      body: big,
      headers: { ...auth, "content-type": "application/json" },
    });
    expect(answer.status).toBe(413);
    expect(expectRestRefusal(answer, "413").code).toBe("payload_too_large");
    const notJson = await send(svc, "PUT", "/admin/v1/issuers/bank-x/bins", {
      body: "x".repeat(svc.config.bodyLimitBytes + 1),
      headers: { ...auth, "content-type": "text/plain" },
    });
    expect([413, 415]).toContain(notJson.status);
    expectRestRefusal(notJson, "oversized text");
  });

  it("refuses a member named twice, as /api/v1 does, and writes nothing", async () => {
    const cases: Array<[string, string, string]> = [
      ["POST", "/admin/v1/api-keys", '{"tenant":"bank-y","role":"merchant","role":"issuer"}'],
      ["PUT", "/admin/v1/issuers/bank-y/bins", '{"bins":["411111"],"bins":["520000"]}'],
      ["PUT", "/admin/v1/merchants/shop-y", '{"tenant":"shop-1","tenant":"shop-2"}'],
      ["POST", "/admin/v1/api-keys", '{"tenant":"bank-y","role":"issuer","merchantIds":[{"a":1,"a":2}]}'],
    ];
    for (const [method, path, body] of cases) {
      const answer = await send(svc, method, path, {
        body,
        headers: { ...auth, "content-type": "application/json" },
      });
      const error = expectRestRefusal(answer, body);
      expect(error.code, body).toBe("invalid_request");
      expect(error.details, body).toMatch(/appears more than once/);
    }
    expect(await svc.store.apiKeys.list("bank-y")).toEqual([]);
    expect(await svc.store.bins.list("bank-y")).toEqual([]);
    expect(await svc.store.merchants.find("shop-y")).toBeUndefined();
  });

  it("never answers 500 to a malformed request", async () => {
    const attempts: Array<[string, string, Record<string, string>, string | undefined]> = [
      ["POST", "/admin/v1/api-keys", { "content-type": "application/json" }, "{"],
      ["POST", "/admin/v1/api-keys", { "content-type": "application/json" }, "[".repeat(50_000)],
      ["POST", "/admin/v1/api-keys", { "content-type": "application/json" }, "null"],
      ["POST", "/admin/v1/api-keys", { "content-type": "application/json; charset=latin1" }, "{}"],
      ["GET", "/admin/v1/issuers/%E0%A4%A/bins", {}, undefined],
      ["GET", `/admin/v1/audit?limit=${"9".repeat(400)}`, {}, undefined],
      ["PATCH", "/admin/v1/api-keys", { "content-type": "application/json" }, "{}"],
    ];
    for (const [method, path, headers, body] of attempts) {
      const answer = await send(svc, method, path, {
        headers: { ...auth, ...headers },
        ...(body === undefined ? {} : { body }),
      });
      expectRestRefusal(answer, `${method} ${path.slice(0, 60)} ${body?.slice(0, 20) ?? ""}`);
    }
  });
});

describe("token guesses from one address", () => {
  it("never lock the right token out from another address", async () => {
    const store = createMemoryStore();
    await store.init();
    const app = Fastify();
    await registerAdminRoutes(app, {
      token: TOKEN,
      store,
      env: "dev",
      clock: minuteStartClock(),
      requestsPerMinute: 5,
    });
    await app.ready();
    try {
      const call = (token: string, remoteAddress: string) =>
        app.inject({
          method: "GET",
          url: "/admin/v1/escrow",
          remoteAddress,
          headers: { authorization: `Bearer ${token}` },
        });
      // Near misses: the token with its last character changed, never to the character it has
      // (a random token ending in 0-4 once made guess number 0-4 the right token).
      const lastCharacters = "0123456789".replace(TOKEN.slice(-1), "");
      for (let i = 0; i < 20; i++) {
        const last = lastCharacters[i % lastCharacters.length];
        const guess = await call(`${TOKEN.slice(0, -1)}${last}`, "198.51.100.7");
        expect(guess.statusCode).toBe(i < 5 ? 401 : 429);
      }
      for (const operator of ["192.0.2.10", "2001:db8::10"]) {
        const right = await call(TOKEN, operator);
        expect(right.statusCode, operator).toBe(200);
        expect((right.json() as Envelope).success).toBe(true);
      }
    } finally {
      await app.close();
    }
  });
});

describe("ADMIN_TOKEN at start", () => {
  const refusal = (token: string) => {
    try {
      loadConfig({ RECEIPTS_ENV: "dev", ADMIN_TOKEN: token });
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      return (error as Error).message;
    }
    return undefined;
  };

  it("is refused when long but not random, without quoting it", () => {
    const weak = [
      "a".repeat(64),
      "passwordpasswordpasswordpassword",
      "0123456789abcde".repeat(4),
      "changeme-changeme-changeme-changeme",
      "ab".repeat(40),
    ];
    for (const token of weak) {
      const message = refusal(token);
      expect(message, token).toMatch(
        /ADMIN_TOKEN is not random enough: \d+ different characters, at least 16 needed/,
      );
      expect(message, token).not.toContain(token.slice(0, 12));
    }
  });

  it("is accepted when random, as the README makes it", () => {
    for (let i = 0; i < 200; i++) {
      const token = randomBytes(32).toString("base64url");
      expect(new Set(token).size).toBeGreaterThanOrEqual(MIN_ADMIN_TOKEN_DISTINCT);
      expect(refusal(token)).toBeUndefined();
    }
  });
});
