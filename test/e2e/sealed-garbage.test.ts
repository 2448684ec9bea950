import { createPrivateKey, randomBytes } from "node:crypto";
import { type Client, status } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { encryptBody, receiptAad, wrapAesKey } from "../../src/crypto/envelope.js";
import { parsePublicKey } from "../../src/crypto/keys.js";
import {
  type Cardholder,
  expectRestRefusal,
  grantFor,
  grpcTyped,
  onboard,
  rawGrpcClient,
  send,
} from "../hardening/support.js";
import { hashPan, post, startService, type TestService } from "../support/harness.js";

/**
 * Merchant-sealed garbage (issue 31, item 8), from the attacker's side: a merchant seals what it likes
 * (valid sizes, random bytes; a real envelope around a plaintext that is no receipt; a receipt naming
 * other ids) and the cardholder's issuer asks the service to decrypt it. Every one is a documented
 * 4xx (`integrity_failure`, 422 / FAILED_PRECONDITION) on REST and gRPC, for receipts and payments,
 * both suites; a forged private key (the grant's public half, another key's secret half) is 403. No
 * answer is a 500, and the server logs no error for any of them.
 */

describe("merchant-sealed garbage is a 4xx on every decrypt path", { timeout: 120_000 }, () => {
  let svc: TestService;
  let grpc: Client;
  const logLines: string[] = [];
  const holders: Record<"rsa" | "p256", Cardholder> = {} as never;

  beforeAll(async () => {
    svc = await startService({ logLines });
    grpc = rawGrpcClient(svc.port);
    holders.rsa = await onboard(svc, "4000000000000911");
    const p256Keys = await post(svc, "/api/v1/onboarding/generate-keys", svc.issuerKey, {
      algorithm: "HPKE-P256-SHA256-A256GCM",
    });
    const { keyId, publicKey, privateKey } = p256Keys.body.data as Record<string, string>;
    const hashedPan = hashPan("4000000000000922");
    const reg = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      hashedPan,
      publicKey,
      keyId,
    });
    holders.p256 = {
      hashedPan,
      userId: reg.body.data.userId,
      keyId: keyId ?? "",
      publicKey: publicKey ?? "",
      privateKey: privateKey ?? "",
    };
  });
  afterAll(async () => {
    grpc.close();
    await svc.close();
  });

  let n = 0;
  const tokens: Record<string, string> = {};
  /** Stores a sealed receipt for `holder` as a merchant would (`viaPayment`: inside a payment). */
  async function plant(holder: Cardholder, parts: Record<string, unknown>, viaPayment = false) {
    const ids = {
      version: "1.0",
      receiptId: `junk-${++n}`,
      merchantId: "merchant-001",
      transactionId: `jt-${n}`,
    };
    const res = viaPayment
      ? await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, {
          merchantId: ids.merchantId,
          transactionId: ids.transactionId,
          recipientHashedPan: holder.hashedPan,
          currency: "EUR",
          amount: 100,
          sealedReceipt: { version: ids.version, receiptId: ids.receiptId, ...parts },
        })
      : await post(svc, "/api/v1/receipts/sealed", svc.merchantKey, {
          recipientHashedPan: holder.hashedPan,
          ...ids,
          ...parts,
        });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return { ids, paymentId: res.body.data.paymentId as string | undefined };
  }

  /** Random bytes of the right sizes for the holder's suite. */
  function randomParts(holder: Cardholder, algorithm: string) {
    const rsa = algorithm === "RSA-OAEP-256";
    return {
      keyBundle: {
        keyId: holder.keyId,
        algorithm,
        encryptedAesKey: randomBytes(rsa ? 256 : 48).toString("base64"),
        ...(rsa
          ? {}
          : { encapsulatedKey: Buffer.concat([Buffer.from([4]), randomBytes(64)]).toString("base64") }),
      },
      ciphertext: randomBytes(200).toString("base64"),
      iv: randomBytes(12).toString("base64"),
      authTag: randomBytes(16).toString("base64"),
    };
  }

  /** A real RSA envelope for the holder around `plaintext`, bound to `ids`. */
  function realRsaParts(holder: Cardholder, ids: Parameters<typeof receiptAad>[0], plaintext: Buffer) {
    const aesKey = randomBytes(32);
    const body = encryptBody(aesKey, plaintext, receiptAad(ids));
    return {
      keyBundle: {
        keyId: holder.keyId,
        algorithm: "RSA-OAEP-256",
        encryptedAesKey: wrapAesKey(aesKey, parsePublicKey(holder.publicKey).key).toString("base64"),
      },
      ciphertext: body.ciphertext.toString("base64"),
      iv: body.iv.toString("base64"),
      authTag: body.authTag.toString("base64"),
    };
  }

  /** Decrypts over REST and over gRPC; returns the REST error code and the gRPC status. */
  async function decrypt(
    holder: Cardholder,
    target: { receiptId?: string; paymentId?: string },
    privateKey = holder.privateKey,
  ) {
    // One grant per holder serves every decrypt (a user has at most 5 live grants).
    tokens[holder.userId] ??= await grantFor(svc, holder);
    const tokenId = tokens[holder.userId];
    const path = target.paymentId === undefined ? "/api/v1/receipts/decrypt" : "/api/v1/payments/decrypt";
    const body = { ...target, tokenId, privateKey };
    const rest = await send(svc, "POST", path, {
      body: JSON.stringify(body),
      headers: { "content-type": "application/json", "x-api-key": svc.issuerKey },
    });
    const error = expectRestRefusal(rest, `${path} ${JSON.stringify(target)}`);
    let grpcCode: number | undefined;
    if (target.receiptId !== undefined) {
      const outcome = await grpcTyped(grpc, ReceiptsService.method.decryptReceipt, body, {
        "x-api-key": svc.issuerKey,
      });
      grpcCode = outcome.code;
    }
    return { status: rest.status, code: error.code, grpcCode };
  }

  it("random bytes of valid sizes, RSA and P-256, receipt and payment: 422 integrity_failure", async () => {
    for (const [suite, algorithm] of [
      ["rsa", "RSA-OAEP-256"],
      ["p256", "HPKE-P256-SHA256-A256GCM"],
    ] as const) {
      const holder = holders[suite];
      const receipt = await plant(holder, randomParts(holder, algorithm));
      expect(await decrypt(holder, { receiptId: receipt.ids.receiptId })).toEqual({
        status: 422,
        code: "integrity_failure",
        grpcCode: status.FAILED_PRECONDITION,
      });
      const payment = await plant(holder, randomParts(holder, algorithm), true);
      expect(await decrypt(holder, { paymentId: payment.paymentId as string })).toMatchObject({
        status: 422,
        code: "integrity_failure",
      });
    }
  });

  it("a real envelope around a plaintext that is no receipt, or names other ids: 422", async () => {
    const holder = holders.rsa;
    const plaintexts = [
      Buffer.from([0xff, 0xfe, 0x00]),
      Buffer.from("not json"),
      Buffer.from("[1,2,3]"),
      Buffer.from('{"amount":"lots","unknownField":true}'),
    ];
    for (const plaintext of plaintexts) {
      const ids = {
        version: "1.0",
        receiptId: `junk-${++n}`,
        merchantId: "merchant-001",
        transactionId: `jt-${n}`,
      };
      await post(svc, "/api/v1/receipts/sealed", svc.merchantKey, {
        recipientHashedPan: holder.hashedPan,
        ...ids,
        ...realRsaParts(holder, ids, plaintext),
      });
      expect(await decrypt(holder, { receiptId: ids.receiptId })).toMatchObject({
        status: 422,
        code: "integrity_failure",
      });
    }
    // A receipt sealed under its own ids (its AAD) whose plaintext claims to be another receipt.
    const ids = {
      version: "1.0",
      receiptId: `junk-${++n}`,
      merchantId: "merchant-001",
      transactionId: `jt-${n}`,
    };
    const liar = realRsaParts(holder, ids, Buffer.from(JSON.stringify({ receiptId: "someone-elses" })));
    await post(svc, "/api/v1/receipts/sealed", svc.merchantKey, {
      recipientHashedPan: holder.hashedPan,
      ...ids,
      ...liar,
    });
    expect(await decrypt(holder, { receiptId: ids.receiptId })).toMatchObject({
      status: 422,
      code: "integrity_failure",
    });
  });

  it("a forged private key (the grant's public half, another key's secret half) is 403 forbidden", async () => {
    const holder = holders.rsa;
    const ids = {
      version: "1.0",
      receiptId: `junk-${++n}`,
      merchantId: "merchant-001",
      transactionId: `jt-${n}`,
    };
    await post(svc, "/api/v1/receipts/sealed", svc.merchantKey, {
      recipientHashedPan: holder.hashedPan,
      ...ids,
      ...realRsaParts(holder, ids, Buffer.from("{}")),
    });
    const jwkOf = (pkcs8: string) =>
      createPrivateKey({ key: Buffer.from(pkcs8, "base64"), format: "der", type: "pkcs8" }).export({
        format: "jwk",
      });
    const victim = jwkOf(holder.privateKey);
    const forger = jwkOf((await onboard(svc, "4000000000000933")).privateKey);
    const secret = Object.fromEntries(["d", "p", "q", "dp", "dq", "qi"].map((k) => [k, forger[k as "d"]]));
    const forged = createPrivateKey({ key: { ...victim, ...secret }, format: "jwk" })
      .export({ type: "pkcs8", format: "der" })
      .toString("base64");
    expect(await decrypt(holder, { receiptId: ids.receiptId }, forged)).toEqual({
      status: 403,
      code: "forbidden",
      grpcCode: status.PERMISSION_DENIED,
    });
  });

  it("logged no error for any of it (a 5xx logs its cause at error level)", () => {
    const errors = logLines.filter((line) => (JSON.parse(line) as { level: number }).level >= 50);
    expect(errors).toEqual([]);
  });
});
