import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { Receipt } from "../../gen/receipts/v1/receipt_pb.js";
import type { SealRequest } from "../../src/crypto/crypto-pool.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { type CreatedPayment, type CreatePaymentInput, createPayment } from "../../src/domain/payments.js";
import { type ValidReceipt, validateReceipt } from "../../src/domain/receipt-rules.js";
import { encryptReceipt } from "../../src/domain/receipts.js";
import { type PreparedReceipt, sealForRecipient } from "../../src/domain/sealing.js";
import type { ReceiptRecord } from "../../src/store/types.js";
import { type DomainFixture, domainFixture, principal, receiptMessage } from "../support/domain.js";
import { hashPan } from "../support/harness.js";

/**
 * While the worker seals, no call of the write path keeps its request or its validated receipt alive:
 * a suspended async function keeps every parameter and local, so each of a load's calls in flight held
 * a whole receipt (a 50-item one is some 200 objects, and its message more) through the seal, and the
 * garbage collector copied them again and again. Each case starts a call from a plain function (so
 * that this test's own frames hold nothing of it), holds the seal until the garbage collector has run,
 * and then lets the call finish as usual.
 */

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

/** Waits for the event loop's next turn: a weak reference made earlier no longer pins its object. */
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));

describe("the write path lets go of the receipt while it is sealed", () => {
  let f: DomainFixture;
  const issuer = principal("issuer", "bank-a");
  const merchant = principal("merchant", "shop-1");
  const pan = "4111111111111111";
  /** Resolves when the pool is asked to seal; `release` lets the seal go on. */
  let sealAsked: Promise<void>;
  let release: () => void;

  beforeEach(async () => {
    f = await domainFixture();
    const keys = await generateKeys(f.deps, issuer);
    await register(f.deps, issuer, { hashedPan: hashPan(pan), publicKey: keys.publicKey, keyId: keys.keyId });
    const seal = f.pool.seal.bind(f.pool);
    let asked: () => void = () => {};
    sealAsked = new Promise((resolve) => {
      asked = resolve;
    });
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    // Only the request's strings reach the pool: holding it here pins neither message nor receipt.
    f.pool.seal = (request: SealRequest) => {
      asked();
      return gate.then(() => seal(request));
    };
  });
  afterEach(async () => {
    await f.close();
  });

  /** Runs `start` while the seal is held, and says whether its weakly held object survived a collection. */
  async function survivesTheSeal<T>(start: () => { held: WeakRef<object>; done: Promise<T> }): Promise<{
    survived: boolean;
    result: T;
  }> {
    const { held, done } = start();
    await sealAsked;
    await nextTurn();
    gc();
    const survived = held.deref() !== undefined;
    release();
    return { survived, result: await done };
  }

  it("encrypt: the request's receipt message", async () => {
    const { survived, result } = await survivesTheSeal(() => {
      const input: Receipt = receiptMessage(pan);
      return { held: new WeakRef(input), done: encryptReceipt(f.deps, merchant, input) };
    });
    expect(survived).toBe(false);
    const record = result as ReceiptRecord;
    expect(record.merchantId).toBe("m-1");
    const stored = await f.store.receipts.findByTransaction(merchant.tenantId, record.transactionId);
    expect(stored.map((r) => r.id)).toEqual([record.id]);
  });

  it("sealing: the validated receipt", async () => {
    const { survived, result } = await survivesTheSeal(() => {
      const receipt: ValidReceipt = validateReceipt(receiptMessage(pan), {
        mode: "encrypt",
        now: f.clock.now(),
      });
      return { held: new WeakRef(receipt), done: sealForRecipient(f.deps, merchant, receipt) };
    });
    expect(survived).toBe(false);
    expect((result as PreparedReceipt).record.panHash).not.toBe("");
    expect((result as PreparedReceipt).card).toEqual({ recipientHashedPan: hashPan(pan) });
  });

  it("create payment: the request and its receipt message", async () => {
    const { survived, result } = await survivesTheSeal(() => {
      const input: CreatePaymentInput = {
        gateway: "gateway_a",
        receipt: receiptMessage(pan, { amount: 300n }),
      };
      return { held: new WeakRef(input.receipt), done: createPayment(f.deps, merchant, input) };
    });
    expect(survived).toBe(false);
    const created = result as CreatedPayment;
    expect(created.payment.amount).toBe(300);
    expect(created.receipt.paymentId).toBe(created.payment.paymentId);
  });
});
