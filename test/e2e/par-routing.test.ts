import { createHmac, generateKeyPairSync, randomBytes } from "node:crypto";
import { status as GrpcStatus, Metadata } from "@grpc/grpc-js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { createReceiptsClient, type MerchantReceipt, sealAndStoreReceipt } from "../../src/client/index.js";
import { grpcClient, grpcUnary } from "../support/grpc.js";
import {
  type Envelope,
  get,
  hashPan,
  post,
  receiptBody,
  startService,
  type TestService,
} from "../support/harness.js";
import { dumpableMemory } from "../support/store-dump.js";

/**
 * Routing by Payment Account Reference, against a running server as merchants and
 * issuers (and strangers) call it: a card registered by its PAR receives what merchants route by that
 * PAR on every merchant path (look-up, encrypt, create, sealed), its escrow is released to it, it is
 * erased like any card; malformed PARs, both or neither card fields, another tenant's PAR and a PAR
 * beside the hashed PAN of the same card get what README, "Who owns what", says; the PAR is never in a log
 * line, an answer or the store.
 */

const TOKEN = `adm_${randomBytes(24).toString("base64url")}`;
const PEPPER = "par-test-pepper-par-test-pepper-par-test";

/** A fresh PAR: 29 upper-case letters and digits. */
function newPar(): string {
  const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  return Array.from(randomBytes(29), (b) => alphabet[b % alphabet.length]).join("");
}

type Answer = { status: number; body: Envelope };

describe("routing by PAR over REST", () => {
  const logLines: string[] = [];
  let svc: TestService;
  let bankB: string;
  /** Every PAR and hashed PAN this test sent: none may appear in a log line or the store. */
  const sent: string[] = [];

  beforeAll(async () => {
    svc = await startService({ env: { ADMIN_TOKEN: TOKEN, HASHED_PAN_PEPPER: PEPPER }, logLines });
    bankB = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "bank-b" });
  });
  afterAll(async () => {
    await svc?.close();
  });

  /** Generates a key pair for an issuer and registers it under `card` (`{par}` or `{hashedPan}`). */
  async function register(card: Record<string, string>, issuerKey = svc.issuerKey) {
    const keys = await post(svc, "/api/v1/onboarding/generate-keys", issuerKey, {});
    expect(keys.status).toBe(200);
    const { keyId, publicKey, privateKey } = keys.body.data as Record<string, string>;
    const reg = await post(svc, "/api/v1/onboarding/register", issuerKey, { ...card, publicKey, keyId });
    return { reg, keyId: keyId as string, privateKey: privateKey as string };
  }

  /** Decrypts `receiptId` of user `userId` with a fresh grant. */
  async function decrypt(userId: string, keyId: string, privateKey: string, receiptId: string) {
    const grant = await post(svc, "/api/v1/keys/grant-access", svc.issuerKey, { userId, keyId });
    expect(grant.status).toBe(200);
    return post(svc, "/api/v1/receipts/decrypt", svc.issuerKey, {
      receiptId,
      tokenId: grant.body.data.tokenId,
      privateKey,
    });
  }

  /** Every audit event of the tenant of `key`, read page by page until a page is empty. */
  async function auditOf(key: string): Promise<{ action: string; userId?: string }[]> {
    const events: { action: string; userId?: string }[] = [];
    for (let token = "", pages = 0; pages < 50; pages++) {
      const page = await get(svc, `/api/v1/audit?pageToken=${token}`, key);
      expect(page.status, JSON.stringify(page.body)).toBe(200);
      if (page.body.data.events.length === 0) return events;
      events.push(...page.body.data.events);
      token = page.body.data.nextPageToken;
    }
    throw new Error("the audit feed never ended");
  }

  function expectInvalid(answer: Answer, field: string): void {
    expect(answer.status, JSON.stringify(answer.body)).toBe(400);
    expect(answer.body.error?.code).toBe("invalid_request");
    expect(answer.body.error?.details).toContain(`${field}:`);
  }

  it("delivers to a card registered by PAR what merchants route by it: look-up, encrypt, create, sealed", async () => {
    const par = newPar();
    sent.push(par);
    const { reg, keyId, privateKey } = await register({ par });
    expect(reg.status, JSON.stringify(reg.body)).toBe(200);
    const userId = reg.body.data.userId as string;

    const lookup = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, { recipientPar: par });
    expect(lookup.status, JSON.stringify(lookup.body)).toBe(200);
    expect(lookup.body.data).toMatchObject({ keyId, isEscrowed: false });

    const encrypted = receiptBody({
      recipientHashedPan: undefined,
      recipientPar: par,
      merchantName: "Tap Cafe",
    });
    const enc = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, encrypted);
    expect(enc.status, JSON.stringify(enc.body)).toBe(200);
    expect(enc.body.data).toMatchObject({ keyId, isEscrowed: false });

    const paid = receiptBody({ recipientHashedPan: undefined, recipientPar: par, merchantName: "Tap Bar" });
    const pay = await post(
      svc,
      "/api/v1/payments/gateway_a/create",
      svc.merchantKey,
      { ...paid, amount: 950 },
      { "idempotency-key": randomBytes(16).toString("hex") },
    );
    expect(pay.status, JSON.stringify(pay.body)).toBe(200);
    expect(pay.body.data.serviceMetadata).toMatchObject({ keyId, isEscrowed: false });

    const merchant = createReceiptsClient({ baseUrl: svc.baseUrl, apiKey: svc.merchantKey });
    const aside = receiptBody({ recipientHashedPan: undefined, merchantName: "Tap Aside" });
    // The card's key is not vouched for by a binding here (register does not take one yet).
    const stored = await sealAndStoreReceipt(
      merchant,
      { ...(aside as unknown as MerchantReceipt), recipientPar: par },
      { trust: "unverified" },
    );
    if (stored.kind !== "receipt") throw new Error("expected a stored receipt");
    expect(stored.receipt.keyId).toBe(keyId);

    const listing = await get(svc, `/api/v1/receipts/${userId}`, svc.issuerKey);
    expect(listing.status).toBe(200);
    const ids = (listing.body.data.receipts as { receiptId: string }[]).map((r) => r.receiptId).sort();
    expect(ids).toEqual([encrypted.receiptId, paid.receiptId, aside.receiptId].sort());

    const opened = await decrypt(userId, keyId, privateKey, encrypted.receiptId as string);
    expect(opened.status, JSON.stringify(opened.body)).toBe(200);
    expect(opened.body.data.merchantName).toBe("Tap Cafe");
    // Input only, like the hashed PAN: never sealed into the receipt.
    expect(JSON.stringify(opened.body.data)).not.toContain(par);
  });

  it("takes a payment with a merchant-sealed receipt by PAR, and refunds it with a refund receipt by PAR", async () => {
    const par = newPar();
    sent.push(par);
    const { reg, keyId } = await register({ par });
    expect(reg.status).toBe(200);
    const merchant = createReceiptsClient({ baseUrl: svc.baseUrl, apiKey: svc.merchantKey });
    const sale = receiptBody({ recipientHashedPan: undefined, merchantName: "Tap Diner" });
    const paid = await sealAndStoreReceipt(
      merchant,
      { ...(sale as unknown as MerchantReceipt), recipientPar: par },
      { trust: "unverified", payment: { gateway: "gateway_a", amount: 950n } },
    );
    if (paid.kind !== "payment") throw new Error("expected a payment");
    expect(paid.payment.serviceMetadata).toMatchObject({ keyId, isEscrowed: false });
    const refund = await post(
      svc,
      `/api/v1/payments/${paid.payment.paymentId}/refund`,
      svc.merchantKey,
      {
        ...receiptBody({ recipientHashedPan: undefined, recipientPar: par }),
        receiptType: "refund",
        originalReceiptId: sale.receiptId,
        amount: 950,
      },
      { "idempotency-key": randomBytes(16).toString("hex") },
    );
    expect(refund.status, JSON.stringify(refund.body)).toBe(200);
    expect(refund.body.data.serviceMetadata).toMatchObject({ keyId, isEscrowed: false });
    const listing = await get(svc, `/api/v1/receipts/${reg.body.data.userId}`, svc.issuerKey);
    expect(listing.body.data.receipts).toHaveLength(2);
  });

  it("escrows what arrives for a PAR before its registration, and releases it to the PAR's registration", async () => {
    const par = newPar();
    sent.push(par);
    const early = receiptBody({ recipientHashedPan: undefined, recipientPar: par });
    const enc = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, early);
    expect(enc.status, JSON.stringify(enc.body)).toBe(200);
    expect(enc.body.data.isEscrowed).toBe(true);

    const { reg, keyId, privateKey } = await register({ par });
    expect(reg.status).toBe(200);
    expect(reg.body.data.releasedReceipts).toBe(1);
    const opened = await decrypt(reg.body.data.userId, keyId, privateKey, early.receiptId as string);
    expect(opened.status, JSON.stringify(opened.body)).toBe(200);
  });

  it("refuses malformed PARs, both card fields and neither, on every path, naming the field and writing nothing", async () => {
    const hashedPan = hashPan("4000000000000010");
    const malformed = [
      newPar().toLowerCase(),
      newPar().slice(0, 28),
      `${newPar()}A`,
      `${newPar().slice(0, 28)}-`,
      `${newPar().slice(0, 28)}\u00c9`,
      " ".repeat(29),
      hashedPan,
      "A".repeat(10_000),
    ];
    const payments = async () =>
      (await get(svc, "/api/v1/payments", svc.merchantKey)).body.data.payments ?? [];
    const paymentsBefore = (await payments()).length;
    const merchantPaths: [string, (card: Record<string, unknown>) => Record<string, unknown>][] = [
      ["/api/v1/keys/lookup", (card) => card],
      ["/api/v1/receipts/encrypt", (card) => receiptBody({ recipientHashedPan: undefined, ...card })],
      [
        "/api/v1/payments/gateway_a/create",
        (card) => ({ ...receiptBody({ recipientHashedPan: undefined, ...card }), amount: 950 }),
      ],
    ];
    for (const [path, body] of merchantPaths) {
      for (const par of malformed) {
        expectInvalid(await post(svc, path, svc.merchantKey, body({ recipientPar: par })), "recipientPar");
      }
      const both = await post(
        svc,
        path,
        svc.merchantKey,
        body({ recipientPar: newPar(), recipientHashedPan: hashedPan }),
      );
      expectInvalid(both, "recipientPar");
      expect(both.body.error?.details).toContain("cannot stand beside recipientHashedPan");
      expectInvalid(await post(svc, path, svc.merchantKey, body({})), "recipientHashedPan");
    }
    for (const par of malformed) {
      const { reg } = await register({ par });
      expectInvalid(reg, "par");
      expectInvalid(await post(svc, "/api/v1/escrow/pending", svc.issuerKey, { par }), "par");
    }
    expectInvalid((await register({})).reg, "hashedPan");
    // Nothing was written: no payment (and no receipt: each refusal came before anything was sealed).
    expect(await payments()).toHaveLength(paymentsBefore);
  });

  it("keeps a PAR to the tenant that registered it: another issuer gets conflict, or forbidden in a BIN it does not own", async () => {
    const par = newPar();
    sent.push(par);
    const first = await register({ par, cardBin: "52000001" });
    expect(first.reg.status).toBe(200);
    const taken = await register({ par }, bankB);
    expect(taken.reg.status).toBe(409);
    expect(taken.reg.body.error?.code).toBe("conflict");

    const bins = await fetch(`${svc.baseUrl}/admin/v1/issuers/issuer-1/bins`, {
      method: "PUT",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ bins: ["52000001"] }),
    });
    expect(bins.status).toBe(200);
    const squatter = await register({ par: newPar(), cardBin: "52000001" }, bankB);
    expect(squatter.reg.status).toBe(403);
    expect(squatter.reg.body.error?.code).toBe("forbidden");

    // bank-b cannot read issuer-1's escrow for the PAR, nor list its user's receipts.
    const pending = await post(svc, "/api/v1/escrow/pending", bankB, { par });
    expect(pending.status).toBe(200);
    expect(pending.body.data.receipts ?? []).toEqual([]);
    const listing = await get(svc, `/api/v1/receipts/${first.reg.body.data.userId}`, bankB);
    expect([403, 404]).toContain(listing.status);
  });

  it("treats a PAR and the hashed PAN of one card as two cards until the issuer registers the PAR", async () => {
    const pan = "4000000000000028";
    const par = newPar();
    sent.push(par, hashPan(pan));
    const byPan = await register({ hashedPan: hashPan(pan) });
    expect(byPan.reg.status).toBe(200);
    // The service cannot know the PAR is this card's: the receipt waits in escrow, not in another's hands.
    const tap = receiptBody({ recipientHashedPan: undefined, recipientPar: par });
    const enc = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, tap);
    expect(enc.status).toBe(200);
    expect(enc.body.data.isEscrowed).toBe(true);
    const listing = await get(svc, `/api/v1/receipts/${byPan.reg.body.data.userId}`, svc.issuerKey);
    expect((listing.body.data.receipts ?? []).map((r: { receiptId: string }) => r.receiptId)).not.toContain(
      tap.receiptId,
    );
  });

  it("lets the BIN's owner take a PAR card from another issuer, audited for both (a claim conflict)", async () => {
    const par = newPar();
    sent.push(par);
    const squat = await register({ par }, bankB);
    expect(squat.reg.status).toBe(200);
    const bins = await fetch(`${svc.baseUrl}/admin/v1/issuers/issuer-1/bins`, {
      method: "PUT",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ bins: ["52000001", "53000002"] }),
    });
    expect(bins.status).toBe(200);
    const owner = await register({ par, cardBin: "53000002" });
    expect(owner.reg.status, JSON.stringify(owner.reg.body)).toBe(200);
    expect(owner.reg.body.data.superseded).toBe(true);
    const tap = receiptBody({ recipientHashedPan: undefined, recipientPar: par });
    const enc = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, tap);
    expect(enc.body.data).toMatchObject({ keyId: owner.keyId, isEscrowed: false });
    const conflicts = async (key: string) =>
      (await auditOf(key)).filter((e) => e.action === "card_binding_conflict");
    expect(await conflicts(svc.issuerKey)).toEqual(
      expect.arrayContaining([expect.objectContaining({ userId: owner.reg.body.data.userId })]),
    );
    expect(await conflicts(bankB)).toEqual(
      expect.arrayContaining([expect.objectContaining({ userId: squat.reg.body.data.userId })]),
    );
  });

  it("escrows a tap in an issuer's BIN to that issuer's own escrow key, listed for it by PAR alone", async () => {
    const par = newPar();
    sent.push(par);
    const bins = await fetch(`${svc.baseUrl}/admin/v1/issuers/bank-b/bins`, {
      method: "PUT",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ bins: ["54000003"] }),
    });
    expect(bins.status).toBe(200);
    const escrowKey = generateKeyPairSync("ec", { namedCurve: "P-256" })
      .publicKey.export({ format: "der", type: "spki" })
      .toString("base64");
    const registered = await post(svc, "/api/v1/issuers/escrow-keys", bankB, { publicKey: escrowKey });
    expect(registered.status, JSON.stringify(registered.body)).toBe(200);
    const tap = receiptBody({ recipientHashedPan: undefined, recipientPar: par, cardBin: "54000003" });
    const enc = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, tap);
    expect(enc.body.data).toMatchObject({ isEscrowed: true, keyId: registered.body.data.escrowKeyId });
    const pending = await post(svc, "/api/v1/escrow/pending", bankB, { par });
    expect(pending.status).toBe(200);
    expect(pending.body.data.receipts.map((r: { receiptId: string }) => r.receiptId)).toEqual([
      tap.receiptId,
    ]);
    // Not to another issuer, and not by the same PAR in another case.
    expect(
      (await post(svc, "/api/v1/escrow/pending", svc.issuerKey, { par })).body.data.receipts ?? [],
    ).toEqual([]);
    expectInvalid(await post(svc, "/api/v1/escrow/pending", bankB, { par: par.toLowerCase() }), "par");
  });

  it("erases a card registered by PAR: its receipts go, and the PAR routes to escrow again", async () => {
    const par = newPar();
    sent.push(par);
    const { reg } = await register({ par });
    const userId = reg.body.data.userId as string;
    const r = receiptBody({ recipientHashedPan: undefined, recipientPar: par });
    expect((await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, r)).status).toBe(200);
    const erased = await fetch(`${svc.baseUrl}/api/v1/users/${userId}`, {
      method: "DELETE",
      headers: { "x-api-key": svc.issuerKey },
    });
    expect(erased.status).toBe(200);
    const lookup = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, { recipientPar: par });
    expect(lookup.body.data.isEscrowed).toBe(true);
  });

  it("carries the PAR over gRPC: register by PAR and look it up, and refuses a malformed one naming it", async () => {
    const par = newPar();
    sent.push(par);
    const { reg, keyId } = await register({ par });
    expect(reg.status).toBe(200);
    const keys = grpcClient(KeysService, svc.port);
    try {
      const metadata = new Metadata();
      metadata.set("x-api-key", svc.merchantKey);
      const found = await grpcUnary<{ keyId: string; isEscrowed: boolean }>(
        keys,
        "lookupKey",
        { recipientPar: par },
        metadata,
      );
      expect(found.error).toBeUndefined();
      expect(found.response).toMatchObject({ keyId, isEscrowed: false });
      const bad = await grpcUnary(keys, "lookupKey", { recipientPar: par.toLowerCase() }, metadata);
      expect(bad.error?.code).toBe(GrpcStatus.INVALID_ARGUMENT);
      // The field violation travels in google.rpc.Status (grpc-status-details-bin): it names the field.
      const status = Buffer.from(bad.error?.metadata.get("grpc-status-details-bin")[0] ?? "").toString(
        "latin1",
      );
      expect(status).toContain("recipientPar");
      expect(`${status} ${bad.error?.details}`).not.toContain(par.toLowerCase());
    } finally {
      keys.close();
    }
  });

  it("stores a PAR only keyed (HMAC under the pepper, apart from hashed PANs), and never logs it", async () => {
    const par = newPar();
    sent.push(par);
    const { reg } = await register({ par });
    const user = await svc.store.users.findByPanHash(
      createHmac("sha256", PEPPER).update(`par:${par}`).digest("hex"),
    );
    expect(user?.userId).toBe(reg.body.data.userId);
    expect(await svc.store.users.findByPanHash(createHmac("sha256", PEPPER).update(par).digest("hex"))).toBe(
      undefined,
    );
    // Nowhere in the store in the clear: users, receipts, escrow, payments, idempotency, audit.
    const stored = JSON.stringify(dumpableMemory(svc.store).dump());
    expect(stored.length).toBeGreaterThan(10_000);
    expect(sent.filter((value) => stored.includes(value))).toEqual([]);
    expect(logLines.length).toBeGreaterThan(50);
    for (const value of sent) {
      expect(logLines.filter((line) => line.includes(value))).toEqual([]);
    }
  });
});
