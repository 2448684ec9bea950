import { generateKeyPairSync } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { createApiKey } from "../../src/domain/api-keys.js";
import { transferCard } from "../../src/domain/card-transfer.js";
import { receiptEvents } from "../../src/domain/events.js";
import { registerEscrowKey } from "../../src/domain/issuer-escrow.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { encryptReceipt } from "../../src/domain/receipts.js";
import { cardBinOwner, lookupKey, recipientOf, serviceEscrowKey } from "../../src/domain/routing.js";
import type { ApiKeyRecord } from "../../src/store/types.js";
import {
  type DomainFixture,
  domainFixture,
  principal,
  receiptMessage,
  rejection,
} from "../support/domain.js";
import { hashPan } from "../support/harness.js";

const bankA = principal("issuer", "bank-a");
const bankB = principal("issuer", "bank-b");
const shop = principal("merchant", "shop-1");
const CALLER = { requestId: "req-r", sourceIp: "203.0.113.9" };

/**
 * Issue 38: where a receipt goes, attacked from the merchant's side (a card reference that names two
 * cards or none, a 6-digit BIN that hides the owner of an 8-digit prefix) and from an issuer's (a
 * card of another issuer's BIN): who gets the receipt, to which key, what the look-up says about
 * binding the wrap to the AAD, and what the audit log records.
 */
describe("routing a receipt to its recipient", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    await f.close();
  });

  async function cardholder(tenant: ApiKeyRecord, pan: string, algorithm = "") {
    const keys = await generateKeys(f.deps, tenant, { algorithm });
    const user = await register(f.deps, tenant, { hashedPan: hashPan(pan), ...keys });
    return { userId: user.userId, keyId: keys.keyId, publicKey: keys.publicKey };
  }
  const lookup = (card: Parameters<typeof lookupKey>[2]) => lookupKey(f.deps, shop, card, CALLER);
  const audit = async (action: string) =>
    (await f.store.audit.list(100)).filter((e) => e.action === action).reverse();

  it("refuses a card named by both, by neither, or with a malformed BIN, naming the merchant's fields; audits nothing", async () => {
    const neither = await rejection(lookup({ recipientHashedPan: "" }));
    expect(neither.code).toBe("invalid_request");
    expect(neither.violations).toEqual([
      { field: "recipientHashedPan", description: "is required (or recipientPar, the card's PAR)" },
    ]);
    const both = await rejection(
      lookup({
        recipientHashedPan: hashPan("4000000000000017"),
        recipientPar: "Q1J4AwSWD4Dr6ttqQ8LmPKs7GgJv1",
      }),
    );
    expect(both.violations).toEqual([
      {
        field: "recipientPar",
        description: "cannot stand beside recipientHashedPan: name the card by exactly one",
      },
    ]);
    const bin = await rejection(
      lookup({ recipientHashedPan: hashPan("4000000000000017"), cardBin: "40000" }),
    );
    expect(bin.violations).toEqual([
      { field: "cardBin", description: "must be the card's first 6 or 8 digits" },
    ]);
    expect(await audit("key.lookup")).toEqual([]);
  });

  it("gives the cardholder's key, bound to the AAD only for HPKE, and audits the look-up with the key", async () => {
    const rsa = await cardholder(bankA, "4000000000000173");
    const hpke = await cardholder(bankA, "4000000000000181", "HPKE-P256-SHA256-A256GCM");
    const byRsa = await lookup({ recipientHashedPan: hashPan("4000000000000173") });
    expect(byRsa).toEqual({
      keyId: rsa.keyId,
      algorithm: "RSA-OAEP-256",
      publicKey: rsa.publicKey,
      isEscrowed: false,
      aadBound: false,
    });
    const byHpke = await lookup({ recipientHashedPan: hashPan("4000000000000181") });
    expect(byHpke).toMatchObject({ keyId: hpke.keyId, isEscrowed: false, aadBound: true });
    const [event] = await audit("key.lookup");
    expect(event).toMatchObject({
      tenantId: "shop-1",
      requestId: "req-r",
      sourceIp: "203.0.113.9",
      keyId: rsa.keyId,
    });
    // The card itself is never written down.
    expect(JSON.stringify(await f.store.audit.list(100))).not.toContain(hashPan("4000000000000173"));
  });

  it("sends an unregistered card without an owned BIN to the service escrow key, AAD-bound", async () => {
    const service = serviceEscrowKey(f.deps);
    const looked = await lookup({ recipientHashedPan: hashPan("4000000000000199"), cardBin: "49999999" });
    expect(looked).toEqual({
      keyId: service.keyId,
      algorithm: service.algorithm,
      publicKey: service.spki,
      isEscrowed: true,
      aadBound: true,
    });
    const routed = await recipientOf(f.deps, { recipientHashedPan: hashPan("4000000000000199") });
    expect(routed).toMatchObject({ kind: "escrow", key: { keyId: service.keyId, aadBound: true } });
    expect(routed).not.toHaveProperty("ownerTenantId");
    // No escrow key configured: an error, never a receipt sealed to nothing.
    f.deps.escrowKeys = [];
    const none = await rejection(recipientOf(f.deps, { recipientHashedPan: hashPan("4000000000000199") }));
    expect([none.code, none.message]).toEqual(["internal_server_error", "No escrow key is configured."]);
  });

  it("escrows a card of an owned BIN for its owner: to the owner's key once it has one, else the service key", async () => {
    await f.store.bins.set("bank-a", ["400000"], f.clock.now());
    const card = { recipientHashedPan: hashPan("4000000000000207"), cardBin: "40000000" };
    const early = await recipientOf(f.deps, card);
    expect(early).toMatchObject({
      kind: "escrow",
      ownerTenantId: "bank-a",
      cardBin: "40000000",
      key: { keyId: serviceEscrowKey(f.deps).keyId, aadBound: true },
    });
    expect(early).not.toHaveProperty("conflict");
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const publicKey = pair.publicKey.export({ type: "spki", format: "der" }).toString("base64");
    const iek = await registerEscrowKey(f.deps, bankA, { publicKey });
    const routed = await recipientOf(f.deps, card);
    expect(routed).toMatchObject({
      kind: "escrow",
      ownerTenantId: "bank-a",
      key: { keyId: iek.escrowKeyId, algorithm: "HPKE-P256-SHA256-A256GCM", spki: publicKey, aadBound: true },
    });
    // Look-up of the same card says the same, and that it is escrowed.
    expect(await lookup(card)).toMatchObject({
      keyId: iek.escrowKeyId,
      publicKey,
      isEscrowed: true,
      aadBound: true,
    });
  });

  it("audits a card another issuer registered in the BIN owner's tenant, caused by the merchant", async () => {
    await f.store.bins.set("bank-a", ["41111111"], f.clock.now());
    const pan = "4111111100000036";
    const user = await cardholder(bankB, pan);
    const looked = await lookup({ recipientHashedPan: hashPan(pan), cardBin: "41111111" });
    expect(looked.isEscrowed).toBe(true);
    expect(looked.keyId).not.toBe(user.keyId);
    const [event, ...more] = await audit("card_binding_conflict");
    expect(more).toEqual([]);
    // What the conflict's audit says, for a look-up and for a stored receipt alike.
    const conflictAudit = {
      tenantId: "bank-a",
      requestId: "req-r",
      sourceIp: "203.0.113.9",
      actorTenantId: "shop-1",
      subject: "a receipt for a card of this tenant's BIN registered by issuer tenant bank-b",
    };
    expect(event).toMatchObject(conflictAudit);
    // A look-up that routes to a user, or to escrow without a conflict, audits none.
    await lookup({ recipientHashedPan: hashPan(pan) });
    await lookup({ recipientHashedPan: hashPan("4111111100000044"), cardBin: "41111111" });
    expect(await audit("card_binding_conflict")).toHaveLength(1);
    // A receipt stored for the card audits it once it is stored; one without a conflict does not.
    await encryptReceipt(f.deps, shop, receiptMessage(pan, { cardBin: "41111111" }), null, CALLER);
    await encryptReceipt(f.deps, shop, receiptMessage(pan), null, CALLER);
    await encryptReceipt(
      f.deps,
      shop,
      receiptMessage("4111111100000044", { cardBin: "41111111" }),
      null,
      CALLER,
    );
    const [, stored, ...others] = await audit("card_binding_conflict");
    expect(others).toEqual([]);
    expect(stored).toMatchObject(conflictAudit);
  });

  it("refuses 6 digits that cover an owned 8-digit prefix as ambiguous, never as unowned", async () => {
    await f.store.bins.set("bank-a", ["42222222"], f.clock.now());
    const err = await rejection(cardBinOwner(f.deps, "422222"));
    expect([err.code, err.message]).toEqual([
      "invalid_request",
      "Issuers own 8-digit prefixes under these 6 digits: send the card's first 8 digits as cardBin.",
    ]);
    expect(err.violations).toEqual([
      { field: "cardBin", description: "is ambiguous: send the card's first 8 digits" },
    ]);
    const viaLookup = await rejection(
      lookup({ recipientHashedPan: hashPan("4222222200000013"), cardBin: "422222" }),
    );
    expect(viaLookup.code).toBe("invalid_request");
    // The 8 digits route to the owner; 6 digits nobody owns under are unowned; 8 unowned are too.
    expect(await cardBinOwner(f.deps, "42222222")).toBe("bank-a");
    expect(await cardBinOwner(f.deps, "433333")).toBeUndefined();
    expect(await cardBinOwner(f.deps, "43333333")).toBeUndefined();
    expect(await cardBinOwner(f.deps, undefined)).toBeUndefined();
    // A 6-digit prefix that is owned answers its owner.
    await f.store.bins.set("bank-b", ["455555"], f.clock.now());
    expect(await cardBinOwner(f.deps, "455555")).toBe("bank-b");
  });

  it("treats a registered card whose key is gone (an erasure midway) as unregistered", async () => {
    await f.store.bins.set("bank-a", ["400000"], f.clock.now());
    const pan = "4000000000000215";
    await cardholder(bankA, pan);
    // The issuer that registered the card has an escrow key of its own: a card outside its BINs whose
    // erasure it began (the MongoDB store deletes an unlogged card's keys before the user) is not its
    // to escrow, so its receipts go to the service's key, never to that issuer's.
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const publicKey = pair.publicKey.export({ type: "spki", format: "der" }).toString("base64");
    const iek = await registerEscrowKey(f.deps, bankA, { publicKey });
    vi.spyOn(f.store.users, "findKey").mockResolvedValue(undefined);
    const unowned = await recipientOf(f.deps, { recipientHashedPan: hashPan(pan) });
    expect(unowned).toMatchObject({ kind: "escrow", key: { keyId: serviceEscrowKey(f.deps).keyId } });
    expect(unowned).not.toHaveProperty("ownerTenantId");
    expect(await lookup({ recipientHashedPan: hashPan(pan) })).toMatchObject({
      keyId: serviceEscrowKey(f.deps).keyId,
      isEscrowed: true,
    });
    // In the owner's BIN: the owner's escrow, and no binding conflict (the card has no user now).
    const owned = await recipientOf(f.deps, { recipientHashedPan: hashPan(pan), cardBin: "40000000" });
    expect(owned).toMatchObject({ kind: "escrow", ownerTenantId: "bank-a", key: { keyId: iek.escrowKeyId } });
    expect(owned).not.toHaveProperty("conflict");
  });

  it("escrows for its new issuer a card the operator moved, and the issuer's event names no BIN the merchant did not send", async () => {
    const pan = "4000000000000223";
    const moved = await cardholder(bankA, pan);
    const now = f.clock.now();
    await createApiKey(f.store, "dev", { role: "issuer", tier: "standard", tenantId: "bank-b" }, now);
    const ctx = { store: f.store, env: "dev" as const, now, requestId: "op", sourceIp: "" };
    await transferCard(ctx, { userId: moved.userId, toTenant: "bank-b" });
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const publicKey = pair.publicKey.export({ type: "spki", format: "der" }).toString("base64");
    const iek = await registerEscrowKey(f.deps, bankB, { publicKey });

    // The merchant names the card and no BIN: the receipt waits for bank B, under bank B's key.
    const record = await encryptReceipt(f.deps, shop, receiptMessage(pan));
    expect(record).toMatchObject({
      isEscrowed: true,
      escrowOwnerTenantId: "bank-b",
      escrowKeyId: iek.escrowKeyId,
    });
    const stored = await f.store.receipts.findByMerchantReceipt(record.merchantId, record.receiptId);
    expect(stored?.escrowCardBin ?? "").toBe("");
    const [event, ...more] = receiptEvents(f.deps, record);
    expect(more).toEqual([]);
    expect(event).toMatchObject({ type: "escrow.pending", tenantId: "bank-b" });
    expect(event?.data.cardBin ?? "").toBe("");
  });
});
