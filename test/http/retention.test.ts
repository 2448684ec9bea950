import { getHeapSpaceStatistics, setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { create } from "@bufbuild/protobuf";
import { createContextValues } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { EncryptReceiptRequestSchema, ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { CallHeaders } from "../../src/http/call-headers.js";
import { createUnaryInvoker } from "../../src/http/invoke.js";
import { kLogger } from "../../src/rpc/context.js";

/*
 * A call's objects must die young. Anything in the old generation that points at them (an accessor
 * pair) makes every young-generation collection copy them and then promote them, and
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
});
