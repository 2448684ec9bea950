import { generateKeyPairSync } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { KeyBundleSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { assertMerchantIdUsable, claimMerchantId } from "../../src/domain/merchants.js";
import { createPayment } from "../../src/domain/payments.js";
import { encryptReceipt, storeSealedReceipt } from "../../src/domain/receipts.js";
import { registerSigningKey } from "../../src/domain/signing-keys.js";
import {
  type DomainFixture,
  domainFixture,
  principal,
  receiptMessage,
  rejection,
} from "../support/domain.js";
import { hashPan } from "../support/harness.js";

const shop1 = principal("merchant", "shop-1");
const shop2 = principal("merchant", "shop-2");
const CALLER = { requestId: "req-m", sourceIp: "198.51.100.4" };
const PAN = "4000000000000066";
const TAKEN = "This merchantId belongs to another tenant.";

/**
 * Issue 38: merchantId ownership from the side of the tenant that does not own it (refused before
 * any check about the owner's keys, so it learns nothing of them) and of the new owner the operator
 * moved a merchantId to (it frees the ids the previous owner's records hold, audited, and only those).
 */
describe("merchantId ownership", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    await f.close();
  });

  const deleted = async () =>
    (await f.store.audit.list(100))
      .filter((e) => e.action === "merchant.previous_owner_record_deleted")
      .reverse();

  it("refuses another tenant before the owner's signing key is consulted: forbidden, not a signature error", async () => {
    await encryptReceipt(f.deps, shop1, receiptMessage(PAN, { merchantId: "m-signed" }), null, CALLER);
    await registerSigningKey(
      f.deps,
      shop1,
      {
        merchantId: "m-signed",
        publicKey: generateKeyPairSync("ed25519")
          .publicKey.export({ format: "der", type: "spki" })
          .toString("base64"),
      },
      CALLER,
    );
    const refused = await rejection(
      encryptReceipt(f.deps, shop2, receiptMessage(PAN, { merchantId: "m-signed" }), null, CALLER),
    );
    expect([refused.code, refused.message]).toEqual(["forbidden", TAKEN]);
    // The owner itself, unsigned, gets the signature error: the refusal above was the ownership.
    const own = await rejection(
      encryptReceipt(f.deps, shop1, receiptMessage(PAN, { merchantId: "m-signed" }), null, CALLER),
    );
    expect(own.code).not.toBe("forbidden");
  });

  it("refuses another tenant's sealed receipt as forbidden before it is told the card's key changed", async () => {
    await encryptReceipt(f.deps, shop1, receiptMessage(PAN, { merchantId: "m-sealed" }), null, CALLER);
    const input = {
      recipientHashedPan: hashPan(PAN),
      version: "1.0",
      receiptId: "sealed-1",
      merchantId: "m-sealed",
      transactionId: "t-sealed-1",
      keyBundle: create(KeyBundleSchema, {
        keyId: "not-the-routed-key",
        algorithm: "HPKE-P256-SHA256-A256GCM",
        encryptedAesKey: new Uint8Array(32),
        encapsulatedKey: new Uint8Array(65),
        aadBound: true,
      }),
      ciphertext: new Uint8Array(40),
      iv: new Uint8Array(12),
      authTag: new Uint8Array(16),
    };
    const refused = await rejection(storeSealedReceipt(f.deps, shop2, input, CALLER));
    expect([refused.code, refused.message]).toEqual(["forbidden", TAKEN]);
    // The owner sending the same is told to look the key up again.
    expect((await rejection(storeSealedReceipt(f.deps, shop1, input, CALLER))).code).toBe("conflict");
    // A merchantId nobody owns yet is usable (and not claimed by a refused call).
    const fresh = await rejection(
      storeSealedReceipt(f.deps, shop2, { ...input, merchantId: "m-free" }, CALLER),
    );
    expect(fresh.code).toBe("conflict");
    expect(await f.store.merchants.find("m-free")).toBeUndefined();
  });

  it("lets the new owner reuse a receiptId of the previous owner: that receipt is deleted and audited, once", async () => {
    const old = await encryptReceipt(
      f.deps,
      shop1,
      receiptMessage(PAN, { merchantId: "m-moved", receiptId: "r-reused" }),
      null,
      CALLER,
    );
    expect(old.merchantTenantId ?? "shop-1").toBe("shop-1");
    await f.store.merchants.assign("m-moved", "shop-2", f.clock.now());
    // The previous owner is now the other tenant.
    const former = await rejection(
      encryptReceipt(f.deps, shop1, receiptMessage(PAN, { merchantId: "m-moved" }), null, CALLER),
    );
    expect([former.code, former.message]).toEqual(["forbidden", TAKEN]);

    const mine = await encryptReceipt(
      f.deps,
      shop2,
      receiptMessage(PAN, { merchantId: "m-moved", receiptId: "r-reused" }),
      null,
      CALLER,
    );
    const stored = await f.store.receipts.findByMerchantReceipt("m-moved", "r-reused");
    expect(stored?.transactionId).toBe(mine.transactionId);
    expect(stored?.transactionId).not.toBe(old.transactionId);
    const [event, ...more] = await deleted();
    expect(more).toEqual([]);
    expect(event).toMatchObject({
      tenantId: "shop-2",
      requestId: "req-m",
      sourceIp: "198.51.100.4",
      subject: "m-moved: receipt r-reused",
    });

    // The owner's own receipt is never freed: the same receiptId again is conflict, nothing deleted.
    const again = await rejection(
      encryptReceipt(
        f.deps,
        shop2,
        receiptMessage(PAN, { merchantId: "m-moved", receiptId: "r-reused" }),
        null,
        CALLER,
      ),
    );
    expect(again.code).toBe("conflict");
    expect(await f.store.receipts.findByMerchantReceipt("m-moved", "r-reused")).toMatchObject({
      transactionId: mine.transactionId,
    });
    expect(await deleted()).toHaveLength(1);
  });

  it("lets the new owner reuse a transactionId of the previous owner's payment, audited as a payment", async () => {
    const pay = (caller: typeof shop1, receiptId: string) =>
      createPayment(
        f.deps,
        caller,
        {
          gateway: "gateway_a",
          receipt: receiptMessage(PAN, {
            merchantId: "m-paid",
            transactionId: "t-reused",
            receiptId,
            amount: 300n,
          }),
        },
        CALLER,
      );
    await pay(shop1, "r-old");
    await f.store.merchants.assign("m-paid", "shop-2", f.clock.now());
    await pay(shop2, "r-new");
    expect(await f.store.receipts.findByMerchantReceipt("m-paid", "r-old")).toBeUndefined();
    expect(await f.store.receipts.findByMerchantReceipt("m-paid", "r-new")).toBeDefined();
    const subjects = (await deleted()).map((e) => [e.tenantId, e.subject]);
    expect(subjects).toEqual([["shop-2", "m-paid: payment of transaction t-reused"]]);
    // The owner's own transactionId again: conflict, nothing more deleted.
    expect((await rejection(pay(shop2, "r-newer"))).code).toBe("conflict");
    expect(await deleted()).toHaveLength(1);
  });

  it("claims nothing for an API key whose allow-list lacks the merchantId, nor for another tenant", async () => {
    const limited = principal("merchant", "shop-1", ["m-allowed"]);
    for (const check of [claimMerchantId, assertMerchantIdUsable]) {
      const refused = await rejection(check(f.deps, limited, "m-other"));
      expect([refused.code, refused.message]).toEqual([
        "forbidden",
        "This API key may not act for this merchantId.",
      ]);
    }
    expect(await f.store.merchants.find("m-other")).toBeUndefined();
    await claimMerchantId(f.deps, limited, "m-allowed");
    expect((await f.store.merchants.find("m-allowed"))?.tenantId).toBe("shop-1");
    // Claimed: another tenant's claim (one that lost a race to the first use) is refused, and the
    // owner keeps it.
    const late = await rejection(claimMerchantId(f.deps, shop2, "m-allowed"));
    expect([late.code, late.message]).toEqual(["forbidden", TAKEN]);
    expect((await f.store.merchants.find("m-allowed"))?.tenantId).toBe("shop-1");
    await claimMerchantId(f.deps, shop1, "m-allowed");
  });
});
