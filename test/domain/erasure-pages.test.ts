import { randomBytes } from "node:crypto";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { deleteUser, ERASURE_PAGE, ERASURE_PAGES_PER_CALL } from "../../src/domain/erasure.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import type { ReceiptRecord } from "../../src/store/types.js";
import { type DomainFixture, domainFixture, principal, rejection } from "../support/domain.js";
import { hashPan } from "../support/harness.js";

const caller = { requestId: "r", sourceIp: "203.0.113.7" };
const issuer = principal("issuer", "bank-a");

/**
 * Erasure in bounded pages (docs/scaling.md): the user and its keys go at once, its receipts a page
 * at a time, a bounded number of pages a call; each call says how many are left, the next goes on,
 * and once none are left a further call is `not_found`.
 */
describe("erasure of a user with many receipts", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    await f.close();
  });

  it("deletes user and keys at once, receipts in bounded pages over calls that count what is left", async () => {
    const keys = await generateKeys(f.deps, issuer);
    const reg = await register(f.deps, issuer, {
      hashedPan: hashPan("4242"),
      publicKey: keys.publicKey,
      keyId: keys.keyId,
    });
    const user = await f.store.users.findById(reg.userId);
    if (user === undefined) throw new Error("no user");
    const perCall = ERASURE_PAGE * ERASURE_PAGES_PER_CALL;
    const total = perCall + 7;
    for (let i = 0; i < total; i++) {
      const record: ReceiptRecord = {
        id: `rcp_${i}`,
        receiptId: `R-${i}`,
        merchantId: "m-1",
        transactionId: `T-${i}`,
        version: "1.0",
        merchantTenantId: "shop-1",
        panHash: user.panHash,
        userId: user.userId,
        issuerTenantId: user.tenantId,
        keyBundle: {
          keyId: keys.keyId,
          algorithm: "RSA-OAEP-256",
          encryptedAesKey: randomBytes(8).toString("base64"),
        },
        ciphertext: "AA==",
        iv: "AA==",
        authTag: "AA==",
        createdAt: new Date(Date.UTC(2026, 0, 1) + i),
        isEscrowed: false,
      };
      await f.store.receipts.insert(record);
    }
    const pages = vi.spyOn(f.store.receipts, "deleteByUser");

    const first = await deleteUser(f.deps, issuer, { userId: user.userId }, caller);
    expect(first).toEqual({ deletedReceipts: perCall, deletedKeys: 1, receiptsLeft: 7 });
    // The user and its keys went at once; no store call deleted more than a page.
    expect(await f.store.users.findById(user.userId)).toBeUndefined();
    expect(await f.store.users.findKey(keys.keyId)).toBeUndefined();
    expect(pages.mock.calls.map(([, limit]) => limit)).toEqual(
      Array(ERASURE_PAGES_PER_CALL).fill(ERASURE_PAGE),
    );

    const second = await deleteUser(f.deps, issuer, { userId: user.userId }, caller);
    expect(second).toEqual({ deletedReceipts: 7, deletedKeys: 0, receiptsLeft: 0 });
    expect(await f.store.receipts.countByUser({ userId: user.userId, panHash: user.panHash })).toBe(0);
    expect((await rejection(deleteUser(f.deps, issuer, { userId: user.userId }, caller))).code).toBe(
      "not_found",
    );
    const audit = await f.store.audit.list(10, { tenantId: "bank-a" });
    expect(audit.filter((e) => e.action === "user.erased").map((e) => e.subject)).toEqual([
      "7 receipts, 0 keys",
      `${perCall} receipts, 1 keys, 7 receipts left`,
    ]);
    // A key change on record (issue 31 item 6): the call that deleted the keys names the active one.
    expect(audit.filter((e) => e.action === "user.erased").map((e) => e.previousKeyId)).toEqual([
      undefined,
      keys.keyId,
    ]);
  });
});
