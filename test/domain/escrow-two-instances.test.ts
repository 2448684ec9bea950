import { generateKeyPairSync, randomInt } from "node:crypto";
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
import { createMongoStore } from "../../src/store/mongo/index.js";
import type { ReceiptRecord, Store } from "../../src/store/types.js";
import { FakeMongo } from "../store/fake-mongo/index.js";
import { type DomainFixture, domainFixture, principal, receiptMessage } from "../support/domain.js";
import { hashPan } from "../support/harness.js";

const bank = principal("issuer", "bank-a");
const merchant = principal("merchant", "shop-1");
const P256 = "HPKE-P256-SHA256-A256GCM";

/**
 * Two service instances on one database (the MongoDB adapter on the driver fake, with random
 * latencies, so their steps interleave) releasing the same card's escrow at once: the registration's
 * release (the service escrow key, a registration sent to both) and the issuer's release (its own
 * escrow key, the same bundles sent to both). Each receipt moves once: the store's release takes only
 * a receipt still escrowed, in one transaction, and the loser of a write conflict finds it released.
 * Counted on the stores' own answers: a release that answered true twice for one receipt would have
 * written its event twice.
 */
describe("two instances on one store release one card's escrow at once", () => {
  let fake: FakeMongo;
  let one: DomainFixture;
  let two: DomainFixture;
  let moved: Map<string, number>;

  /** A MongoDB store of its own over the shared fake database, counting each receipt it released. */
  async function instanceStore(): Promise<Store> {
    const store = await createMongoStore({
      uri: "mongodb://fake.invalid/",
      dbName: "receipts_two",
      createClient: fake.createClient,
    });
    await store.init();
    const release = store.receipts.release.bind(store.receipts);
    store.receipts.release = async (receipt, ...rest) => {
      const done = await release(receipt, ...rest);
      if (done) moved.set(receipt.id, (moved.get(receipt.id) ?? 0) + 1);
      return done;
    };
    return store;
  }

  beforeEach(async () => {
    fake = new FakeMongo({ seed: randomInt(2 ** 31) });
    moved = new Map();
    one = await domainFixture({ store: await instanceStore() });
    two = await domainFixture({ store: await instanceStore() });
    await one.store.bins.set("bank-a", ["400000"], one.clock.now());
  });
  afterEach(async () => {
    for (const f of [one, two]) {
      await f.close();
      await f.store.close();
    }
  });

  async function escrow(pan: string, n: number): Promise<ReceiptRecord[]> {
    const held: ReceiptRecord[] = [];
    for (let i = 0; i < n; i++) {
      const f = i % 2 === 0 ? one : two;
      held.push(await encryptReceipt(f.deps, merchant, receiptMessage(pan, { cardBin: "40000000" })));
    }
    return held;
  }

  it("at registration: a registration sent to both releases each receipt once, to the key", async () => {
    const pan = "4000000000000066";
    const held = await escrow(pan, 6);
    const keys = await generateKeys(one.deps, bank, { algorithm: P256 });
    const input = { hashedPan: hashPan(pan), keyId: keys.keyId, publicKey: keys.publicKey };
    const [a, b] = await Promise.all([register(one.deps, bank, input), register(two.deps, bank, input)]);
    expect(a.userId).toBe(b.userId);
    expect(a.releasedReceipts + b.releasedReceipts).toBe(held.length);
    expect([...moved.values()]).toEqual(held.map(() => 1));
    for (const r of held) {
      const stored = await one.store.receipts.findByMerchantReceipt(r.merchantId, r.receiptId);
      expect(stored).toMatchObject({ isEscrowed: false, userId: a.userId, keyBundle: { keyId: keys.keyId } });
    }
  });

  it("by the issuer: the same release sent to both moves each receipt once, and keeps one copy", async () => {
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const escrowPrivate = pair.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64");
    await registerEscrowKey(one.deps, bank, {
      publicKey: pair.publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    });
    const pan = "4000000000000074";
    const held = await escrow(pan, 6);
    const keys = await generateKeys(one.deps, bank, { algorithm: P256 });
    const user = await register(one.deps, bank, { hashedPan: hashPan(pan), ...keys });
    expect(user.releasedReceipts).toBe(0);
    const items: EscrowReleaseInput[] = [];
    for (const r of held) {
      const m = encryptedReceiptOf(r);
      const bundle = await rewrapKeyBundle({ ...m, keyBundle: m.keyBundle }, escrowPrivate, keys);
      items.push({
        merchantId: r.merchantId,
        receiptId: r.receiptId,
        keyBundle: create(KeyBundleSchema, {
          keyId: bundle.keyId,
          algorithm: bundle.algorithm,
          encryptedAesKey: Buffer.from(bundle.encryptedAesKey, "base64"),
          encapsulatedKey: Buffer.from(bundle.encapsulatedKey ?? "", "base64"),
        }),
      });
    }
    const call = (f: DomainFixture) =>
      releaseByIssuer(
        f.deps,
        bank,
        { userId: user.userId, receipts: items },
        { requestId: "r", sourceIp: "" },
      );
    const [a, b] = await Promise.all([call(one), call(two)]);
    // Out of escrow once each. The second call's item is a release again with the same bundle when it
    // read the receipt released, or not_escrowed when it lost the store's release step.
    expect([...moved.values()]).toEqual(held.map(() => 1));
    expect(a.released + b.released + a.failed.length + b.failed.length).toBe(2 * held.length);
    expect(a.released + b.released).toBeGreaterThanOrEqual(held.length);
    for (const failure of [...a.failed, ...b.failed]) expect(failure.reason).toBe("not_escrowed");
    for (const [i, r] of held.entries()) {
      const copy = await two.store.receipts.escrowCopyOf(r, two.clock.now());
      expect(copy?.keyBundle).toEqual(r.keyBundle);
      const stored = await one.store.receipts.findByMerchantReceipt(r.merchantId, r.receiptId);
      expect(stored?.keyBundle.encryptedAesKey).toBe(
        Buffer.from(items[i]?.keyBundle?.encryptedAesKey ?? []).toString("base64"),
      );
    }
  });
});
