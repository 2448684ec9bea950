import { generateKeyPairSync, randomBytes } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { KeyBundleSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { openReceipt, rewrapKeyBundle } from "../../src/client/index.js";
import { createApiKey } from "../../src/domain/api-keys.js";
import { transferCard } from "../../src/domain/card-transfer.js";
import {
  type EscrowReleaseInput,
  listPendingEscrow,
  registerEscrowKey,
  releaseByIssuer,
} from "../../src/domain/issuer-escrow.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { encryptReceipt, listReceipts } from "../../src/domain/receipts.js";
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

const P256 = "HPKE-P256-SHA256-A256GCM";
const bankA = principal("issuer", "bank-a");
const bankB = principal("issuer", "bank-b");
const merchant = principal("merchant", "shop-1");
const CALLER = { requestId: "r", sourceIp: "" };
const PAN = "4000000000000041";

/** The JSON envelope of a stored receipt, as the device's listing gives it. */
function envelopeOf(record: ReceiptRecord) {
  const m = encryptedReceiptOf(record);
  return { ...m, keyBundle: m.keyBundle };
}

/**
 * A stolen issuer API key releases the bank's escrow with bundles of the right shape holding random
 * bytes: the service cannot see that (the bundle is wrapped to the user's key), and the receipts open
 * for nobody. The release keeps the escrow-wrapped key as the receipt's escrow copy until the escrow
 * would have expired, so the bank, once it revoked the stolen key, lists what it released and
 * releases it again, correctly; nobody else can, and not after the retention.
 */
describe("escrow copies: a release with random bytes is recovered by the bank", () => {
  let f: DomainFixture;
  let escrowPrivate: string;
  let device: { keyId: string; publicKey: string; privateKey: string };
  let userId: string;
  let held: ReceiptRecord[];

  beforeEach(async () => {
    f = await domainFixture();
    await f.store.bins.set("bank-a", ["400000"], f.clock.now());
    const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
    escrowPrivate = pair.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64");
    await registerEscrowKey(f.deps, bankA, {
      publicKey: pair.publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    });
    held = [];
    for (let i = 0; i < 2; i++)
      held.push(await encryptReceipt(f.deps, merchant, receiptMessage(PAN, { cardBin: "40000000" })));
    const keys = await generateKeys(f.deps, bankA, { algorithm: P256 });
    device = { keyId: keys.keyId, publicKey: keys.publicKey, privateKey: keys.privateKey ?? "" };
    userId = (await register(f.deps, bankA, { hashedPan: hashPan(PAN), ...keys })).userId;
  });
  afterEach(async () => {
    await f.close();
  });

  /**
   * A bundle for the device's key with the right shape: a valid point as its encapsulated key (the
   * escrowed bundle's: any will do) and random bytes of the right length as the wrapped key (the thief's).
   */
  function randomBundle(record: ReceiptRecord): EscrowReleaseInput {
    const real = record.keyBundle;
    return {
      merchantId: record.merchantId,
      receiptId: record.receiptId,
      keyBundle: create(KeyBundleSchema, {
        keyId: device.keyId,
        algorithm: P256,
        encryptedAesKey: randomBytes(Buffer.from(real.encryptedAesKey, "base64").length),
        encapsulatedKey: Buffer.from(real.encapsulatedKey ?? "", "base64"),
      }),
    };
  }

  /** The bank's release item: `record`'s key unwrapped with its escrow key, wrapped to `to`. */
  async function rewrapped(
    record: ReceiptRecord,
    to: { keyId: string; publicKey: string } = device,
  ): Promise<EscrowReleaseInput> {
    const bundle = await rewrapKeyBundle(envelopeOf(record), escrowPrivate, to);
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

  const listReleased = (who = bankA) =>
    listPendingEscrow(f.deps, who, { hashedPan: hashPan(PAN), pageSize: 0, pageToken: "", released: true });
  const deviceReceipts = async () =>
    (await listReceipts(f.deps, bankA, { userId, pageSize: 0, pageToken: "" })).receipts;
  const release = (items: EscrowReleaseInput[], who = bankA, to = userId) =>
    releaseByIssuer(f.deps, who, { userId: to, receipts: items }, CALLER);

  it("lists what the thief released with its escrow copy, and the bank's release again opens on the device", async () => {
    expect(await release(held.map(randomBundle))).toEqual({ released: 2, failed: [] });
    for (const r of await deviceReceipts())
      await expect(openReceipt(envelopeOf(r), device.privateKey)).rejects.toThrow();
    // Nothing pending any more; the released ones are listed with their escrow-wrapped keys.
    const pending = await listPendingEscrow(f.deps, bankA, {
      hashedPan: hashPan(PAN),
      pageSize: 0,
      pageToken: "",
    });
    expect(pending.receipts).toEqual([]);
    // Made at one instant: listed by id, in any order of receiptId.
    const listed = (await listReleased()).receipts.sort((x, y) => x.receiptId.localeCompare(y.receiptId));
    const byId = [...held].sort((x, y) => x.receiptId.localeCompare(y.receiptId));
    expect(listed.map((r) => [r.receiptId, r.isEscrowed, r.userId])).toEqual(
      byId.map((r) => [r.receiptId, false, userId]),
    );
    expect(listed.map((r) => r.keyBundle)).toEqual(byId.map((r) => r.keyBundle));

    const again = await release(await Promise.all(listed.map((r) => rewrapped(r))));
    expect(again).toEqual({ released: 2, failed: [] });
    const opened = await Promise.all(
      (await deviceReceipts()).map((r) => openReceipt(envelopeOf(r), device.privateKey)),
    );
    expect(opened.map((o) => o.receiptId).sort()).toEqual(held.map((r) => r.receiptId).sort());
    const audit = await f.store.audit.list(100, { tenantId: "bank-a" });
    const releasedAgain = audit.filter((e) => e.subject?.endsWith("released again"));
    const row = (e: { action: string; subject?: string; previousKeyId?: string; keyId?: string }) =>
      [e.action, e.subject, e.previousKeyId, e.keyId].join(" ");
    expect(releasedAgain.map(row).sort()).toEqual(
      held
        .map((r) =>
          row({
            action: "escrow.released_by_issuer",
            subject: `${r.receiptId} released again`,
            previousKeyId: device.keyId,
            keyId: device.keyId,
          }),
        )
        .sort(),
    );
  });

  it("pages the released list: a page token gives the rest, the last page has none", async () => {
    expect(await release(held.map(randomBundle))).toEqual({ released: 2, failed: [] });
    const page = (pageToken: string) =>
      listPendingEscrow(f.deps, bankA, { hashedPan: hashPan(PAN), pageSize: 1, pageToken, released: true });
    const first = await page("");
    expect(first.receipts).toHaveLength(1);
    expect(first.nextCursor).toEqual(expect.any(String));
    const last = await page(first.nextCursor ?? "");
    expect(last.receipts).toHaveLength(1);
    expect(last).not.toHaveProperty("nextCursor");
    expect([...first.receipts, ...last.receipts].map((r) => r.receiptId).sort()).toEqual(
      held.map((r) => r.receiptId).sort(),
    );
  });

  it("keeps every refusal of a first release for a release again, and changes nothing refused", async () => {
    await release(held.map(randomBundle));
    const [first] = held as [ReceiptRecord];
    const before = (await f.store.receipts.findByMerchantReceipt(first.merchantId, first.receiptId))
      ?.keyBundle;
    const other = await generateKeys(f.deps, bankA, { algorithm: P256 });
    const otherUser = await register(f.deps, bankA, { hashedPan: hashPan("4000000000000058"), ...other });
    const good = await rewrapped(first);
    const cutBundle = create(KeyBundleSchema, {
      keyId: device.keyId,
      algorithm: P256,
      encryptedAesKey: new Uint8Array(3),
      encapsulatedKey: good.keyBundle?.encapsulatedKey ?? new Uint8Array(0),
    });
    const cut = { ...good, keyBundle: cutBundle };
    expect(await release([await rewrapped(first, other)])).toMatchObject({
      failed: [{ reason: "key_mismatch" }],
    });
    expect(await release([cut])).toMatchObject({ failed: [{ reason: "invalid_key_bundle" }] });
    // Another user of the same bank (its own card): not the receipt's.
    expect(await release([await rewrapped(first, other)], bankA, otherUser.userId)).toMatchObject({
      failed: [{ reason: "not_found" }],
    });
    expect(
      (await f.store.receipts.findByMerchantReceipt(first.merchantId, first.receiptId))?.keyBundle,
    ).toEqual(before);
  });

  it("releases again only to the user it was released to, not to the card's next user of the same bank", async () => {
    expect(await release(held.map(randomBundle))).toEqual({ released: 2, failed: [] });
    // The operator moves the card to bank B and back: bank A's card now has a new user, with a new key.
    const now = f.clock.now();
    for (const tenantId of ["bank-a", "bank-b"])
      await createApiKey(f.store, "dev", { role: "issuer", tier: "standard", tenantId }, now);
    const ctx = { store: f.store, env: "dev" as const, now, requestId: "op", sourceIp: "" };
    const away = await transferCard(ctx, { userId, toTenant: "bank-b" });
    await transferCard(ctx, { userId: away.userId, toTenant: "bank-a" });
    const keys = await generateKeys(f.deps, bankA, { algorithm: P256 });
    const next = await register(f.deps, bankA, { hashedPan: hashPan(PAN), ...keys });
    expect(next.userId).not.toBe(userId);
    // The receipts were released to the first user: for the next one they are not escrowed, whatever
    // key the bundles name.
    const [first] = held;
    if (first === undefined) throw new Error("no receipt");
    const before = (await f.store.receipts.findByMerchantReceipt(first.merchantId, first.receiptId))
      ?.keyBundle;
    for (const to of [device, keys])
      expect(await release([await rewrapped(first, to)], bankA, next.userId)).toMatchObject({
        released: 0,
        failed: [{ reason: "not_escrowed" }],
      });
    expect(
      (await f.store.receipts.findByMerchantReceipt(first.merchantId, first.receiptId))?.keyBundle,
    ).toEqual(before);
  });

  it("lets another tenant neither list nor release again", async () => {
    await release(held.map(randomBundle));
    expect((await listReleased(bankB)).receipts).toEqual([]);
    const refused = await rejection(release([await rewrapped(held[0] as ReceiptRecord)], bankB));
    expect([refused.code, refused.message]).toEqual(["not_found", "User not found."]);
  });

  it("drops the copy when the escrow would have expired: the release again is refused, not_escrowed", async () => {
    await release(held.map(randomBundle));
    const listed = (await listReleased()).receipts;
    expect(listed).toHaveLength(2);
    const expiry = listed[0]?.expiresAt?.getTime() ?? 0;
    expect(expiry).toBe((held[0]?.createdAt.getTime() ?? 0) + f.deps.escrowRetentionDays * 86_400_000);
    f.clock.advance(expiry - f.clock.now().getTime());
    expect((await listReleased()).receipts).toEqual([]);
    const late = await release(await Promise.all(listed.map((r) => rewrapped(r))));
    expect(late.released).toBe(0);
    expect(late.failed.map((x) => `${x.receiptId} ${x.reason}`).sort()).toEqual(
      held.map((r) => `${r.receiptId} not_escrowed`).sort(),
    );
    // The receipts stay, released (unreadable: the thief's bytes).
    expect((await deviceReceipts()).map((r) => r.receiptId).sort()).toEqual(
      held.map((r) => r.receiptId).sort(),
    );
  });
});
