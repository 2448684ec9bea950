import { Agent, request } from "node:http";
import { createContextValues, type Interceptor } from "@connectrpc/connect";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { CallHeaders } from "../../src/http/call-headers.js";
import { createRouteInvoker } from "../../src/http/invoke.js";
import { KEY_LOG } from "../../src/rpc/route-services.js";
import { startService, type TestService } from "../support/harness.js";

/*
 * What a REST answer costs besides its own work: what can be made once per server is not made once
 * per request. The key log's public reads answer bytes the service already holds, so anything the
 * request path makes for every call shows in their CPU time per answer (docs/performance.md).
 */

describe("the routes beside the API: the chain is wrapped once", () => {
  it("wraps each interceptor once, however many calls pass it, and every call still passes it", async () => {
    let wrapped = 0;
    const passed: string[] = [];
    const counting: Interceptor = (next) => {
      wrapped++;
      return (req) => {
        passed.push(req.method.name);
        return next(req);
      };
    };
    const invoke = createRouteInvoker([counting, counting]);
    const results: number[] = [];
    for (let i = 0; i < 5; i++) {
      const { result } = await invoke(
        {
          method: KEY_LOG.GetCheckpoint,
          header: new CallHeaders(),
          contextValues: createContextValues(),
          signal: () => new AbortController().signal,
          url: "/kt/v1/checkpoint",
        },
        async () => i * 10,
      );
      results.push(result);
    }
    expect(wrapped).toBe(2);
    expect(results).toEqual([0, 10, 20, 30, 40]);
    expect(passed).toEqual(Array(10).fill("GetCheckpoint"));
  });

  it("gives each call its own work's result when calls overlap", async () => {
    const invoke = createRouteInvoker([(next) => (req) => next(req)]);
    const call = (value: string, ms: number) =>
      invoke(
        {
          method: KEY_LOG.GetCheckpoint,
          header: new CallHeaders(),
          contextValues: createContextValues(),
          signal: () => new AbortController().signal,
          url: "/kt/v1/checkpoint",
        },
        () => new Promise<string>((resolve) => setTimeout(() => resolve(value), ms)),
      );
    const answers = await Promise.all([call("slow", 30), call("fast", 1), call("middle", 10)]);
    expect(answers.map((a) => a.result)).toEqual(["slow", "fast", "middle"]);
  });
});

describe("a key log read through the whole server", () => {
  let svc: TestService;
  const Original = globalThis.AbortController;
  let made = 0;
  beforeAll(async () => {
    svc = await startService();
  });
  afterEach(() => {
    globalThis.AbortController = Original;
  });
  afterAll(async () => {
    await svc.close();
  });

  it("makes no abort signal nobody asks for", async () => {
    // node:http rather than fetch, which makes abort controllers of its own.
    const agent = new Agent({ keepAlive: true });
    const get = () =>
      new Promise<string>((resolve, reject) => {
        const req = request(`${svc.baseUrl}/kt/v1/checkpoint`, { agent });
        req.on("error", reject);
        req.on("response", (res) => {
          let text = "";
          res.setEncoding("utf8");
          res.on("data", (chunk: string) => {
            text += chunk;
          });
          res.on("end", () => (res.statusCode === 200 ? resolve(text) : reject(new Error(text))));
        });
        req.end();
      });
    const first = await get();
    globalThis.AbortController = class extends Original {
      constructor() {
        super();
        made++;
      }
    };
    const READS = 20;
    for (let i = 0; i < READS; i++) expect(await get()).toBe(first);
    agent.destroy();
    // One per read before; none now (room left for the service's own background work).
    expect(made).toBeLessThan(READS / 2);
  });
});
