import { generateKeyPairSync, randomBytes, randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { KeyBundleSchema, type Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import {
  assignMerchant,
  createKey,
  type OperatorContext,
  revokeKey,
  setBins,
} from "../../src/domain/admin.js";
import { createApiKey } from "../../src/domain/api-keys.js";
import { readTenantAudit } from "../../src/domain/audit.js";
import { deleteUser } from "../../src/domain/erasure.js";
import { gatewayByName } from "../../src/domain/gateways/index.js";
import { grantAccess } from "../../src/domain/grants.js";
import { registerEscrowKey, releaseByIssuer, revokeEscrowKey } from "../../src/domain/issuer-escrow.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { panHashOf } from "../../src/domain/pan.js";
import { createPayment } from "../../src/domain/payments.js";
import { encryptReceipt, storeSealedReceipt } from "../../src/domain/receipts.js";
import { refundPayment } from "../../src/domain/refunds.js";
import { lookupKey } from "../../src/domain/routing.js";
import { registerSigningKey, revokeSigningKey } from "../../src/domain/signing-keys.js";
import { invalidRequest } from "../../src/errors.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import type { ApiKeyRecord, PaymentRecord } from "../../src/store/types.js";
import {
  type DomainFixture,
  domainFixture,
  principal,
  receiptMessage,
  rejection,
} from "../support/domain.js";
import { hashPan } from "../support/harness.js";
import { type DumpableStore, dumpableMemory, dumpableMongo } from "../support/store-dump.js";

/**
 * A refused call changes nothing (issue 31, item 5): every write path of the domain is called the way
 * an attacker or a clumsy client would, by two tenants of each role against each other's cards, keys,
 * merchantIds and receipts, and the whole store is read back after each refusal and found exactly as
 * it was. On the memory store and on the MongoDB adapter (fake driver).
 */

const caller = { requestId: "req-attack", sourceIp: "198.51.100.9" };
const PAN_X = "4111111111111111"; // bank-a's BIN 411111, registered by bank-a (rotated once)
const PAN_Y = "4000000000000002"; // no owned BIN, registered by bank-b
const PAN_Z = "4111110000000009"; // bank-a's BIN, registered by bank-b (a squatter) without a BIN
const PAN_W = "4111112222222228"; // bank-a's BIN, not registered: bank-a's escrow

/** A P-256 public key, base64 DER SPKI. */
function p256(): string {
  return generateKeyPairSync("ec", { namedCurve: "P-256" })
    .publicKey.export({ format: "der", type: "spki" })
    .toString("base64");
}

/** An Ed25519 public key, base64 DER SPKI. */
function ed25519(): string {
  return generateKeyPairSync("ed25519").publicKey.export({ format: "der", type: "spki" }).toString("base64");
}

interface World {
  f: DomainFixture;
  db: DumpableStore;
  bankA: ApiKeyRecord;
  bankB: ApiKeyRecord;
  shop1: ApiKeyRecord;
  shop2: ApiKeyRecord;
  operator: () => OperatorContext;
  userX: string;
  userZ: string;
  oldKeyX: string;
  keyY: string;
  keyZ: string;
  pendingOfA: string;
  escrowKeyOfA: string;
  signingKeyOfShop1: string;
  /** Shop-1's payment of 950 on m-1 (gateway_a), nothing refunded. */
  paymentOfShop1: PaymentRecord;
}

/** The tenants, cards, keys and receipts every refusal below is tried against. */
async function buildWorld(db: DumpableStore): Promise<World> {
  const f = await domainFixture({ store: db.store });
  const [bankA, bankB] = [principal("issuer", "bank-a"), principal("issuer", "bank-b")];
  const [shop1, shop2] = [principal("merchant", "shop-1"), principal("merchant", "shop-2")];
  for (const p of [bankA, bankB, shop1, shop2]) {
    await createApiKey(
      f.store,
      "dev",
      { role: p.role, tier: "standard", tenantId: p.tenantId },
      f.clock.now(),
    );
  }
  const operator = (): OperatorContext => ({
    store: f.store,
    env: "dev",
    now: f.clock.now(),
    requestId: "req-op",
    sourceIp: "192.0.2.1",
  });
  await setBins(operator(), "bank-a", { bins: ["411111", "52222211"] });
  const escrowKeyOfA = (await registerEscrowKey(f.deps, bankA, { publicKey: p256() }, caller)).escrowKeyId;

  const oldKeyX = randomUUID();
  const first = await register(f.deps, bankA, {
    hashedPan: hashPan(PAN_X),
    publicKey: p256(),
    keyId: oldKeyX,
  });
  await register(f.deps, bankA, {
    hashedPan: hashPan(PAN_X),
    publicKey: p256(),
    keyId: randomUUID(),
    cardBin: "411111",
  });
  const keyY = randomUUID();
  await register(f.deps, bankB, { hashedPan: hashPan(PAN_Y), publicKey: p256(), keyId: keyY });
  const keyZ = randomUUID();
  const squat = await register(f.deps, bankB, { hashedPan: hashPan(PAN_Z), publicKey: p256(), keyId: keyZ });
  const pendingOfA = (await generateKeys(f.deps, bankA, { algorithm: "HPKE-P256-SHA256-A256GCM" })).keyId;

  const signingKeyOfShop1 = (
    await registerSigningKey(f.deps, shop1, { merchantId: "m-signed", publicKey: ed25519() }, caller)
  ).merchantKeyId;
  await encryptReceipt(
    f.deps,
    shop1,
    receiptMessage(PAN_X, { merchantId: "m-1", receiptId: "r-x1" }),
    null,
    caller,
  );
  await encryptReceipt(
    f.deps,
    shop2,
    receiptMessage(PAN_Y, { merchantId: "m-2", receiptId: "r-y1" }),
    null,
    caller,
  );
  await encryptReceipt(
    f.deps,
    shop2,
    receiptMessage(PAN_W, { merchantId: "m-2", receiptId: "r-w1", cardBin: "411111" }),
    null,
    caller,
  );
  const { payment: paymentOfShop1 } = await createPayment(
    f.deps,
    shop1,
    {
      gateway: "gateway_a",
      receipt: receiptMessage(PAN_Y, { merchantId: "m-1", transactionId: "t-pay1", amount: 950n }),
    },
    caller,
  );
  for (let i = 0; i < 5; i++)
    await grantAccess(f.deps, bankA, { userId: first.userId, keyId: oldKeyX }, caller);
  return {
    f,
    db,
    bankA,
    bankB,
    shop1,
    shop2,
    operator,
    userX: first.userId,
    userZ: squat.userId,
    oldKeyX,
    keyY,
    keyZ,
    pendingOfA,
    escrowKeyOfA,
    signingKeyOfShop1,
    paymentOfShop1,
  };
}

/**
 * A merchant-sealed receipt for `pan` to the card's active key (or to `keyId`, a P-256 key), sizes
 * right. Read from the store, not looked up: a look-up is audited, and the dump is taken before.
 */
async function sealed(w: World, pan: string, overrides: Record<string, unknown> = {}, keyId?: string) {
  const user = await w.f.store.users.findByPanHash(panHashOf(w.f.deps.pepper, hashPan(pan)));
  return {
    recipientHashedPan: hashPan(pan),
    version: "1.0",
    receiptId: `rs-${randomBytes(4).toString("hex")}`,
    merchantId: "m-1",
    transactionId: `ts-${randomBytes(4).toString("hex")}`,
    keyBundle: create(KeyBundleSchema, {
      keyId: keyId ?? user?.activeKeyId ?? "",
      algorithm: "HPKE-P256-SHA256-A256GCM",
      encryptedAesKey: randomBytes(48),
      encapsulatedKey: Buffer.concat([Buffer.from([4]), randomBytes(64)]),
    }),
    ciphertext: randomBytes(64),
    iv: randomBytes(12),
    authTag: randomBytes(16),
    ...overrides,
  };
}

/** The call that stores a merchant-sealed receipt. */
function sealedCall(w: World, merchant: ApiKeyRecord, input: Awaited<ReturnType<typeof sealed>>): Call {
  return () => storeSealedReceipt(w.f.deps, merchant, input, caller);
}

/** A receipt message for encrypt and create. */
function plainReceipt(pan: string, overrides: Partial<Receipt> = {}): Receipt {
  return receiptMessage(pan, { merchantId: "m-1", ...overrides });
}

/** A refund of shop-1's payment: its refund receipt in the clear, refunding `amount`. */
function refundOfShop1(
  w: World,
  merchant: ApiKeyRecord,
  amount: bigint,
  overrides: Partial<Receipt> = {},
): Call {
  const receipt = receiptMessage(PAN_Y, {
    merchantId: "m-1",
    receiptType: "refund",
    originalReceiptId: w.paymentOfShop1.receiptId,
    amount,
    items: [],
    mockItems: false,
    ...overrides,
  });
  return () => refundPayment(w.f.deps, merchant, { paymentId: w.paymentOfShop1.paymentId, receipt }, caller);
}

/**
 * One refused call: its name, the call (made by a function that may prepare its input first, before
 * the store is read), and the error code it must get.
 */
type Refusal = [string, (w: World) => Call | Promise<Call>, string];
type Call = () => Promise<unknown>;

const REFUSALS: Refusal[] = [
  // register and rotation
  [
    "register: a rotated keyId with another public key",
    (w) => () =>
      register(w.f.deps, w.bankA, { hashedPan: hashPan(PAN_X), publicKey: p256(), keyId: w.oldKeyX }),
    "conflict",
  ],
  [
    "register: another issuer's card, no BIN",
    (w) => () =>
      register(w.f.deps, w.bankB, { hashedPan: hashPan(PAN_X), publicKey: p256(), keyId: randomUUID() }),
    "conflict",
  ],
  [
    "register: another issuer's card, inside that issuer's BIN",
    (w) => () =>
      register(w.f.deps, w.bankB, {
        hashedPan: hashPan(PAN_X),
        publicKey: p256(),
        keyId: randomUUID(),
        cardBin: "411111",
      }),
    "forbidden",
  ],
  [
    "register: a squatted card inside another issuer's BIN",
    (w) => () =>
      register(w.f.deps, w.bankB, {
        hashedPan: hashPan(PAN_Z),
        publicKey: p256(),
        keyId: randomUUID(),
        cardBin: "41111100",
      }),
    "forbidden",
  ],
  [
    "register: the BIN owner supersedes with the squatter's keyId",
    (w) => () =>
      register(w.f.deps, w.bankA, {
        hashedPan: hashPan(PAN_Z),
        publicKey: p256(),
        keyId: w.keyZ,
        cardBin: "411111",
      }),
    "conflict",
  ],
  [
    "register: another issuer's keyId",
    (w) => () =>
      register(w.f.deps, w.bankA, {
        hashedPan: hashPan("4000000000000010"),
        publicKey: p256(),
        keyId: w.keyY,
      }),
    "conflict",
  ],
  [
    "register: another issuer's pending keyId",
    (w) => () =>
      register(w.f.deps, w.bankB, {
        hashedPan: hashPan("4000000000000028"),
        publicKey: p256(),
        keyId: w.pendingOfA,
      }),
    "conflict",
  ],
  [
    "register: 6 digits over an owned 8-digit prefix",
    (w) => () =>
      register(w.f.deps, w.bankA, {
        hashedPan: hashPan("5222221100000001"),
        publicKey: p256(),
        keyId: randomUUID(),
        cardBin: "522222",
      }),
    "invalid_request",
  ],
  [
    "register: a malformed cardBin",
    (w) => () =>
      register(w.f.deps, w.bankA, {
        hashedPan: hashPan("5222221100000001"),
        publicKey: p256(),
        keyId: randomUUID(),
        cardBin: "4111",
      }),
    "invalid_request",
  ],
  // issuer escrow keys
  [
    "escrow key: revoke another issuer's",
    (w) => () => revokeEscrowKey(w.f.deps, w.bankB, { escrowKeyId: w.escrowKeyOfA }, caller),
    "not_found",
  ],
  [
    "escrow key: revoke an unknown id",
    (w) => () => revokeEscrowKey(w.f.deps, w.bankA, { escrowKeyId: "iek_nope" }, caller),
    "not_found",
  ],
  [
    "escrow key: register a key that is no key",
    (w) => () => registerEscrowKey(w.f.deps, w.bankA, { publicKey: "AAAA" }, caller),
    "invalid_request",
  ],
  // merchant signing keys
  [
    "signing key: register for another merchant's merchantId",
    (w) => () =>
      registerSigningKey(w.f.deps, w.shop2, { merchantId: "m-signed", publicKey: ed25519() }, caller),
    "forbidden",
  ],
  [
    "signing key: revoke another merchant's",
    (w) => () =>
      revokeSigningKey(
        w.f.deps,
        w.shop2,
        { merchantId: "m-signed", merchantKeyId: w.signingKeyOfShop1 },
        caller,
      ),
    "forbidden",
  ],
  [
    "signing key: revoke an unknown id",
    (w) => () =>
      revokeSigningKey(w.f.deps, w.shop1, { merchantId: "m-signed", merchantKeyId: "mk_nope" }, caller),
    "not_found",
  ],
  [
    "signing key: revoke with a key limited to other merchantIds",
    (w) => () =>
      revokeSigningKey(
        w.f.deps,
        principal("merchant", "shop-1", ["m-1"]),
        { merchantId: "m-signed", merchantKeyId: w.signingKeyOfShop1 },
        caller,
      ),
    "forbidden",
  ],
  [
    "signing key: register a key that is no Ed25519 key",
    (w) => () =>
      registerSigningKey(w.f.deps, w.shop1, { merchantId: "m-fresh-sk", publicKey: p256() }, caller),
    "invalid_request",
  ],
  // merchant-sealed receipts (each input read before the store is, and the call made after)
  [
    "sealed: another merchant's merchantId",
    async (w) => sealedCall(w, w.shop2, await sealed(w, PAN_X)),
    "forbidden",
  ],
  [
    "sealed: a key bundle for an old key",
    async (w) => sealedCall(w, w.shop1, await sealed(w, PAN_X, {}, w.oldKeyX)),
    "conflict",
  ],
  [
    "sealed: a used receiptId",
    async (w) => sealedCall(w, w.shop1, await sealed(w, PAN_X, { receiptId: "r-x1" })),
    "conflict",
  ],
  [
    "sealed: an ambiguous cardBin, first use of a merchantId",
    async (w) =>
      sealedCall(w, w.shop1, await sealed(w, PAN_Y, { cardBin: "522222", merchantId: "m-fresh-1" })),
    "invalid_request",
  ],
  [
    // To the BIN owner's escrow key, as look-up gives it: the card is bank-b's, its BIN bank-a's.
    "sealed: a binding conflict with a used receiptId",
    async (w) =>
      sealedCall(
        w,
        w.shop1,
        await sealed(w, PAN_Z, { cardBin: "411111", receiptId: "r-x1" }, w.escrowKeyOfA),
      ),
    "conflict",
  ],
  // plaintext receipts and payments
  [
    "encrypt: another merchant's merchantId",
    (w) => () => encryptReceipt(w.f.deps, w.shop2, plainReceipt(PAN_X), null, caller),
    "forbidden",
  ],
  [
    "encrypt: a used receiptId",
    (w) => () => encryptReceipt(w.f.deps, w.shop1, plainReceipt(PAN_X, { receiptId: "r-x1" }), null, caller),
    "conflict",
  ],
  [
    "encrypt: an ambiguous cardBin, first use of a merchantId",
    (w) => () =>
      encryptReceipt(
        w.f.deps,
        w.shop1,
        plainReceipt(PAN_Y, { merchantId: "m-fresh-2", cardBin: "522222" }),
        null,
        caller,
      ),
    "invalid_request",
  ],
  [
    "encrypt: unsigned for a merchantId with a signing key",
    (w) => () =>
      encryptReceipt(w.f.deps, w.shop1, plainReceipt(PAN_X, { merchantId: "m-signed" }), null, caller),
    "invalid_signature",
  ],
  [
    "encrypt: a binding conflict with a used receiptId",
    (w) => () =>
      encryptReceipt(
        w.f.deps,
        w.shop1,
        plainReceipt(PAN_Z, { cardBin: "411111", receiptId: "r-x1" }),
        null,
        caller,
      ),
    "conflict",
  ],
  [
    "create: a used transactionId",
    (w) => () =>
      createPayment(
        w.f.deps,
        w.shop1,
        { gateway: "gateway_a", receipt: plainReceipt(PAN_X, { transactionId: "t-pay1", amount: 100n }) },
        caller,
      ),
    "conflict",
  ],
  [
    "create: another merchant's merchantId",
    (w) => () =>
      createPayment(
        w.f.deps,
        w.shop2,
        { gateway: "gateway_a", receipt: plainReceipt(PAN_X, { amount: 100n }) },
        caller,
      ),
    "forbidden",
  ],
  [
    "create: an ambiguous cardBin, first use of a merchantId",
    (w) => () =>
      createPayment(
        w.f.deps,
        w.shop1,
        {
          gateway: "gateway_a",
          receipt: plainReceipt(PAN_Y, { merchantId: "m-fresh-4", cardBin: "522222", amount: 100n }),
        },
        caller,
      ),
    "invalid_request",
  ],
  [
    "lookup: an ambiguous cardBin",
    (w) => () =>
      lookupKey(w.f.deps, w.shop1, { recipientHashedPan: hashPan(PAN_Y), cardBin: "522222" }, caller),
    "invalid_request",
  ],
  // refunds
  ["refund: another merchant's payment", (w) => refundOfShop1(w, w.shop2, 100n), "not_found"],
  ["refund: more than was charged", (w) => refundOfShop1(w, w.shop1, 951n), "invalid_request"],
  [
    "refund: a receiptId the merchantId used",
    (w) => refundOfShop1(w, w.shop1, 100n, { receiptId: "r-x1" }),
    "conflict",
  ],
  [
    "refund: refused by the gateway",
    (w) => {
      vi.spyOn(gatewayByName("gateway_a"), "refund").mockRejectedValueOnce(
        invalidRequest([{ field: "amount", description: "refused by the gateway" }]),
      );
      return refundOfShop1(w, w.shop1, 100n);
    },
    "invalid_request",
  ],
  // issuer release, erasure, grants, audit
  [
    "release: another issuer's user",
    (w) => () =>
      releaseByIssuer(
        w.f.deps,
        w.bankB,
        { userId: w.userX, receipts: [{ merchantId: "m-2", receiptId: "r-w1" }] },
        caller,
      ),
    "not_found",
  ],
  [
    "release: nothing to release",
    (w) => () => releaseByIssuer(w.f.deps, w.bankA, { userId: w.userX, receipts: [] }, caller),
    "invalid_request",
  ],
  [
    "erase: another issuer's user",
    (w) => () => deleteUser(w.f.deps, w.bankB, { userId: w.userX }, caller),
    "not_found",
  ],
  [
    "erase: a user of the BIN's owner's card, by the squatter... of the owner",
    (w) => () => deleteUser(w.f.deps, w.bankA, { userId: w.userZ }, caller),
    "not_found",
  ],
  [
    "grant: another issuer's user",
    (w) => () => grantAccess(w.f.deps, w.bankB, { userId: w.userX, keyId: w.oldKeyX }, caller),
    "not_found",
  ],
  [
    "grant: a sixth grant",
    (w) => () => grantAccess(w.f.deps, w.bankA, { userId: w.userX, keyId: w.oldKeyX }, caller),
    "rate_limit_exceeded",
  ],
  [
    "audit: another tenant's page token",
    async (w) => {
      const page = await readTenantAudit(w.f.deps, "bank-a", { after: "", pageSize: 1, pageToken: "" });
      return () =>
        readTenantAudit(w.f.deps, "bank-b", { after: "", pageSize: 1, pageToken: page.nextPageToken });
    },
    "invalid_request",
  ],
  // the operator's writes
  [
    "operator: a BIN another issuer owns",
    (w) => () => setBins(w.operator(), "bank-b", { bins: ["41111111"] }),
    "conflict",
  ],
  [
    "operator: BINs for a merchant tenant",
    (w) => () => setBins(w.operator(), "shop-1", { bins: ["600000"] }),
    "invalid_request",
  ],
  [
    "operator: a merchantId to an issuer tenant",
    (w) => () => assignMerchant(w.operator(), "m-1", { tenant: "bank-a" }),
    "invalid_request",
  ],
  [
    "operator: a key of no role",
    (w) => () => createKey(w.operator(), { tenant: "bank-c", role: "admin" }),
    "invalid_request",
  ],
  ["operator: revoke an unknown key", (w) => () => revokeKey(w.operator(), "key_nope"), "not_found"],
];

describe.each([
  ["memory store", async () => dumpableMemory(createMemoryStore())],
  ["MongoDB adapter (fake driver)", dumpableMongo],
])("a refused call changes nothing: %s", (_name, makeStore) => {
  let w: World;
  beforeAll(async () => {
    const db = await makeStore();
    await db.store.init();
    w = await buildWorld(db);
  }, 60_000);
  afterAll(async () => {
    await w?.f.close();
    await w?.db.store.close();
  });

  it.each(REFUSALS)("%s", async (_label, prepare, code) => {
    const call = await prepare(w);
    const before = w.db.dump();
    expect((await rejection(call())).code).toBe(code);
    expect(w.db.dump()).toEqual(before);
  });

  // A declined card is an answer of the card's issuer, not a refusal of the call: the merchant can read
  // the declined payment, and nothing else is written: no receipt, no claim of the
  // merchantId, nothing charged; and its payment.declined event (docs/events.md), for the merchant.
  it("create: declined, first use of a merchantId, keeps only the declined payment and its event", async () => {
    const receipt = plainReceipt(PAN_X, { merchantId: "m-fresh-3", cardNonce: "cnon:card-nonce-declined" });
    const before = withoutPayments(w.db.dumpWithoutEvents());
    const eventsBefore = w.db.eventsWritten();
    const err = await rejection(createPayment(w.f.deps, w.shop1, { gateway: "gateway_b", receipt }, caller));
    expect(err.code).toBe("payment_declined");
    expect(withoutPayments(w.db.dumpWithoutEvents())).toEqual(before);
    expect(w.db.eventsWritten()).toBe(eventsBefore + 1);
    const kept = await w.db.store.payments.findById(err.metadata.payment_id as string);
    expect(kept).toMatchObject({ status: "declined", merchantId: "m-fresh-3", receiptId: receipt.receiptId });
    expect(await w.db.store.receipts.findByMerchantReceipt("m-fresh-3", receipt.receiptId)).toBeUndefined();
  });
});

/** A dump without the payments (the memory store's payment store, or the payments collection). */
function withoutPayments(dump: unknown): unknown {
  const { payments: _payments, ...rest } = dump as Record<string, unknown>;
  return rest;
}
