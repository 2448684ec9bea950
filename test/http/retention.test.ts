import { Agent, request } from "node:http";
import { getHeapSpaceStatistics, setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { create } from "@bufbuild/protobuf";
import { createContextValues } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EncryptReceiptRequestSchema, ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { CallHeaders } from "../../src/http/call-headers.js";
import { createUnaryInvoker } from "../../src/http/invoke.js";
import { kLogger } from "../../src/rpc/context.js";
import { startService, type TestService } from "../support/harness.js";

/*
 * A call's objects must die young. Anything in the old generation that points at them (an accessor
 * pair, a WeakMap entry) makes every young-generation collection copy them and then promote them, and
 * only a full collection frees them: under load that was about a tenth of everything a call
 * allocated, and a third of the time the event loop spent collecting garbage.
 *
 * Each check runs calls whose request holds a fresh string of PAYLOAD bytes, then two young-generation
 * collections, and measures how much the old generation grew: every call kept alive by such a
 * reference adds its payload. The bound, a quarter of all payloads, leaves room for the last call's
 * objects, which its connection may still reference (about four payloads' worth over HTTP/1.1).
 */

const PAYLOAD = 96 * 1024; // below V8's large-object size, so the string is born in the young generation
const CALLS = 32;

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as (options?: { type: "major" | "minor" }) => void;

function oldGenerationBytes(): number {
  return getHeapSpaceStatistics()
    .filter((space) => space.space_name === "old_space" || space.space_name === "large_object_space")
    .reduce((sum, space) => sum + space.space_used_size, 0);
}

/** Bytes the old generation grew by over `calls` followed by two young-generation collections. */
async function promotedBy(calls: () => Promise<void>): Promise<number> {
  gc();
  const before = oldGenerationBytes();
  await calls();
  gc({ type: "minor" });
  gc({ type: "minor" });
  return oldGenerationBytes() - before;
}

/** A new flat string of PAYLOAD bytes, different for each `i`. */
function payload(i: number): string {
  return Buffer.alloc(PAYLOAD, 97 + (i % 26)).toString("latin1");
}

describe("a call's objects are not promoted by references from the old generation", () => {
  it("in-process calls: the request and handler context the invoker makes", async () => {
    const invoke = createUnaryInvoker(
      (router) => {
        router.service(ReceiptsService, { encryptReceipt: async () => ({}) });
      },
      // Like the request-context interceptor: a closure over the call, kept in its context values.
      [
        (next) => async (req) => {
          req.contextValues.set(kLogger, () => {
            throw new Error(`no logger for ${req.method.name}`);
          });
          return next(req);
        },
      ],
    );
    const promoted = await promotedBy(async () => {
      for (let i = 0; i < CALLS; i++) {
        await invoke({
          method: ReceiptsService.method.encryptReceipt,
          message: create(EncryptReceiptRequestSchema, { receipt: { merchantName: payload(i) } }),
          header: new CallHeaders(),
          contextValues: createContextValues(),
          signal: () => new AbortController().signal,
          url: "/test",
        });
      }
    });
    expect(promoted).toBeLessThan((CALLS * PAYLOAD) / 4);
  });

  describe("REST calls through the whole server", () => {
    let svc: TestService;
    beforeAll(async () => {
      svc = await startService();
    });
    afterAll(async () => {
      await svc.close();
    });

    it("keeps nothing of a call once it is answered", async () => {
      // node:http rather than fetch, whose own bookkeeping would be measured too.
      const agent = new Agent({ keepAlive: true });
      const post = (i: number) =>
        new Promise<void>((resolve, reject) => {
          // Refused by validation (the hashed PAN is not hex), so nothing of it is stored.
          const body = JSON.stringify({ recipientHashedPan: "not-hex", merchantName: payload(i) });
          const req = request(`${svc.baseUrl}/api/v1/receipts/encrypt`, {
            method: "POST",
            agent,
            headers: { "content-type": "application/json", "x-api-key": svc.merchantKey },
          });
          req.on("error", reject);
          req.on("response", (res) => {
            res.resume();
            res.on("end", () =>
              res.statusCode === 400 ? resolve() : reject(new Error(`${res.statusCode}`)),
            );
          });
          req.end(body);
        });
      await post(-1); // the first call compiles and caches what every later call shares
      const promoted = await promotedBy(async () => {
        for (let i = 0; i < CALLS; i++) await post(i);
      });
      agent.destroy();
      expect(promoted).toBeLessThan((CALLS * PAYLOAD) / 4);
    });
  });

  describe("the routes beside the API (operator, key log reads), through the chained-route adapter", () => {
    const ADMIN_TOKEN = "retention-test-admin-token-0123456789ab";
    let svc: TestService;
    beforeAll(async () => {
      svc = await startService({ env: { ADMIN_TOKEN } });
    });
    afterAll(async () => {
      await svc.close();
    });

    it("keeps nothing of an operator call once it is answered", async () => {
      const agent = new Agent({ keepAlive: true });
      const post = (i: number) =>
        new Promise<void>((resolve, reject) => {
          // Let in by the chain, then refused by validation (no such role), so nothing is stored.
          const body = JSON.stringify({ role: "nobody", tenantId: "t", label: payload(i) });
          const req = request(`${svc.baseUrl}/admin/v1/api-keys`, {
            method: "POST",
            agent,
            headers: { "content-type": "application/json", authorization: `Bearer ${ADMIN_TOKEN}` },
          });
          req.on("error", reject);
          req.on("response", (res) => {
            res.resume();
            res.on("end", () =>
              res.statusCode === 400 ? resolve() : reject(new Error(`${res.statusCode}`)),
            );
          });
          req.end(body);
        });
      await post(-1);
      const promoted = await promotedBy(async () => {
        for (let i = 0; i < CALLS; i++) await post(i);
      });
      agent.destroy();
      expect(promoted).toBeLessThan((CALLS * PAYLOAD) / 4);
    });
  });
});
