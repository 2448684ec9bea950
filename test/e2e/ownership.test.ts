import { randomBytes } from "node:crypto";
import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { type Client, status as GrpcStatus, Metadata, type ServiceError } from "@grpc/grpc-js";
import Fastify from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { KeysService } from "../../gen/receipts/v1/keys_pb.js";
import { OnboardingService } from "../../gen/receipts/v1/onboarding_pb.js";
import { PaymentsService } from "../../gen/receipts/v1/payments_pb.js";
import { ReceiptsService } from "../../gen/receipts/v1/receipts_pb.js";
import { ConfigError, loadConfig } from "../../src/config.js";
import { registerAdminRoutes } from "../../src/http/admin.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { SIGNING_KEY } from "../hardening/support.js";
import { minuteStartClock } from "../support/clock.js";
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

/**
 * Who owns what, from the attacker's side: two issuer tenants (bank-a
 * owns the BIN 411111, bank-b owns none) and two merchant tenants (shop-1, shop-2), all made through the
 * operator API of a real server. Every cross-ownership move, over REST and over gRPC, gets the
 * documented error and writes nothing; the operator API itself is on only with ADMIN_TOKEN, behind its
 * bearer token and rate limit.
 */

const TOKEN = `adm_${randomBytes(24).toString("base64url")}`;
const BIN_A = "411111";
/** shop-1's merchantId, claimed by its first use. */
const SHOP1_MID = "shop-1-store";

type Answer = { status: number; headers: Headers; body: Envelope };
// biome-ignore lint/suspicious/noExplicitAny: responses are protobuf-es messages read field by field
type Any = any;

/** Calls the operator API; `token` null sends no Authorization header. */
async function admin(
  svc: TestService,
  method: string,
  path: string,
  body?: unknown,
  token: string | null = TOKEN,
): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (token !== null) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(`${svc.baseUrl}/admin/v1${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Envelope };
}

/** DELETE with an API key. */
async function del(svc: TestService, path: string, key: string): Promise<Answer> {
  const res = await fetch(`${svc.baseUrl}${path}`, { method: "DELETE", headers: { "x-api-key": key } });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Envelope };
}

function keyed(key: string): Metadata {
  const md = new Metadata();
  md.set("x-api-key", key);
  return md;
}

/** The service's error code of a gRPC failure (the `ErrorInfo` reason). */
function reasonOf(error: ServiceError | undefined): string | undefined {
  const raw = error?.metadata.get("grpc-status-details-bin")[0];
  if (!(raw instanceof Buffer)) return undefined;
  const info = fromBinary(StatusSchema, raw).details[0];
  return info && anyUnpack(info, ErrorInfoSchema)?.reason;
}

/** Expects a REST refusal with `status` and `code` in the envelope; returns the error. */
function refused(answer: Answer, status: number, code: string) {
  expect(answer.status, JSON.stringify(answer.body)).toBe(status);
  expect(answer.body.success).toBe(false);
  expect(answer.body.error?.code).toBe(code);
  expect(answer.body.error?.request_id).toBe(answer.headers.get("x-request-id"));
  return answer.body.error as NonNullable<Envelope["error"]>;
}

/** Expects a gRPC refusal with `code` and the service's string code as its reason. */
function grpcRefused(result: { error?: ServiceError }, code: GrpcStatus, reason: string) {
  expect(result.error, "expected an error").toBeDefined();
  expect(result.error?.code).toBe(code);
  expect(reasonOf(result.error)).toBe(reason);
  return result.error as ServiceError;
}

/** A receipt as the gRPC API takes it. */
function grpcReceipt(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const n = randomBytes(4).toString("hex");
  return {
    receiptId: `grpc-r-${n}`,
    merchantId: SHOP1_MID,
    merchantName: "Gate 7 Kiosk",
    transactionId: `grpc-t-${n}`,
    transactionDate: { seconds: BigInt(Date.parse("2026-01-01T08:00:00Z") / 1000), nanos: 0 },
    currency: "usd",
    recipientHashedPan: hashPan("4000000000000002"),
    totalAmount: 1234n,
    items: [{ lineItemId: "1", name: "Water", quantity: 1n, unitPrice: 1234n, totalPrice: 1234n }],
    ...overrides,
  };
}

/** The parts of a merchant-sealed receipt for the key look-up gave: sizes right, content unknowable. */
function sealedParts(keyId: string, algorithm: string) {
  return {
    keyBundle: { keyId, algorithm, encryptedAesKey: randomBytes(256) },
    ciphertext: randomBytes(120),
    iv: randomBytes(12),
    authTag: randomBytes(16),
  };
}

/** {@link sealedParts} as REST JSON (base64). */
function sealedJson(keyId: string, algorithm: string) {
  const parts = sealedParts(keyId, algorithm);
  return {
    keyBundle: {
      keyId,
      algorithm,
      encryptedAesKey: parts.keyBundle.encryptedAesKey.toString("base64"),
      // Bound to the receipt's AAD, as a bundle for an escrow key must be (these parts are random).
      aadBound: true,
    },
    ciphertext: parts.ciphertext.toString("base64"),
    iv: parts.iv.toString("base64"),
    authTag: parts.authTag.toString("base64"),
  };
}

/** Tenants made through the operator API, with their API keys. */
interface Tenants {
  bankA: string;
  bankB: string;
  shop1: string;
  shop2: string;
}

/** Generates a key pair and registers card `pan` with `issuerKey`; returns the registration. */
async function register(svc: TestService, issuerKey: string, pan: string) {
  const keys = await post(svc, "/api/v1/onboarding/generate-keys", issuerKey, {});
  expect(keys.status).toBe(200);
  const { keyId, publicKey, privateKey } = keys.body.data as Record<string, string>;
  const reg = await post(svc, "/api/v1/onboarding/register", issuerKey, {
    hashedPan: hashPan(pan),
    publicKey,
    keyId,
  });
  expect(reg.status, JSON.stringify(reg.body)).toBe(200);
  return { ...(reg.body.data as Record<string, Any>), keyId, publicKey, privateKey } as {
    userId: string;
    keyId: string;
    publicKey: string;
    privateKey: string;
    releasedReceipts?: number;
    heldReceipts?: number;
  };
}

describe("ownership across tenants, REST and gRPC", () => {
  let svc: TestService;
  let keys: Tenants;
  const clients: Client[] = [];
  let receipts: Client & Record<string, unknown>;
  let payments: Client & Record<string, unknown>;
  let onboarding: Client & Record<string, unknown>;
  let keysRpc: Client & Record<string, unknown>;

  beforeAll(async () => {
    svc = await startService({ env: { ADMIN_TOKEN: TOKEN } });
    const make = async (tenant: string, role: string) => {
      const created = await admin(svc, "POST", "/api-keys", { tenant, role });
      expect(created.status, JSON.stringify(created.body)).toBe(200);
      expect(created.body.data).toMatchObject({ tenant, role, tier: "standard", environment: "dev" });
      return created.body.data.apiKey as string;
    };
    keys = {
      bankA: await make("bank-a", "issuer"),
      bankB: await make("bank-b", "issuer"),
      shop1: await make("shop-1", "merchant"),
      shop2: await make("shop-2", "merchant"),
    };
    const bins = await admin(svc, "PUT", "/issuers/bank-a/bins", { bins: [BIN_A, "52000000"] });
    expect(bins.status, JSON.stringify(bins.body)).toBe(200);
    expect(bins.body.data).toEqual({ tenant: "bank-a", bins: [BIN_A, "52000000"], tokenBins: [] });
    receipts = grpcClient(ReceiptsService, svc.port);
    payments = grpcClient(PaymentsService, svc.port);
    onboarding = grpcClient(OnboardingService, svc.port);
    keysRpc = grpcClient(KeysService, svc.port);
    clients.push(receipts, payments, onboarding, keysRpc);
    // shop-1's first use claims its merchantId.
    const first = await post(
      svc,
      "/api/v1/receipts/encrypt",
      keys.shop1,
      receiptBody({ merchantId: SHOP1_MID }),
    );
    expect(first.status, JSON.stringify(first.body)).toBe(200);
  });
  afterAll(async () => {
    for (const c of clients) c.close();
    await svc.close();
  });

  describe("a merchantId belongs to one merchant tenant", () => {
    it("refuses shop-2's encrypt, payment, sealed receipt and signing key for shop-1's merchantId over REST, storing nothing", async () => {
      const escrowBefore = (await admin(svc, "GET", "/escrow")).body.data;
      const pan = hashPan("4000000000000002");
      const encrypt = receiptBody({ merchantId: SHOP1_MID, recipientHashedPan: pan });
      const error = refused(
        await post(svc, "/api/v1/receipts/encrypt", keys.shop2, encrypt),
        403,
        "forbidden",
      );
      expect(error.message).toContain("merchantId belongs to another tenant");

      const payment: Record<string, unknown> = {
        ...receiptBody({ merchantId: SHOP1_MID, recipientHashedPan: pan }),
        amount: 950,
      };
      const paid = await post(svc, "/api/v1/payments/gateway_a/create", keys.shop2, payment);
      expect(refused(paid, 403, "forbidden").message).toContain("merchantId belongs to another tenant");

      const lookup = await post(svc, "/api/v1/keys/lookup", keys.shop2, { recipientHashedPan: pan });
      expect(lookup.status).toBe(200);
      const { keyId, algorithm } = lookup.body.data as { keyId: string; algorithm: string };
      const sealedBody = {
        recipientHashedPan: pan,
        version: "1.0",
        receiptId: "sealed-by-shop-2",
        merchantId: SHOP1_MID,
        transactionId: "sealed-txn-shop-2",
        ...sealedJson(keyId, algorithm),
      };
      const sealed = await post(svc, "/api/v1/receipts/sealed", keys.shop2, sealedBody);
      expect(refused(sealed, 403, "forbidden").message).toContain("merchantId belongs to another tenant");
      // With a stale key bundle too: the merchantId is refused first, whatever else is wrong.
      const stale = await post(svc, "/api/v1/receipts/sealed", keys.shop2, {
        ...sealedBody,
        ...sealedJson("00000000-0000-4000-8000-000000000000", algorithm),
      });
      expect(refused(stale, 403, "forbidden").message).toContain("merchantId belongs to another tenant");
      // The same body under shop-2's own merchantId is accepted: the refusal was the ownership.
      const own = await post(svc, "/api/v1/receipts/sealed", keys.shop2, {
        ...sealedBody,
        merchantId: "shop-2-store",
      });
      expect(own.status, JSON.stringify(own.body)).toBe(200);

      const signing = await post(svc, "/api/v1/receipts/signing-keys", keys.shop2, {
        merchantId: SHOP1_MID,
        publicKey: SIGNING_KEY,
      });
      expect(refused(signing, 403, "forbidden").message).toContain("merchantId belongs to another tenant");

      // Nothing was written: no receipt, no payment, no signing key, no escrow; the owner is shop-1.
      for (const [txn, key] of [
        [encrypt.transactionId, keys.shop2],
        [payment.transactionId, keys.shop2],
        [encrypt.transactionId, keys.shop1],
        [payment.transactionId, keys.shop1],
        ["sealed-txn-shop-2", keys.shop1],
      ] as const) {
        const read = await get(svc, `/api/v1/transactions/${txn}/receipt?merchantId=${SHOP1_MID}`, key);
        refused(read, 404, "not_found");
      }
      expect(await svc.store.receipts.findByMerchantReceipt(SHOP1_MID, "sealed-by-shop-2")).toBeUndefined();
      expect(
        await svc.store.receipts.findByMerchantReceipt(SHOP1_MID, encrypt.receiptId as string),
      ).toBeUndefined();
      expect(
        await svc.store.receipts.findByMerchantReceipt(SHOP1_MID, payment.receiptId as string),
      ).toBeUndefined();
      expect(await svc.store.merchantKeys.findByMerchantId(SHOP1_MID)).toBeUndefined();
      expect((await svc.store.merchants.find(SHOP1_MID))?.tenantId).toBe("shop-1");
      const escrowAfter = (await admin(svc, "GET", "/escrow")).body.data.escrow as Array<{ count: number }>;
      const total = (list: Array<{ count: number }>) => list.reduce((sum, c) => sum + c.count, 0);
      // Only shop-2's own sealed receipt was added.
      expect(total(escrowAfter)).toBe(total(escrowBefore.escrow) + 1);
    });

    it("refuses the same four over gRPC with PERMISSION_DENIED, storing nothing", async () => {
      const pan = hashPan("4000000000000002");
      const receipt = grpcReceipt({ recipientHashedPan: pan });
      const encrypted = await grpcUnary<Any>(receipts, "encryptReceipt", { receipt }, keyed(keys.shop2));
      const error = grpcRefused(encrypted, GrpcStatus.PERMISSION_DENIED, "forbidden");
      expect(error.details).toContain("merchantId belongs to another tenant");

      const paid = await grpcUnary<Any>(
        payments,
        "createPayment",
        { gateway: "gateway_a", receipt: grpcReceipt({ recipientHashedPan: pan, amount: 1234n }) },
        keyed(keys.shop2),
      );
      grpcRefused(paid, GrpcStatus.PERMISSION_DENIED, "forbidden");

      const lookup = await grpcUnary<Any>(
        keysRpc,
        "lookupKey",
        { recipientHashedPan: pan },
        keyed(keys.shop2),
      );
      expect(lookup.error).toBeUndefined();
      const sealed = await grpcUnary<Any>(
        receipts,
        "storeSealedReceipt",
        {
          recipientHashedPan: pan,
          version: "1.0",
          receiptId: "grpc-sealed-shop-2",
          merchantId: SHOP1_MID,
          transactionId: "grpc-sealed-txn",
          ...sealedParts(lookup.response.keyId, lookup.response.algorithm),
        },
        keyed(keys.shop2),
      );
      grpcRefused(sealed, GrpcStatus.PERMISSION_DENIED, "forbidden");

      const signing = await grpcUnary<Any>(
        receipts,
        "registerSigningKey",
        { merchantId: SHOP1_MID, publicKey: SIGNING_KEY },
        keyed(keys.shop2),
      );
      grpcRefused(signing, GrpcStatus.PERMISSION_DENIED, "forbidden");

      for (const receiptId of [receipt.receiptId as string, "grpc-sealed-shop-2"]) {
        expect(await svc.store.receipts.findByMerchantReceipt(SHOP1_MID, receiptId)).toBeUndefined();
      }
      const txn = await grpcUnary<Any>(
        receipts,
        "getTransactionReceipt",
        { transactionId: receipt.transactionId, merchantId: SHOP1_MID },
        keyed(keys.shop1),
      );
      grpcRefused(txn, GrpcStatus.NOT_FOUND, "not_found");
      expect(await svc.store.merchantKeys.findByMerchantId(SHOP1_MID)).toBeUndefined();
      // shop-1 itself still uses its merchantId over gRPC.
      const mine = await grpcUnary<Any>(
        receipts,
        "encryptReceipt",
        { receipt: grpcReceipt() },
        keyed(keys.shop1),
      );
      expect(mine.error).toBeUndefined();
    });
  });

  describe("a merchantId with a signing key", () => {
    it("answers another tenant forbidden, not a signature error, signed or not, REST and gRPC", async () => {
      const mid = "signed-store";
      // Registering a signing key is a first use: it claims the merchantId for shop-1.
      const registered = await post(svc, "/api/v1/receipts/signing-keys", keys.shop1, {
        merchantId: mid,
        publicKey: SIGNING_KEY,
      });
      expect(registered.status, JSON.stringify(registered.body)).toBe(200);
      const body = receiptBody({ merchantId: mid });
      const signature = randomBytes(64).toString("base64");
      for (const headers of [{}, { "x-receipt-signature": signature }]) {
        const encrypt = await post(svc, "/api/v1/receipts/encrypt", keys.shop2, body, headers);
        expect(refused(encrypt, 403, "forbidden").message).toContain("merchantId belongs to another tenant");
        const paid = await post(
          svc,
          "/api/v1/payments/gateway_a/create",
          keys.shop2,
          { ...body, amount: 950 },
          headers,
        );
        expect(refused(paid, 403, "forbidden").message).toContain("merchantId belongs to another tenant");
      }
      const overGrpc = await grpcUnary<Any>(
        receipts,
        "encryptReceipt",
        { receipt: grpcReceipt({ merchantId: mid }) },
        keyed(keys.shop2),
      );
      grpcRefused(overGrpc, GrpcStatus.PERMISSION_DENIED, "forbidden");
      expect(await svc.store.receipts.findByMerchantReceipt(mid, body.receiptId as string)).toBeUndefined();
    });
  });

  describe("an issuer tenant's users are invisible to the other issuer", () => {
    let holder: Awaited<ReturnType<typeof register>>;
    beforeAll(async () => {
      holder = await register(svc, keys.bankA, "4111110000000001");
      const r = receiptBody({
        merchantId: SHOP1_MID,
        recipientHashedPan: hashPan("4111110000000001"),
        cardBin: BIN_A,
      });
      const sealed = await post(svc, "/api/v1/receipts/encrypt", keys.shop1, r);
      expect(sealed.body.data.isEscrowed).toBe(false);
    });

    it("answers bank-b's read, listing, grant and erasure of bank-a's user with 404 over REST and gRPC", async () => {
      refused(await get(svc, `/api/v1/receipts/${holder.userId}`, keys.bankB), 404, "not_found");
      refused(
        await post(svc, "/api/v1/keys/grant-access", keys.bankB, {
          userId: holder.userId,
          keyId: holder.keyId,
        }),
        404,
        "not_found",
      );
      refused(await del(svc, `/api/v1/users/${holder.userId}`, keys.bankB), 404, "not_found");
      // Re-registering bank-a's card under bank-b is not a way in either.
      const gen = await post(svc, "/api/v1/onboarding/generate-keys", keys.bankB, {});
      const taken = await post(svc, "/api/v1/onboarding/register", keys.bankB, {
        hashedPan: hashPan("4111110000000001"),
        publicKey: gen.body.data.publicKey,
        keyId: gen.body.data.keyId,
      });
      expect(taken.status).toBeGreaterThanOrEqual(400);
      expect(taken.status).toBeLessThan(500);

      const list = await grpcUnary<Any>(
        receipts,
        "listReceipts",
        { userId: holder.userId },
        keyed(keys.bankB),
      );
      grpcRefused(list, GrpcStatus.NOT_FOUND, "not_found");
      const grant = await grpcUnary<Any>(
        keysRpc,
        "grantAccess",
        { userId: holder.userId, keyId: holder.keyId },
        keyed(keys.bankB),
      );
      grpcRefused(grant, GrpcStatus.NOT_FOUND, "not_found");
      const erase = await grpcUnary<Any>(
        onboarding,
        "deleteUser",
        { userId: holder.userId },
        keyed(keys.bankB),
      );
      grpcRefused(erase, GrpcStatus.NOT_FOUND, "not_found");

      // Nothing changed for bank-a: its user, key and receipt are there, and nobody erased anything.
      const mine = await get(svc, `/api/v1/receipts/${holder.userId}`, keys.bankA);
      expect(mine.status).toBe(200);
      expect(mine.body.data.receipts).toHaveLength(1);
      expect((await svc.store.users.findById(holder.userId))?.activeKeyId).toBe(holder.keyId);
      const audit = await admin(svc, "GET", "/audit?tenant=bank-a");
      const actions = (audit.body.data.events as Array<{ action: string }>).map((e) => e.action);
      expect(actions).not.toContain("user.erased");
      const grants = await admin(svc, "GET", "/audit?tenant=bank-b");
      expect((grants.body.data.events as Array<{ action: string }>).map((e) => e.action)).not.toContain(
        "grant.created",
      );
    });
  });

  describe("a card under bank-a's BIN registered by bank-b", () => {
    const pan = "4111112222222222";
    let bHolder: Awaited<ReturnType<typeof register>>;
    const escrowed: string[] = [];

    beforeAll(async () => {
      bHolder = await register(svc, keys.bankB, pan);
    });

    it("sends receipts with cardBin to bank-a's escrow, not to bank-b's user, and audits the conflict", async () => {
      const lookup = await post(svc, "/api/v1/keys/lookup", keys.shop1, {
        recipientHashedPan: hashPan(pan),
        cardBin: BIN_A,
      });
      expect(lookup.body.data.isEscrowed).toBe(true);
      expect(lookup.body.data.keyId).not.toBe(bHolder.keyId);

      const rest = receiptBody({ merchantId: SHOP1_MID, recipientHashedPan: hashPan(pan), cardBin: BIN_A });
      const sealed = await post(svc, "/api/v1/receipts/encrypt", keys.shop1, rest);
      expect(sealed.status, JSON.stringify(sealed.body)).toBe(200);
      expect(sealed.body.data).toMatchObject({ isEscrowed: true });
      expect(sealed.body.data.keyBundle.keyId).not.toBe(bHolder.keyId);
      escrowed.push(rest.receiptId as string);

      const receipt = grpcReceipt({ recipientHashedPan: hashPan(pan), cardBin: "41111122" });
      const overGrpc = await grpcUnary<Any>(receipts, "encryptReceipt", { receipt }, keyed(keys.shop1));
      expect(overGrpc.error).toBeUndefined();
      expect(overGrpc.response.receipt.isEscrowed).toBe(true);
      escrowed.push(receipt.receiptId as string);

      // A payment with the cardBin goes the same way.
      const payment: Record<string, unknown> = {
        ...receiptBody({ merchantId: SHOP1_MID, recipientHashedPan: hashPan(pan), cardBin: BIN_A }),
        amount: 950,
      };
      const paid = await post(svc, "/api/v1/payments/gateway_a/create", keys.shop1, payment);
      expect(paid.status, JSON.stringify(paid.body)).toBe(200);
      expect(paid.body.data.serviceMetadata).toMatchObject({ isEscrowed: true });
      expect(paid.body.data.serviceMetadata.keyId).not.toBe(bHolder.keyId);
      escrowed.push(payment.receiptId as string);

      // A merchant that seals on its side to bank-b's user anyway is refused, and nothing is stored.
      const sealedToB = await post(svc, "/api/v1/receipts/sealed", keys.shop1, {
        recipientHashedPan: hashPan(pan),
        cardBin: BIN_A,
        version: "1.0",
        receiptId: "sealed-to-bank-b",
        merchantId: SHOP1_MID,
        transactionId: "sealed-to-bank-b-txn",
        ...sealedJson(bHolder.keyId, "RSA-OAEP-256"),
      });
      expect(refused(sealedToB, 409, "conflict").message).toContain("look it up again");
      expect(await svc.store.receipts.findByMerchantReceipt(SHOP1_MID, "sealed-to-bank-b")).toBeUndefined();

      const listing = await get(svc, `/api/v1/receipts/${bHolder.userId}`, keys.bankB);
      expect(listing.status).toBe(200);
      const listed = (listing.body.data.receipts ?? []) as Array<{ receiptId: string }>;
      for (const id of escrowed) expect(listed.map((r) => r.receiptId)).not.toContain(id);
      for (const id of escrowed) {
        const stored = await svc.store.receipts.findByMerchantReceipt(SHOP1_MID, id);
        expect(stored).toMatchObject({ isEscrowed: true, escrowOwnerTenantId: "bank-a" });
        expect(stored?.userId).toBeUndefined();
      }
      const audit = await admin(svc, "GET", "/audit?tenant=bank-a");
      const conflicts = (audit.body.data.events as Array<{ action: string; tenantId: string }>).filter(
        (e) => e.action === "card_binding_conflict",
      );
      // The look-up, both receipts and the payment.
      expect(conflicts.length).toBeGreaterThanOrEqual(4);
      expect(conflicts.every((e) => e.tenantId === "bank-a")).toBe(true);
      const counts = (await admin(svc, "GET", "/escrow")).body.data.escrow as Array<{
        ownerTenantId?: string;
        count: number;
      }>;
      expect(counts.filter((c) => c.ownerTenantId === "bank-a").reduce((s, c) => s + c.count, 0)).toBe(3);
    });

    it("routes as before without a cardBin: sealed to bank-b's user", async () => {
      const rest = receiptBody({ merchantId: SHOP1_MID, recipientHashedPan: hashPan(pan) });
      const sealed = await post(svc, "/api/v1/receipts/encrypt", keys.shop1, rest);
      expect(sealed.body.data).toMatchObject({ isEscrowed: false, keyId: bHolder.keyId });
      const listing = await get(svc, `/api/v1/receipts/${bHolder.userId}`, keys.bankB);
      expect((listing.body.data.receipts as Array<{ receiptId: string }>).map((r) => r.receiptId)).toContain(
        rest.receiptId,
      );
      // A BIN nobody owns routes as before too.
      const unowned = receiptBody({
        merchantId: SHOP1_MID,
        recipientHashedPan: hashPan(pan),
        cardBin: "999999",
      });
      const again = await post(svc, "/api/v1/receipts/encrypt", keys.shop1, unowned);
      expect(again.body.data).toMatchObject({ isEscrowed: false, keyId: bHolder.keyId });
    });

    it("keeps bank-a's escrow from bank-b's registration, and releases it to bank-a's after bank-b erases its user", async () => {
      // bank-b registers the card again with a new key: a rotation, which releases nothing of bank-a's.
      const gen = await post(svc, "/api/v1/onboarding/generate-keys", keys.bankB, {});
      const rotated = await post(svc, "/api/v1/onboarding/register", keys.bankB, {
        hashedPan: hashPan(pan),
        publicKey: gen.body.data.publicKey,
        keyId: gen.body.data.keyId,
      });
      expect(rotated.status).toBe(200);
      expect(rotated.body.data.releasedReceipts ?? 0).toBe(0);
      for (const id of escrowed) {
        expect((await svc.store.receipts.findByMerchantReceipt(SHOP1_MID, id))?.isEscrowed).toBe(true);
      }
      // bank-a cannot register the card while bank-b holds it.
      const genA = await post(svc, "/api/v1/onboarding/generate-keys", keys.bankA, {});
      const blocked = await post(svc, "/api/v1/onboarding/register", keys.bankA, {
        hashedPan: hashPan(pan),
        publicKey: genA.body.data.publicKey,
        keyId: genA.body.data.keyId,
      });
      expect(blocked.status).toBe(409);

      const erased = await del(svc, `/api/v1/users/${bHolder.userId}`, keys.bankB);
      expect(erased.status, JSON.stringify(erased.body)).toBe(200);
      expect(erased.body.data).toMatchObject({ deletedKeys: 2 });
      refused(await del(svc, `/api/v1/users/${bHolder.userId}`, keys.bankB), 404, "not_found");

      const aHolder = await register(svc, keys.bankA, pan);
      expect(aHolder.releasedReceipts).toBe(3);
      const listing = await get(svc, `/api/v1/receipts/${aHolder.userId}`, keys.bankA);
      const listed = (listing.body.data.receipts as Array<{ receiptId: string; keyId: string }>).filter((r) =>
        escrowed.includes(r.receiptId),
      );
      expect(listed).toHaveLength(3);
      for (const r of listed) expect(r.keyId).toBe(aHolder.keyId);
      // Decrypted by bank-a's cardholder: the escrowed receipt was real and is now theirs.
      const grant = await post(svc, "/api/v1/keys/grant-access", keys.bankA, {
        userId: aHolder.userId,
        keyId: aHolder.keyId,
      });
      const opened = await post(svc, "/api/v1/receipts/decrypt", keys.bankA, {
        receiptId: escrowed[0],
        tokenId: grant.body.data.tokenId,
        privateKey: aHolder.privateKey,
      });
      expect(opened.status, JSON.stringify(opened.body)).toBe(200);
      expect(opened.body.data).toMatchObject({ receiptId: escrowed[0], merchantName: "Corner Coffee" });
    });
  });

  describe("the operator API", () => {
    it("answers 401 in the envelope without a token, with a wrong one, or another scheme", async () => {
      for (const token of [null, "", `${TOKEN}x`, TOKEN.slice(0, -1), "wrong"]) {
        const answer = await admin(svc, "GET", "/api-keys", undefined, token);
        refused(answer, 401, "unauthorized");
      }
      const basic = await fetch(`${svc.baseUrl}/admin/v1/api-keys`, {
        headers: { authorization: `Basic ${TOKEN}` },
      });
      expect(basic.status).toBe(401);
      // A refused call changed nothing.
      const put = await admin(svc, "PUT", "/issuers/bank-b/bins", { bins: ["600000"] }, "wrong");
      refused(put, 401, "unauthorized");
      expect((await admin(svc, "GET", "/issuers/bank-b/bins")).body.data.bins).toEqual([]);
    });

    it("refuses bad input in the envelope and changes nothing", async () => {
      const malformed = await admin(svc, "PUT", "/issuers/bank-b/bins", {
        bins: ["12345", "abcdef", 411111],
      });
      const error = refused(malformed, 400, "invalid_request");
      expect(error.details).toContain("bins[0]");
      expect(error.details).toContain("bins[1]");
      expect(error.details).toContain("bins[2]");
      const unknown = await admin(svc, "PUT", "/issuers/bank-b/bins", { bins: ["600000"], owner: "x" });
      expect(refused(unknown, 400, "invalid_request").details).toContain("owner");
      const keyTypo = await admin(svc, "POST", "/api-keys", {
        tenant: "t",
        role: "merchant",
        teir: "sandbox",
      });
      expect(refused(keyTypo, 400, "invalid_request").details).toContain("teir");
      refused(await admin(svc, "POST", "/api-keys", { tenant: "t", role: "admin" }), 400, "invalid_request");
      refused(await admin(svc, "PUT", "/issuers/bank-b/bins", "{not json"), 400, "invalid_request");
      // bank-a's prefix, the 8-digit one under it, and the 6-digit one over bank-a's 8-digit prefix.
      for (const bin of [BIN_A, "41111199", "520000"]) {
        const taken = await admin(svc, "PUT", "/issuers/bank-b/bins", { bins: ["600000", bin] });
        expect(refused(taken, 409, "conflict").message).toContain(bin);
      }
      expect((await admin(svc, "GET", "/issuers/bank-b/bins")).body.data.bins).toEqual([]);
      expect((await admin(svc, "GET", "/issuers/bank-a/bins")).body.data.bins).toEqual([BIN_A, "52000000"]);
      const keysOfT = await admin(svc, "GET", "/api-keys?tenant=t");
      expect(keysOfT.body.data.apiKeys).toEqual([]);
    });

    it("refuses BINs for a tenant that is no issuer, and a merchantId for a tenant that is no merchant", async () => {
      // An unknown tenant (a typo) or one of the other role would own prefixes or merchantIds nobody uses.
      for (const tenant of ["bank-z", "shop-1"]) {
        const bins = await admin(svc, "PUT", `/issuers/${tenant}/bins`, { bins: ["700000"] });
        expect(refused(bins, 400, "invalid_request").details).toContain("tenant");
        expect(await svc.store.bins.list(tenant)).toEqual([]);
      }
      for (const tenant of ["shop-z", "bank-a"]) {
        const assigned = await admin(svc, "PUT", "/merchants/unclaimed-store", { tenant });
        expect(refused(assigned, 400, "invalid_request").details).toContain("tenant");
      }
      expect(await svc.store.merchants.find("unclaimed-store")).toBeUndefined();
    });

    it("moves a merchantId to the assigned tenant: the old owner is forbidden and its signing key removed", async () => {
      const mid = "moving-store";
      const first = await post(svc, "/api/v1/receipts/encrypt", keys.shop1, receiptBody({ merchantId: mid }));
      expect(first.status).toBe(200);
      const signing = await post(svc, "/api/v1/receipts/signing-keys", keys.shop1, {
        merchantId: mid,
        publicKey: SIGNING_KEY,
      });
      expect(signing.status, JSON.stringify(signing.body)).toBe(200);

      const assigned = await admin(svc, "PUT", `/merchants/${mid}`, { tenant: "shop-2" });
      expect(assigned.status, JSON.stringify(assigned.body)).toBe(200);
      expect(assigned.body.data).toMatchObject({
        merchantId: mid,
        tenant: "shop-2",
        signingKeyRemoved: true,
      });
      refused(
        await admin(svc, "PUT", `/merchants/${mid}`, { tenant: "shop-2", extra: 1 }),
        400,
        "invalid_request",
      );

      const old = await post(svc, "/api/v1/receipts/encrypt", keys.shop1, receiptBody({ merchantId: mid }));
      expect(refused(old, 403, "forbidden").message).toContain("merchantId belongs to another tenant");
      const oldKey = await post(svc, "/api/v1/receipts/signing-keys", keys.shop1, {
        merchantId: mid,
        publicKey: SIGNING_KEY,
      });
      refused(oldKey, 403, "forbidden");
      const overGrpc = await grpcUnary<Any>(
        receipts,
        "encryptReceipt",
        { receipt: grpcReceipt({ merchantId: mid }) },
        keyed(keys.shop1),
      );
      grpcRefused(overGrpc, GrpcStatus.PERMISSION_DENIED, "forbidden");
      // The new owner is not locked out by the old owner's key: an unsigned receipt is accepted (the old
      // key would have required shop-1's signature), and it registers a key of its own.
      expect(await svc.store.merchantKeys.findByMerchantId(mid)).toBeUndefined();
      const now = await post(svc, "/api/v1/receipts/encrypt", keys.shop2, receiptBody({ merchantId: mid }));
      expect(now.status, JSON.stringify(now.body)).toBe(200);
      const newKey = await post(svc, "/api/v1/receipts/signing-keys", keys.shop2, {
        merchantId: mid,
        publicKey: SIGNING_KEY,
      });
      expect(newKey.status, JSON.stringify(newKey.body)).toBe(200);
      expect((await svc.store.merchantKeys.findByMerchantId(mid))?.tenantId).toBe("shop-2");
    });

    it("counts escrow by owner tenant and key, and reads the audit by tenant, time and limit", async () => {
      const unowned = await post(
        svc,
        "/api/v1/receipts/encrypt",
        keys.shop1,
        receiptBody({ merchantId: SHOP1_MID, recipientHashedPan: hashPan("3000000000000004") }),
      );
      expect(unowned.body.data.isEscrowed).toBe(true);
      const counts = (await admin(svc, "GET", "/escrow")).body.data.escrow as Array<{
        ownerTenantId?: string;
        escrowKeyId: string;
        count: number;
      }>;
      const noOwner = counts.find((c) => c.ownerTenantId === undefined);
      expect(noOwner?.escrowKeyId).toBe(unowned.body.data.escrowKeyId);
      expect(noOwner?.count).toBeGreaterThanOrEqual(1);

      const all = (await admin(svc, "GET", "/audit?tenant=bank-a&limit=1000")).body.data.events as Array<{
        at: string;
        tenantId: string;
        action: string;
      }>;
      expect(all.length).toBeGreaterThan(1);
      expect(all.every((e) => e.tenantId === "bank-a")).toBe(true);
      expect(all.map((e) => e.action)).toContain("admin.bins.set");
      const one = (await admin(svc, "GET", "/audit?tenant=bank-a&limit=1")).body.data.events;
      expect(one).toEqual([all[0]]);
      const oldest = all.at(-1);
      const after = (await admin(svc, "GET", `/audit?tenant=bank-a&after=${oldest?.at}`)).body.data
        .events as Array<{
        at: string;
      }>;
      expect(after.every((e) => e.at > (oldest?.at ?? ""))).toBe(true);
      expect(after.length).toBeLessThan(all.length);
      refused(await admin(svc, "GET", "/audit?after=yesterday"), 400, "invalid_request");
      refused(await admin(svc, "GET", "/audit?limit=0"), 400, "invalid_request");
      // No secret is in the audit: no API key, no admin token.
      const text = JSON.stringify((await admin(svc, "GET", "/audit?limit=1000")).body);
      for (const secret of [TOKEN, keys.bankA, keys.shop1]) expect(text).not.toContain(secret);
    });

    it("lists a tenant's keys without their secret, and a revoked key gets 401", async () => {
      const created = await admin(svc, "POST", "/api-keys", {
        tenant: "shop-3",
        role: "merchant",
        tier: "sandbox",
      });
      const { apiKeyId, apiKey } = created.body.data as { apiKeyId: string; apiKey: string };
      const works = await post(
        svc,
        "/api/v1/receipts/encrypt",
        apiKey,
        receiptBody({ merchantId: "shop-3-store" }),
      );
      expect(works.status).toBe(200);
      const listed = await admin(svc, "GET", "/api-keys?tenant=shop-3");
      expect(listed.body.data.apiKeys).toHaveLength(1);
      expect(listed.body.data.apiKeys[0]).toMatchObject({ apiKeyId, tenant: "shop-3", tier: "sandbox" });
      expect(JSON.stringify(listed.body)).not.toContain(apiKey);

      const revoked = await admin(svc, "DELETE", `/api-keys/${apiKeyId}`);
      expect(revoked.status, JSON.stringify(revoked.body)).toBe(200);
      refused(
        await post(svc, "/api/v1/receipts/encrypt", apiKey, receiptBody({ merchantId: "shop-3-store" })),
        401,
        "unauthorized",
      );
      const overGrpc = await grpcUnary<Any>(
        receipts,
        "encryptReceipt",
        { receipt: grpcReceipt({ merchantId: "shop-3-store" }) },
        keyed(apiKey),
      );
      grpcRefused(overGrpc, GrpcStatus.UNAUTHENTICATED, "unauthorized");
      expect((await admin(svc, "GET", "/api-keys?tenant=shop-3")).body.data.apiKeys[0].revokedAt).toEqual(
        expect.any(String),
      );
      refused(await admin(svc, "DELETE", "/api-keys/key_nope"), 404, "not_found");
    });
  });
});

describe("the operator API without ADMIN_TOKEN, with a short one, and its rate limit", () => {
  it("is 404 everywhere in the envelope when ADMIN_TOKEN is unset, token or not", async () => {
    const svc = await startService();
    try {
      const calls: Array<[string, string, unknown]> = [
        ["GET", "/api-keys", undefined],
        ["POST", "/api-keys", { tenant: "x", role: "issuer" }],
        ["DELETE", "/api-keys/key_1", undefined],
        ["PUT", "/issuers/bank-a/bins", { bins: ["411111"] }],
        ["GET", "/issuers/bank-a/bins", undefined],
        ["PUT", "/merchants/m-1", { tenant: "x" }],
        ["GET", "/audit", undefined],
        ["GET", "/escrow", undefined],
      ];
      for (const [method, path, body] of calls) {
        for (const token of [TOKEN, null]) {
          refused(await admin(svc, method, path, body, token), 404, "not_found");
        }
      }
      expect(await svc.store.apiKeys.list("x")).toEqual([]);
      expect(await svc.store.bins.list("bank-a")).toEqual([]);
    } finally {
      await svc.close();
    }
  });

  it("refuses to start with an ADMIN_TOKEN under 32 characters, naming it", () => {
    for (const token of ["short", "x".repeat(31)]) {
      let failure: unknown;
      try {
        loadConfig({ RECEIPTS_ENV: "dev", ADMIN_TOKEN: token });
      } catch (err) {
        failure = err;
      }
      expect(failure).toBeInstanceOf(ConfigError);
      expect((failure as Error).message).toContain("ADMIN_TOKEN");
      expect((failure as Error).message).not.toContain(token.length > 5 ? token : "\u0000");
    }
    const random = randomBytes(24).toString("base64url");
    expect(loadConfig({ RECEIPTS_ENV: "dev", ADMIN_TOKEN: random }).adminToken).toBe(random);
  });

  it("answers 429 with Retry-After past its own limit, wrong tokens counted too", async () => {
    const store = createMemoryStore();
    await store.init();
    const app = Fastify();
    await registerAdminRoutes(app, {
      token: TOKEN,
      store,
      env: "dev",
      clock: minuteStartClock(),
      requestsPerMinute: 3,
    });
    await app.ready();
    try {
      const call = (token: string) =>
        app.inject({ method: "GET", url: "/admin/v1/escrow", headers: { authorization: `Bearer ${token}` } });
      // Two guesses and one good call use the three; the good token is then refused too.
      expect((await call("wrong-1")).statusCode).toBe(401);
      expect((await call("wrong-2")).statusCode).toBe(401);
      const ok = await call(TOKEN);
      expect(ok.statusCode).toBe(200);
      expect(ok.headers["x-ratelimit-limit"]).toBe("3");
      expect(ok.headers["x-ratelimit-remaining"]).toBe("0");
      for (const token of [TOKEN, "wrong-3"]) {
        const limited = await call(token);
        expect(limited.statusCode).toBe(429);
        const body = limited.json() as Envelope;
        expect(body.success).toBe(false);
        expect(body.error?.code).toBe("rate_limit_exceeded");
        expect(Number(limited.headers["retry-after"])).toBeGreaterThanOrEqual(1);
        expect(Number(limited.headers["retry-after"])).toBeLessThanOrEqual(60);
      }
      // A limited call writes nothing.
      const put = await app.inject({
        method: "PUT",
        url: "/admin/v1/issuers/bank-a/bins",
        headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
        payload: JSON.stringify({ bins: ["411111"] }),
      });
      expect(put.statusCode).toBe(429);
      expect(await store.bins.list("bank-a")).toEqual([]);
    } finally {
      await app.close();
    }
  });
});
