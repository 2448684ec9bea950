import { connect } from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { get, hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";

/**
 * A hashed PAN and a PAR are card data: whatever a stranger or a careless client puts
 * them in (an unknown gRPC method's path, an unknown REST path, a path parameter, a query string, a
 * malformed field), they never reach a log line or a metric label (the `/metrics` page is public),
 * and an error answer never repeats them (but an unknown path's, which names the caller's own path).
 */

const HASHED_PAN = hashPan("4111111111111111");
const PAR = "5001A9ZXCVBNMASDFGHJKLQWERTY1";

/** Sends one gRPC request on its own HTTP/2 session and waits for its end. */
async function grpcTo(baseUrl: string, path: string): Promise<void> {
  const session = connect(baseUrl);
  try {
    await new Promise<void>((resolve) => {
      const req = session.request({
        ":method": "POST",
        ":path": path,
        "content-type": "application/grpc",
        te: "trailers",
      });
      req.on("data", () => {});
      req.on("close", resolve);
      req.end(Buffer.from([0, 0, 0, 0, 0]));
    });
  } finally {
    session.close();
  }
}

describe("card references never reach logs, metrics or error texts", () => {
  const logLines: string[] = [];
  let svc: TestService;
  const answers: string[] = [];

  beforeAll(async () => {
    svc = await startService({ logLines });
  });
  afterAll(async () => {
    await svc?.close();
  });

  it("keeps them out wherever a caller puts them", async () => {
    for (const ref of [HASHED_PAN, PAR]) {
      await grpcTo(svc.baseUrl, `/receipts.v1.KeysService/${ref}`);
      await grpcTo(svc.baseUrl, `/${ref}`);
      // An unknown path's answer names the path to its own caller ("No endpoint GET ..."); only the
      // log and the metrics are checked for it.
      await get(svc, `/api/v1/${ref}`, svc.merchantKey);
      answers.push(JSON.stringify((await get(svc, `/api/v1/receipts/${ref}`, svc.issuerKey)).body));
      answers.push(
        JSON.stringify((await get(svc, `/api/v1/payments?pageToken=${ref}`, svc.merchantKey)).body),
      );
      answers.push(JSON.stringify((await get(svc, `/api/v1/payments/${ref}`, svc.merchantKey)).body));
    }
    const malformed = [
      { recipientPar: PAR.toLowerCase() },
      { recipientPar: `${PAR}0` },
      { recipientPar: PAR, recipientHashedPan: HASHED_PAN },
      { recipientHashedPan: `${HASHED_PAN}0` },
    ];
    for (const card of malformed) {
      const lookup = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, card);
      expect(lookup.status).toBe(400);
      answers.push(JSON.stringify(lookup.body));
      const enc = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, {
        ...receiptBody({ recipientHashedPan: undefined }),
        ...card,
      });
      expect(enc.status).toBe(400);
      answers.push(JSON.stringify(enc.body));
    }
    const metrics = await (await fetch(`${svc.baseUrl}/metrics`)).text();
    expect(metrics).toContain("http_requests_total");
    expect(logLines.length).toBeGreaterThan(10);
    for (const ref of [HASHED_PAN, PAR, PAR.toLowerCase()]) {
      expect(metrics.includes(ref), "in /metrics").toBe(false);
      expect(logLines.filter((line) => line.includes(ref))).toEqual([]);
      expect(answers.filter((answer) => answer.includes(ref))).toEqual([]);
    }
  });
});
