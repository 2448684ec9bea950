import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startService, type TestService } from "../support/harness.js";

/**
 * The request line the chain's first step writes for every call (at info): its id, route, outcome,
 * latency and the caller's tenant, never the key; for a refused call its error code.
 */

interface RequestLine {
  msg: string;
  requestId: string;
  route: string;
  status: string;
  latencyMs: number;
  tenant?: string;
}

describe("the request line", () => {
  let svc: TestService;
  const lines: string[] = [];
  beforeAll(async () => {
    svc = await startService({ logLines: lines });
  });
  afterAll(async () => {
    await svc.close();
  });

  const requestLines = (from: number): RequestLine[] =>
    lines
      .slice(from)
      .map((line) => JSON.parse(line) as RequestLine)
      .filter((line) => line.msg === "request");

  it("names the call, its outcome, latency and tenant, with the id the answer carries", async () => {
    const from = lines.length;
    const ok = await fetch(`${svc.baseUrl}/api/v1/keys/lookup`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-api-key": svc.merchantKey,
        "x-request-id": "line-ok",
      },
      body: JSON.stringify({ recipientHashedPan: "cd".repeat(32) }),
    });
    expect(ok.status).toBe(200);
    const refused = await fetch(`${svc.baseUrl}/api/v1/keys/lookup`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": svc.issuerKey },
      body: JSON.stringify({ recipientHashedPan: "cd".repeat(32) }),
    });
    expect(refused.status).toBe(403);
    const [first, second, ...rest] = requestLines(from);
    expect(rest).toEqual([]);
    expect(first).toMatchObject({
      requestId: "line-ok",
      route: "/receipts.v1.KeysService/LookupKey",
      status: "ok",
      tenant: expect.any(String),
    });
    expect(second).toMatchObject({
      requestId: refused.headers.get("x-request-id"),
      route: "/receipts.v1.KeysService/LookupKey",
      status: "forbidden",
    });
    // A refused call has no principal: no tenant.
    expect(second?.tenant).toBeUndefined();
    for (const line of [first, second]) {
      expect(line?.latencyMs).toBeGreaterThanOrEqual(0);
      expect(line?.latencyMs).toBeLessThan(10_000);
    }
    expect(JSON.stringify([first, second])).not.toContain(svc.merchantKey);
  });
});
