import type { webcrypto } from "node:crypto";
import { type DescMessage, toJsonString } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openListing, type ReceiptsClient, sealAndStoreReceipt } from "../../src/client/index.js";
import { createReceiptsClient } from "../../src/client/node.js";
import { toBase64 } from "../../src/kt/base64.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { Store } from "../../src/store/types.js";
import { hashPan, startService, type TestService } from "../support/harness.js";

/**
 * The zero-knowledge promise (SECURITY.md, "What the service can read, in each mode"), tested from the
 * outside: a merchant that seals on its side hands the service nothing that holds the receipt's content. The
 * whole merchant-side flow runs against a real server (P-256 key made on the "device" as a non-extractable
 * WebCrypto key, look-up, signature, seal, store and a payment, listing, opening on the device); then
 * everything the service wrote or said is searched for the receipt's fields: every argument of every store
 * call, every log line at trace level, and every request and response message on the wire.
 */

const SECRETS = [
  "Zero Knowledge Cafe",
  "Secret Espresso",
  "1 Hidden Lane",
  "owner@hidden.example",
  "Lavender Scone",
];

/** Every argument of every call to a repository of `store`, as JSON text, in call order. */
function recording(store: Store, calls: string[]): Store {
  const wrap = <T extends object>(repo: T): T =>
    new Proxy(repo, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver);
        if (typeof value !== "function") return value;
        return (...args: unknown[]) => {
          calls.push(JSON.stringify(args));
          return value.apply(target, args);
        };
      },
    });
  const out = { ...store } as Record<string, unknown>;
  for (const [name, value] of Object.entries(store)) {
    if (typeof value === "object" && value !== null) out[name] = wrap(value);
  }
  return out as unknown as Store;
}

describe("merchant-side sealing: the service never holds the plaintext", () => {
  const logLines: string[] = [];
  const storeCalls: string[] = [];
  const wire: string[] = [];
  let svc: TestService;
  let issuer: ReceiptsClient;
  let merchant: ReceiptsClient;

  /** Records every request and response message as JSON, as it crossed the wire. */
  const recorder: Interceptor = (next) => async (req) => {
    if (req.stream === false) wire.push(toJsonString(req.method.input as DescMessage, req.message as never));
    const res = await next(req);
    if (res.stream === false) wire.push(toJsonString(req.method.output as DescMessage, res.message as never));
    return res;
  };

  beforeAll(async () => {
    svc = await startService({ logLines, store: recording(createMemoryStore(), storeCalls) });
    const client = (apiKey: string) =>
      createReceiptsClient({
        baseUrl: svc.baseUrl,
        apiKey,
        transportOverride: createConnectTransport({
          baseUrl: svc.baseUrl,
          httpVersion: "1.1",
          interceptors: [recorder],
        }),
      });
    issuer = client(svc.issuerKey);
    merchant = client(svc.merchantKey);
  });

  afterAll(async () => {
    await svc.close();
  });

  it("seals on the merchant's side, opens on the device, and nothing the service saw holds a field", async () => {
    // The device: a P-256 key pair whose private half cannot be exported.
    const device = await crypto.subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, false, [
      "deriveBits",
    ]);
    const spki = toBase64(new Uint8Array(await crypto.subtle.exportKey("spki", device.publicKey)));
    const keyId = crypto.randomUUID();
    const card = hashPan("4000000000000077");
    const registered = await issuer.register({ hashedPan: card, publicKey: spki, keyId });
    expect(registered.algorithm).toBe("HPKE-P256-SHA256-A256GCM");

    // The merchant: an Ed25519 signing key, registered; then look-up, sign, seal and store in one call.
    const signing = (await crypto.subtle.generateKey({ name: "Ed25519" }, false, [
      "sign",
      "verify",
    ])) as webcrypto.CryptoKeyPair;
    const signingSpki = toBase64(new Uint8Array(await crypto.subtle.exportKey("spki", signing.publicKey)));
    const signer = await merchantSigningKey(signingSpki);
    const receipt = {
      receiptId: "zk-r-1",
      merchantId: "m-zero",
      merchantName: SECRETS[0] as string,
      merchantStreet: SECRETS[2] as string,
      merchantContactEmail: SECRETS[3] as string,
      transactionId: "zk-t-1",
      transactionDate: "2026-11-25T09:00:00Z",
      currency: "EUR",
      items: [
        {
          lineItemId: "1",
          name: SECRETS[1] as string,
          quantity: 2,
          unitPrice: 350,
          totalPrice: 700,
          taxes: [],
        },
      ],
      recipientHashedPan: card,
    };
    const stored = await sealAndStoreReceipt(merchant, receipt, {
      trust: "unverified",
      signer: { merchantKeyId: signer, privateKey: signing.privateKey },
    });
    expect(stored.kind).toBe("receipt");
    const paid = await sealAndStoreReceipt(
      merchant,
      {
        ...receipt,
        receiptId: "zk-r-2",
        transactionId: "zk-t-2",
        items: [
          {
            lineItemId: "1",
            name: SECRETS[4] as string,
            quantity: 1,
            unitPrice: 450,
            totalPrice: 450,
            taxes: [],
          },
        ],
      },
      {
        trust: "unverified",
        signer: { merchantKeyId: signer, privateKey: signing.privateKey },
        payment: { gateway: "gateway_a", amount: 450n },
      },
    );
    expect(paid.kind).toBe("payment");

    // The device lists and opens both with its key.
    const listed = [];
    for await (const sealed of issuer.listAllReceipts(registered.userId)) listed.push(sealed);
    const opened = await openListing(listed, { [keyId]: device.privateKey });
    const receipts = opened.map((o) =>
      "receipt" in o ? (o.receipt as unknown as Record<string, unknown>) : undefined,
    );
    expect(receipts.map((r) => r?.merchantName)).toEqual([SECRETS[0], SECRETS[0]]);
    expect(receipts.map((r) => r?.merchantKeyId)).toEqual([signer, signer]);
    // The search finds these fields where they are: in what the device opened.
    const onDevice = JSON.stringify(receipts);
    for (const secret of SECRETS) expect(onDevice).toContain(secret);

    // ...and nowhere in what the service stored, logged, received or answered.
    expect(storeCalls.length).toBeGreaterThan(10);
    expect(logLines.length).toBeGreaterThan(5);
    expect(wire.length).toBeGreaterThan(10);
    const everything = [...storeCalls, ...logLines, ...wire].join("\n");
    for (const secret of SECRETS) expect(everything).not.toContain(secret);
    // The sealed envelope itself was stored: the service holds ciphertext only.
    expect(storeCalls.some((c) => c.includes("zk-r-1") && c.includes("ciphertext"))).toBe(true);
  });

  it("does the same over gRPC, and refuses plaintext fields beside a sealed receipt there too", async () => {
    const grpcIssuer = createReceiptsClient({
      baseUrl: svc.baseUrl,
      apiKey: svc.issuerKey,
      transport: "grpc",
    });
    const grpcMerchant = createReceiptsClient({
      baseUrl: svc.baseUrl,
      apiKey: svc.merchantKey,
      transport: "grpc",
    });
    const keys = await grpcIssuer.generateKeys({ algorithm: "HPKE-P256-SHA256-A256GCM" });
    const card = hashPan("4000000000000078");
    const user = await grpcIssuer.register({ hashedPan: card, publicKey: keys.publicKey, keyId: keys.keyId });
    const looked = await grpcMerchant.lookupKey({ recipientHashedPan: card });
    expect(looked).toMatchObject({
      keyId: keys.keyId,
      algorithm: "HPKE-P256-SHA256-A256GCM",
      isEscrowed: false,
    });
    const fields = {
      receiptId: "zk-g-1",
      merchantId: "m-zero-grpc",
      merchantName: "Over The Wire",
      transactionId: "zk-g-t-1",
      transactionDate: "2026-11-25T09:00:00Z",
      currency: "EUR",
      items: [{ lineItemId: "1", name: "Tea", quantity: 1, unitPrice: 250, totalPrice: 250, taxes: [] }],
    };
    const stored = await sealAndStoreReceipt(
      grpcMerchant,
      { ...fields, recipientHashedPan: card },
      {
        trust: "unverified",
        payment: { gateway: "gateway_b", amount: 250n },
      },
    );
    expect(stored.kind === "payment" && stored.payment.serviceMetadata?.keyId).toBe(keys.keyId);
    const [listed] = (await grpcIssuer.listReceipts(user.userId)).receipts;
    expect(listed?.keyBundle?.encapsulatedKey).toHaveLength(65);
    const opened = await openListing(listed ? [listed] : [], { [keys.keyId]: keys.privateKey });
    expect(opened.map((o) => ("receipt" in o ? o.receipt.merchantName : o))).toEqual(["Over The Wire"]);

    const mixed = grpcMerchant.createPayment("gateway_a", {
      merchantId: "m-zero-grpc",
      transactionId: "zk-g-t-2",
      recipientHashedPan: card,
      currency: "EUR",
      amount: 100n,
      merchantName: "Leaked",
      sealedReceipt: { receiptId: "zk-g-2" },
    });
    await expect(mixed).rejects.toMatchObject({ code: "invalid_request" });
  });

  /** Registers the merchant's signing key over REST and returns its `mk_...` id. */
  async function merchantSigningKey(publicKey: string): Promise<string> {
    const res = await fetch(`${svc.baseUrl}/api/v1/receipts/signing-keys`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": svc.merchantKey },
      body: JSON.stringify({ merchantId: "m-zero", publicKey }),
    });
    const body = (await res.json()) as { data: { merchantKeyId: string } };
    expect(res.status).toBe(200);
    return body.data.merchantKeyId;
  }
});
