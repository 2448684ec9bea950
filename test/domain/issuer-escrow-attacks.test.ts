import { generateKeyPairSync } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { KeyBundleSchema } from "../../gen/receipts/v1/receipt_pb.js";
import { rewrapKeyBundle } from "../../src/client/index.js";
import {
  escrowKeyStatement,
  generateIssuerSigner,
  type IssuerSigner,
  signStatement,
} from "../../src/client/key-binding.js";
import { receiptEvents } from "../../src/domain/events.js";
import {
  type EscrowReleaseInput,
  listEscrowKeys,
  listPendingEscrow,
  MAX_RELEASES_PER_CALL,
  registerEscrowKey,
  releaseByIssuer,
  revokeEscrowKey,
} from "../../src/domain/issuer-escrow.js";
import { confirmRoot } from "../../src/domain/kt/issuer-admin.js";
import { registerIssuerSigningKey } from "../../src/domain/kt/issuer-keys.js";
import { generateKeys, register } from "../../src/domain/onboarding.js";
import { encryptReceipt, PAGE_SIZE } from "../../src/domain/receipts.js";
import { encryptedReceiptOf } from "../../src/rpc/convert.js";
import type { ApiKeyRecord, ReceiptRecord } from "../../src/store/types.js";
import {
  type DomainFixture,
  domainFixture,
  principal,
  receiptMessage,
  rejection,
} from "../support/domain.js";
import { ESCROW_FIXTURE } from "../support/fixture-keys.js";
import { hashPan } from "../support/harness.js";

const bankA = principal("issuer", "bank-a");
const bankB = principal("issuer", "bank-b");
const merchant = principal("merchant", "shop-1");
const CALLER = { requestId: "req-38", sourceIp: "192.0.2.7" };

function p256(): { publicKey: string; privateKey: string } {
  const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return {
    publicKey: pair.publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    privateKey: pair.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64"),
  };
}

/**
 * Issue 38: the issuer escrow surface attacked from the side of a tenant that is not the key's owner,
 * or of an issuer asking for more than its own escrow. Each test names who is refused, with what
 * code and field, and what stays unwritten (keys, audit entries, key-log records, released receipts).
 */
describe("issuer escrow keys: register, list, revoke", () => {
  let f: DomainFixture;
  beforeEach(async () => {
    f = await domainFixture();
  });
  afterEach(async () => {
    await f.close();
  });

  const audit = async (action: string) =>
    (await f.store.audit.list(100)).filter((e) => e.action === action).reverse();
  const directoryChanges = async () =>
    (await f.store.ktLog.pending(100)).filter((p) => p.kind === "directory");

  it("refuses an empty public key naming the field, and registers nothing", async () => {
    const err = await rejection(registerEscrowKey(f.deps, bankA, { publicKey: "" }, CALLER));
    expect(err.code).toBe("invalid_request");
    expect(err.violations).toEqual([{ field: "publicKey", description: "is required" }]);
    expect(await listEscrowKeys(f.deps, bankA)).toEqual({ keys: [], currentEscrowKeyId: "" });
    expect(await audit("escrow_key.registered")).toEqual([]);
    const bad = await rejection(registerEscrowKey(f.deps, bankA, { publicKey: "bm90IGEga2V5" }, CALLER));
    expect(bad.code).toBe("invalid_request");
    expect(bad.violations.map((v) => v.field)).toEqual(["publicKey"]);
    expect((await listEscrowKeys(f.deps, bankA)).keys).toEqual([]);
  });

  it("registers keys for the caller's tenant only, the newest current, each audited with the one before", async () => {
    const first = p256();
    const second = p256();
    // Each change wakes the key log's sequencer, which snapshots the tenant's directory entry.
    const notify = vi.spyOn(f.deps.kt, "notify");
    const a1 = await registerEscrowKey(f.deps, bankA, { publicKey: first.publicKey }, CALLER);
    expect(notify).toHaveBeenCalledTimes(1);
    f.clock.advance(1_000);
    const a2 = await registerEscrowKey(f.deps, bankA, { publicKey: second.publicKey }, CALLER);
    expect(a1.escrowKeyId).toMatch(/^iek_[A-Za-z0-9_-]{16}$/);
    expect(a2.escrowKeyId).not.toBe(a1.escrowKeyId);
    expect(a1).toMatchObject({
      tenantId: "bank-a",
      algorithm: "HPKE-P256-SHA256-A256GCM",
      publicKey: first.publicKey,
      createdAt: new Date("2026-03-01T12:00:00Z"),
    });
    const listed = await listEscrowKeys(f.deps, bankA);
    expect(listed.keys.map((k) => k.escrowKeyId)).toEqual([a2.escrowKeyId, a1.escrowKeyId]);
    expect(listed.currentEscrowKeyId).toBe(a2.escrowKeyId);
    // Another issuer sees none of them.
    expect(await listEscrowKeys(f.deps, bankB)).toEqual({ keys: [], currentEscrowKeyId: "" });

    const events = await audit("escrow_key.registered");
    expect(events).toHaveLength(2);
    expect(events[0]).toMatchObject({
      tenantId: "bank-a",
      requestId: "req-38",
      sourceIp: "192.0.2.7",
      keyId: a1.escrowKeyId,
      subject: a1.escrowKeyId,
    });
    expect(events[0]).not.toHaveProperty("previousKeyId");
    expect(events[1]).toMatchObject({ keyId: a2.escrowKeyId, previousKeyId: a1.escrowKeyId });
    // The tenant's directory entry changed twice: the key log snapshots it.
    const changes = await directoryChanges();
    expect(changes.map((c) => [c.tenantId, c.reason])).toEqual([
      ["bank-a", "issuerEscrowKeys.insert"],
      ["bank-a", "issuerEscrowKeys.insert"],
    ]);
  });

  it("answers conflict when the key log refuses the change, and audits nothing", async () => {
    vi.spyOn(f.store.issuerEscrowKeys, "insert").mockResolvedValue({
      kind: "log_refused",
      pendingId: "ktp_x",
      reason: "refused by the test",
    });
    const err = await rejection(registerEscrowKey(f.deps, bankA, { publicKey: p256().publicKey }, CALLER));
    expect(err.code).toBe("conflict");
    expect(err.message).toBe("refused by the test");
    expect(await audit("escrow_key.registered")).toEqual([]);
  });

  /** `tenant` with a root the operator confirmed, and requireBindings on: what signs its escrow keys. */
  async function boundIssuer(tenant: ApiKeyRecord): Promise<IssuerSigner> {
    const root = await generateIssuerSigner("Ed25519");
    await registerIssuerSigningKey(f.deps, tenant, { publicKey: root.spki, statement: "", signature: "" });
    const ctx = { store: f.store, env: "dev" as const, now: f.clock.now(), requestId: "op", sourceIp: "" };
    await confirmRoot(ctx, tenant.tenantId, root.signingKeyId);
    const record = await f.store.ktIssuers.get(tenant.tenantId);
    if (record === undefined) throw new Error("no issuer record");
    const on = { ...record, requireBindings: true, revision: record.revision + 1, updatedAt: f.clock.now() };
    expect((await f.store.ktIssuers.put(on)).kind).toBe("stored");
    return root;
  }

  it("refuses a requireBindings issuer's escrow key sent without its signed statement, saying what it requires", async () => {
    await boundIssuer(bankA);
    const pending = (await f.store.ktLog.pending(100)).length;
    const err = await rejection(registerEscrowKey(f.deps, bankA, { publicKey: p256().publicKey }, CALLER));
    expect([err.code, err.message, err.violations]).toEqual([
      "forbidden",
      "This issuer requires a signed binding with every escrow key.",
      [{ field: "binding", description: "is required: the issuer set requireBindings" }],
    ]);
    expect(await listEscrowKeys(f.deps, bankA)).toEqual({ keys: [], currentEscrowKeyId: "" });
    expect(await audit("escrow_key.registered")).toEqual([]);
    expect(await f.store.ktLog.pending(100)).toHaveLength(pending);
  });

  it("refuses an issuer's signed escrow key that names another issuer's escrowKeyId: conflict, nothing taken", async () => {
    // Bank A's key id is public: every look-up of a card of its BINs answers it.
    const victim = await registerEscrowKey(f.deps, bankA, { publicKey: p256().publicKey }, CALLER);
    const root = await boundIssuer(bankB);
    const publicKey = p256().publicKey;
    const binding = await signStatement(
      escrowKeyStatement({
        issuer: "bank-b",
        keyId: victim.escrowKeyId,
        publicKey,
        version: 1,
        notBefore: f.clock.now(),
      }),
      root,
    );
    const pending = (await f.store.ktLog.pending(100)).length;
    const err = await rejection(registerEscrowKey(f.deps, bankB, { publicKey, binding }, CALLER));
    expect([err.code, err.message]).toEqual(["conflict", "This escrowKeyId is already in use."]);
    expect(await listEscrowKeys(f.deps, bankB)).toEqual({ keys: [], currentEscrowKeyId: "" });
    expect(await listEscrowKeys(f.deps, bankA)).toEqual({
      keys: [victim],
      currentEscrowKeyId: victim.escrowKeyId,
    });
    expect((await audit("escrow_key.registered")).map((e) => e.tenantId)).toEqual(["bank-a"]);
    expect(await f.store.ktLog.pending(100)).toHaveLength(pending);
  });

  it("revokes: another tenant's key is not_found, a second revocation changes and audits nothing", async () => {
    const older = await registerEscrowKey(f.deps, bankA, { publicKey: p256().publicKey }, CALLER);
    f.clock.advance(1_000);
    const newer = await registerEscrowKey(f.deps, bankA, { publicKey: p256().publicKey }, CALLER);

    const empty = await rejection(revokeEscrowKey(f.deps, bankA, { escrowKeyId: "" }, CALLER));
    expect(empty.code).toBe("invalid_request");
    expect(empty.violations).toEqual([{ field: "escrowKeyId", description: "is required" }]);
    const foreign = await rejection(
      revokeEscrowKey(f.deps, bankB, { escrowKeyId: newer.escrowKeyId }, CALLER),
    );
    expect([foreign.code, foreign.message]).toEqual([
      "not_found",
      "No escrow key of this tenant has this id.",
    ]);
    expect((await listEscrowKeys(f.deps, bankA)).currentEscrowKeyId).toBe(newer.escrowKeyId);
    expect(await audit("escrow_key.revoked")).toEqual([]);
    const changesBefore = (await directoryChanges()).length;

    f.clock.advance(1_000);
    const notify = vi.spyOn(f.deps.kt, "notify");
    const revoked = await revokeEscrowKey(f.deps, bankA, { escrowKeyId: newer.escrowKeyId }, CALLER);
    expect(notify).toHaveBeenCalledTimes(1);
    expect(revoked.currentEscrowKeyId).toBe(older.escrowKeyId);
    expect(revoked.key.revokedAt).toEqual(f.clock.now());
    // The older, unrevoked key is current again although a newer (revoked) one is listed first.
    const listed = await listEscrowKeys(f.deps, bankA);
    expect(listed.keys.map((k) => k.escrowKeyId)).toEqual([newer.escrowKeyId, older.escrowKeyId]);
    expect(listed.currentEscrowKeyId).toBe(older.escrowKeyId);
    const [event, ...more] = await audit("escrow_key.revoked");
    expect(more).toEqual([]);
    expect(event).toMatchObject({
      tenantId: "bank-a",
      requestId: "req-38",
      sourceIp: "192.0.2.7",
      keyId: older.escrowKeyId,
      previousKeyId: newer.escrowKeyId,
      subject: newer.escrowKeyId,
    });
    const changes = await directoryChanges();
    expect(changes.slice(changesBefore).map((c) => [c.tenantId, c.reason])).toEqual([
      ["bank-a", "issuerEscrowKeys.revoke"],
    ]);

    // Revoked before: the same answer, nothing written.
    f.clock.advance(1_000);
    const again = await revokeEscrowKey(f.deps, bankA, { escrowKeyId: newer.escrowKeyId }, CALLER);
    expect(again.currentEscrowKeyId).toBe(older.escrowKeyId);
    expect(await audit("escrow_key.revoked")).toHaveLength(1);
    expect(await directoryChanges()).toHaveLength(changes.length);

    // The last key revoked: no current key, and the audit names none.
    const last = await revokeEscrowKey(f.deps, bankA, { escrowKeyId: older.escrowKeyId }, CALLER);
    expect(last.currentEscrowKeyId).toBe("");
    expect((await listEscrowKeys(f.deps, bankA)).currentEscrowKeyId).toBe("");
    const lastEvent = (await audit("escrow_key.revoked"))[1];
    expect(lastEvent).toMatchObject({ previousKeyId: older.escrowKeyId, subject: older.escrowKeyId });
    expect(lastEvent).not.toHaveProperty("keyId");
    // Revoked before, and no key current: the same answer.
    f.clock.advance(1_000);
    const again2 = await revokeEscrowKey(f.deps, bankA, { escrowKeyId: older.escrowKeyId }, CALLER);
    expect(again2.currentEscrowKeyId).toBe("");
  });

  it("audits a revocation with no key current before it without a previous key", async () => {
    const only = await registerEscrowKey(f.deps, bankA, { publicKey: p256().publicKey }, CALLER);
    // The store's current key is gone (a concurrent revocation) while this one runs.
    vi.spyOn(f.store.issuerEscrowKeys, "current").mockResolvedValue(undefined);
    f.clock.advance(1_000);
    const revoked = await revokeEscrowKey(f.deps, bankA, { escrowKeyId: only.escrowKeyId }, CALLER);
    expect(revoked.currentEscrowKeyId).toBe("");
    const [event] = await audit("escrow_key.revoked");
    expect(event).toMatchObject({ subject: only.escrowKeyId });
    expect(event).not.toHaveProperty("previousKeyId");
    expect(event).not.toHaveProperty("keyId");
  });
});

describe("issuer escrow: listing and releasing only the caller's own escrow", () => {
  let f: DomainFixture;
  let escrowPrivate: string;
  beforeEach(async () => {
    f = await domainFixture();
    await f.store.bins.set("bank-a", ["400000"], f.clock.now());
    await f.store.bins.set("bank-b", ["510000"], f.clock.now());
    const pair = p256();
    escrowPrivate = pair.privateKey;
    await registerEscrowKey(f.deps, bankA, { publicKey: pair.publicKey });
  });
  afterEach(async () => {
    await f.close();
  });

  const held = (pan: string, cardBin?: string) =>
    encryptReceipt(f.deps, merchant, receiptMessage(pan, cardBin === undefined ? {} : { cardBin }));

  async function registered(tenant: typeof bankA, pan: string) {
    const keys = await generateKeys(f.deps, tenant);
    const user = await register(f.deps, tenant, { hashedPan: hashPan(pan), ...keys });
    return { userId: user.userId, keyId: keys.keyId, publicKey: keys.publicKey };
  }

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

  const stillEscrowed = async (r: ReceiptRecord) =>
    (await f.store.receipts.findByMerchantReceipt(r.merchantId, r.receiptId))?.isEscrowed;

  const pending = (
    tenant: typeof bankA,
    input: Partial<Parameters<typeof listPendingEscrow>[2]>,
  ): ReturnType<typeof listPendingEscrow> =>
    listPendingEscrow(f.deps, tenant, { hashedPan: "", pageSize: 0, pageToken: "", ...input });

  it("lists a card's escrow by hashed PAN or by the escrowRef it was sent, pages it, and refuses another tenant's ref", async () => {
    const pan = "4000000000000108";
    const r1 = await held(pan, "40000000");
    f.clock.advance(1_000);
    const r2 = await held(pan, "40000000");
    await held("4000000000000116", "40000000");
    const escrowRef = receiptEvents(f.deps, r1)[0]?.data.escrowRef ?? "";
    expect(escrowRef).not.toBe("");

    const byPan = await pending(bankA, { hashedPan: hashPan(pan) });
    expect(byPan.receipts.map((r) => r.receiptId)).toEqual([r1.receiptId, r2.receiptId]);
    const byRef = await pending(bankA, { escrowRef });
    expect(byRef.receipts.map((r) => r.receiptId)).toEqual([r1.receiptId, r2.receiptId]);
    // A page of one, then the rest from its token.
    const first = await pending(bankA, { escrowRef, pageSize: 1 });
    expect(first.receipts.map((r) => r.receiptId)).toEqual([r1.receiptId]);
    expect(first.nextCursor).toBeDefined();
    const rest = await pending(bankA, { escrowRef, pageSize: 1, pageToken: first.nextCursor ?? "" });
    expect(rest.receipts.map((r) => r.receiptId)).toEqual([r2.receiptId]);
    expect(
      (await pending(bankA, { hashedPan: hashPan(pan), pageSize: PAGE_SIZE.max })).receipts,
    ).toHaveLength(2);

    // Bank B, handed bank A's reference, learns nothing: the ref is not one sent to it.
    const foreign = await rejection(pending(bankB, { escrowRef }));
    expect(foreign.code).toBe("invalid_request");
    expect(foreign.violations).toEqual([
      { field: "escrowRef", description: "is not an escrow reference sent to this tenant" },
    ]);
    // ...nor by naming the card: none of bank A's escrow is bank B's.
    expect((await pending(bankB, { hashedPan: hashPan(pan) })).receipts).toEqual([]);
  });

  it("refuses an escrowRef beside a hashed PAN or a PAR, and bad page fields, naming each", async () => {
    const r1 = await held("4000000000000124", "40000000");
    const escrowRef = receiptEvents(f.deps, r1)[0]?.data.escrowRef ?? "";
    const both = await rejection(pending(bankA, { escrowRef, hashedPan: hashPan("4000000000000124") }));
    expect(both.violations.map((v) => v.field)).toEqual(["escrowRef"]);
    expect(both.violations[0]?.description).toBe(
      "cannot stand beside hashedPan or par: name the card by exactly one",
    );
    const withPar = await rejection(pending(bankA, { escrowRef, par: "Q1J4AwSWD4Dr6ttqQ8LmPKs7GgJv1" }));
    expect(withPar.violations.map((v) => v.field)).toEqual(["escrowRef"]);
    for (const pageSize of [-1, PAGE_SIZE.max + 1]) {
      const err = await rejection(pending(bankA, { escrowRef, pageSize }));
      expect(err.violations).toEqual([
        { field: "pageSize", description: `must be from 1 to ${PAGE_SIZE.max}` },
      ]);
    }
    const token = await rejection(pending(bankA, { escrowRef, pageToken: "x".repeat(513) }));
    expect(token.violations).toEqual([{ field: "pageToken", description: "is not a valid page token" }]);
    // 512 characters pass the length check: the store then refuses a token it did not make.
    const longest = await rejection(pending(bankA, { escrowRef, pageToken: "x".repeat(512) }));
    expect(longest.violations).toEqual([
      { field: "pageToken", description: "is not a page token returned by this service" },
    ]);
    // No card named at all.
    const none = await rejection(pending(bankA, {}));
    expect(none.violations.map((v) => v.field)).toEqual(["hashedPan"]);
  });

  it("lists nothing escrowed under the service key for a tenant that had no key of its own then", async () => {
    // Bank B owns 510000 but registered no escrow key: its escrow is sealed to the service key.
    const pan = "5100000000000101";
    const r = await held(pan, "51000000");
    expect(r).toMatchObject({ isEscrowed: true, escrowOwnerTenantId: "bank-b" });
    expect((await pending(bankB, { hashedPan: hashPan(pan) })).receipts).toEqual([]);
    // A page token it never got is refused as for a tenant with keys, not answered with an empty page.
    const forged = await rejection(pending(bankB, { hashedPan: hashPan(pan), pageToken: "x".repeat(512) }));
    expect([forged.code, forged.violations]).toEqual([
      "invalid_request",
      [{ field: "pageToken", description: "is not a page token returned by this service" }],
    ]);
    // Once it has a key, still only what was sealed to it.
    await registerEscrowKey(f.deps, bankB, { publicKey: p256().publicKey });
    const later = await held(pan, "51000000");
    expect((await pending(bankB, { hashedPan: hashPan(pan) })).receipts.map((x) => x.receiptId)).toEqual([
      later.receiptId,
    ]);
  });

  it("refuses release requests with missing or too many items, naming each field", async () => {
    const empty = await rejection(releaseByIssuer(f.deps, bankA, { userId: "", receipts: [] }, CALLER));
    expect(empty.code).toBe("invalid_request");
    expect(empty.violations).toEqual([
      { field: "userId", description: "is required" },
      { field: "receipts", description: "is required" },
    ]);
    const item = { merchantId: "m-1", receiptId: "r-x" };
    const tooMany = await rejection(
      releaseByIssuer(
        f.deps,
        bankA,
        { userId: "u", receipts: Array.from({ length: MAX_RELEASES_PER_CALL + 1 }, () => item) },
        CALLER,
      ),
    );
    expect(tooMany.violations).toEqual([
      { field: "receipts", description: `must have at most ${MAX_RELEASES_PER_CALL} entries` },
    ]);
    const blanks = await rejection(
      releaseByIssuer(
        f.deps,
        bankA,
        { userId: "u", receipts: [item, { merchantId: "", receiptId: "" }] },
        CALLER,
      ),
    );
    expect(blanks.violations).toEqual([
      { field: "receipts[1].merchantId", description: "is required" },
      { field: "receipts[1].receiptId", description: "is required" },
    ]);
    // Exactly the maximum passes validation (then the user is unknown).
    const max = await rejection(
      releaseByIssuer(
        f.deps,
        bankA,
        { userId: "u", receipts: Array.from({ length: MAX_RELEASES_PER_CALL }, () => item) },
        CALLER,
      ),
    );
    expect(max.code).toBe("not_found");
  });

  it("releases only its own escrow of the user's card: every other receipt fails with its reason, unchanged", async () => {
    const pan = "4000000000000132";
    const mine = await held(pan, "40000000");
    const badBundle = await held(pan, "40000000");
    const otherCard = await held("4000000000000140", "40000000");
    // The same card, sent without a cardBin: escrow without an owner, which the registration below
    // releases to the user (the service key opens it): no longer escrowed.
    const unowned = await held(pan);
    const user = await registered(bankA, pan);
    // Delivered to the user since it registered: not escrowed.
    const delivered = await held(pan, "40000000");
    expect(delivered.isEscrowed).toBe(false);

    const good = await rewrapped(mine, user);
    const corrupt = await rewrapped(badBundle, user);
    const { keyId, algorithm, encapsulatedKey } = corrupt.keyBundle ?? create(KeyBundleSchema);
    corrupt.keyBundle = create(KeyBundleSchema, {
      keyId,
      algorithm,
      encapsulatedKey,
      encryptedAesKey: new Uint8Array(3),
    });
    const items: EscrowReleaseInput[] = [
      good,
      corrupt,
      { ...(await rewrapped(otherCard, user)) },
      { merchantId: unowned.merchantId, receiptId: unowned.receiptId, keyBundle: good.keyBundle },
      { merchantId: delivered.merchantId, receiptId: delivered.receiptId, keyBundle: good.keyBundle },
      { merchantId: "m-1", receiptId: "no-such-receipt", keyBundle: good.keyBundle },
    ];
    const result = await releaseByIssuer(f.deps, bankA, { userId: user.userId, receipts: items }, CALLER);
    const failure = (r: { merchantId: string; receiptId: string }, reason: string) => ({
      merchantId: r.merchantId,
      receiptId: r.receiptId,
      reason,
    });
    expect(result).toEqual({
      released: 1,
      failed: [
        failure(badBundle, "invalid_key_bundle"),
        failure(otherCard, "not_found"),
        failure(unowned, "not_escrowed"),
        failure(delivered, "not_escrowed"),
        failure({ merchantId: "m-1", receiptId: "no-such-receipt" }, "not_found"),
      ],
    });
    for (const r of [badBundle, otherCard]) expect(await stillEscrowed(r)).toBe(true);
    const released = await f.store.receipts.findByMerchantReceipt(mine.merchantId, mine.receiptId);
    expect(released).toMatchObject({ isEscrowed: false, userId: user.userId });
    expect(released?.keyBundle.keyId).toBe(user.keyId);

    const [event, ...more] = (await f.store.audit.list(100)).filter(
      (e) => e.action === "escrow.released_by_issuer",
    );
    expect(more).toEqual([]);
    expect(event).toMatchObject({
      tenantId: "bank-a",
      requestId: "req-38",
      sourceIp: "192.0.2.7",
      userId: user.userId,
      keyId: user.keyId,
      subject: "1 released, 5 failed",
    });
  });

  it("for a requireBindings issuer, refuses a release that omits the card or names another, with its reason, moving nothing", async () => {
    const pan = "4000000000000157";
    const escrowed = await held(pan, "40000000");
    const user = await registered(bankA, pan);
    // The issuer turns requireBindings on after the user registered (a bank moving to the key log).
    const before = await f.store.ktIssuers.get("bank-a");
    const turnedOn = await f.store.ktIssuers.put({
      ...(before ?? { tenantId: "bank-a", signingKeys: [], revision: 0 }),
      requireBindings: true,
      revision: (before?.revision ?? 0) + 1,
      updatedAt: f.clock.now(),
    });
    expect(turnedOn.kind).toBe("stored");
    const receipts = [await rewrapped(escrowed, user)];
    const release = (card: { hashedPan?: string; par?: string }) =>
      rejection(releaseByIssuer(f.deps, bankA, { userId: user.userId, receipts, ...card }, CALLER));

    // A caller that leaves the card out (no member at all, or both empty) is refused as forbidden.
    for (const card of [{}, { hashedPan: "" }, { hashedPan: "", par: "" }]) {
      const none = await release(card);
      expect([none.code, none.message, none.violations], JSON.stringify(card)).toEqual([
        "forbidden",
        "This issuer requires every escrow release to name the card, whose key is checked against the key directory.",
        [{ field: "hashedPan", description: "is required (or par): the issuer set requireBindings" }],
      ]);
    }
    // A well-formed card that is not the user's is named by the field the caller used.
    const notHers = [
      [{ hashedPan: hashPan("4000000000000165") }, "hashedPan"],
      [{ par: "V0010013018209856843587239384" }, "par"],
    ] as const;
    for (const [card, field] of notHers) {
      const wrong = await release(card);
      expect([wrong.code, wrong.message, wrong.violations], field).toEqual([
        "invalid_request",
        "The request is invalid.",
        [{ field, description: "must be the user's card" }],
      ]);
    }
    expect(await stillEscrowed(escrowed)).toBe(true);
    expect((await f.store.audit.list(100)).filter((e) => e.action === "escrow.released_by_issuer")).toEqual(
      [],
    );
  });

  it("does not release a card's escrow held for another issuer, nor under the service key, nor to another tenant's user", async () => {
    // Bank A registers a card of bank B's BIN: receipts naming that BIN go to bank B's escrow.
    const pan = "5100000000000119";
    const user = await registered(bankA, pan);
    const forB = await held(pan, "51000000");
    expect(forB).toMatchObject({ isEscrowed: true, escrowOwnerTenantId: "bank-b" });
    const item = { merchantId: forB.merchantId, receiptId: forB.receiptId, keyBundle: undefined };
    const result = await releaseByIssuer(f.deps, bankA, { userId: user.userId, receipts: [item] }, CALLER);
    expect(result).toEqual({
      released: 0,
      failed: [{ merchantId: forB.merchantId, receiptId: forB.receiptId, reason: "not_found" }],
    });
    expect(await stillEscrowed(forB)).toBe(true);

    // Bank B's user: bank A's call for it is not_found before any receipt is read.
    const userB = await registered(bankB, "5100000000000127");
    const foreign = await rejection(
      releaseByIssuer(f.deps, bankA, { userId: userB.userId, receipts: [item] }, CALLER),
    );
    expect(foreign.code).toBe("not_found");
    expect(foreign.message).toBe("User not found.");
  });

  it("never lets an issuer swap the bundle of its escrow sealed to the service key, left over by a failed registration release", async () => {
    // Bank B owns 510000 and has no escrow key yet: the receipt waits for it under the service key.
    const pan = "5100000000000135";
    const record = await held(pan, "51000000");
    expect(record).toMatchObject({ isEscrowed: true, escrowOwnerTenantId: "bank-b" });
    expect(record.escrowKeyId).toBe(f.deps.escrowKeys[0]?.keyId);
    // The registration's own release meets a store failure: the user exists, the receipt stays escrowed.
    vi.spyOn(f.store.receipts, "findEscrowed").mockRejectedValueOnce(new Error("store unavailable"));
    const user = await registered(bankB, pan);
    expect(await stillEscrowed(record)).toBe(true);
    await registerEscrowKey(f.deps, bankB, { publicKey: p256().publicKey });
    // Bank B (or a thief with its API key) sends a bundle of the right shape for the user's key.
    const m = encryptedReceiptOf(record);
    const bundle = await rewrapKeyBundle({ ...m, keyBundle: m.keyBundle }, ESCROW_FIXTURE.privateKey, user);
    const item: EscrowReleaseInput = {
      merchantId: record.merchantId,
      receiptId: record.receiptId,
      keyBundle: create(KeyBundleSchema, {
        keyId: bundle.keyId,
        algorithm: bundle.algorithm,
        encryptedAesKey: Buffer.from(bundle.encryptedAesKey, "base64"),
      }),
    };
    const result = await releaseByIssuer(f.deps, bankB, { userId: user.userId, receipts: [item] }, CALLER);
    expect(result).toEqual({
      released: 0,
      failed: [{ merchantId: record.merchantId, receiptId: record.receiptId, reason: "not_escrowed" }],
    });
    const after = await f.store.receipts.findByMerchantReceipt(record.merchantId, record.receiptId);
    expect(after).toMatchObject({
      isEscrowed: true,
      escrowKeyId: record.escrowKeyId,
      keyBundle: record.keyBundle,
    });
  });

  it("answers not_escrowed for escrow held for it under a key that is not one of its own", async () => {
    const pan = "4000000000000157";
    const record = await held(pan, "40000000");
    const user = await registered(bankA, pan);
    const item = await rewrapped(record, user);
    // The same receipt as if sealed to the service escrow key (bank A had no key of its own then):
    // the service releases that one itself, bank A never holds its key.
    vi.spyOn(f.store.receipts, "findByMerchantReceipt").mockResolvedValueOnce({
      ...record,
      escrowKeyId: f.deps.escrowKeys[0]?.keyId ?? "",
    });
    const result = await releaseByIssuer(f.deps, bankA, { userId: user.userId, receipts: [item] }, CALLER);
    expect(result.failed.map((x) => x.reason)).toEqual(["not_escrowed"]);
    expect(await stillEscrowed(record)).toBe(true);
    // Without an escrow key id at all, the same.
    const { escrowKeyId: _id, ...noKey } = record;
    vi.spyOn(f.store.receipts, "findByMerchantReceipt").mockResolvedValueOnce(noKey);
    const none = await releaseByIssuer(f.deps, bankA, { userId: user.userId, receipts: [item] }, CALLER);
    expect(none.failed.map((x) => x.reason)).toEqual(["not_escrowed"]);
  });

  it("answers not_escrowed when the receipt was released by someone else during the call", async () => {
    const pan = "4000000000000165";
    const record = await held(pan, "40000000");
    const user = await registered(bankA, pan);
    vi.spyOn(f.store.receipts, "release").mockResolvedValueOnce(false);
    const result = await releaseByIssuer(
      f.deps,
      bankA,
      { userId: user.userId, receipts: [await rewrapped(record, user)] },
      CALLER,
    );
    expect(result).toEqual({
      released: 0,
      failed: [{ merchantId: record.merchantId, receiptId: record.receiptId, reason: "not_escrowed" }],
    });
  });
  it("takes back a release whose user an erasure took meanwhile: not_found, the receipt gone", async () => {
    const pan = "4000000000000173";
    const record = await held(pan, "40000000");
    const user = await registered(bankA, pan);
    const release = f.store.receipts.release.bind(f.store.receipts);
    const spy = vi.spyOn(f.store.receipts, "release").mockImplementationOnce(async (...args) => {
      const ok = await release(...args);
      await f.store.users.erase(user.userId);
      return ok;
    });
    const result = await releaseByIssuer(
      f.deps,
      bankA,
      { userId: user.userId, receipts: [await rewrapped(record, user)] },
      CALLER,
    );
    expect(result).toEqual({
      released: 0,
      failed: [{ merchantId: record.merchantId, receiptId: record.receiptId, reason: "not_found" }],
    });
    expect(await f.store.receipts.findByMerchantReceipt(record.merchantId, record.receiptId)).toBeUndefined();
    // The release was written with its escrow.released event to the user's issuer.
    const events = spy.mock.calls[0]?.[3] ?? [];
    expect(events.map((e) => [e.type, e.tenantId, e.data.receiptId, e.data.userId])).toEqual([
      ["escrow.released", "bank-a", record.receiptId, user.userId],
    ]);
  });

  it("answers internal_server_error when the user's active key is missing, releasing nothing", async () => {
    const pan = "4000000000000181";
    const record = await held(pan, "40000000");
    const user = await registered(bankA, pan);
    const item = await rewrapped(record, user);
    vi.spyOn(f.store.users, "findKey").mockResolvedValue(undefined);
    const err = await rejection(
      releaseByIssuer(f.deps, bankA, { userId: user.userId, receipts: [item] }, CALLER),
    );
    expect([err.code, err.message]).toEqual(["internal_server_error", "A user's active key is missing."]);
    expect(await stillEscrowed(record)).toBe(true);
  });
});
