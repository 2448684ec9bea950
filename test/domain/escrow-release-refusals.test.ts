import { generateKeyPairSync } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { KeyBundleSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { rewrapKeyBundle } from "../../src/client/index.js";
import {
  type EscrowReleaseInput,
  registerEscrowKey,
  releaseByIssuer,
} from "../../src/domain/issuer-escrow.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { encryptReceipt } from "../../src/domain/receipts.js";
import { encryptedReceiptOf } from "../../src/rpc/convert.js";
import type { ReceiptRecord } from "../../src/store/types.js";
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
const merchant = principal("merchant", "shop-1");
const CALLER = { requestId: "r", sourceIp: "" };

/**
 * Issue 38: issuer escrow release accepted a bundle wrapped to a key other than the user's active one,
 * and no test asserted the failure reason. An issuer (or a thief of its escrow key) re-wraps held
 * receipts to keys of its choice: the user's previous key (a lost device's), another cardholder's key
 * (its own card), a key of nobody. Each is refused with `key_mismatch`, the receipt stays escrowed
 * under its old bundle, and only a bundle for the active key is released.
 */
describe("issuer escrow release refuses a bundle for any key but the user's active one", () => {
  let f: DomainFixture;
  let escrowPrivate: string;
  beforeEach(async () => {
    f = await domainFixture();
    await f.store.bins.set("bank-a", ["400000"], f.clock.now());
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    escrowPrivate = pair.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64");
    await registerEscrowKey(f.deps, bankA, {
      publicKey: pair.publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    });
  });
  afterEach(async () => {
    await f.close();
  });

  /** A card of the issuer's BIN with `n` receipts escrowed for the issuer before it registers. */
  async function heldReceipts(pan: string, n: number): Promise<ReceiptRecord[]> {
    const held: ReceiptRecord[] = [];
    for (let i = 0; i < n; i++)
      held.push(await encryptReceipt(f.deps, merchant, receiptMessage(pan, { cardBin: "40000000" })));
    return held;
  }

  async function registered(pan: string) {
    const keys = await generateKeys(f.deps, bankA);
    const user = await register(f.deps, bankA, { hashedPan: hashPan(pan), ...keys });
    return { userId: user.userId, keyId: keys.keyId, publicKey: keys.publicKey };
  }

  /** The release item of `record`, its key unwrapped from escrow and wrapped to `to`. */
  async function rewrapped(
    record: ReceiptRecord,
    to: { keyId: string; publicKey: string },
  ): Promise<EscrowReleaseInput> {
    const m = encryptedReceiptOf(record);
    const bundle = await rewrapKeyBundle({ ...m, keyBundle: m.keyBundle }, escrowPrivate, to);
    return {
      merchantId: record.merchantId,
      receiptId: record.receiptId,
      keyBundle: create(KeyBundleSchema, {
        keyId: bundle.keyId,
        algorithm: bundle.algorithm,
        encryptedAesKey: Buffer.from(bundle.encryptedAesKey, "base64"),
        encapsulatedKey: Buffer.from(bundle.encapsulatedKey ?? "", "base64"),
      }),
    };
  }

  it("answers key_mismatch for the previous key, another cardholder's key and a stranger's key", async () => {
    const pan = "4000000000000025";
    const held = await heldReceipts(pan, 4);
    const previous = await registered(pan);
    const active = await registered(pan);
    expect(active.userId).toBe(previous.userId);
    const other = await registered("4000000000000033");
    const strangerKeys = await generateKeys(f.deps, bankA);
    const stranger = { keyId: strangerKeys.keyId, publicKey: strangerKeys.publicKey };
    const [h0, h1, h2, h3] = held as [ReceiptRecord, ReceiptRecord, ReceiptRecord, ReceiptRecord];
    const items = [
      await rewrapped(h0, previous),
      await rewrapped(h1, other),
      await rewrapped(h2, stranger),
      await rewrapped(h3, active),
    ];

    const result = await releaseByIssuer(f.deps, bankA, { userId: active.userId, receipts: items }, CALLER);

    const mismatch = (r: ReceiptRecord) => ({
      merchantId: r.merchantId,
      receiptId: r.receiptId,
      reason: "key_mismatch",
    });
    expect(result).toEqual({ released: 1, failed: [mismatch(h0), mismatch(h1), mismatch(h2)] });
    for (const record of [h0, h1, h2]) {
      const kept = await f.store.receipts.findByMerchantReceipt(record.merchantId, record.receiptId);
      expect(kept).toMatchObject({ isEscrowed: true, keyBundle: record.keyBundle });
      expect(kept?.userId).toBeUndefined();
    }
    const released = await f.store.receipts.findByMerchantReceipt(h3.merchantId, h3.receiptId);
    expect(released).toMatchObject({ isEscrowed: false, userId: active.userId });
    expect(released?.keyBundle.keyId).toBe(active.keyId);
  });

  it("answers key_mismatch for a bundle with no key, and not_found for another issuer's call", async () => {
    const pan = "4000000000000041";
    const [held] = (await heldReceipts(pan, 1)) as [ReceiptRecord];
    const user = await registered(pan);
    const item = await rewrapped(held, user);
    const noKey = await releaseByIssuer(
      f.deps,
      bankA,
      { userId: user.userId, receipts: [{ ...item, keyBundle: undefined }] },
      CALLER,
    );
    expect(noKey.failed).toEqual([
      { merchantId: held.merchantId, receiptId: held.receiptId, reason: "key_mismatch" },
    ]);
    const foreign = await rejection(
      releaseByIssuer(f.deps, bankB, { userId: user.userId, receipts: [item] }, CALLER),
    );
    expect(foreign.code).toBe("not_found");
    expect((await f.store.receipts.findByMerchantReceipt(held.merchantId, held.receiptId))?.isEscrowed).toBe(
      true,
    );
    // The same item from the issuer that holds it is released: the refusals were the keys.
    expect(await releaseByIssuer(f.deps, bankA, { userId: user.userId, receipts: [item] }, CALLER)).toEqual({
      released: 1,
      failed: [],
    });
  });
});
