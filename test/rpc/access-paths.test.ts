import {
  Code,
  ConnectError,
  createContextValues,
  type Interceptor,
  type UnaryResponse,
} from "@connectrpc/connect";
import pino from "pino";
import { describe, expect, it } from "vitest";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { FakeClock } from "../../src/clock.js";
import { createApiKey } from "../../src/domain/api-keys.js";
import { AppError } from "../../src/errors.js";
import { CallHeaders } from "../../src/http/call-headers.js";
import { kRemoteAddress } from "../../src/rpc/context.js";
import { accessInterceptor, requestContextInterceptor } from "../../src/rpc/interceptors.js";
import { KEY_LOG, OPERATOR } from "../../src/rpc/route-services.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { ACCESS_CONFIG } from "./access-config.js";

/**
 * The access step's other ways through, beside the API call's comparison in access-step.test.ts: a
 * malformed key's words, the rate-limit headers on an error that is not the service's own, the
 * operator's and the key log's counters; and the request line's latency.
 */

const CONFIG = ACCESS_CONFIG;
const TOKEN = "t".repeat(40);
const MERCHANT_KEY = `rk_dev_${"m".repeat(32)}`;

type Req = Parameters<ReturnType<Interceptor>>[0];

function requestOf(method: Req["method"], headers: Record<string, string> = {}): Req {
  const contextValues = createContextValues();
  contextValues.set(kRemoteAddress, "10.0.0.1");
  const header = new CallHeaders();
  for (const [name, value] of Object.entries(headers)) header.set(name, value);
  return { method, service: method.parent, header, contextValues } as unknown as Req;
}

const answer = async () =>
  ({ header: new CallHeaders(), trailer: new CallHeaders() }) as unknown as UnaryResponse;

async function step() {
  const store = createMemoryStore();
  const clock = new FakeClock("2026-03-01T00:00:10Z");
  await createApiKey(
    store,
    "dev",
    { role: "merchant", tier: "standard", tenantId: "t-m" },
    clock.now(),
    MERCHANT_KEY,
  );
  return accessInterceptor({
    store,
    config: CONFIG,
    clock,
    operator: { token: TOKEN },
    keyLogReadsPerMinute: 7,
  });
}

describe("the access step's other ways through", () => {
  it("refuses a malformed key with the words an unknown key gets", async () => {
    const access = await step();
    const refusal = await access(answer as never)(
      requestOf(KeysService.method.lookupKey, { "x-api-key": "rk_dev_short" }),
    ).catch((err: unknown) => err);
    expect(refusal).toBeInstanceOf(AppError);
    expect([(refusal as AppError).code, (refusal as AppError).message]).toEqual([
      "unauthorized",
      "Invalid API key.",
    ]);
  });

  it("puts the rate-limit headers on a ConnectError from below, and lets any other error through untouched", async () => {
    const access = await step();
    const req = () => requestOf(KeysService.method.lookupKey, { "x-api-key": MERCHANT_KEY });
    const connect = new ConnectError("gone", Code.Unavailable);
    const thrownConnect = await access((async () => {
      throw connect;
    }) as never)(req()).catch((err: unknown) => err);
    expect(thrownConnect).toBe(connect);
    expect(connect.metadata.get("x-ratelimit-limit")).toBe("4");
    expect(connect.metadata.get("x-ratelimit-remaining")).toBe("3");
    const plain = new TypeError("a bug");
    const thrownPlain = await access((async () => {
      throw plain;
    }) as never)(req()).catch((err: unknown) => err);
    expect(thrownPlain).toBe(plain);
    expect(Object.keys(plain)).toEqual([]);
  });

  it("counts the operator's calls and the key log's reads by address, headers on the answer", async () => {
    const access = await step();
    const operator = await access(answer as never)(
      requestOf(OPERATOR.ListApiKeys, { authorization: `Bearer ${TOKEN}` }),
    );
    expect(operator.header.get("x-ratelimit-limit")).toBe("120");
    expect(operator.header.get("x-ratelimit-remaining")).toBe("119");
    const read = await access(answer as never)(requestOf(KEY_LOG.GetCheckpoint));
    expect(read.header.get("x-ratelimit-limit")).toBe("7");
    expect(read.header.get("x-ratelimit-remaining")).toBe("6");
  });
});

describe("the request line", () => {
  it("gives the call's latency in milliseconds", async () => {
    const lines: Array<{ msg?: string; latencyMs?: number }> = [];
    const root = pino({ level: "info" }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const slow = async () => {
      await new Promise((resolve) => setTimeout(resolve, 40));
      return answer();
    };
    await requestContextInterceptor(root)(slow as never)(requestOf(KeysService.method.lookupKey));
    const line = lines.find((l) => l.msg === "request");
    // A timer may fire up to a millisecond early; nothing can make the call take less than ~39 ms.
    expect(line?.latencyMs).toBeGreaterThanOrEqual(35);
    expect(line?.latencyMs).toBeLessThan(10_000);
  });
});
