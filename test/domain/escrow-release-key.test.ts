import { generateKeyPairSync } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { KeyBundleSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { rewrapKeyBundle } from "../../src/client/index.js";
import { registerEscrowKey, releaseByIssuer } from "../../src/domain/issuer-escrow.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { panHashOf } from "../../src/domain/pan.js";
import { encryptReceipt } from "../../src/domain/receipts.js";
import { encryptedReceiptOf } from "../../src/rpc/convert.js";
import { type ReceiptRecord, receiptOwnerOf } from "../../src/store/types.js";
import { type DomainFixture, domainFixture, principal, receiptMessage } from "../support/domain.js";
import { hashPan } from "../support/harness.js";

const issuer = principal("issuer", "bank-a");
const merchant = principal("merchant", "shop-1");

/**
 * Escrow release checks that its target key is still the user's active key before each receipt: a
 * release that runs on in the background after the registration answered must not hand receipts to a
 * key rotated away meanwhile (a lost device's); they wait for the new key's release. Nor to a user
 * that lost the card to the BIN's owner meanwhile: the rest of the card's escrow is the owner's.
 */
describe("escrow release to a key rotated away meanwhile", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
    f.deps.escrow = { ...f.deps.escrow, releasePerCall: 2 };
  });
  afterEach(async () => {
    await f.close();
  });

  it("stops, and the receipts left go to the key that replaced it", async () => {
    const pan = "4000000000009995";
    for (let i = 0; i < 5; i++) await encryptReceipt(f.deps, merchant, receiptMessage(pan));
    // The releases the registrations leave for the background, held until the test runs them.
    const later: Array<() => Promise<unknown>> = [];
    vi.spyOn(f.deps.background, "run").mockImplementation((_name, task) => later.push(task));

    const lost = await generateKeys(f.deps, issuer);
    const first = await register(f.deps, issuer, {
      hashedPan: hashPan(pan),
      publicKey: lost.publicKey,
      keyId: lost.keyId,
    });
    expect(first).toMatchObject({ releasedReceipts: 2, releasePending: true });
    // The device is lost before the background release runs: a new key replaces the first.
    const replacement = await generateKeys(f.deps, issuer);
    await register(f.deps, issuer, {
      hashedPan: hashPan(pan),
      publicKey: replacement.publicKey,
      keyId: replacement.keyId,
    });
    for (const task of later.splice(0)) await task();
    for (const task of later.splice(0)) await task();

    const user = await f.store.users.findById(first.userId);
    if (user === undefined) throw new Error("no user");
    expect(user.panHash).toBe(panHashOf(f.deps.pepper, hashPan(pan)));
    const { receipts } = await f.store.receipts.listByUser(
      { userId: user.userId, panHash: user.panHash },
      10,
    );
    const byKey = (keyId: string) => receipts.filter((r) => r.keyBundle.keyId === keyId).length;
    expect([byKey(lost.keyId), byKey(replacement.keyId), receipts.length]).toEqual([2, 3, 5]);
  });

  it("stops when the BIN's owner takes the card meanwhile: the rest goes to the owner", async () => {
    await f.store.bins.set("bank-a", ["400000"], f.clock.now());
    const squatter = principal("issuer", "bank-b");
    const pan = "4000000000000025";
    // Escrowed without a cardBin: without an owner, released to whoever holds the card.
    for (let i = 0; i < 5; i++) await encryptReceipt(f.deps, merchant, receiptMessage(pan));
    const later: Array<() => Promise<unknown>> = [];
    vi.spyOn(f.deps.background, "run").mockImplementation((_name, task) => later.push(task));

    const squat = await register(f.deps, squatter, {
      hashedPan: hashPan(pan),
      ...(await generateKeys(f.deps, squatter)),
    });
    expect(squat).toMatchObject({ releasedReceipts: 2, releasePending: true });
    const owned = await register(f.deps, issuer, {
      hashedPan: hashPan(pan),
      ...(await generateKeys(f.deps, issuer)),
      cardBin: "400000",
    });
    expect(owned).toMatchObject({ superseded: true, releasedReceipts: 2, releasePending: true });
    // The squatter's background release runs first, after it lost the card.
    for (const task of later.splice(0)) await task();

    const held = async (userId: string) => {
      const user = await f.store.users.findById(userId);
      if (user === undefined) throw new Error("no user");
      return (await f.store.receipts.listByUser(receiptOwnerOf(user), 10)).receipts.length;
    };
    expect([await held(squat.userId), await held(owned.userId)]).toEqual([2, 3]);
  });

  it("refuses, item by item, an issuer's bundles for a key rotated away during its release call", async () => {
    await f.store.bins.set("bank-a", ["400000"], f.clock.now());
    const escrowPair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const escrowPublic = escrowPair.publicKey.export({ type: "spki", format: "der" }).toString("base64");
    const escrowPrivate = escrowPair.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64");
    await registerEscrowKey(f.deps, issuer, { publicKey: escrowPublic });
    const pan = "4000000000000017";
    const held: ReceiptRecord[] = [];
    for (let i = 0; i < 2; i++)
      held.push(await encryptReceipt(f.deps, merchant, receiptMessage(pan, { cardBin: "40000000" })));
    const first = await generateKeys(f.deps, issuer);
    const user = await register(f.deps, issuer, {
      hashedPan: hashPan(pan),
      publicKey: first.publicKey,
      keyId: first.keyId,
    });
    const items = [];
    for (const record of held) {
      const m = encryptedReceiptOf(record);
      const bundle = await rewrapKeyBundle({ ...m, keyBundle: m.keyBundle }, escrowPrivate, {
        keyId: first.keyId,
        publicKey: first.publicKey,
      });
      items.push({
        merchantId: record.merchantId,
        receiptId: record.receiptId,
        keyBundle: create(KeyBundleSchema, {
          keyId: bundle.keyId,
          algorithm: bundle.algorithm,
          encryptedAesKey: Buffer.from(bundle.encryptedAesKey, "base64"),
          encapsulatedKey: Buffer.from(bundle.encapsulatedKey ?? "", "base64"),
        }),
      });
    }
    // The key rotates while the call runs, right after its first release.
    const replacement = await generateKeys(f.deps, issuer);
    const release = f.store.receipts.release.bind(f.store.receipts);
    vi.spyOn(f.store.receipts, "release").mockImplementationOnce(async (...args) => {
      const done = await release(...args);
      await register(f.deps, issuer, {
        hashedPan: hashPan(pan),
        publicKey: replacement.publicKey,
        keyId: replacement.keyId,
      });
      return done;
    });
    const result = await releaseByIssuer(
      f.deps,
      issuer,
      { userId: user.userId, receipts: items },
      { requestId: "r", sourceIp: "" },
    );
    expect(result).toEqual({
      released: 1,
      failed: [{ merchantId: held[1]?.merchantId, receiptId: held[1]?.receiptId, reason: "key_mismatch" }],
    });
    expect(
      (await f.store.receipts.findByMerchantReceipt(held[1]?.merchantId ?? "", held[1]?.receiptId ?? ""))
        ?.isEscrowed,
    ).toBe(true);
  });
});
