import { generateKeyPairSync, randomUUID } from "node:crypto";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReceiptsService } from "../../../gen/receipts/v1/receipts_pb.js";
import { generateIssuerSigner, signStatement, statementOf } from "../../../src/client/key-binding.js";
import { sealReceipt } from "../../../src/client/webcrypto.js";
import { formatTime } from "../../../src/kt/statements.js";
import { hashPan, post, startService, type TestService } from "../../support/harness.js";
import { type LooseAdminBody, operatorCalls } from "../../support/kt-issuers.js";

/**
 * An issuer's `plaintextIntake: "refuse"` from the merchant's side, over REST, Connect and gRPC: once
 * the operator (before a confirmed root) or the root's statement (after) sets it, encrypt, create and
 * refund with receipt fields are `forbidden` for the issuer's cards, by BIN or by registration (whatever
 * BIN the merchant names), and
 * nothing is written; a receipt the merchant sealed is still taken; other issuers' cards are not
 * touched; the directory snapshot shows the setting.
 */

const TOKEN = "kt-plaintext-intake-admin-token-0123456789";
let svc: TestService;
let counter = 0;

beforeAll(async () => {
  svc = await startService({ env: { ADMIN_TOKEN: TOKEN, KT_SEQUENCER_POLL_MS: "20" } });
});
afterAll(async () => {
  await svc?.close();
});

const admin = (method: string, path: string, body?: unknown) =>
  operatorCalls<LooseAdminBody>(svc.baseUrl, TOKEN)(method, path, body);

/** A fresh issuer tenant owning `bin`, its API key, and a fresh merchant tenant with its merchantId. */
async function world(bin: string) {
  counter += 1;
  const bank = `pi-bank-${counter}`;
  const bankKey = await svc.newKey({ role: "issuer", tier: "standard", tenantId: bank });
  const bins = await admin("PUT", `/admin/v1/issuers/${bank}/bins`, { bins: [bin] });
  expect(bins.status, JSON.stringify(bins.body)).toBe(200);
  const merchantId = `pi-shop-${counter}`;
  const shopKey = await svc.newKey({ role: "merchant", tier: "standard", tenantId: merchantId });
  return { bank, bankKey, merchantId, shopKey };
}

/** A receipt body for encrypt (for create and refund, `paid` gives it the payment's `amount`). */
function receipt(merchantId: string, pan: string, cardBin?: string, paid = false): Record<string, unknown> {
  counter += 1;
  return {
    receiptId: `pi-r-${counter}`,
    merchantId,
    merchantName: "Corner Coffee",
    transactionId: `pi-t-${counter}`,
    transactionDate: "2026-01-01T09:30:00Z",
    currency: "EUR",
    recipientHashedPan: hashPan(pan),
    ...(cardBin === undefined ? {} : { cardBin }),
    ...(paid ? { amount: 950 } : { totalAmount: 950 }),
    items: [{ lineItemId: "1", name: "Flat white", quantity: 1, unitPrice: 950, totalPrice: 950 }],
  };
}

async function setIntake(bank: string, body: Record<string, unknown>) {
  return admin("PUT", `/admin/v1/issuers/${bank}/plaintext-intake`, body);
}

/** The newest directory snapshot's entry of `bank`, once it shows `want`. */
async function intakeListed(bank: string, want: string): Promise<string | undefined> {
  let seen: string | undefined;
  for (let i = 0; i < 200; i++) {
    const answer = await svc.app.domain.kt.proofs().catch(() => undefined);
    const body = answer && (await svc.store.ktLog.directory(answer.directory.sha256));
    const issuers =
      body === undefined ? [] : (JSON.parse(body.json).issuers as Array<Record<string, unknown>>);
    seen = issuers.find((e) => e.issuer === bank)?.plaintextIntake as string | undefined;
    if (seen === want) return seen;
    await new Promise((r) => setTimeout(r, 20));
  }
  return seen;
}

/** Nothing of a refused receipt was written: no receipt, and the merchantId is still nobody's. */
async function nothingWritten(merchantId: string, receiptId: string) {
  expect(await svc.store.receipts.findByMerchantReceipt(merchantId, receiptId)).toBeUndefined();
  expect(await svc.store.merchants.find(merchantId)).toBeUndefined();
}

function expectRefused(res: { status: number; body: { error?: { code: string; details: string } } }) {
  expect(res.status, JSON.stringify(res.body)).toBe(403);
  expect(res.body.error?.code).toBe("forbidden");
  expect(res.body.error?.details).toContain("sealedReceipt");
}

describe("plaintextIntake: refuse", () => {
  it("refuses encrypt and create for the issuer's BIN over REST, writes nothing, and still takes sealed receipts", async () => {
    const w = await world("42424201");
    const pan = "4242420100000001";
    const before = await post(
      svc,
      "/api/v1/receipts/encrypt",
      w.shopKey,
      receipt(w.merchantId, pan, "42424201"),
    );
    expect(before.status, JSON.stringify(before.body)).toBe(200);

    const set = await setIntake(w.bank, { plaintextIntake: "refuse" });
    expect(set).toMatchObject({ status: 200, body: { data: { tenant: w.bank, plaintextIntake: "refuse" } } });
    expect(await intakeListed(w.bank, "refuse")).toBe("refuse");

    // A fresh merchant, so that "nothing written" includes the merchantId's claim.
    const other = await world("42424202");
    const body = receipt(other.merchantId, pan, "42424201");
    const encrypt = await post(svc, "/api/v1/receipts/encrypt", other.shopKey, body);
    expectRefused(encrypt);
    expect(JSON.stringify(encrypt.body)).not.toContain(hashPan(pan));
    await nothingWritten(other.merchantId, body.receiptId as string);
    const payBody = receipt(other.merchantId, pan, "42424201", true);
    const pay = await post(svc, "/api/v1/payments/gateway_a/create", other.shopKey, payBody);
    expectRefused(pay);
    await nothingWritten(other.merchantId, payBody.receiptId as string);
    const transactionId = payBody.transactionId as string;
    expect(await svc.store.payments.findByTransaction(other.merchantId, transactionId)).toBeUndefined();

    // The merchant seals on its side to the looked-up key: taken.
    const lookup = await post(svc, "/api/v1/keys/lookup", other.shopKey, {
      recipientHashedPan: hashPan(pan),
      cardBin: "42424201",
    });
    expect(lookup.status).toBe(200);
    const sealedBody = receipt(other.merchantId, pan, "42424201");
    const envelope = await sealReceipt(sealedBody as never, lookup.body.data, { trust: "unverified" });
    const { keyId: _keyId, ...sealed } = envelope as unknown as Record<string, unknown>;
    const stored = await post(svc, "/api/v1/receipts/sealed", other.shopKey, {
      receiptId: sealedBody.receiptId,
      merchantId: other.merchantId,
      transactionId: sealedBody.transactionId,
      recipientHashedPan: hashPan(pan),
      cardBin: "42424201",
      ...sealed,
    });
    expect(stored.status, JSON.stringify(stored.body)).toBe(200);

    // Another issuer's cards are not touched.
    const elsewhere = await post(
      svc,
      "/api/v1/receipts/encrypt",
      other.shopKey,
      receipt(other.merchantId, "4242420200000002", "42424202"),
    );
    expect(elsewhere.status, JSON.stringify(elsewhere.body)).toBe(200);
  });

  it("refuses a card the issuer registered when the merchant sends no BIN, and a plaintext refund", async () => {
    const w = await world("42424203");
    const pan = "4242420300000003";
    const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const registered = await post(svc, "/api/v1/onboarding/register", w.bankKey, {
      hashedPan: hashPan(pan),
      keyId: randomUUID(),
      publicKey: publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    });
    expect(registered.status, JSON.stringify(registered.body)).toBe(200);
    const sale = receipt(w.merchantId, pan, undefined, true);
    const paid = await post(svc, "/api/v1/payments/gateway_a/create", w.shopKey, sale);
    expect(paid.status, JSON.stringify(paid.body)).toBe(200);
    expect((await setIntake(w.bank, { plaintextIntake: "refuse" })).status).toBe(200);

    const noBin = receipt(w.merchantId, pan);
    expectRefused(await post(svc, "/api/v1/receipts/encrypt", w.shopKey, noBin));
    expect(
      await svc.store.receipts.findByMerchantReceipt(w.merchantId, noBin.receiptId as string),
    ).toBeUndefined();
    // Naming another (accepting) issuer's BIN for the card does not get it taken in the clear.
    await world("42424299");
    const lie = receipt(w.merchantId, pan, "42424299");
    expectRefused(await post(svc, "/api/v1/receipts/encrypt", w.shopKey, lie));
    expect(
      await svc.store.receipts.findByMerchantReceipt(w.merchantId, lie.receiptId as string),
    ).toBeUndefined();
    const refund: Record<string, unknown> = {
      ...receipt(w.merchantId, pan, undefined, true),
      receiptType: "refund",
      originalReceiptId: sale.receiptId,
      amount: 300,
      items: [],
    };
    const refunded = await post(
      svc,
      `/api/v1/payments/${paid.body.data.paymentId}/refund`,
      w.shopKey,
      refund,
    );
    expectRefused(refunded);
    const payment = await svc.store.payments.findById(paid.body.data.paymentId);
    expect(payment?.refundedAmount ?? 0).toBe(0);
    expect(
      await svc.store.receipts.findByMerchantReceipt(w.merchantId, refund.receiptId as string),
    ).toBeUndefined();
  });

  it("answers PermissionDenied over Connect and gRPC", async () => {
    const w = await world("42424204");
    expect((await setIntake(w.bank, { plaintextIntake: "refuse" })).status).toBe(200);
    const headers = { "x-api-key": w.shopKey };
    for (const transport of [
      createConnectTransport({ baseUrl: svc.baseUrl, httpVersion: "1.1" }),
      createGrpcTransport({ baseUrl: svc.baseUrl }),
    ]) {
      const client = createClient(ReceiptsService, transport);
      const body = receipt(w.merchantId, "4242420400000004", "42424204");
      const err = await client
        .encryptReceipt(
          {
            receipt: {
              ...body,
              transactionDate: timestampFromDate(new Date("2026-01-01T09:30:00Z")),
              totalAmount: 950n,
              items: [],
            } as never,
          },
          { headers },
        )
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code, (err as ConnectError).rawMessage).toBe(Code.PermissionDenied);
      expect((err as ConnectError).rawMessage).toContain("sealedReceipt");
      await nothingWritten(w.merchantId, body.receiptId as string);
    }
  });

  it("takes the operator's word before a confirmed root, and only the root's statement after", async () => {
    const w = await world("42424205");
    const bad = await setIntake(w.bank, { plaintextIntake: "maybe" });
    expect(bad.status).toBe(400);
    expect(JSON.stringify(bad.body)).toContain("plaintextIntake");
    expect((await setIntake(w.bank, { plaintextIntake: "refuse" })).status).toBe(200);

    const root = await generateIssuerSigner("Ed25519");
    const added = await post(svc, "/api/v1/issuers/signing-keys", w.bankKey, { publicKey: root.spki });
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    const confirm = `/admin/v1/issuers/${w.bank}/signing-keys/${root.signingKeyId}/confirm`;
    expect((await admin("POST", confirm)).status).toBe(200);

    // The operator alone can no longer turn it off.
    const word = await setIntake(w.bank, { plaintextIntake: "accept" });
    expect(word.body.error?.code).toBe("invalid_signature");
    const statement = (value: string, version: number) =>
      statementOf({
        v: 1,
        type: "receipts.v1/plaintext-intake",
        issuer: w.bank,
        plaintextIntake: value,
        version,
        issuedAt: formatTime(Date.now()),
      });
    const signedAccept = await signStatement(statement("accept", 1), root);
    const mismatch = await setIntake(w.bank, { plaintextIntake: "refuse", ...pick(signedAccept) });
    expect(mismatch.body.error?.code).toBe("invalid_request");
    const skipped = await signStatement(statement("accept", 2), root);
    expect((await setIntake(w.bank, { plaintextIntake: "accept", ...pick(skipped) })).status).not.toBe(200);
    const body = receipt(w.merchantId, "4242420500000005", "42424205");
    expectRefused(await post(svc, "/api/v1/receipts/encrypt", w.shopKey, body));

    const ok = await setIntake(w.bank, { plaintextIntake: "accept", ...pick(signedAccept) });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(await intakeListed(w.bank, "accept")).toBe("accept");
    const after = await post(svc, "/api/v1/receipts/encrypt", w.shopKey, body);
    expect(after.status, JSON.stringify(after.body)).toBe(200);
  });
});

function pick(signed: { statement: string; signature: string }) {
  return { statement: signed.statement, signature: signed.signature };
}
