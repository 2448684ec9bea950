import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { http2Request, startTestServer, type TestServer } from "./support.js";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

interface Envelope {
  success: boolean;
  // biome-ignore lint/suspicious/noExplicitAny: assertions index freely into response data
  data?: any;
  error?: { code: string; message: string; details: string; timestamp: string; request_id: string };
}

describe("the REST surface", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer();
  });
  afterAll(async () => {
    await t.close();
  });

  async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}) {
    const init: RequestInit = { method, headers: { ...headers } };
    if (body !== undefined) {
      init.body = typeof body === "string" ? body : JSON.stringify(body);
      init.headers = { "content-type": "application/json", ...headers };
    }
    const res = await fetch(`${t.baseUrl}${path}`, init);
    return { status: res.status, headers: res.headers, body: (await res.json()) as Envelope };
  }

  /** Asserts an error envelope and that its request id is the response's X-Request-Id. */
  function expectError(res: Awaited<ReturnType<typeof call>>, status: number, code: string) {
    expect(res.status).toBe(status);
    expect(res.body.success).toBe(false);
    expect(res.body.error?.code).toBe(code);
    expect(res.headers.get("content-type")).toContain("application/json");
    const id = res.headers.get("x-request-id");
    expect(id).toBeTruthy();
    expect(res.body.error?.request_id).toBe(id);
    expect(Date.parse(res.body.error?.timestamp ?? "")).not.toBeNaN();
    return res.body.error as NonNullable<Envelope["error"]>;
  }

  it("wraps a response in the success envelope, implicit defaults included", async () => {
    const res = await call("POST", "/api/v1/onboarding/register", {
      hashedPan: "A".repeat(64),
      publicKey: "PUB",
      keyId: "key-1",
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      success: true,
      data: {
        userId: "usr_1",
        keyId: "key-1",
        status: "active",
        registeredAt: "2026-01-01T00:00:00Z",
        releasedReceipts: 0,
        heldReceipts: 0,
        algorithm: "",
        publicKey: "",
        releasePending: false,
        superseded: false,
      },
    });
  });

  it("accepts a POST without a body for a request with no fields", async () => {
    const res = await call("POST", "/api/v1/onboarding/generate-keys");
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({
      keyId: "key-1",
      publicKey: "PUB",
      privateKey: "PRIV",
      algorithm: "RSA-OAEP-256",
    });
  });

  it("reports domain validation errors with every violation in details", async () => {
    const res = await call("POST", "/api/v1/onboarding/register", { hashedPan: "xyz", publicKey: "" });
    const error = expectError(res, 400, "invalid_request");
    expect(error.message).toBe("The request is invalid.");
    expect(error.details).toBe("hashedPan: must be 64 hexadecimal characters; publicKey: is required");
  });

  it("rejects unknown fields by name, prototype keys included", async () => {
    const res = await call(
      "POST",
      "/api/v1/onboarding/register",
      '{"hashedPan":"x","hashedPAN":"y","extra":1,"__proto__":{"admin":true},"constructor":{}}',
    );
    const error = expectError(res, 400, "invalid_request");
    expect(error.details).toBe(
      "hashedPAN: unknown field; extra: unknown field; __proto__: unknown field; constructor: unknown field",
    );
  });

  it("renders money as JSON numbers and leaves unset optional fields out", async () => {
    const receipt = { receiptId: "r1", currency: "EUR", amount: 9_007_199_254_740_991, items: [] };
    const a = await call("POST", "/api/v1/payments/gateway_a/create", receipt);
    expect(a.status).toBe(200);
    expect(a.body.data.amount).toBe(9_007_199_254_740_991);
    expect(a.body.data.serviceMetadata).toEqual({
      receiptId: "r1",
      transactionId: "",
      keyId: "",
      isEscrowed: false,
      gateway: "gateway_a",
      amount: 9_007_199_254_740_991,
      currency: "",
    });
    expect(a.body.data.clientSecret).toBe("pay_1_secret_x");
    const b = await call("POST", "/api/v1/payments/gateway_b/create", { ...receipt, amount: 950 });
    expect(b.body.data.amount).toBe(950);
    expect(b.body.data).not.toHaveProperty("clientSecret");
  });

  it("rejects money sent as strings, fractions or beyond the safe range, naming every field", async () => {
    const res = await call("POST", "/api/v1/payments/gateway_a/create", {
      amount: "950",
      subtotal: 1.5,
      totalAmount: 2 ** 60,
      merchantName: 5,
      transactionDate: "yesterday",
      items: [{ unitPrice: 1 }, { unitPrice: "350", quantity: null, taxes: [{ amount: "1" }] }],
    });
    const error = expectError(res, 400, "invalid_request");
    expect(error.details.split("; ")).toEqual([
      "amount: must be a JSON integer, not a string",
      "subtotal: must be an integer",
      "totalAmount: must be an integer between ±9007199254740991",
      "merchantName: must be a string",
      "transactionDate: must be an RFC 3339 timestamp, e.g. 2026-01-31T12:00:00Z",
      "items[1].unitPrice: must be a JSON integer, not a string",
      "items[1].taxes[0].amount: must be a JSON integer, not a string",
    ]);
  });

  it("maps path and query parameters onto fields by name, coercing by field type", async () => {
    const list = await call("GET", "/api/v1/receipts/usr_42?pageSize=20");
    expect(list.status).toBe(200);
    expect(list.body.data).toEqual({
      receipts: [
        {
          version: "1.0",
          receiptId: "usr_42",
          keyId: "key-1",
          ciphertext: "AQID",
          iv: "",
          authTag: "",
          merchantId: "",
          transactionId: "",
          createdAt: "2026-01-01T00:00:00Z",
          isEscrowed: false,
        },
      ],
      nextPageToken: "size:20",
    });
    const snake = await call("GET", "/api/v1/receipts/usr_42?page_size=7");
    expect(snake.body.data.nextPageToken).toBe("size:7");
    const encoded = await call("GET", "/api/v1/transactions/t%2F1/receipt?merchantId=m1");
    expect(encoded.body.data.receiptId).toBe("t/1/m1");
  });

  it("rejects bad query values and unknown query parameters", async () => {
    const res = await call("GET", "/api/v1/receipts/usr_42?pageSize=ten&sort=desc&pageToken=a&pageToken=b");
    const error = expectError(res, 400, "invalid_request");
    expect(error.details).toBe(
      "pageSize: must be an integer; sort: unknown query parameter; pageToken: must be given once",
    );
    const bodyAll = await call("POST", "/api/v1/onboarding/register?keyId=k", { hashedPan: "A".repeat(64) });
    expect(expectError(bodyAll, 400, "invalid_request").details).toBe("keyId: unknown query parameter");
    const badUrl = await call("GET", "/api/v1/receipts/%E0%A4%A");
    expect(expectError(badUrl, 400, "invalid_request").message).toBe("The request URL is malformed.");
  });

  it("reports an invalid path segment as invalid_request", async () => {
    const res = await call("POST", "/api/v1/payments/gateway_x/create", {});
    expect(expectError(res, 400, "invalid_request").details).toBe("gateway: must be gateway_a or gateway_b");
  });

  it("returns only the response_body field as data", async () => {
    const res = await call("GET", "/api/v1/transactions/t1/receipt");
    expect(res.status).toBe(200);
    expect(res.body.data.receiptId).toBe("t1/");
    expect(res.body.data).not.toHaveProperty("receipt");
  });

  it("hides internal errors behind a generic message", async () => {
    const res = await call("GET", "/api/v1/transactions/boom/receipt");
    const error = expectError(res, 500, "internal_server_error");
    expect(error.message).toBe("Internal server error.");
    expect(JSON.stringify(res.body)).not.toContain("hunter2");
  });

  it("sends error headers: retry-after and rate limits", async () => {
    const res = await call("GET", "/api/v1/transactions/limited/receipt");
    expectError(res, 429, "rate_limit_exceeded");
    expect(res.headers.get("retry-after")).toBe("7");
    expect(res.headers.get("x-ratelimit-remaining")).toBe("0");
    expect(res.headers.get("x-test-interceptor")).toMatch(/^rest:\d+$/);
  });

  it("answers an unknown path with 404 not_found in the envelope", async () => {
    const res = await call("GET", "/api/v1/nope");
    expect(expectError(res, 404, "not_found").message).toBe("No endpoint GET /api/v1/nope.");
    expect(res.headers.get("x-request-id")).toMatch(UUID);
    const post = await call("POST", "/nowhere", "<xml/>", { "content-type": "text/xml" });
    expectError(post, 404, "not_found");
  });

  it("answers a body over the limit with 413 payload_too_large", async () => {
    const res = await call("POST", "/api/v1/onboarding/register", { publicKey: "x".repeat(70_000) });
    expect(expectError(res, 413, "payload_too_large").message).toBe("The body is larger than 65536 bytes.");
  });

  it("answers a wrong Content-Type with 415 unsupported_media_type", async () => {
    const res = await call("POST", "/api/v1/onboarding/register", "hashedPan=x", {
      "content-type": "application/x-www-form-urlencoded",
    });
    expectError(res, 415, "unsupported_media_type");
    const charset = await call("POST", "/api/v1/onboarding/generate-keys", "{}", {
      "content-type": "application/json; charset=utf-8",
    });
    expect(charset.status).toBe(200);
  });

  it("answers malformed JSON with 400 invalid_request", async () => {
    const res = await call("POST", "/api/v1/onboarding/register", '{"hashedPan": ');
    expect(expectError(res, 400, "invalid_request").details).toBe("body: is not valid JSON");
    const array = await call("POST", "/api/v1/onboarding/register", "[1]");
    expect(expectError(array, 400, "invalid_request").details).toBe("body: must be a JSON object");
  });

  it("echoes a sane X-Request-Id and replaces an insane one", async () => {
    const sane = "abc-123._:XYZ";
    const echoed = await call(
      "POST",
      "/api/v1/onboarding/register",
      { hashedPan: "x" },
      { "x-request-id": sane },
    );
    expect(echoed.headers.get("x-request-id")).toBe(sane);
    expect(echoed.body.error?.request_id).toBe(sane);
    for (const insane of ["a".repeat(129), "has spaces", "semi;colon"]) {
      const res = await call("GET", "/api/v1/nope", undefined, { "x-request-id": insane });
      expect(res.headers.get("x-request-id")).toMatch(UUID);
      expect(res.body.error?.request_id).toBe(res.headers.get("x-request-id"));
    }
    const ok = await call("POST", "/api/v1/onboarding/generate-keys", undefined, {
      "x-request-id": "b".repeat(128),
    });
    expect(ok.headers.get("x-request-id")).toBe("b".repeat(128));
  });

  it("gives the same envelope over HTTP/2", async () => {
    const res = await http2Request(t.baseUrl, { ":method": "GET", ":path": "/api/v1/nope" });
    expect(res.status).toBe(404);
    expect(JSON.parse(res.text).error.code).toBe("not_found");
    expect(res.headers["x-request-id"]).toMatch(UUID);
  });

  it("serves liveness, readiness and counts failures before an RPC in /metrics", async () => {
    expect((await call("GET", "/healthz")).body).toEqual({ success: true, data: { status: "ok" } });
    expect((await call("GET", "/readyz")).status).toBe(200);
    t.setReady(false);
    try {
      expectError(await call("GET", "/readyz"), 503, "service_unavailable");
    } finally {
      t.setReady(true);
    }
    const text = await (await fetch(`${t.baseUrl}/metrics`)).text();
    expect(text).toContain('http_requests_total{protocol="http",method="unmatched",code="not_found"}');
    expect(text).toContain(
      'http_requests_total{protocol="rest",method="receipts.v1.OnboardingService/Register",code="payload_too_large"}',
    );
  });
});
