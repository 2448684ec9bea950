import { createContextValues, type Interceptor, type UnaryResponse } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { FakeClock } from "../../src/clock.js";
import { authenticate, createApiKey } from "../../src/domain/api-keys.js";
import { countInWindow } from "../../src/domain/rate-limit.js";
import { AppError } from "../../src/errors.js";
import { CallHeaders } from "../../src/http/call-headers.js";
import { kPrincipal, kRemoteAddress } from "../../src/rpc/context.js";
import { accessInterceptor } from "../../src/rpc/interceptors.js";
import { policyOf } from "../../src/rpc/policy.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { ApiKeyRecord, Store } from "../../src/store/types.js";
import { ACCESS_CONFIG } from "./access-config.js";

/**
 * The access step of an API call runs in one async function, with one `await` per store call
 * (`apiKeyAccess`), where it ran through `authenticate`, a per-call counter and a wrapper of its own,
 * each a promise (and two more turns of the microtask queue each) on every call. What it decides must
 * be what those pieces decide: here every kind of caller goes through both, the step and a reference
 * built from the pieces as the step used them (`authenticate`, `countInWindow`, the headers put on
 * the answer or the error), each with a store of its own, and the two must agree on everything a
 * caller or a handler can see: the answer's headers, the error (code, message, headers, Retry-After),
 * the principal handed to the handler, and whether the handler ran.
 */

const CONFIG = ACCESS_CONFIG;

/** What a caller and the handler see of one call. */
interface Seen {
  ran: boolean;
  principal?: string | undefined;
  headers?: Record<string, string>;
  error?: { code: string; message: string; headers: Record<string, string>; retryAfter?: number | undefined };
}

type Req = Parameters<ReturnType<Interceptor>>[0];
type Next = (req: Req) => Promise<UnaryResponse>;

/** The access step as it was built before: authenticate, count, then the rest with the headers. */
function reference(store: Store, clock: FakeClock): Interceptor {
  return (next) => async (req) => {
    const policy = policyOf(req.method);
    if (policy === "public") return next(req);
    let principal: ApiKeyRecord | undefined;
    let refusal: AppError | undefined;
    try {
      principal = await authenticate(store, CONFIG.env, req.header.get("x-api-key"));
    } catch (err) {
      if (!(err instanceof AppError) || err.code !== "unauthorized") throw err;
      refusal = err;
    }
    const tier = CONFIG.tiers[principal?.tier ?? "sandbox"];
    const limit = policy.rateBucket === "keygen" ? tier.generateKeysPerMinute : tier.requestsPerMinute;
    const address = req.contextValues.get(kRemoteAddress) || "unknown";
    const counter = principal ? `${principal.id}:${policy.rateBucket}` : `ip:${address}:${policy.rateBucket}`;
    const headers = await countInWindow({ store, clock }, { counter, limit });
    if (refusal === undefined && principal !== undefined && !policy.roles.includes(principal.role)) {
      const article = principal.role === "issuer" ? "An" : "A";
      refusal = new AppError(
        "forbidden",
        `${article} ${principal.role} API key may not call ${req.method.name}.`,
      );
    }
    if (refusal === undefined) req.contextValues.set(kPrincipal, principal);
    try {
      if (refusal !== undefined) throw refusal;
      const res = await next(req);
      for (const name in headers) res.header.set(name, headers[name] as string);
      return res;
    } catch (err) {
      if (err instanceof AppError) Object.assign(err.headers, headers);
      throw err;
    }
  };
}

/** Runs one call of `method` with `apiKey` from `address` through `step`; what was seen. */
async function callThrough(
  step: Interceptor,
  method: Req["method"],
  apiKey: string | undefined,
  address: string,
  handlerFails: boolean,
): Promise<Seen> {
  const contextValues = createContextValues();
  contextValues.set(kRemoteAddress, address);
  const header = new CallHeaders();
  if (apiKey !== undefined) header.set("x-api-key", apiKey);
  const seen: Seen = { ran: false };
  const handler: Next = async () => {
    seen.ran = true;
    seen.principal = contextValues.get(kPrincipal)?.id;
    if (handlerFails) throw new AppError("not_found", "No such thing.");
    return { header: new CallHeaders(), trailer: new CallHeaders() } as unknown as UnaryResponse;
  };
  const req = { method, service: method.parent, header, contextValues } as unknown as Req;
  try {
    const res = await step(handler as never)(req);
    seen.headers = Object.fromEntries(res.header.entries());
  } catch (err) {
    if (!(err instanceof AppError)) throw err;
    seen.error = {
      code: err.code,
      message: err.message,
      headers: { ...err.headers },
      retryAfter: err.retryAfterSeconds,
    };
  }
  return seen;
}

/** The same keys, made in each of two stores (the key ids are random: compared by their role here). */
async function world() {
  const store = createMemoryStore();
  const clock = new FakeClock("2026-03-01T00:00:10Z");
  const now = clock.now();
  const make = async (role: "issuer" | "merchant", tier: "standard" | "sandbox", given: string) =>
    (await createApiKey(store, "dev", { role, tier, tenantId: `t-${role}` }, now, given)).record;
  const keys = {
    merchant: await make("merchant", "standard", `rk_dev_${"m".repeat(32)}`),
    issuer: await make("issuer", "standard", `rk_dev_${"i".repeat(32)}`),
    sandbox: await make("merchant", "sandbox", `rk_dev_${"s".repeat(32)}`),
    revoked: await make("merchant", "standard", `rk_dev_${"r".repeat(32)}`),
  };
  await store.apiKeys.revoke(keys.revoked.id, now);
  const names = new Map(Object.entries(keys).map(([name, record]) => [record.id, name]));
  return { store, clock, names };
}

const KEYS: Array<string | undefined> = [
  `rk_dev_${"m".repeat(32)}`,
  `rk_dev_${"i".repeat(32)}`,
  `rk_dev_${"s".repeat(32)}`,
  `rk_dev_${"r".repeat(32)}`,
  `rk_dev_${"u".repeat(32)}`, // well formed, unknown
  `rk_live_${"m".repeat(32)}`, // another environment
  "rk_dev_short",
  "not a key",
  "",
  undefined,
];

describe("the access step of an API call, in one pass", () => {
  it("answers every caller as the pieces it replaced do, to the last header, until and past each limit", async () => {
    const fast = await world();
    const slow = await world();
    const fastStep = accessInterceptor({ store: fast.store, config: CONFIG, clock: fast.clock });
    const slowStep = reference(slow.store, slow.clock);
    const methods = [KeysService.method.lookupKey, ReceiptsService.method.listReceipts];
    let compared = 0;
    let refusedByLimit = 0;
    // Six rounds: past every tier's limit (the sandbox's 3, the standard's 4) for keys and addresses.
    for (let round = 0; round < 6; round++) {
      for (const method of methods) {
        for (const [i, apiKey] of KEYS.entries()) {
          for (const address of ["10.0.0.1", ""]) {
            const handlerFails = (round + i) % 3 === 0;
            const a = await callThrough(fastStep, method, apiKey, address, handlerFails);
            const b = await callThrough(slowStep, method, apiKey, address, handlerFails);
            const named = (s: Seen) => ({
              ...s,
              principal: fast.names.get(s.principal ?? "") ?? s.principal,
            });
            const namedSlow = (s: Seen) => ({
              ...s,
              principal: slow.names.get(s.principal ?? "") ?? s.principal,
            });
            expect([round, method.name, apiKey, address, named(a)]).toEqual([
              round,
              method.name,
              apiKey,
              address,
              namedSlow(b),
            ]);
            compared++;
            if (a.error?.code === "rate_limit_exceeded") refusedByLimit++;
          }
        }
      }
      fast.clock.advance(7_000);
      slow.clock.advance(7_000);
    }
    expect(compared).toBe(6 * 2 * KEYS.length * 2);
    // The comparison reached the limits, and every kind of answer.
    expect(refusedByLimit).toBeGreaterThan(20);
  });

  it("gives the handler the caller's record and refuses each kind of bad key as before", async () => {
    const { store, clock } = await world();
    const step = accessInterceptor({ store, config: CONFIG, clock });
    const lookUp = (key: string | undefined, address = "10.0.0.9") =>
      callThrough(step, KeysService.method.lookupKey, key, address, false);
    const ok = await lookUp(`rk_dev_${"m".repeat(32)}`);
    expect(ok.ran).toBe(true);
    expect(ok.headers).toEqual({
      "x-ratelimit-limit": "4",
      "x-ratelimit-remaining": "3",
      "x-ratelimit-reset": String(Date.parse("2026-03-01T00:01:00Z") / 1000),
    });
    const refusals = [];
    for (const key of [undefined, `rk_live_${"m".repeat(32)}`, `rk_dev_${"u".repeat(32)}`]) {
      refusals.push(await lookUp(key));
    }
    refusals.push(await lookUp(`rk_dev_${"r".repeat(32)}`, "10.0.0.10"));
    expect(refusals.map((s) => [s.ran, s.error?.code, s.error?.message])).toEqual([
      [false, "unauthorized", "Missing API key: send it in the X-API-Key header."],
      [false, "unauthorized", 'This API key is for the "live" environment; this server runs "dev".'],
      [false, "unauthorized", "Invalid API key."],
      [false, "unauthorized", "This API key has been revoked."],
    ]);
    // Refused callers are counted by their address, in the sandbox tier: 3 a minute.
    expect(refusals.map((s) => s.error?.headers["x-ratelimit-remaining"])).toEqual(["2", "1", "0", "2"]);
    const limited = await lookUp(undefined);
    expect([limited.error?.code, limited.error?.retryAfter]).toEqual(["rate_limit_exceeded", 50]);
  });
});
