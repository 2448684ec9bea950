import { randomBytes } from "node:crypto";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { CHAIN_STEPS } from "../../src/rpc/chain.js";
import { minuteStartClock } from "../support/clock.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import { startService, type TestService } from "../support/harness.js";

/**
 * One pipeline: a call of each kind (REST, gRPC, Connect, the operator API, a key log read) enters the
 * same chain's steps in the same order, observed through the chain's own hook; the operator API and
 * the key log's reads answer with the chain's request id and rate-limit headers, each with a counter
 * of its own, and are counted by the chain's metrics step.
 */
const TOKEN = `adm_${randomBytes(24).toString("base64url")}`;

describe("one chain for every kind of call", () => {
  let svc: TestService;
  const seen: string[] = [];
  beforeAll(async () => {
    svc = await startService({
      // The limit headers of two calls are compared below: they must fall in one window.
      clock: minuteStartClock(),
      env: { ADMIN_TOKEN: TOKEN, KT_READS_PER_MINUTE: "50" },
      onChainStep: (step, method) => seen.push(`${method} ${step}`),
    });
  });
  afterAll(async () => {
    await svc?.close();
  });

  /** The steps the hook saw for calls of `method` since `from`. */
  const stepsOf = (method: string, from: number) =>
    seen
      .slice(from)
      .filter((line) => line.startsWith(`${method} `))
      .map((line) => line.slice(method.length + 1));

  it("takes REST, gRPC, Connect, the operator API and a key log read through the same steps in order", async () => {
    const listPayments = "receipts.v1.PaymentsService/ListPayments";
    const calls: Array<[string, string, () => Promise<unknown>]> = [
      [
        "REST",
        listPayments,
        () => fetch(`${svc.baseUrl}/api/v1/payments`, { headers: { "x-api-key": svc.merchantKey } }),
      ],
      [
        "gRPC",
        listPayments,
        async () => {
          const client = grpcClient(PaymentsService, svc.port);
          const metadata = new Metadata();
          metadata.set("x-api-key", svc.merchantKey);
          try {
            const result = await grpcUnary(client, "listPayments", {}, metadata);
            expect(result.error).toBeUndefined();
          } finally {
            (client as unknown as { close(): void }).close();
          }
        },
      ],
      [
        "Connect",
        listPayments,
        () =>
          createClient(
            PaymentsService,
            createConnectTransport({ baseUrl: svc.baseUrl, httpVersion: "1.1" }),
          ).listPayments({}, { headers: { "x-api-key": svc.merchantKey } }),
      ],
      [
        "operator API",
        "receipts.operator.v1.OperatorApi/CountEscrow",
        () => fetch(`${svc.baseUrl}/admin/v1/escrow`, { headers: { authorization: `Bearer ${TOKEN}` } }),
      ],
      [
        "key log read",
        "receipts.kt.v1.KeyLogReads/GetCheckpoint",
        () => fetch(`${svc.baseUrl}/kt/v1/checkpoint`),
      ],
    ];
    for (const [kind, method, call] of calls) {
      const from = seen.length;
      await call();
      expect([kind, stepsOf(method, from)]).toEqual([kind, [...CHAIN_STEPS]]);
    }
    expect(CHAIN_STEPS).toEqual(["request", "metrics", "errors", "access"]);
  });

  it("refuses a wrong operator token in the chain's access step, with its request id and limit headers", async () => {
    const from = seen.length;
    const res = await fetch(`${svc.baseUrl}/admin/v1/escrow`, {
      headers: { authorization: "Bearer not-the-token", "x-request-id": "op-call-1" },
    });
    expect(res.status).toBe(401);
    expect(res.headers.get("x-request-id")).toBe("op-call-1");
    expect(res.headers.get("x-ratelimit-limit")).toBe("120");
    const body = (await res.json()) as { success: boolean; error: { code: string; request_id: string } };
    expect(body).toMatchObject({ success: false, error: { code: "unauthorized", request_id: "op-call-1" } });
    expect(stepsOf("receipts.operator.v1.OperatorApi/CountEscrow", from)).toEqual([...CHAIN_STEPS]);
  });

  it("counts the operator API and the key log's reads in buckets of their own, not the API key's", async () => {
    const admin = () =>
      fetch(`${svc.baseUrl}/admin/v1/escrow`, {
        headers: { authorization: `Bearer ${TOKEN}`, "x-api-key": svc.merchantKey },
      });
    const api = () => fetch(`${svc.baseUrl}/api/v1/payments`, { headers: { "x-api-key": svc.merchantKey } });
    const kt = () => fetch(`${svc.baseUrl}/kt/v1/checkpoint`, { headers: { "x-api-key": svc.merchantKey } });
    const remaining = (res: Response) => Number(res.headers.get("x-ratelimit-remaining"));
    const [a1, p1, k1] = [await admin(), await api(), await kt()];
    const [a2, p2, k2] = [await admin(), await api(), await kt()];
    expect([a1.status, p1.status, k1.status]).toEqual([200, 200, 200]);
    expect([a1.headers.get("x-ratelimit-limit"), k1.headers.get("x-ratelimit-limit")]).toEqual(["120", "50"]);
    // Each counter moved by one call of its own kind, whatever the others did in between.
    expect([
      remaining(a1) - remaining(a2),
      remaining(p1) - remaining(p2),
      remaining(k1) - remaining(k2),
    ]).toEqual([1, 1, 1]);
    expect(remaining(a1)).not.toBe(remaining(p1));
    expect(k2.headers.get("content-type")).toBe("text/plain; charset=utf-8");
    expect(await k2.text()).toContain("\n\n\u2014 ");
  });

  it("counts operator and key log calls in the chain's metrics, by method", async () => {
    const text = await (await fetch(`${svc.baseUrl}/metrics`)).text();
    expect(text).toMatch(
      /http_requests_total\{protocol="rest",method="receipts\.operator\.v1\.OperatorApi\/CountEscrow",code="ok"\} [1-9]/,
    );
    expect(text).toMatch(
      /http_requests_total\{protocol="rest",method="receipts\.operator\.v1\.OperatorApi\/CountEscrow",code="unauthorized"\} 1/,
    );
    expect(text).toMatch(
      /http_requests_total\{protocol="rest",method="receipts\.kt\.v1\.KeyLogReads\/GetCheckpoint",code="ok"\} [1-9]/,
    );
  });
});
