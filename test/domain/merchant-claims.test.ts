import { generateKeyPairSync } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { KeyBundleSchema, ReceiptSchema, SealedReceiptSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { sealReceipt } from "../../src/client/webcrypto.js";
import { createPayment } from "../../src/domain/payments.js";
import { encryptReceipt, storeSealedReceipt } from "../../src/domain/receipts.js";
import { lookupKey } from "../../src/domain/routing.js";
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
const CALLER = { requestId: "r", sourceIp: "" };
const PAN = "4000000000000058";

/**
 * Issue 38: a merchantId first used through a sealed receipt was never claimed, so another tenant
 * could take it through encrypt; the tests only ever claimed through encrypt. Here each of the five
 * surfaces that write under a merchantId (encrypt, a merchant-sealed receipt, a payment in the clear,
 * a payment carrying a sealed receipt, a signing key) is the first use in turn, and another merchant
 * tenant then tries every surface: each must be `forbidden`, with nothing stored under the merchantId.
 */
describe("the first use of a merchantId claims it, on every surface", () => {
  let f: DomainFixture;
  let n = 0;
  beforeAll(async () => {
    f = await domainFixture();
  });
  afterAll(async () => {
    await f.close();
  });

  /** A merchant-sealed receipt for `merchantId`, sealed to the key look-up gives for the card. */
  async function sealed(caller: typeof shop1, merchantId: string) {
    n += 1;
    const key = await lookupKey(f.deps, caller, { recipientHashedPan: hashPan(PAN) }, CALLER);
    const envelope = await sealReceipt(
      {
        version: "1.0",
        receiptId: `claim-r-${n}`,
        merchantId,
        merchantName: "Claimed Cafe",
        transactionId: `claim-t-${n}`,
        transactionDate: "2026-03-01T11:00:00Z",
        currency: "EUR",
        items: [{ lineItemId: "1", name: "Tea", quantity: 1, unitPrice: 300, totalPrice: 300, taxes: [] }],
      },
      key.publicKey,
      { keyId: key.keyId, aadBound: key.aadBound },
    );
    const b = (text: string) => Buffer.from(text, "base64");
    return {
      version: envelope.version,
      receiptId: envelope.receiptId,
      merchantId,
      transactionId: envelope.transactionId,
      keyBundle: create(KeyBundleSchema, {
        keyId: envelope.keyBundle.keyId,
        algorithm: envelope.keyBundle.algorithm,
        encryptedAesKey: b(envelope.keyBundle.encryptedAesKey),
        encapsulatedKey: b(envelope.keyBundle.encapsulatedKey ?? ""),
        aadBound: envelope.keyBundle.aadBound === true,
      }),
      ciphertext: b(envelope.ciphertext),
      iv: b(envelope.iv),
      authTag: b(envelope.authTag),
    };
  }

  /** Each surface, as a call by `caller` that writes under `merchantId`. */
  const SURFACES: Record<string, (caller: typeof shop1, merchantId: string) => Promise<unknown>> = {
    encrypt: (caller, merchantId) =>
      encryptReceipt(f.deps, caller, receiptMessage(PAN, { merchantId }), null, CALLER),
    sealed: async (caller, merchantId) =>
      storeSealedReceipt(
        f.deps,
        caller,
        { recipientHashedPan: hashPan(PAN), ...(await sealed(caller, merchantId)) },
        CALLER,
      ),
    payment: (caller, merchantId) =>
      createPayment(
        f.deps,
        caller,
        { gateway: "gateway_a", receipt: receiptMessage(PAN, { merchantId, amount: 300n }) },
        CALLER,
      ),
    sealedPayment: async (caller, merchantId) => {
      const s = await sealed(caller, merchantId);
      const sealedReceipt = create(SealedReceiptSchema, {
        version: s.version,
        receiptId: s.receiptId,
        keyBundle: s.keyBundle,
        ciphertext: s.ciphertext,
        iv: s.iv,
        authTag: s.authTag,
      });
      const receipt = create(ReceiptSchema, {
        merchantId,
        transactionId: s.transactionId,
        recipientHashedPan: hashPan(PAN),
        currency: "EUR",
        amount: 300n,
        sealedReceipt,
      });
      return createPayment(f.deps, caller, { gateway: "gateway_a", receipt }, CALLER);
    },
    signingKey: (caller, merchantId) =>
      registerSigningKey(
        f.deps,
        caller,
        {
          merchantId,
          publicKey: generateKeyPairSync("ed25519")
            .publicKey.export({ format: "der", type: "spki" })
            .toString("base64"),
        },
        CALLER,
      ),
  };

  it.each(Object.keys(SURFACES))(
    "claimed by a first use through %s: another tenant is refused on every surface",
    async (first) => {
      const merchantId = `claimed-by-${first}`;
      await (SURFACES[first] as (typeof SURFACES)[string])(shop1, merchantId);
      expect((await f.store.merchants.find(merchantId))?.tenantId).toBe("shop-1");
      for (const [surface, call] of Object.entries(SURFACES)) {
        const refused = await rejection(call(shop2, merchantId));
        expect([surface, refused.code, refused.message]).toEqual([
          surface,
          "forbidden",
          "This merchantId belongs to another tenant.",
        ]);
      }
      expect((await f.store.merchants.find(merchantId))?.tenantId).toBe("shop-1");
      // The owner goes on using it: the refusals were the ownership.
      await (SURFACES.sealed as (typeof SURFACES)[string])(shop1, merchantId);
    },
  );
});
