import { configureTextEncoding, getTextEncoding } from "@bufbuild/protobuf/wire";
import { afterAll, describe, expect, it } from "vitest";
import { createReceiptsClient } from "../../src/client/index.js";
import { createReceiptsClient as createInNode } from "../../src/client/node.js";
import { clientOf, encryptedReceipt, receiptInput, rejectionOf, scriptedServer } from "./support.js";

/** Each typed method calls its RPC with the request it was given and returns the useful part. */
describe("ReceiptsClient methods", () => {
  const protobufDefault = getTextEncoding();
  afterAll(() => configureTextEncoding(protobufDefault));

  it("issuer onboarding: generateKeys, register, grantAccess", async () => {
    const server = scriptedServer();
    const { client } = clientOf(server);

    const keys = await client.generateKeys();
    const user = await client.register({ hashedPan: "cd".repeat(32), publicKey: "spki", keyId: keys.keyId });
    const grant = await client.grantAccess({ userId: user.userId, keyId: user.keyId });

    expect(keys).toMatchObject({ keyId: "key-1", privateKey: "pkcs8", algorithm: "RSA-OAEP-256" });
    expect(user).toMatchObject({ userId: "usr_1", keyId: "key-1", releasedReceipts: 2 });
    expect(grant).toMatchObject({ tokenId: "tok_1", userId: "usr_1", keyId: "key-1" });
    expect(server.calls[1]?.request).toMatchObject({
      hashedPan: "cd".repeat(32),
      publicKey: "spki",
      keyId: "key-1",
    });
  });

  it("merchant: createPayment sends gateway and receipt (bigint money), encryptReceipt returns the envelope", async () => {
    const server = scriptedServer();
    const { client } = clientOf(server);

    const payment = await client.createPayment("gateway_b", receiptInput);
    const sealed = await client.encryptReceipt(receiptInput);

    expect(server.calls[0]?.request).toMatchObject({
      gateway: "gateway_b",
      receipt: { receiptId: "rcpt-1", amount: 1250n },
    });
    expect(payment).toMatchObject({ gateway: "gateway_b", amount: 1250n, currency: "EUR" });
    expect(sealed.$typeName).toBe("receipts.v1.EncryptedReceipt");
    expect(sealed.receiptId).toBe("rcpt-1");
  });

  it("issuer decrypt calls return the decrypted Receipt", async () => {
    const server = scriptedServer();
    const { client } = clientOf(server);

    const ofPayment = await client.decryptPayment({ paymentId: "pay_9", tokenId: "tok_1", privateKey: "pk" });
    const ofReceipt = await client.decryptReceipt({
      receiptId: "r-9",
      tokenId: "tok_1",
      privateKey: "pk",
      merchantId: "m-2",
    });

    expect(ofPayment).toMatchObject({
      $typeName: "receipts.v1.Receipt",
      receiptId: "of-pay_9",
      amount: 1250n,
    });
    expect(ofReceipt.receiptId).toBe("r-9");
    expect(server.calls[1]?.request).toMatchObject({ receiptId: "r-9", tokenId: "tok_1", merchantId: "m-2" });
  });

  it("keeps a leading U+FEFF in strings, which protobuf-es's default decoder drops", async () => {
    configureTextEncoding(protobufDefault);
    const { client } = clientOf(scriptedServer());
    const receipt = await client.decryptReceipt({
      receiptId: "\ufeffr-9",
      tokenId: "tok_1",
      privateKey: "pk",
    });
    expect(receipt.receiptId).toBe("\ufeffr-9");
  });

  it("listReceipts passes pageSize and pageToken", async () => {
    const server = scriptedServer();
    const { client } = clientOf(server);

    const page = await client.listReceipts("usr_1", { pageSize: 20, pageToken: "cursor-2" });

    expect(server.calls[0]?.request).toMatchObject({ userId: "usr_1", pageSize: 20, pageToken: "cursor-2" });
    expect(page.receipts.map((r) => r.receiptId)).toEqual(["usr_1-r1"]);
  });

  it("listAllReceipts walks every page in order, following nextPageToken", async () => {
    const pages: Record<string, { ids: string[]; next: string }> = {
      "": { ids: ["r5", "r4"], next: "p2" },
      p2: { ids: ["r3", "r2"], next: "p3" },
      p3: { ids: ["r1"], next: "" },
    };
    const server = scriptedServer({
      listReceipts: (req) => {
        const page = pages[req.pageToken] ?? { ids: [], next: "" };
        return { receipts: page.ids.map(encryptedReceipt), nextPageToken: page.next };
      },
    });
    const { client } = clientOf(server);

    const ids: string[] = [];
    for await (const receipt of client.listAllReceipts("usr_1", { pageSize: 2 })) ids.push(receipt.receiptId);

    expect(ids).toEqual(["r5", "r4", "r3", "r2", "r1"]);
    expect(server.calls.map((c) => c.request)).toMatchObject([
      { pageToken: "", pageSize: 2 },
      { pageToken: "p2", pageSize: 2 },
      { pageToken: "p3", pageSize: 2 },
    ]);
  });

  it("listAllReceipts stops with an error when the server repeats a page token", async () => {
    const server = scriptedServer({
      listReceipts: () => ({ receipts: [encryptedReceipt("same")], nextPageToken: "loop" }),
    });
    const { client } = clientOf(server);

    const seen: string[] = [];
    const walk = async () => {
      for await (const receipt of client.listAllReceipts("usr_1")) seen.push(receipt.receiptId);
    };

    expect(await rejectionOf(walk())).toMatchObject({ name: "ReceiptsApiError", code: "data_loss" });
    expect(seen).toEqual(["same", "same"]);
  });

  it("getTransactionReceipt sends merchantId only when given", async () => {
    const server = scriptedServer();
    const { client } = clientOf(server);

    const mine = await client.getTransactionReceipt("txn-7");
    await client.getTransactionReceipt("txn-7", "m-3");

    expect(mine.receiptId).toBe("for-txn-7");
    expect(server.calls.map((c) => c.request)).toMatchObject([
      { transactionId: "txn-7", merchantId: "" },
      { transactionId: "txn-7", merchantId: "m-3" },
    ]);
  });

  it("rejects a misconfiguration when the client is created", () => {
    const base = { baseUrl: "http://localhost:8080", apiKey: "rk_dev_x" };
    expect(() => createReceiptsClient({ ...base, apiKey: "" })).toThrow(TypeError);
    expect(() => createReceiptsClient({ ...base, transport: "grpc-web" as "connect" })).toThrow(RangeError);
    expect(() => createReceiptsClient({ ...base, timeoutMs: -5 })).toThrow(RangeError);
    // gRPC needs Node's HTTP/2: the platform-neutral entry point says where to find it.
    expect(() => createReceiptsClient({ ...base, transport: "grpc" as "connect" })).toThrow(/"\/node"/);
    expect(createInNode({ ...base, transport: "grpc" }).generateKeys).toBeTypeOf("function");
    expect(() => createInNode({ ...base, transport: "grpc-web" as "grpc" })).toThrow(RangeError);
  });
});
