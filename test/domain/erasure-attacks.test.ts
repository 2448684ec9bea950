import { generateKeyPairSync } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  deleteUser,
  ERASURE_PAGE,
  ERASURE_PAGES_PER_CALL,
  keepIfKeyLives,
} from "../../src/domain/erasure.js";
import { grantAccess, validGrant } from "../../src/domain/grants.js";
import { registerEscrowKey } from "../../src/domain/issuer-escrow.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { encryptReceipt } from "../../src/domain/receipts.js";
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
const CALLER = { requestId: "req-e", sourceIp: "192.0.2.44" };

/**
 * Issue 38: erasure from the side of another issuer (it erases nothing and learns nothing, not even
 * of an erasure left half-done), and from the cardholder's (after it, no key, grant, receipt, held
 * escrow or key-log statement of the card is left, and the audit says what went without the card).
 */
describe("erasure", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
    await f.store.bins.set("bank-a", ["400000"], f.clock.now());
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    await f.close();
  });

  async function cardholder(tenant: typeof bankA, pan: string) {
    const keys = await generateKeys(f.deps, tenant);
    const user = await register(f.deps, tenant, { hashedPan: hashPan(pan), ...keys });
    return { userId: user.userId, keyId: keys.keyId };
  }
  const erased = async () =>
    (await f.store.audit.list(100)).filter((e) => e.action === "user.erased").reverse();

  it("refuses a blank userId by name", async () => {
    const err = await rejection(deleteUser(f.deps, bankA, { userId: "" }, CALLER));
    expect(err.code).toBe("invalid_request");
    expect(err.violations).toEqual([{ field: "userId", description: "is required" }]);
  });

  it("erases nothing of another tenant's user: not_found, as an unknown user", async () => {
    const user = await cardholder(bankA, "4000000000000231");
    const receipt = await encryptReceipt(f.deps, shop, receiptMessage("4000000000000231"));
    const eraseCard = vi.spyOn(f.store.ktLog, "eraseCard");
    for (const userId of [user.userId, "usr_unknown"]) {
      const err = await rejection(deleteUser(f.deps, bankB, { userId }, CALLER));
      expect([err.code, err.message]).toEqual(["not_found", "User not found."]);
    }
    expect(eraseCard).not.toHaveBeenCalled();
    expect(await f.store.users.findById(user.userId)).toBeDefined();
    expect(await f.store.users.findKey(user.keyId)).toBeDefined();
    expect(await f.store.receipts.findByMerchantReceipt(receipt.merchantId, receipt.receiptId)).toBeDefined();
    expect(await f.store.erasures.find(user.userId)).toBeUndefined();
    expect(await erased()).toEqual([]);
  });

  it("takes keys, grants, receipts, the tenant's held escrow of the card and its key-log statements", async () => {
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    await registerEscrowKey(f.deps, bankA, {
      publicKey: pair.publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    });
    const pan = "4000000000000249";
    // Held for bank A under its own escrow key (it releases them itself): they stay escrowed.
    const held = await encryptReceipt(f.deps, shop, receiptMessage(pan, { cardBin: "40000000" }));
    const user = await cardholder(bankA, pan);
    const delivered = await encryptReceipt(f.deps, shop, receiptMessage(pan));
    const otherCard = await encryptReceipt(
      f.deps,
      shop,
      receiptMessage("4000000000000256", { cardBin: "40000000" }),
    );
    expect((await f.store.receipts.findByMerchantReceipt(held.merchantId, held.receiptId))?.isEscrowed).toBe(
      true,
    );
    const grant = await grantAccess(f.deps, bankA, user, CALLER);
    const stored = await f.store.users.findById(user.userId);
    const eraseCard = vi.spyOn(f.store.ktLog, "eraseCard");
    const eraseUser = vi.spyOn(f.store.users, "erase");

    const result = await deleteUser(f.deps, bankA, { userId: user.userId }, CALLER);
    // The issuer is told, in the same store step that deletes the user: a user.erased event.
    const events = eraseUser.mock.calls[0]?.[1] ?? [];
    expect(events.map((e) => [e.type, e.tenantId, e.data.userId])).toEqual([
      ["user.erased", "bank-a", user.userId],
    ]);
    expect(result).toEqual({ deletedReceipts: 2, deletedKeys: 1, receiptsLeft: 0 });
    expect(eraseCard).toHaveBeenCalledWith(stored?.panHash, f.clock.now());
    for (const r of [held, delivered])
      expect(await f.store.receipts.findByMerchantReceipt(r.merchantId, r.receiptId)).toBeUndefined();
    expect(
      await f.store.receipts.findByMerchantReceipt(otherCard.merchantId, otherCard.receiptId),
    ).toBeDefined();
    expect(await f.store.users.findKey(user.keyId)).toBeUndefined();
    expect((await rejection(validGrant(f.deps, bankA, grant.tokenId))).code).toBe("not_found");
    const [event, ...more] = await erased();
    expect(more).toEqual([]);
    expect(event).toMatchObject({
      tenantId: "bank-a",
      requestId: "req-e",
      sourceIp: "192.0.2.44",
      userId: user.userId,
      previousKeyId: user.keyId,
      subject: "2 receipts, 1 keys",
    });
    expect(JSON.stringify(event)).not.toContain(stored?.panHash ?? "?");
    // Finished: the erasure record is gone and a retry is not_found.
    expect(await f.store.erasures.find(user.userId)).toBeUndefined();
    expect((await rejection(deleteUser(f.deps, bankA, { userId: user.userId }, CALLER))).code).toBe(
      "not_found",
    );
  });

  it("finishes a half-done erasure on retry by its tenant only; another tenant is not_found", async () => {
    const user = await cardholder(bankA, "4000000000000264");
    const receipt = await encryptReceipt(f.deps, shop, receiptMessage("4000000000000264"));
    // The audit write fails after the user and its keys went.
    vi.spyOn(f.store.audit, "append").mockRejectedValueOnce(new Error("audit down"));
    await expect(deleteUser(f.deps, bankA, { userId: user.userId }, CALLER)).rejects.toThrow("audit down");
    expect(await f.store.users.findById(user.userId)).toBeUndefined();
    expect(await f.store.erasures.find(user.userId)).toBeDefined();

    const foreign = await rejection(deleteUser(f.deps, bankB, { userId: user.userId }, CALLER));
    expect([foreign.code, foreign.message]).toEqual(["not_found", "User not found."]);
    expect(await f.store.erasures.find(user.userId)).toBeDefined();

    const retry = await deleteUser(f.deps, bankA, { userId: user.userId }, CALLER);
    expect(retry).toEqual({ deletedReceipts: 0, deletedKeys: 0, receiptsLeft: 0 });
    expect(
      await f.store.receipts.findByMerchantReceipt(receipt.merchantId, receipt.receiptId),
    ).toBeUndefined();
    expect(await f.store.erasures.find(user.userId)).toBeUndefined();
    const [event] = await erased();
    expect(event).toMatchObject({ userId: user.userId, subject: "0 receipts, 0 keys" });
    expect(event).not.toHaveProperty("previousKeyId");
  });

  it("takes what is held under the card's PAR too, for a user holding its hashed PAN and PAR", async () => {
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    await registerEscrowKey(f.deps, bankA, {
      publicKey: pair.publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    });
    const pan = "4000000000000280";
    const par = "Q1ERASUREALIAS000000000000001";
    const byPar = { recipientHashedPan: "", recipientPar: par };
    // Held for bank A under its escrow key by PAR, and by hashed PAN, before the card registered.
    const heldPar = await encryptReceipt(
      f.deps,
      shop,
      receiptMessage(pan, { ...byPar, cardBin: "40000000" }),
    );
    const heldPan = await encryptReceipt(f.deps, shop, receiptMessage(pan, { cardBin: "40000000" }));
    const keys = await generateKeys(f.deps, bankA);
    const user = await register(f.deps, bankA, { hashedPan: hashPan(pan), par, ...keys });
    const deliveredPar = await encryptReceipt(f.deps, shop, receiptMessage(pan, byPar));
    const all = [heldPar, heldPan, deliveredPar];
    for (const r of all)
      expect(await f.store.receipts.findByMerchantReceipt(r.merchantId, r.receiptId)).toBeDefined();
    // The first call fails after the user went: the retry works from the erasure record alone.
    vi.spyOn(f.store.grants, "deleteByUser").mockRejectedValueOnce(new Error("grants down"));
    await expect(deleteUser(f.deps, bankA, { userId: user.userId }, CALLER)).rejects.toThrow("grants down");
    expect(await f.store.erasures.find(user.userId)).toMatchObject({ aliasPanHash: expect.any(String) });
    const retry = await deleteUser(f.deps, bankA, { userId: user.userId }, CALLER);
    expect(retry).toEqual({ deletedReceipts: 3, deletedKeys: 0, receiptsLeft: 0 });
    for (const r of all) {
      expect(
        await f.store.receipts.findByMerchantReceipt(r.merchantId, r.receiptId),
        r.receiptId,
      ).toBeUndefined();
    }
  });

  it("finishes an erasure an older version began (its record names no cards), leaving the key log alone", async () => {
    const pan = "4000000000000256";
    const user = await cardholder(bankA, pan);
    const receipt = await encryptReceipt(f.deps, shop, receiptMessage(pan));
    const record = await f.store.users.findById(user.userId);
    if (record === undefined) throw new Error("no user");
    // The older version wrote its record without ktCards and deleted the user, then failed.
    await f.store.erasures.begin({
      userId: user.userId,
      tenantId: "bank-a",
      panHash: record.panHash,
      startedAt: f.clock.now(),
    });
    await f.store.users.erase(user.userId);
    const eraseCard = vi.spyOn(f.store.ktLog, "eraseCard");
    const retry = await deleteUser(f.deps, bankA, { userId: user.userId }, CALLER);
    expect(retry).toEqual({ deletedReceipts: 1, deletedKeys: 0, receiptsLeft: 0 });
    expect(eraseCard).not.toHaveBeenCalled();
    expect(
      await f.store.receipts.findByMerchantReceipt(receipt.merchantId, receipt.receiptId),
    ).toBeUndefined();
    expect(await f.store.erasures.find(user.userId)).toBeUndefined();
  });

  it("leaves the key log alone for a user superseded by the BIN's owner: the card is another's now", async () => {
    const user = await cardholder(bankA, "4000000000000272");
    const record = await f.store.users.findById(user.userId);
    if (record === undefined) throw new Error("no user");
    vi.spyOn(f.store.users, "findById").mockResolvedValue({ ...record, supersededAt: f.clock.now() });
    const eraseCard = vi.spyOn(f.store.ktLog, "eraseCard");
    await deleteUser(f.deps, bankA, { userId: user.userId }, CALLER);
    expect(eraseCard).not.toHaveBeenCalled();
  });

  it("counts the held escrow of the card among what is left when a call runs out of pages", async () => {
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    await registerEscrowKey(f.deps, bankA, {
      publicKey: pair.publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    });
    const pan = "4000000000000280";
    for (let i = 0; i < 3; i++)
      await encryptReceipt(f.deps, shop, receiptMessage(pan, { cardBin: "40000000" }));
    const user = await cardholder(bankA, pan);
    for (let i = 0; i < 2; i++) await encryptReceipt(f.deps, shop, receiptMessage(pan));
    // Every page of the user's receipts comes back full (a card with thousands of them), deleting none.
    const byUser = vi.spyOn(f.store.receipts, "deleteByUser").mockResolvedValue(ERASURE_PAGE);
    const escrowed = vi.spyOn(f.store.receipts, "deleteEscrowedFor");
    const first = await deleteUser(f.deps, bankA, { userId: user.userId }, CALLER);
    expect(first).toEqual({
      deletedReceipts: ERASURE_PAGE * ERASURE_PAGES_PER_CALL,
      deletedKeys: 1,
      receiptsLeft: 5,
    });
    expect(byUser).toHaveBeenCalledTimes(ERASURE_PAGES_PER_CALL);
    expect(escrowed).not.toHaveBeenCalled();
    expect(await f.store.erasures.find(user.userId)).toBeDefined();
    expect((await erased())[0]?.subject).toBe(
      `${ERASURE_PAGE * ERASURE_PAGES_PER_CALL} receipts, 1 keys, 5 receipts left`,
    );
    byUser.mockRestore();
    // The next call deletes the rest: the user's two, then the three held.
    const second = await deleteUser(f.deps, bankA, { userId: user.userId }, CALLER);
    expect(second).toEqual({ deletedReceipts: 5, deletedKeys: 0, receiptsLeft: 0 });
    expect(escrowed).toHaveBeenCalledTimes(1);
  });

  it("deletes a receipt stored for a key erased meanwhile, and logs that with the user's id only", async () => {
    const user = await cardholder(bankA, "4000000000000298");
    const record = await encryptReceipt(f.deps, shop, receiptMessage("4000000000000298"));
    await f.store.users.erase(user.userId);
    const info = vi.spyOn(f.deps.logger, "info");
    expect(await keepIfKeyLives(f.deps, record)).toBe(false);
    expect(await f.store.receipts.findByMerchantReceipt(record.merchantId, record.receiptId)).toBeUndefined();
    expect(info).toHaveBeenCalledWith({ userId: user.userId }, "receipt stored for an erased key deleted");
    expect(JSON.stringify(info.mock.calls)).not.toContain(record.panHash);
  });
});
