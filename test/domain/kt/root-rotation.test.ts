import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  generateIssuerSigner,
  type IssuerSigner,
  keyBindingStatement,
  signRootRotation,
  signSigningKeyRevocation,
  signStatement,
} from "../../../src/client/key-binding.js";
import { FakeClock } from "../../../src/clock.js";
import { parseDirectory } from "../../../src/kt/directory.js";
import { hashPan, post, startService, type TestService } from "../../support/harness.js";
import {
  type Bank,
  deviceKey,
  endorsedSigner,
  newIssuer,
  type OperatorCall,
  operatorCalls,
  registeredRoot,
  signerStatement,
} from "../../support/kt-issuers.js";

/**
 * Root rotation, root revocation and recovery over REST, from the attacker's side: the confirmed root
 * introduces its successor and signs nothing after; a rotation signed by a signer, by another tenant's
 * root or replayed is refused; the root revokes itself (and every signer with it); the tenant gets a
 * recovery root only by registration and the operator's confirm, never while its root is live; and a
 * tenant waiting for its recovery root does not fall back to the operator's word.
 */

const TOKEN = "kt-root-rotation-test-admin-token-012345";
let svc: TestService;
let cards = 0;

let admin: OperatorCall;

beforeAll(async () => {
  svc = await startService({ env: { ADMIN_TOKEN: TOKEN, KT_SEQUENCER_POLL_MS: "20" } });
  admin = operatorCalls(svc.baseUrl, TOKEN);
});
afterAll(async () => {
  await svc?.close();
});

const issuer = () => newIssuer(svc, "rot-bank");
const rootFor = (bank: Bank) => registeredRoot(svc, admin, bank);
const signerFor = (bank: Bank, root: IssuerSigner, version: number) =>
  endorsedSigner(svc, bank, root, version);

async function confirm(bank: Bank, signer: IssuerSigner) {
  return admin("POST", `/admin/v1/issuers/${bank.id}/signing-keys/${signer.signingKeyId}/confirm`);
}

/**
 * The operator's confirm of a recovery root, sent again while it is `conflict` because the key log
 * has not yet published the old root's revocation (a second or so).
 */
async function confirmOnceLogged(bank: Bank, signer: IssuerSigner) {
  let res = await confirm(bank, signer);
  for (let i = 0; i < 100 && res.status === 409; i++) {
    svc.app.domain.kt.notify();
    await new Promise((r) => setTimeout(r, 50));
    res = await confirm(bank, signer);
  }
  return res;
}

async function keysOf(bank: Bank): Promise<Record<string, { role: string; status: string }>> {
  const res = await fetch(`${svc.baseUrl}/api/v1/issuers/signing-keys`, {
    headers: { "x-api-key": bank.key },
  });
  const body = (await res.json()) as {
    data: { signingKeys: Array<{ signingKeyId: string; role: string; status: string }> };
  };
  return Object.fromEntries(
    body.data.signingKeys.map((k) => [k.signingKeyId, { role: k.role, status: k.status }]),
  );
}

/** Registers a fresh card of the bank with a binding signed by `signer`: the status and error code. */
async function register(bank: Bank, signer: IssuerSigner) {
  cards += 1;
  const hashedPan = hashPan(`4111119${String(cards).padStart(9, "0")}`);
  const device = deviceKey();
  const binding = await signStatement(
    keyBindingStatement({
      issuer: bank.id,
      card: { hashedPan },
      bin: "411111",
      keyId: device.keyId,
      publicKey: device.publicKey,
      version: 1,
    }),
    signer,
  );
  const res = await post(svc, "/api/v1/onboarding/register", bank.key, { hashedPan, ...device, binding });
  return { status: res.status, code: (res.body.error as { code?: string } | undefined)?.code };
}

async function waitForVersion(bankId: string, version: number) {
  for (let i = 0; i < 400; i++) {
    const leaf = await svc.store.ktLog.lastOfSequence(`tenant:${bankId}`);
    if (leaf !== undefined && (leaf.version ?? 0) >= version) return leaf;
    svc.app.domain.kt.notify();
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`the log has no tenant statement ${version} of ${bankId}`);
}

const errorCode = (res: { body: { error?: unknown } }) =>
  (res.body.error as { code?: string } | undefined)?.code;

describe("root rotation", () => {
  it("makes the new root current at once, retires the old one, and logs the rotation", async () => {
    const bank = await issuer();
    const old = await rootFor(bank);
    const signer = await signerFor(bank, old, 1);
    const next = await generateIssuerSigner("ECDSA-P256-SHA256");
    const body = await signRootRotation({ issuer: bank.id, newRoot: next, version: 2 }, old);
    const res = await post(svc, "/api/v1/issuers/signing-keys", bank.key, body);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.data).toMatchObject({ signingKeyId: next.signingKeyId, role: "root", status: "current" });
    expect(await keysOf(bank)).toEqual({
      [old.signingKeyId]: { role: "root", status: "revoked" },
      [signer.signingKeyId]: { role: "signer", status: "current" },
      [next.signingKeyId]: { role: "root", status: "current" },
    });
    // The new root keeps the statement that introduced it (answers carry it as rootRotation); the
    // listing does not show it, and it names no card.
    const record = await svc.store.ktIssuers.get(bank.id);
    const introduced = record?.signingKeys.find((k) => k.signingKeyId === next.signingKeyId);
    expect(introduced?.introduction).toEqual({
      statement: body.statement,
      signature: body.signature,
      signingKeyId: old.signingKeyId,
    });
    expect(record?.signingKeys.filter((k) => k.introduction !== undefined)).toHaveLength(1);
    const listed = await fetch(`${svc.baseUrl}/api/v1/issuers/signing-keys`, {
      headers: { "x-api-key": bank.key },
    });
    expect(await listed.text()).not.toContain("introduction");
    // The sequencer appends the rotation, which the old root signed while it was the root.
    const leaf = await waitForVersion(bank.id, 2);
    expect(leaf).toMatchObject({ type: "receipts.v1/signing-key", signingKeyId: old.signingKeyId });
    const audit = await svc.store.audit.list(1000, { tenantId: bank.id });
    expect(audit.some((e) => e.action === "kt.root.rotated" && e.previousKeyId === old.signingKeyId)).toBe(
      true,
    );

    // The old root signs nothing after the rotation: a signer it endorses, a revocation, a binding.
    const late = await generateIssuerSigner("Ed25519");
    const byOld = await signStatement(signerStatement(bank.id, late, 3), old);
    const refused = await post(svc, "/api/v1/issuers/signing-keys", bank.key, {
      publicKey: late.spki,
      statement: byOld.statement,
      signature: byOld.signature,
    });
    expect(errorCode(refused)).toBe("invalid_signature");
    const revokeByOld = await signSigningKeyRevocation(
      { issuer: bank.id, signingKeyId: signer.signingKeyId, version: 3 },
      old,
    );
    const path = `/api/v1/issuers/signing-keys/${signer.signingKeyId}/revoke`;
    expect(errorCode(await post(svc, path, bank.key, revokeByOld))).toBe("invalid_signature");
    expect(await register(bank, old)).toMatchObject({ code: "invalid_signature" });
    // The signer the old root endorsed still signs; the new root signs the tenant's statements.
    expect((await register(bank, signer)).status).toBe(200);
    const byNew = await signStatement(signerStatement(bank.id, late, 3), next);
    const added = await post(svc, "/api/v1/issuers/signing-keys", bank.key, {
      publicKey: late.spki,
      statement: byNew.statement,
      signature: byNew.signature,
    });
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    await waitForVersion(bank.id, 3);
  });

  it("refuses a rotation signed by a signer, by another tenant's root, or replayed", async () => {
    const bank = await issuer();
    const root = await rootFor(bank);
    const signer = await signerFor(bank, root, 1);
    const other = await issuer();
    const otherRoot = await rootFor(other);
    const thief = await generateIssuerSigner("Ed25519");
    const bySigner = await signRootRotation({ issuer: bank.id, newRoot: thief, version: 2 }, signer);
    expect(errorCode(await post(svc, "/api/v1/issuers/signing-keys", bank.key, bySigner))).toBe(
      "invalid_signature",
    );
    // Another tenant's root, for this tenant or for its own (the key is then the other's, not this one's).
    const byOther = await signRootRotation({ issuer: bank.id, newRoot: thief, version: 2 }, otherRoot);
    expect(errorCode(await post(svc, "/api/v1/issuers/signing-keys", bank.key, byOther))).toBe(
      "invalid_signature",
    );
    const othersOwn = await signRootRotation({ issuer: other.id, newRoot: thief, version: 1 }, otherRoot);
    expect(errorCode(await post(svc, "/api/v1/issuers/signing-keys", bank.key, othersOwn))).toBe(
      "invalid_request",
    );
    // A good rotation, then its replay, and an old-version rotation the retired root signed before.
    const next = await generateIssuerSigner("Ed25519");
    const stale = await signRootRotation({ issuer: bank.id, newRoot: thief, version: 2 }, root);
    const good = await signRootRotation({ issuer: bank.id, newRoot: next, version: 2 }, root);
    expect((await post(svc, "/api/v1/issuers/signing-keys", bank.key, good)).status).toBe(200);
    expect(errorCode(await post(svc, "/api/v1/issuers/signing-keys", bank.key, good))).toBe("conflict");
    expect(errorCode(await post(svc, "/api/v1/issuers/signing-keys", bank.key, stale))).toBe(
      "invalid_signature",
    );
    const wrongVersion = await signRootRotation({ issuer: bank.id, newRoot: thief, version: 2 }, next);
    expect(errorCode(await post(svc, "/api/v1/issuers/signing-keys", bank.key, wrongVersion))).toBe(
      "invalid_request",
    );
    expect(Object.keys(await keysOf(bank))).not.toContain(thief.signingKeyId);
  });
});

describe("the directory's bound on signing keys", () => {
  it("refuses a tenant's 65th signing key, which would make every snapshot unparseable", async () => {
    const bank = await issuer();
    let root = await rootFor(bank);
    // Rotations keep the retired roots listed: 63 more keys (rotations and signers) reach 64.
    for (let version = 1; version <= 63; version++) {
      const key = await generateIssuerSigner("Ed25519");
      const body =
        version % 2 === 0
          ? await signRootRotation({ issuer: bank.id, newRoot: key, version }, root)
          : await signStatement(signerStatement(bank.id, key, version), root).then((signed) => ({
              publicKey: key.spki,
              statement: signed.statement,
              signature: signed.signature,
            }));
      const res = await post(svc, "/api/v1/issuers/signing-keys", bank.key, body);
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      if (version % 2 === 0) root = key;
    }
    const last = await generateIssuerSigner("Ed25519");
    const refused = await post(
      svc,
      "/api/v1/issuers/signing-keys",
      bank.key,
      await signRootRotation({ issuer: bank.id, newRoot: last, version: 64 }, root),
    );
    expect(errorCode(refused)).toBe("conflict");
    expect(Object.keys(await keysOf(bank))).toHaveLength(64);
  });
});

describe("root revocation and recovery", () => {
  it("revokes the root and its signers with the root's own statement; a recovery root counts after the operator's confirm", async () => {
    const bank = await issuer();
    const root = await rootFor(bank);
    const signer = await signerFor(bank, root, 1);
    const revocation = await signSigningKeyRevocation(
      { issuer: bank.id, signingKeyId: root.signingKeyId, version: 2 },
      root,
    );
    const res = await post(
      svc,
      `/api/v1/issuers/signing-keys/${root.signingKeyId}/revoke`,
      bank.key,
      revocation,
    );
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.data).toMatchObject({ signingKey: { status: "revoked", role: "root" } });
    expect(await keysOf(bank)).toEqual({
      [root.signingKeyId]: { role: "root", status: "revoked" },
      [signer.signingKeyId]: { role: "signer", status: "revoked" },
    });
    await waitForVersion(bank.id, 2);
    expect(await register(bank, signer)).toMatchObject({ code: "invalid_signature" });
    // Waiting for its recovery root, the tenant's settings are not the operator's word again.
    const setting = await admin("PUT", `/admin/v1/issuers/${bank.id}/require-bindings`, {
      requireBindings: false,
    });
    expect(setting.body.error?.code).toBe("forbidden");
    const bins = await admin("PUT", `/admin/v1/issuers/${bank.id}/bins`, { bins: ["41111199"] });
    expect(bins.body.error?.code, JSON.stringify(bins.body)).toBe("forbidden");

    const recovery = await generateIssuerSigner("Ed25519");
    const added = await post(svc, "/api/v1/issuers/signing-keys", bank.key, { publicKey: recovery.spki });
    expect(added.body.data).toMatchObject({ role: "root", status: "pending" });
    expect(await register(bank, recovery)).toMatchObject({ code: "invalid_signature" });
    const confirmed = await confirmOnceLogged(bank, recovery);
    expect(confirmed.status).toBe(200);
    const recovered = await svc.store.ktIssuers.get(bank.id);
    expect(recovered?.signingKeys.some((k) => k.introduction !== undefined)).toBe(false);
    const audit = await svc.store.audit.list(1000, { tenantId: bank.id });
    expect(audit.some((e) => e.subject === `recovery root ${recovery.signingKeyId} confirmed`)).toBe(true);
    expect((await register(bank, recovery)).status).toBe(200);
  });

  it("refuses a recovery root while the tenant's root is live, by API or by a key slipped into the store", async () => {
    const bank = await issuer();
    const root = await rootFor(bank);
    const intruder = await generateIssuerSigner("Ed25519");
    const unsigned = await post(svc, "/api/v1/issuers/signing-keys", bank.key, { publicKey: intruder.spki });
    expect(errorCode(unsigned)).toBe("invalid_signature");
    expect((await confirm(bank, intruder)).body.error?.code).toBe("not_found");
    // A store writer adds a pending root beside the live one: the operator's confirm refuses it.
    const record = await svc.store.ktIssuers.get(bank.id);
    if (record === undefined) throw new Error("no record");
    const slipped = {
      ...record,
      signingKeys: [
        ...record.signingKeys,
        {
          signingKeyId: intruder.signingKeyId,
          algorithm: intruder.algorithm,
          spki: intruder.spki,
          role: "root" as const,
          status: "pending" as const,
          createdAt: new Date(),
        },
      ],
      revision: record.revision + 1,
    };
    expect((await svc.store.ktIssuers.put(slipped, [])).kind).toBe("stored");
    const res = await confirm(bank, intruder);
    expect(res.body.error?.code).toBe("conflict");
    expect(res.body.error?.message).toMatch(/root is live/);
    expect((await keysOf(bank))[root.signingKeyId]).toEqual({ role: "root", status: "current" });
    // An unconfirmed root revokes nothing, and a signer cannot revoke the root.
    const byIntruder = await signSigningKeyRevocation(
      { issuer: bank.id, signingKeyId: root.signingKeyId, version: 1 },
      intruder,
    );
    const path = `/api/v1/issuers/signing-keys/${root.signingKeyId}/revoke`;
    expect(errorCode(await post(svc, path, bank.key, byIntruder))).toBe("invalid_signature");
  });
});

describe("a recovery root's confirm waits for the log to publish the revocation", () => {
  // The service's clock stands still unless moved, so that "the same second" is not left to chance.
  const clock = new FakeClock(new Date(Math.floor(Date.now() / 1000) * 1000 + 200));
  let frozen: TestService;
  beforeAll(async () => {
    frozen = await startService({ clock, env: { ADMIN_TOKEN: TOKEN, KT_SEQUENCER_POLL_MS: "20" } });
  });
  afterAll(async () => {
    await frozen?.close();
  });

  const at = (path: string) =>
    fetch(`${frozen.baseUrl}${path}`, { method: "POST", headers: { authorization: `Bearer ${TOKEN}` } });

  /** The bank's signing keys in the log's latest snapshot, once it lists `id` with `status`. */
  async function snapshotListing(bank: string, id: string, status: string) {
    for (let i = 0; i < 400; i++) {
      const head = await frozen.store.ktLog.head();
      const latest = await frozen.store.ktLog.directoryBefore(head.size);
      const parsed = latest === undefined ? undefined : parseDirectory(latest.json);
      const keys = parsed?.ok ? parsed.value.issuers.find((x) => x.issuer === bank)?.signingKeys : undefined;
      if (keys?.some((k) => k.signingKeyId === id && k.status === status)) return keys;
      frozen.app.domain.kt.notify();
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`no snapshot lists ${id} ${status}`);
  }

  it("is conflict until a snapshot of an earlier second lists the old root revoked; then the recovery root is listed current later", async () => {
    const bank = "frozen-bank";
    const key = await frozen.newKey({ role: "issuer", tier: "standard", tenantId: bank });
    const root = await generateIssuerSigner("Ed25519");
    expect((await post(frozen, "/api/v1/issuers/signing-keys", key, { publicKey: root.spki })).status).toBe(
      200,
    );
    expect((await at(`/admin/v1/issuers/${bank}/signing-keys/${root.signingKeyId}/confirm`)).status).toBe(
      200,
    );
    const revocation = await signSigningKeyRevocation(
      { issuer: bank, signingKeyId: root.signingKeyId, version: 1, revokedAt: clock.now() },
      root,
    );
    const revoked = await post(
      frozen,
      `/api/v1/issuers/signing-keys/${root.signingKeyId}/revoke`,
      key,
      revocation,
    );
    expect(revoked.status, JSON.stringify(revoked.body)).toBe(200);
    const recovery = await generateIssuerSigner("Ed25519");
    expect(
      (await post(frozen, "/api/v1/issuers/signing-keys", key, { publicKey: recovery.spki })).status,
    ).toBe(200);
    const confirmPath = `/admin/v1/issuers/${bank}/signing-keys/${recovery.signingKeyId}/confirm`;
    // Logged or not yet, the snapshot listing the revocation is of this very second: conflict.
    const early = await at(confirmPath);
    expect(early.status).toBe(409);
    expect(((await early.json()) as { error: { message: string } }).error.message).toMatch(/revocation/);
    const before = await snapshotListing(bank, root.signingKeyId, "revoked");
    expect((await at(confirmPath)).status).toBe(409);
    expect(
      (await frozen.store.ktIssuers.get(bank))?.signingKeys.find(
        (k) => k.signingKeyId === recovery.signingKeyId,
      )?.status,
    ).toBe("pending");
    clock.advance(1000);
    expect((await at(confirmPath)).status).toBe(200);
    const after = await snapshotListing(bank, recovery.signingKeyId, "current");
    const revokedFrom = before.find((k) => k.signingKeyId === root.signingKeyId)?.effectiveFrom as string;
    expect(after.find((k) => k.signingKeyId === root.signingKeyId)?.effectiveFrom).toBe(revokedFrom);
    expect(
      (after.find((k) => k.signingKeyId === recovery.signingKeyId)?.effectiveFrom as string) > revokedFrom,
    ).toBe(true);
  });
});
