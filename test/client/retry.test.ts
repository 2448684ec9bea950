import { Code, type ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { createReceiptsClient, ReceiptsApiError } from "../../src/client/index.js";
import { bareError, clientOf, rejectionOf, scriptedServer, serviceError } from "./support.js";

/** The retry rules: which failures are retried, how often, and how long the client waits in between. */

const retryable: [string, () => ConnectError][] = [
  ["429 rate_limit_exceeded", () => serviceError("rate_limit_exceeded", Code.ResourceExhausted)],
  ["500 internal_server_error", () => serviceError("internal_server_error", Code.Internal)],
  ["503 service_unavailable", () => serviceError("service_unavailable", Code.Unavailable)],
  ["a proxy's 502 / 503 / 504 / 429 (Unavailable, no ErrorInfo)", () => bareError(Code.Unavailable)],
  ["a proxy's plain 500 (Unknown, no ErrorInfo)", () => bareError(Code.Unknown)],
  ["a network timeout (DeadlineExceeded)", () => bareError(Code.DeadlineExceeded)],
  ["a reset connection (Aborted)", () => bareError(Code.Aborted)],
  ["a broken stream (Internal, no ErrorInfo)", () => bareError(Code.Internal)],
];

const final: [string, () => ConnectError, string][] = [
  ["400 invalid_request", () => serviceError("invalid_request", Code.InvalidArgument), "invalid_request"],
  [
    "400 invalid_signature",
    () => serviceError("invalid_signature", Code.InvalidArgument),
    "invalid_signature",
  ],
  ["401 unauthorized", () => serviceError("unauthorized", Code.Unauthenticated), "unauthorized"],
  ["403 forbidden", () => serviceError("forbidden", Code.PermissionDenied), "forbidden"],
  ["404 not_found", () => serviceError("not_found", Code.NotFound), "not_found"],
  ["409 conflict", () => serviceError("conflict", Code.AlreadyExists), "conflict"],
  [
    "402 payment_declined",
    () => serviceError("payment_declined", Code.FailedPrecondition),
    "payment_declined",
  ],
  [
    "413 payload_too_large (ResourceExhausted like a 429)",
    () => serviceError("payload_too_large", Code.ResourceExhausted),
    "payload_too_large",
  ],
  [
    "415 unsupported_media_type",
    () => serviceError("unsupported_media_type", Code.InvalidArgument),
    "unsupported_media_type",
  ],
  [
    "ResourceExhausted without ErrorInfo (oversized message)",
    () => bareError(Code.ResourceExhausted),
    "resource_exhausted",
  ],
  ["a proxy's 401 (Unauthenticated, no ErrorInfo)", () => bareError(Code.Unauthenticated), "unauthorized"],
  ["a cancelled call", () => bareError(Code.Canceled), "canceled"],
];

describe("retries", () => {
  it.each(retryable)(
    "retries %s and succeeds on the third attempt after 1 s and 2 s",
    async (_name, error) => {
      const server = scriptedServer();
      server.fail(error(), error());
      const { client, delays } = clientOf(server);

      const grant = await client.grantAccess({ userId: "usr_1", keyId: "key-1" });

      expect(grant.tokenId).toBe("tok_1");
      expect(server.calls.map((c) => c.method)).toEqual(["grantAccess", "grantAccess", "grantAccess"]);
      expect(delays).toEqual([1000, 2000]);
    },
  );

  it.each(final)("never retries %s", async (_name, error, code) => {
    const server = scriptedServer();
    server.fail(error(), error());
    const { client, delays } = clientOf(server);

    const err = await rejectionOf(client.createPayment("gateway_a", { receiptId: "r-1" }));

    expect(err).toBeInstanceOf(ReceiptsApiError);
    expect(err).toMatchObject({ code, attempts: 1, retryable: false });
    expect(server.calls).toHaveLength(1);
    expect(delays).toEqual([]);
  });

  it("makes at most 3 attempts and reports them", async () => {
    const server = scriptedServer();
    server.fail(...Array.from({ length: 5 }, () => serviceError("service_unavailable", Code.Unavailable)));
    const { client, delays } = clientOf(server);

    const err = await rejectionOf(client.listReceipts("usr_1"));

    expect(err).toMatchObject({ code: "service_unavailable", attempts: 3, retryable: true });
    expect(server.calls).toHaveLength(3);
    expect(delays).toEqual([1000, 2000]);
  });

  it("waits Retry-After seconds instead of the backoff when the server sends it", async () => {
    const server = scriptedServer();
    server.fail(
      serviceError("rate_limit_exceeded", Code.ResourceExhausted, { retryAfter: "7" }),
      serviceError("service_unavailable", Code.Unavailable),
    );
    const { client, delays } = clientOf(server);

    await client.generateKeys();

    expect(delays).toEqual([7000, 2000]);
    expect(server.calls).toHaveLength(3);
  });

  it("retries an attempt that timed out (timeoutMs) like any network timeout", async () => {
    const server = scriptedServer();
    server.fail("hang", "hang");
    const { client, delays } = clientOf(server, { timeoutMs: 50 });

    const keys = await client.generateKeys();

    expect(keys.keyId).toBe("key-1");
    expect(server.calls).toHaveLength(3);
    expect(delays).toEqual([1000, 2000]);
  });

  it("reports a timeout on every attempt as deadline_exceeded after 3 attempts", async () => {
    const server = scriptedServer();
    server.fail("hang", "hang", "hang");
    const { client } = clientOf(server, { timeoutMs: 20 });

    const err = await rejectionOf(client.generateKeys());

    expect(err).toMatchObject({ code: "deadline_exceeded", attempts: 3 });
  });

  it("honours retry.maxAttempts and retry.baseDelayMs within the limits", async () => {
    const once = scriptedServer();
    once.fail(serviceError("internal_server_error", Code.Internal));
    const single = clientOf(once, { retry: { maxAttempts: 1 } });
    expect(await rejectionOf(single.client.generateKeys())).toMatchObject({ attempts: 1 });
    expect(single.delays).toEqual([]);

    const fast = scriptedServer();
    fast.fail(bareError(Code.Unavailable), bareError(Code.Unavailable));
    const quick = clientOf(fast, { retry: { baseDelayMs: 10 } });
    await quick.client.generateKeys();
    expect(quick.delays).toEqual([10, 20]);
  });

  it("refuses more than 3 attempts, as the retry rules cap them", () => {
    const base = { baseUrl: "http://localhost:8080", apiKey: "rk_dev_x" };
    expect(() => createReceiptsClient({ ...base, retry: { maxAttempts: 4 } })).toThrow(RangeError);
    expect(() => createReceiptsClient({ ...base, retry: { maxAttempts: 0 } })).toThrow(RangeError);
    expect(() => createReceiptsClient({ ...base, retry: { baseDelayMs: -1 } })).toThrow(RangeError);
  });

  it("stops retrying when the caller aborts during the wait", async () => {
    const server = scriptedServer();
    server.fail(bareError(Code.Unavailable), bareError(Code.Unavailable));
    const controller = new AbortController();
    const delays: number[] = [];
    const { client } = clientOf(server, {
      sleep: async (ms) => {
        delays.push(ms);
        controller.abort();
      },
    });

    const err = await rejectionOf(client.generateKeys({ signal: controller.signal }));

    expect(err).toMatchObject({ code: "canceled", attempts: 1 });
    expect(server.calls).toHaveLength(1);
    expect(delays).toEqual([1000]);
  });

  it("judges a reason this client does not know (a newer service) by its status", async () => {
    const server = scriptedServer();
    server.fail(
      serviceError("maintenance", Code.Unavailable),
      serviceError("quota_rule", Code.PermissionDenied),
    );
    const { client, delays } = clientOf(server);

    const err = await rejectionOf(client.generateKeys());

    expect(err).toMatchObject({ code: "quota_rule", attempts: 2, retryable: false });
    expect(delays).toEqual([1000]);
  });
});
