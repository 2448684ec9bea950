import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { bareError, clientOf, receiptInput, scriptedServer, serviceError } from "./support.js";

/**
 * Creates carry an Idempotency-Key that stays the same across the retries of
 * one logical call (so a retry never pays twice) and differs between calls; every request carries
 * the API key.
 */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe("Idempotency-Key", () => {
  it("is the same on every attempt of one createPayment", async () => {
    const server = scriptedServer();
    server.fail(serviceError("service_unavailable", Code.Unavailable), bareError(Code.DeadlineExceeded));
    const { client } = clientOf(server);

    const payment = await client.createPayment("gateway_a", receiptInput);

    const keys = server.calls.map((c) => c.headers.get("idempotency-key"));
    expect(keys).toHaveLength(3);
    expect(keys[0]).toMatch(UUID);
    expect(new Set(keys).size).toBe(1);
    expect(payment.paymentId).toBe("pay_3");
  });

  it("differs between two logical calls", async () => {
    const server = scriptedServer();
    const { client } = clientOf(server);

    await client.createPayment("gateway_a", receiptInput);
    await client.createPayment("gateway_a", receiptInput);

    const [first, second] = server.calls.map((c) => c.headers.get("idempotency-key"));
    expect(first).toMatch(UUID);
    expect(second).toMatch(UUID);
    expect(first).not.toBe(second);
  });

  it("comes from the injected generator, called once per logical call", async () => {
    const server = scriptedServer();
    server.fail(bareError(Code.Unavailable));
    let generated = 0;
    const { client } = clientOf(server, { idempotencyKey: () => `key-${++generated}` });

    await client.createPayment("gateway_b", receiptInput);
    await client.createPayment("gateway_b", receiptInput);

    expect(server.calls.map((c) => c.headers.get("idempotency-key"))).toEqual(["key-1", "key-1", "key-2"]);
  });

  it("is used exactly as given when the caller passes one", async () => {
    const server = scriptedServer();
    server.fail(bareError(Code.Unavailable));
    const { client } = clientOf(server, {
      idempotencyKey: () => {
        throw new Error("the generator must not be called when a key is given");
      },
    });

    await client.createPayment("gateway_a", receiptInput, { idempotencyKey: "order-4711-attempt" });

    expect(server.calls.map((c) => c.headers.get("idempotency-key"))).toEqual([
      "order-4711-attempt",
      "order-4711-attempt",
    ]);
  });

  it("is sent with encryptReceipt too, the same on every attempt", async () => {
    const server = scriptedServer();
    server.fail(serviceError("internal_server_error", Code.Internal));
    const { client } = clientOf(server);

    const sealed = await client.encryptReceipt(receiptInput);

    const keys = server.calls.map((c) => c.headers.get("idempotency-key"));
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(UUID);
    expect(keys[1]).toBe(keys[0]);
    expect(sealed.receiptId).toBe("rcpt-1");
  });

  it("is not sent by calls that create nothing", async () => {
    const server = scriptedServer();
    const { client } = clientOf(server);

    await client.grantAccess({ userId: "usr_1", keyId: "key-1" });
    await client.listReceipts("usr_1");
    await client.decryptPayment({ paymentId: "pay_1", tokenId: "tok_1", privateKey: "pkcs8" });

    expect(server.calls.map((c) => c.headers.get("idempotency-key"))).toEqual([null, null, null]);
  });
});

describe("x-api-key", () => {
  it("is sent on every attempt of every call", async () => {
    const server = scriptedServer();
    server.fail(bareError(Code.Unavailable), bareError(Code.Unavailable));
    const { client } = clientOf(server, { apiKey: "rk_test_abc123" });

    await client.generateKeys();
    await client.register({ hashedPan: "ab".repeat(32), publicKey: "spki", keyId: "key-1" });
    await client.getTransactionReceipt("txn-1");

    expect(server.calls).toHaveLength(5);
    expect(server.calls.map((c) => c.headers.get("x-api-key"))).toEqual(Array(5).fill("rk_test_abc123"));
  });
});
