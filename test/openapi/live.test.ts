import type { JsonObject } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { responseSchemaRef, validateAgainst } from "../../src/openapi/validate.js";
import { hashPan, receiptBody, startService, type TestService } from "../support/harness.js";
import { deref, doc, operation } from "./support.js";

/**
 * Real responses of the running service, over HTTP, checked against the document: each status must
 * be documented for its operation, each body must validate against the documented schema, and the
 * documented headers must be there.
 */

let svc: TestService;
beforeAll(async () => {
  svc = await startService();
});
afterAll(async () => {
  await svc?.close();
});

interface Call {
  status: number;
  headers: Headers;
  body: unknown;
}

async function call(
  verb: "get" | "post",
  template: string,
  url: string,
  key: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<Call> {
  const init: RequestInit = { method: verb.toUpperCase(), headers: { "x-api-key": key, ...headers } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers = { ...init.headers, "content-type": "application/json" };
  }
  const res = await fetch(`${svc.baseUrl}${url}`, init);
  const result = { status: res.status, headers: res.headers, body: await res.json() };
  expectDocumented(template, verb, result);
  return result;
}

/** The response is one the document promises for this operation, body and headers. */
function expectDocumented(template: string, verb: string, res: Call): void {
  const responses = operation(template, verb).responses as JsonObject;
  expect(Object.keys(responses), `${verb} ${template}`).toContain(String(res.status));
  const pointer = responseSchemaRef(template, verb, String(res.status));
  expect(validateAgainst(doc, pointer, res.body), `${verb} ${template} ${res.status}`).toEqual([]);
  expect(res.headers.get("x-request-id")).toBeTruthy();
  if (res.status === 200 || res.status === 401 || res.status === 403) {
    for (const [name, header] of Object.entries(deref(responses[String(res.status)]).headers as JsonObject)) {
      // A header documented as optional (Idempotent-Replayed) is there only sometimes.
      if (deref(header).required !== true) continue;
      expect(res.headers.get(name), `${name} on ${verb} ${template} ${res.status}`).not.toBeNull();
    }
  }
}

const data = (res: Call) => (res.body as { data: Record<string, unknown> }).data;

describe("the running service answers as documented", () => {
  it("for the five-step flow, encrypt and list", async () => {
    const keys = await call(
      "post",
      "/api/v1/onboarding/generate-keys",
      "/api/v1/onboarding/generate-keys",
      svc.issuerKey,
      {},
    );
    const pan = hashPan("4000056655665556");
    const reg = data(
      await call("post", "/api/v1/onboarding/register", "/api/v1/onboarding/register", svc.issuerKey, {
        hashedPan: pan,
        publicKey: data(keys).publicKey,
        keyId: data(keys).keyId,
      }),
    );
    const payment = await call(
      "post",
      "/api/v1/payments/{gateway}/create",
      "/api/v1/payments/gateway_a/create",
      svc.merchantKey,
      receiptBody({ recipientHashedPan: pan, amount: 950 }),
      { "idempotency-key": "openapi-live-1" },
    );
    expect(payment.status).toBe(200);
    await call(
      "post",
      "/api/v1/receipts/encrypt",
      "/api/v1/receipts/encrypt",
      svc.merchantKey,
      receiptBody({ recipientHashedPan: pan }),
    );
    const grant = data(
      await call("post", "/api/v1/keys/grant-access", "/api/v1/keys/grant-access", svc.issuerKey, {
        userId: reg.userId,
        keyId: reg.keyId,
      }),
    );
    const decrypted = await call(
      "post",
      "/api/v1/payments/decrypt",
      "/api/v1/payments/decrypt",
      svc.issuerKey,
      {
        paymentId: data(payment).paymentId,
        tokenId: grant.tokenId,
        privateKey: data(keys).privateKey,
      },
    );
    expect(data(decrypted).totalAmount).toBe(950);
    const list = await call(
      "get",
      "/api/v1/receipts/{userId}",
      `/api/v1/receipts/${reg.userId}?pageSize=5`,
      svc.issuerKey,
    );
    expect(data(list).receipts).toHaveLength(2);
  });

  it("for errors: validation, missing key, wrong role, unknown receipt", async () => {
    const bad = await call("post", "/api/v1/receipts/encrypt", "/api/v1/receipts/encrypt", svc.merchantKey, {
      bogus: 1,
    });
    expect(bad.status).toBe(400);
    const noKey = await call("post", "/api/v1/keys/grant-access", "/api/v1/keys/grant-access", "", {});
    expect(noKey.status).toBe(401);
    const wrongRole = await call(
      "post",
      "/api/v1/keys/grant-access",
      "/api/v1/keys/grant-access",
      svc.merchantKey,
      {},
    );
    expect(wrongRole.status).toBe(403);
    const missing = await call(
      "get",
      "/api/v1/transactions/{transactionId}/receipt",
      "/api/v1/transactions/none/receipt",
      svc.merchantKey,
    );
    expect(missing.status).toBe(404);
  });

  it("for the operational paths", async () => {
    for (const path of ["/healthz", "/readyz"]) {
      const res = await fetch(`${svc.baseUrl}${path}`);
      expectDocumented(path, "get", { status: res.status, headers: res.headers, body: await res.json() });
    }
  });
});
