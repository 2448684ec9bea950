import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { gatewayByName } from "../../src/domain/gateways/index.js";
import { grantAccess } from "../../src/domain/grants.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { panHashOf } from "../../src/domain/pan.js";
import { createPayment, decryptPayment } from "../../src/domain/payments.js";
import { decryptReceipt, encryptReceipt, listReceipts } from "../../src/domain/receipts.js";
import type { AppError } from "../../src/errors.js";
import { uuid } from "../../src/ids.js";
import {
  type DomainFixture,
  domainFixture,
  principal,
  receiptMessage,
  rejection,
} from "../support/domain.js";
import { fixtureRsaKeyPair } from "../support/fixture-keys.js";
import { hashPan } from "../support/harness.js";

const caller = { requestId: "req-1", sourceIp: "203.0.113.7" };

describe("receipt flow rules (domain)", () => {
  let f: DomainFixture;
  const issuer = principal("issuer", "bank-a");
  const otherIssuer = principal("issuer", "bank-b");
  const merchant = principal("merchant", "shop-1");

  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    await f.close();
  });

  async function onboard(pan: string, who = issuer) {
    const keys = await generateKeys(f.deps, who);
    const reg = await register(f.deps, who, {
      hashedPan: hashPan(pan),
      publicKey: keys.publicKey,
      keyId: keys.keyId,
    });
    return { ...keys, userId: reg.userId, reg };
  }

  describe("register", () => {
    it("names every bad field at once", async () => {
      const err = await rejection(
        register(f.deps, issuer, { hashedPan: "xyz", publicKey: "not a key", keyId: "k" }),
      );
      expect(err.code).toBe("invalid_request");
      expect(err.violations.map((v) => v.field).sort()).toEqual(["hashedPan", "keyId", "publicKey"]);
    });

    it("refuses a public key that differs from the one generate-keys made for that keyId", async () => {
      const keys = await generateKeys(f.deps, issuer);
      const other = await fixtureRsaKeyPair();
      const err = await rejection(
        register(f.deps, issuer, { hashedPan: hashPan("1"), publicKey: other.publicKey, keyId: keys.keyId }),
      );
      expect(err.code).toBe("forbidden");
    });

    it("accepts a device-made key under a fresh UUID", async () => {
      const pair = await fixtureRsaKeyPair();
      const keyId = uuid();
      const reg = await register(f.deps, issuer, {
        hashedPan: hashPan("2"),
        publicKey: pair.publicKey,
        keyId,
      });
      expect(reg).toMatchObject({ keyId, status: "active", releasedReceipts: 0 });
    });

    it("stores the hashed PAN only as an HMAC under the pepper", async () => {
      const { userId } = await onboard("4111");
      expect(await f.store.users.findByPanHash(hashPan("4111"))).toBeUndefined();
      const stored = await f.store.users.findByPanHash(panHashOf(f.deps.pepper, hashPan("4111")));
      expect(stored?.userId).toBe(userId);
      expect(stored?.panHash).not.toContain(hashPan("4111"));
    });

    it("rotates: same user, new key active, old receipts still open with the old key", async () => {
      const first = await onboard("5000");
      const before = await encryptReceipt(f.deps, merchant, receiptMessage("5000"));
      const second = await onboard("5000");
      expect(second.userId).toBe(first.userId);
      expect((await f.store.users.findKey(first.keyId))?.status).toBe("rotated");
      expect((await f.store.users.findKey(second.keyId))?.status).toBe("active");
      const after = await encryptReceipt(f.deps, merchant, receiptMessage("5000"));
      expect(after.keyBundle.keyId).toBe(second.keyId);

      const oldGrant = await grantAccess(
        f.deps,
        issuer,
        { userId: first.userId, keyId: first.keyId },
        caller,
      );
      const opened = await decryptReceipt(
        f.deps,
        issuer,
        {
          receiptId: before.receiptId,
          merchantId: "",
          tokenId: oldGrant.tokenId,
          accessTokenId: "",
          privateKey: first.privateKey,
        },
        caller,
      );
      expect(opened.receiptId).toBe(before.receiptId);
    });

    it("refuses the same card from another issuer tenant, and a keyId of another user", async () => {
      const first = await onboard("6000");
      const keys = await generateKeys(f.deps, otherIssuer);
      const err = await rejection(
        register(f.deps, otherIssuer, {
          hashedPan: hashPan("6000"),
          publicKey: keys.publicKey,
          keyId: keys.keyId,
        }),
      );
      expect(err.code).toBe("conflict");
      const reuse = await rejection(
        register(f.deps, issuer, {
          hashedPan: hashPan("6001"),
          publicKey: first.publicKey,
          keyId: first.keyId,
        }),
      );
      expect(reuse.code).toBe("conflict");
    });
  });

  describe("grants", () => {
    it("caps a user at 5 unexpired grants and says when the oldest expires", async () => {
      const u = await onboard("7000");
      for (let i = 0; i < 5; i++) {
        await grantAccess(f.deps, issuer, { userId: u.userId, keyId: u.keyId }, caller);
        f.clock.advance(10_000);
      }
      const err = await rejection(grantAccess(f.deps, issuer, { userId: u.userId, keyId: u.keyId }, caller));
      expect(err.code).toBe("rate_limit_exceeded");
      expect(err.retryAfterSeconds).toBe(130); // first grant: 180 s lifetime, 50 s ago
      f.clock.advance(130_000);
      await expect(
        grantAccess(f.deps, issuer, { userId: u.userId, keyId: u.keyId }, caller),
      ).resolves.toBeDefined();
    });

    it("records the source address in the audit log and returns a 128-bit-plus token", async () => {
      const u = await onboard("7100");
      const grant = await grantAccess(f.deps, issuer, { userId: u.userId, keyId: u.keyId }, caller);
      expect(grant.tokenId).toMatch(/^tok_[A-Za-z0-9_-]{32}$/);
      const [event] = await f.store.audit.list(1);
      expect(event).toMatchObject({ action: "grant.created", sourceIp: "203.0.113.7", userId: u.userId });
      expect(JSON.stringify(event)).not.toContain(grant.tokenId);
    });

    it("answers not_found for a user of another tenant", async () => {
      const u = await onboard("7200");
      const err = await rejection(
        grantAccess(f.deps, otherIssuer, { userId: u.userId, keyId: u.keyId }, caller),
      );
      expect(err.code).toBe("not_found");
    });
  });

  describe("decrypt", () => {
    async function paidReceipt(pan: string) {
      const u = await onboard(pan);
      const created = await createPayment(f.deps, merchant, {
        gateway: "gateway_a",
        receipt: receiptMessage(pan, { amount: 300n }),
      });
      const grant = await grantAccess(f.deps, issuer, { userId: u.userId, keyId: u.keyId }, caller);
      const input = {
        paymentId: created.payment.paymentId,
        tokenId: grant.tokenId,
        accessTokenId: "",
        privateKey: u.privateKey,
      };
      return { u, created, grant, input };
    }

    it("opens with a valid grant and the matching key, and audits the use", async () => {
      const { input, u } = await paidReceipt("8000");
      const receipt = await decryptPayment(f.deps, issuer, input, caller);
      expect(receipt).toMatchObject({ merchantName: "Corner Coffee", keyId: u.keyId, amount: 300n });
      const [event] = await f.store.audit.list(1);
      expect(event).toMatchObject({ action: "payment.decrypted", subject: input.paymentId });
    });

    it("refuses a private key that does not match the grant's key", async () => {
      const { input } = await paidReceipt("8100");
      const wrong = await fixtureRsaKeyPair();
      const err = await rejection(
        decryptPayment(f.deps, issuer, { ...input, privateKey: wrong.privateKey }, caller),
      );
      expect(err.code).toBe("forbidden");
    });

    it("refuses an expired token even though the store still has it", async () => {
      const { input } = await paidReceipt("8200");
      f.clock.advance(180_000);
      const err = await rejection(decryptPayment(f.deps, issuer, input, caller));
      expect(err.code).toBe("forbidden");
      expect(err.message).toMatch(/expired/);
    });

    it("finds no receipt for another user's token, nor for another tenant's (not_found)", async () => {
      const { input } = await paidReceipt("8300");
      const other = await onboard("8301");
      const otherGrant = await grantAccess(
        f.deps,
        issuer,
        { userId: other.userId, keyId: other.keyId },
        caller,
      );
      const err = await rejection(
        decryptPayment(
          f.deps,
          issuer,
          { ...input, tokenId: otherGrant.tokenId, privateKey: other.privateKey },
          caller,
        ),
      );
      // The payment's receipt is looked for among the token's user's receipts (on its card, which
      // places receipts on a sharded store), as a receipt decrypt looks for its receiptId.
      expect([err.code, err.message]).toEqual(["not_found", "Receipt not found."]);
      const foreign = await rejection(decryptPayment(f.deps, otherIssuer, input, caller));
      expect(foreign.code).toBe("not_found");
    });
  });

  describe("sealing", () => {
    it("seals on the worker pool, to the registered key or else to the escrow key", async () => {
      const seal = vi.spyOn(f.pool, "seal");
      const u = await onboard("7000");
      const sealed = await encryptReceipt(f.deps, merchant, receiptMessage("7000"));
      const escrowed = await encryptReceipt(f.deps, merchant, receiptMessage("7001"));
      expect(seal.mock.calls.map(([request]) => [request.keyId, request.spki])).toEqual([
        [u.keyId, u.publicKey],
        [f.deps.escrowKeys[0]?.keyId, f.deps.escrowKeys[0]?.spki],
      ]);
      expect(sealed.keyBundle.keyId).toBe(u.keyId);
      expect(escrowed.keyBundle.keyId).toBe(f.deps.escrowKeys[0]?.keyId);
      // What the workers were given is the receipt's sealed plaintext, which is never stored.
      const plaintext = JSON.parse(seal.mock.calls[0]?.[0].plaintext ?? "{}") as { receiptId?: string };
      expect(plaintext.receiptId).toBe(sealed.receiptId);
      expect(JSON.stringify(sealed)).not.toContain(seal.mock.calls[0]?.[0].plaintext);
    });
  });

  describe("escrow", () => {
    it("releases only unexpired escrow, keeping the ciphertext byte for byte", async () => {
      const kept = await encryptReceipt(f.deps, merchant, receiptMessage("9000"));
      expect(kept.isEscrowed).toBe(true);
      f.clock.advance(29 * 86_400_000);
      const u = await onboard("9000");
      expect(u.reg.releasedReceipts).toBe(1);
      const page = await listReceipts(f.deps, issuer, { userId: u.userId, pageSize: 0, pageToken: "" });
      expect(page.receipts[0]?.ciphertext).toBe(kept.ciphertext);
      expect(page.receipts[0]?.isEscrowed).toBe(false);

      await encryptReceipt(f.deps, merchant, receiptMessage("9001"));
      f.clock.advance(31 * 86_400_000);
      expect((await onboard("9001")).reg.releasedReceipts).toBe(0);
    });

    it("loses no receipt when registration and new receipts race", async () => {
      const pan = "9100";
      const sent = Array.from({ length: 12 }, () => receiptMessage(pan));
      const [onboarded] = await Promise.all([
        onboard(pan),
        ...sent.map((r) => encryptReceipt(f.deps, merchant, r)),
      ]);
      const page = await listReceipts(f.deps, issuer, {
        userId: onboarded.userId,
        pageSize: 50,
        pageToken: "",
      });
      expect(page.receipts).toHaveLength(12);
      expect(page.receipts.every((r) => !r.isEscrowed && r.keyBundle.keyId === onboarded.keyId)).toBe(true);
      const grant = await grantAccess(
        f.deps,
        issuer,
        { userId: onboarded.userId, keyId: onboarded.keyId },
        caller,
      );
      for (const r of sent) {
        const opened = await decryptReceipt(
          f.deps,
          issuer,
          {
            receiptId: r.receiptId,
            merchantId: "",
            tokenId: grant.tokenId,
            accessTokenId: "",
            privateKey: onboarded.privateKey,
          },
          caller,
        );
        expect(opened.transactionId).toBe(r.transactionId);
      }
    });
  });

  describe("payments", () => {
    it("refuses a second payment for the same merchant transaction", async () => {
      const r = receiptMessage("1200", { amount: 300n });
      await createPayment(f.deps, merchant, { gateway: "gateway_a", receipt: r });
      const err = await rejection(
        createPayment(f.deps, merchant, { gateway: "gateway_a", receipt: { ...r, receiptId: "another" } }),
      );
      expect(err.code).toBe("conflict");
    });

    it("names the earlier payment, and charges nothing, when a transaction is paid again", async () => {
      const r = receiptMessage("1210", { amount: 300n });
      const first = await createPayment(f.deps, merchant, { gateway: "gateway_a", receipt: r });
      const charge = vi.spyOn(gatewayByName("gateway_a"), "charge");
      try {
        const err = await rejection(createPayment(f.deps, merchant, { gateway: "gateway_a", receipt: r }));
        expect(err.code).toBe("conflict");
        expect(err.metadata).toEqual({ payment_id: first.payment.paymentId });
        expect(err.message).toContain(first.payment.paymentId);
        expect(charge).not.toHaveBeenCalled();
      } finally {
        charge.mockRestore();
      }
    });

    it("names the payment that won when two payments of a transaction race", async () => {
      const r = receiptMessage("1220", { amount: 300n });
      const outcomes = await Promise.allSettled(
        ["a", "b"].map((suffix) =>
          createPayment(f.deps, merchant, {
            gateway: "gateway_a",
            receipt: { ...r, receiptId: `${r.receiptId}-${suffix}` },
          }),
        ),
      );
      const won = outcomes.flatMap((o) => (o.status === "fulfilled" ? [o.value] : []));
      const lost = outcomes.flatMap((o) => (o.status === "rejected" ? [o.reason as AppError] : []));
      expect(won).toHaveLength(1);
      expect(lost.map((e) => [e.code, e.metadata])).toEqual([
        ["conflict", { payment_id: won[0]?.payment.paymentId }],
      ]);
    });

    it("stores nothing when gateway_b declines the card", async () => {
      const u = await onboard("1300");
      const err = await rejection(
        createPayment(f.deps, merchant, {
          gateway: "gateway_b",
          receipt: receiptMessage("1300", { cardNonce: "cnon:card-nonce-declined" }),
        }),
      );
      expect(err.code).toBe("payment_declined");
      const page = await listReceipts(f.deps, issuer, { userId: u.userId, pageSize: 50, pageToken: "" });
      expect(page.receipts).toHaveLength(0);
    });

    it("refuses a merchantId the key is not allowed to use", async () => {
      const limited = principal("merchant", "shop-2", ["m-allowed"]);
      const err = await rejection(encryptReceipt(f.deps, limited, receiptMessage("1400")));
      expect(err.code).toBe("forbidden");
    });
  });
});
