import { generateKeyPairSync } from "node:crypto";
import { type Client, status } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { hashApiKey } from "../../src/domain/api-keys.js";
import { hashToken } from "../../src/domain/grants.js";
import { hashPan, post, receiptBody, startService, type TestService } from "../support/harness.js";
import { storeDouble } from "./store-double.js";
import { type Cardholder, grantFor, grpcTyped, onboard, rawGrpcClient } from "./support.js";

/** Distinctive receipt contents: if any of these shows up in a log line or a stored document, it leaked. */
const PLAINTEXT = {
  merchantName: "Zanzibar Quokka Emporium",
  merchantStreet: "17 Obscure Lantern Alley",
  merchantContactEmail: "quokka.keeper@zanzibar-emporium.example",
  itemName: "Quokka Sourdough Loaf No. 77",
};

/**
 * Every window of `length` characters of a private key, none of which may appear anywhere. The
 * first 64 characters are left out: they encode the PKCS#8 header (version, algorithm, lengths),
 * which is the same for every RSA-2048 key and so a secret of none.
 */
function windows(privateKey: string, length = 40): string[] {
  const material = privateKey.slice(64);
  return Array.from({ length: material.length - length + 1 }, (_, i) => material.slice(i, i + length));
}

/** The secrets found in `haystack`, by name; each may be found whole or, for keys, as any 40-character piece. */
function leaks(haystack: string, secrets: Record<string, string[]>): string[] {
  return Object.entries(secrets)
    .filter(([, pieces]) => pieces.some((piece) => haystack.includes(piece)))
    .map(([name]) => name);
}

describe("secrets: nothing the service writes holds a secret or a receipt's contents", () => {
  const logLines: string[] = [];
  const errorBodies: string[] = [];
  const double = storeDouble();
  const escrowKey = generateKeyPairSync("rsa", { modulusLength: 2048 })
    .privateKey.export({ type: "pkcs8", format: "der" })
    .toString("base64");
  const pepper = "pepper-Vq8XkT2mLr9ZsW4yPn6bHc3Jd7Gf5Ae1";
  let svc: TestService;
  let grpc: Client;
  let holder: Cardholder;
  let escrowHolder: Cardholder;
  let tokenId: string;
  let clientSecret: string;
  let otherPrivateKey: string;

  /** POSTs and keeps the body of every error answer for the scan. */
  async function call(path: string, key: string, body: unknown, headers: Record<string, string> = {}) {
    const answer = await post(svc, path, key, body, headers);
    if (answer.status >= 400)
      errorBodies.push(JSON.stringify(answer.body), JSON.stringify([...answer.headers]));
    return answer;
  }

  beforeAll(async () => {
    svc = await startService({
      store: double.store,
      logLines,
      env: { ESCROW_PRIVATE_KEY: escrowKey, HASHED_PAN_PEPPER: pepper },
    });
    grpc = rawGrpcClient(svc.port);
    otherPrivateKey = generateKeyPairSync("rsa", { modulusLength: 2048 })
      .privateKey.export({ type: "pkcs8", format: "der" })
      .toString("base64");

    // The five steps, with a receipt full of recognisable contents.
    holder = await onboard(svc, "4111111111111111");
    const contents = {
      merchantName: PLAINTEXT.merchantName,
      merchantStreet: PLAINTEXT.merchantStreet,
      merchantContactEmail: PLAINTEXT.merchantContactEmail,
      items: [{ lineItemId: "1", name: PLAINTEXT.itemName, quantity: 1, unitPrice: 950, totalPrice: 950 }],
    };
    const payment = await call(
      "/api/v1/payments/gateway_a/create",
      svc.merchantKey,
      {
        ...receiptBody({ ...contents, recipientHashedPan: holder.hashedPan.toUpperCase() }),
        amount: 950,
      },
      { "idempotency-key": "secret-scan-1" },
    );
    expect(payment.status).toBe(200);
    clientSecret = payment.body.data.clientSecret;
    tokenId = await grantFor(svc, holder);
    const paymentId = payment.body.data.paymentId;
    const opened = await call("/api/v1/payments/decrypt", svc.issuerKey, {
      paymentId,
      tokenId,
      privateKey: holder.privateKey,
    });
    expect(opened.body.data.merchantName).toBe(PLAINTEXT.merchantName);

    // Escrow and its release, a receipt by encrypt, and decrypt again.
    const escrowPan = hashPan("4000000000000051");
    const escrowed = receiptBody({ ...contents, recipientHashedPan: escrowPan });
    expect((await call("/api/v1/receipts/encrypt", svc.merchantKey, escrowed)).body.data.isEscrowed).toBe(
      true,
    );
    escrowHolder = await onboard(svc, "4000000000000051");
    const escrowToken = await grantFor(svc, escrowHolder);
    const released = await call("/api/v1/receipts/decrypt", svc.issuerKey, {
      receiptId: escrowed.receiptId,
      tokenId: escrowToken,
      privateKey: escrowHolder.privateKey,
    });
    expect(released.body.data.merchantName).toBe(PLAINTEXT.merchantName);

    // Failures that carry secrets in their requests: the wrong key, a broken key, a store outage.
    expect(
      (
        await call("/api/v1/payments/decrypt", svc.issuerKey, {
          paymentId,
          tokenId,
          privateKey: otherPrivateKey,
        })
      ).status,
    ).toBe(403);
    const broken = `${holder.privateKey.slice(0, 400)}!${holder.privateKey.slice(401)}`;
    expect(
      (await call("/api/v1/payments/decrypt", svc.issuerKey, { paymentId, tokenId, privateKey: broken }))
        .status,
    ).toBe(400);
    double.inject("audit.append", "fail");
    expect(
      (
        await call("/api/v1/payments/decrypt", svc.issuerKey, {
          paymentId,
          tokenId,
          privateKey: holder.privateKey,
        })
      ).status,
    ).toBe(503);
    expect(
      (await call("/api/v1/keys/grant-access", `${svc.issuerKey}x`, { userId: holder.userId })).status,
    ).toBe(401);
    const viaGrpc = await grpcTyped(
      grpc,
      PaymentsService.method.decryptPayment,
      { paymentId, tokenId, privateKey: otherPrivateKey },
      { "x-api-key": svc.issuerKey },
    );
    expect(viaGrpc.code).toBe(status.PERMISSION_DENIED);
    errorBodies.push(viaGrpc.details, JSON.stringify(viaGrpc.metadata?.toJSON()));
  });

  afterAll(async () => {
    grpc.close();
    await svc.close();
  });

  const secrets = (): Record<string, string[]> => ({
    "merchant name": [PLAINTEXT.merchantName],
    "merchant street": [PLAINTEXT.merchantStreet],
    "contact e-mail": [PLAINTEXT.merchantContactEmail],
    "item name": [PLAINTEXT.itemName],
    "private key": windows(holder.privateKey),
    "escrowed card's private key": windows(escrowHolder.privateKey),
    "another private key sent to decrypt": windows(otherPrivateKey),
    "escrow private key": windows(escrowKey),
    "hashed PAN (lower case)": [holder.hashedPan.toLowerCase(), escrowHolder.hashedPan.toLowerCase()],
    "hashed PAN (upper case)": [holder.hashedPan.toUpperCase(), escrowHolder.hashedPan.toUpperCase()],
    "issuer API key": [svc.issuerKey],
    "merchant API key": [svc.merchantKey],
    "token id": [tokenId],
    "client secret": [clientSecret],
    pepper: [pepper],
  });

  it("writes none of them to any stored document (every store call's arguments)", () => {
    const stored = JSON.stringify(double.calls);
    expect(stored.length).toBeGreaterThan(10_000);
    expect(leaks(stored, secrets())).toEqual([]);
  });

  it("logs none of them, at the most verbose level, errors with their causes included", () => {
    expect(logLines.length).toBeGreaterThan(10);
    expect(logLines.some((line) => line.includes('"level":50'))).toBe(true);
    expect(leaks(logLines.join("\n"), secrets())).toEqual([]);
  });

  it("returns none of them in an error, on REST or gRPC", () => {
    expect(errorBodies.length).toBeGreaterThan(5);
    expect(leaks(errorBodies.join("\n"), secrets())).toEqual([]);
  });

  it("looks API keys and tokens up by their SHA-256 only: the store never sees one in the clear", () => {
    const lookups = double.calls.filter(
      (c) => c.method === "apiKeys.findByHash" || c.method === "grants.findByHash",
    );
    const asked = new Set(lookups.map((c) => c.args[0]));
    expect(asked.has(hashApiKey(svc.issuerKey))).toBe(true);
    expect(asked.has(hashApiKey(svc.merchantKey))).toBe(true);
    expect(asked.has(hashToken(tokenId))).toBe(true);
    expect([...asked].every((hash) => typeof hash === "string" && /^[0-9a-f]{64}$/.test(hash))).toBe(true);
  });
});
