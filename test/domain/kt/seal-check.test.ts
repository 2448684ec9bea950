import { generateKeyPairSync, randomUUID } from "node:crypto";
import { fromJson, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReceiptSchema } from "../../../gen/receipts/v1/receipt_pb.js";
import { ReceiptsService } from "../../../gen/receipts/v1/receipts_pb.js";
import {
  escrowKeyStatement,
  type IssuerSigner,
  keyBindingStatement,
  signStatement,
} from "../../../src/client/key-binding.js";
import { panHashOf } from "../../../src/domain/pan.js";
import type { KeyRecord } from "../../../src/store/types.js";
import { hashPan, post, receiptBody, startService, type TestService } from "../../support/harness.js";
import { operatorSteps, ownBins, registeredRoot, untilSequenced } from "../../support/kt-issuers.js";

/**
 * Server-side sealing for a tenant with `requireBindings` (issue 32): encrypt and create seal only to
 * the key whose signed binding the key log holds under its latest checkpoint. A store writer who
 * swaps the key row of such a card (here: the memory store's row, changed in place, as a database
 * writer would) gets `integrity_failure` on encrypt and create, and no receipt or payment is
 * written; the untouched card seals normally; a tenant without `requireBindings` is not checked.
 */

const TOKEN = "kt-seal-check-test-admin-token-0123456";
let svc: TestService;

beforeAll(async () => {
  svc = await startService({ env: { ADMIN_TOKEN: TOKEN, KT_SEQUENCER_POLL_MS: "20" } });
});
afterAll(async () => {
  await svc?.close();
});

const admin = (method: string, path: string, body?: unknown) =>
  operatorSteps(svc.baseUrl, TOKEN)(method, path, body);

function p256(): { spki: string } {
  const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return { spki: publicKey.export({ type: "spki", format: "der" }).toString("base64") };
}

/** The memory store's key row of `keyId`, as a writer with access to the database would change it. */
function keyRow(keyId: string): KeyRecord {
  const keys = (svc.store.users as unknown as { keys: Map<string, KeyRecord> }).keys;
  const row = keys.get(keyId);
  if (row === undefined) throw new Error(`no key row ${keyId}`);
  return row;
}

const sequenced = () => untilSequenced(svc);

interface Issuer {
  id: string;
  key: string;
  bin: string;
  root?: IssuerSigner;
}

/** An issuer tenant owning `bin`; with `strict`, requireBindings and a confirmed root. */
async function issuer(id: string, bin: string, strict: boolean): Promise<Issuer> {
  const bank: Issuer = { id, bin, key: await svc.newKey({ role: "issuer", tier: "standard", tenantId: id }) };
  await ownBins(svc, id, [bin]);
  if (!strict) return bank;
  await admin("PUT", `/admin/v1/issuers/${id}/require-bindings`, { requireBindings: true });
  const root = await registeredRoot(svc, admin, { id, key: bank.key });
  bank.root = root;
  return bank;
}

/** Registers a card of the issuer's BIN (signed when the issuer has a root); answers its hashed PAN and keyId. */
async function card(bank: Issuer, n: number): Promise<{ hashedPan: string; keyId: string }> {
  const hashedPan = hashPan(`${bank.bin}${String(n).padStart(8, "0")}`);
  const keyId = randomUUID();
  const { spki: publicKey } = p256();
  const binding =
    bank.root === undefined
      ? undefined
      : await signStatement(
          keyBindingStatement({
            issuer: bank.id,
            card: { hashedPan },
            bin: bank.bin,
            keyId,
            publicKey,
            version: 1,
          }),
          bank.root,
        );
  const res = await post(svc, "/api/v1/onboarding/register", bank.key, {
    hashedPan,
    publicKey,
    keyId,
    ...(binding === undefined ? {} : { binding }),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return { hashedPan, keyId };
}

async function encrypt(hashedPan: string, cardBin?: string) {
  const body = receiptBody({ recipientHashedPan: hashedPan, ...(cardBin === undefined ? {} : { cardBin }) });
  const res = await post(svc, "/api/v1/receipts/encrypt", svc.merchantKey, body);
  return { res, body: body as { merchantId: string; receiptId: string; transactionId: string } };
}

async function nothingStored(body: { merchantId: string; receiptId: string; transactionId: string }) {
  expect(await svc.store.receipts.findByMerchantReceipt(body.merchantId, body.receiptId)).toBeUndefined();
  expect(await svc.store.payments.findByTransaction(body.merchantId, body.transactionId)).toBeUndefined();
}

describe("server-side sealing verifies the recipient key for tenants with requireBindings", () => {
  let strict: Issuer;
  let lax: Issuer;
  beforeAll(async () => {
    strict = await issuer("seal-strict-bank", "53000011", true);
    lax = await issuer("seal-lax-bank", "53000022", false);
  });

  it("seals to an untouched card's bound key, with or without cardBin", async () => {
    const c = await card(strict, 1);
    await sequenced();
    for (const bin of [strict.bin, undefined]) {
      const { res } = await encrypt(c.hashedPan, bin);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.data.keyId).toBe(c.keyId);
    }
    const pay = await post(
      svc,
      "/api/v1/payments/gateway_a/create",
      svc.merchantKey,
      receiptBody({ recipientHashedPan: c.hashedPan, amount: 950 }),
    );
    expect(pay.status, JSON.stringify(pay.body)).toBe(200);
  });

  it("refuses encrypt and create, writing nothing, once a store writer swapped the key row", async () => {
    const c = await card(strict, 2);
    await sequenced();
    keyRow(c.keyId).publicKey = p256().spki;
    const { res, body } = await encrypt(c.hashedPan, strict.bin);
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.error?.code).toBe("integrity_failure");
    expect(res.body.error?.message).toContain("key directory");
    await nothingStored(body);
    const payBody = receiptBody({ recipientHashedPan: c.hashedPan, amount: 950 });
    const pay = await post(svc, "/api/v1/payments/gateway_a/create", svc.merchantKey, payBody);
    expect(pay.status, JSON.stringify(pay.body)).toBe(422);
    expect(pay.body.error?.code).toBe("integrity_failure");
    await nothingStored(payBody as never);
    // Over gRPC too: FAILED_PRECONDITION.
    const grpc = createClient(ReceiptsService, createGrpcTransport({ baseUrl: svc.baseUrl }));
    const err = await grpc
      .encryptReceipt(
        { receipt: fromJson(ReceiptSchema, receiptBody({ recipientHashedPan: c.hashedPan }) as JsonValue) },
        { headers: { "x-api-key": svc.merchantKey } },
      )
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.FailedPrecondition);
  });

  it("refuses a key row added behind the log's back and made the user's active key", async () => {
    const c = await card(strict, 3);
    await sequenced();
    const users = svc.store.users as unknown as {
      keys: Map<string, KeyRecord>;
      users: Map<string, { activeKeyId: string }>;
    };
    const user = await svc.store.users.findByPanHash(panHashOf(svc.config.hashedPanPepper, c.hashedPan));
    if (user === undefined) throw new Error("no user");
    const planted = randomUUID();
    users.keys.set(planted, { ...keyRow(c.keyId), keyId: planted, publicKey: p256().spki });
    const row = users.users.get(user.userId);
    if (row === undefined) throw new Error("no user row");
    row.activeKeyId = planted;
    const { res, body } = await encrypt(c.hashedPan, strict.bin);
    expect(res.body.error?.code, JSON.stringify(res.body)).toBe("integrity_failure");
    await nothingStored(body);
  });

  it("seals escrow for the strict issuer only to its signed escrow key", async () => {
    const unregistered = hashPan(`${strict.bin}99999999`);
    // No escrow key of its own: the service's escrow key, which the snapshot lists.
    await sequenced();
    const service = await encrypt(unregistered, strict.bin);
    expect(service.res.status, JSON.stringify(service.res.body)).toBe(200);
    const publicKey = p256().spki;
    const binding = await signStatement(
      escrowKeyStatement({ issuer: strict.id, keyId: "iek_seal-check-1", publicKey, version: 1 }),
      strict.root as IssuerSigner,
    );
    const res = await post(svc, "/api/v1/issuers/escrow-keys", strict.key, { publicKey, binding });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await sequenced();
    const signed = await encrypt(unregistered, strict.bin);
    expect(signed.res.status, JSON.stringify(signed.res.body)).toBe(200);
    expect(signed.res.body.data.keyId).toBe("iek_seal-check-1");
    // The escrow key's row swapped in the store: refused.
    const rows = (
      svc.store.issuerEscrowKeys as unknown as { byTenant: Map<string, Array<{ publicKey: string }>> }
    ).byTenant;
    const row = rows.get(strict.id)?.[0];
    if (row === undefined) throw new Error("no escrow key row");
    row.publicKey = p256().spki;
    const swapped = await encrypt(unregistered, strict.bin);
    expect(swapped.res.body.error?.code, JSON.stringify(swapped.res.body)).toBe("integrity_failure");
    await nothingStored(swapped.body);
  });

  it("leaves tenants without requireBindings unchecked: a swapped row seals as before", async () => {
    const c = await card(lax, 1);
    keyRow(c.keyId).publicKey = p256().spki;
    const { res } = await encrypt(c.hashedPan, lax.bin);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.data.keyId).toBe(c.keyId);
  });
});
