import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { keepIfKeyLives } from "../../src/domain/erasure.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { encryptReceipt } from "../../src/domain/receipts.js";
import { type DomainFixture, domainFixture, principal, receiptMessage } from "../support/domain.js";
import { hashPan } from "../support/harness.js";

const bank = principal("issuer", "bank-a");
const shop = principal("merchant", "shop-1");

/**
 * The erasure race's last guard (issue 38: it survived mutation testing in the fast tests, and only
 * the hardening suite raced it): a receipt stored for a user whose key an erasure took meanwhile is
 * deleted, and one sealed to a live key of its own user, or to nobody's, is kept.
 */
describe("keepIfKeyLives after a receipt is stored", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    await f.close();
  });

  async function stored(pan: string) {
    const keys = await generateKeys(f.deps, bank);
    const user = await register(f.deps, bank, { hashedPan: hashPan(pan), ...keys });
    const record = await encryptReceipt(f.deps, shop, receiptMessage(pan));
    expect(record).toMatchObject({ userId: user.userId, keyBundle: { keyId: keys.keyId } });
    return record;
  }
  const find = (r: { merchantId: string; receiptId: string }) =>
    f.store.receipts.findByMerchantReceipt(r.merchantId, r.receiptId);

  it("keeps a receipt sealed to its user's live key, and an escrowed one", async () => {
    const record = await stored("4000000000000108");
    expect(await keepIfKeyLives(f.deps, record)).toBe(true);
    expect(await find(record)).toBeDefined();
    const escrowed = await encryptReceipt(f.deps, shop, receiptMessage("4000000000000116"));
    const findKey = vi.spyOn(f.store.users, "findKey");
    expect(await keepIfKeyLives(f.deps, escrowed)).toBe(true);
    expect(findKey).not.toHaveBeenCalled();
    expect(await find(escrowed)).toBeDefined();
  });

  it("deletes a receipt whose user's key an erasure took, and one naming another user's key", async () => {
    const record = await stored("4000000000000124");
    await f.store.users.erase(record.userId as string);
    expect(await keepIfKeyLives(f.deps, record)).toBe(false);
    expect(await find(record)).toBeUndefined();

    const mine = await stored("4000000000000132");
    const other = await stored("4000000000000140");
    // A record that claims a user but names another user's (live) key is not that user's.
    expect(await keepIfKeyLives(f.deps, { ...mine, keyBundle: other.keyBundle })).toBe(false);
  });
});
