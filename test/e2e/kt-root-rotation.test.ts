import { createHash, generateKeyPairSync, randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeyTrust, KeyVerificationError } from "../../src/client/index.js";
import {
  generateIssuerSigner,
  type IssuerSigner,
  keyBindingStatement,
  signRootRotation,
  signStatement,
  statementOf,
} from "../../src/client/key-binding.js";
import { formatNoteSkey, generateNoteSigner } from "../../src/domain/kt/note-keys.js";
import { base64url } from "../../src/kt/bytes.js";
import { NOTE_ED25519 } from "../../src/kt/note.js";
import type { TrustPolicy } from "../../src/kt/policy.js";
import { formatTime } from "../../src/kt/statements.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { hashPan, post, startService, type TestService } from "../support/harness.js";
import { ORIGIN, PEPPER } from "../support/kt.js";
import { startWitnesses } from "../support/witnesses.js";

/**
 * A merchant's verification across an issuer's root rotation, against a running service and three
 * witnesses: before the rotation the card's binding verifies; after it, the merchant's trust policy
 * refuses the issuer's statements (check `root`) until the new root has been in the witnessed log
 * for the root delay, as for a first root, or until the merchant pins the new root; then the same
 * binding (signed by a signer the old root endorsed) verifies again.
 */

const TOKEN = "kt-root-rotation-e2e-admin-token-0123456";
const WITNESSES = [
  { name: "w1.bank-a.example", organisation: "bank-a" },
  { name: "w2.bank-b.example", organisation: "bank-b" },
  { name: "w3.ngo.example", organisation: "ngo" },
];
const DELAY = 3600;

describe("a merchant's verification across a root rotation", { timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "kt-root-rotation-"));
  const logSigner = generateNoteSigner(ORIGIN, NOTE_ED25519);
  const store = createMemoryStore();
  const closers: Array<() => Promise<unknown>> = [];
  let svc: TestService;
  let policy: TrustPolicy;
  const bank = { tenant: "rotating-bank", bin: "52000055", key: "" };
  const hashedPan = hashPan(`${bank.bin}00000001`);
  const card = { hashedPan, bin: bank.bin };
  let oldRoot: IssuerSigner;
  let signer: IssuerSigner;

  /** Waits until the log is sequenced, snapshotted and cosigned by every witness at its head. */
  async function witnessed(): Promise<void> {
    for (let i = 0; i < 500; i++) {
      const pending = await store.ktLog.pending(1);
      const latest = await store.ktLog.latestCheckpoint();
      const head = await store.ktLog.head();
      if (
        pending.length === 0 &&
        latest?.size === head.size &&
        Object.keys(latest.cosignatures).length === WITNESSES.length
      )
        return;
      svc.app.domain.kt.notify();
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error("the witnesses did not cosign the head");
  }

  async function lookup() {
    const res = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
      recipientHashedPan: hashedPan,
      cardBin: bank.bin,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return res.body.data as Record<string, unknown>;
  }

  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      () => {
        throw new Error("the answer verified");
      },
      (err: unknown) => {
        expect(err).toBeInstanceOf(KeyVerificationError);
        return (err as KeyVerificationError).check;
      },
    );

  beforeAll(async () => {
    const witnesses = await startWitnesses(ORIGIN, logSigner.key, dir, closers, WITNESSES);
    svc = await startService({
      store,
      env: {
        ADMIN_TOKEN: TOKEN,
        KT_LOG_PRIVATE_KEY: formatNoteSkey(logSigner),
        HASHED_PAN_PEPPER: PEPPER,
        WITNESS_URLS: witnesses.map((w) => `${w.url} ${w.vkey}`).join(","),
        KT_ANSWER_COSIGNATURES: "3",
        KT_SEQUENCER_POLL_MS: "20",
        KT_READS_PER_MINUTE: "100000",
      },
    });
    closers.unshift(() => svc.close());
    policy = {
      origin: ORIGIN,
      logKey: svc.app.domain.kt.vkey,
      operator: "receipts-operator",
      witnesses: witnesses.map((w) => ({ vkey: w.vkey, organisation: w.organisation })),
      quorum: 2,
      maxCheckpointAgeSeconds: 600,
      rootDelaySeconds: DELAY,
    };
    bank.key = await svc.newKey({ role: "issuer", tier: "standard", tenantId: bank.tenant });
    const change = svc.app.domain.kt.pendingDirectoryChange("bins.set", bank.tenant);
    expect((await store.bins.set(bank.tenant, [bank.bin], new Date(), [change])).kind).toBe("set");
    oldRoot = await generateIssuerSigner("Ed25519");
    expect(
      (await post(svc, "/api/v1/issuers/signing-keys", bank.key, { publicKey: oldRoot.spki })).status,
    ).toBe(200);
    const confirmed = await fetch(
      `${svc.baseUrl}/admin/v1/issuers/${bank.tenant}/signing-keys/${oldRoot.signingKeyId}/confirm`,
      { method: "POST", headers: { authorization: `Bearer ${TOKEN}` } },
    );
    expect(confirmed.status).toBe(200);
    signer = await generateIssuerSigner("Ed25519");
    const endorsement = await signStatement(
      statementOf({
        v: 1,
        type: "receipts.v1/signing-key",
        issuer: bank.tenant,
        signingKeyId: signer.signingKeyId,
        algorithm: signer.algorithm,
        spki: signer.spki,
        role: "signer",
        version: 1,
        issuedAt: formatTime(Date.now()),
      }),
      oldRoot,
    );
    const added = await post(svc, "/api/v1/issuers/signing-keys", bank.key, {
      publicKey: signer.spki,
      statement: endorsement.statement,
      signature: endorsement.signature,
    });
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const device = {
      keyId: randomUUID(),
      publicKey: publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    };
    const binding = await signStatement(
      keyBindingStatement({
        issuer: bank.tenant,
        card: { hashedPan },
        bin: bank.bin,
        keyId: device.keyId,
        publicKey: device.publicKey,
        version: 1,
      }),
      signer,
    );
    const res = await post(svc, "/api/v1/onboarding/register", bank.key, {
      hashedPan,
      cardBin: bank.bin,
      ...device,
      binding,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await witnessed();
  });
  afterAll(async () => {
    for (const close of closers) await close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("honours the new root only the root delay after the witnessed checkpoint that first showed it", async () => {
    // A merchant that has known the old root for long: the binding verifies.
    const seen = new Map([[`${bank.tenant} ${oldRoot.signingKeyId}`, 0]]);
    const trust = createKeyTrust({ policy, baseUrl: svc.baseUrl, rootsSeen: seen });
    await expect(trust.verify(await lookup(), card)).resolves.toMatchObject({
      issuer: bank.tenant,
      version: 1,
    });

    const newRoot = await generateIssuerSigner("Ed25519");
    const rotation = await signRootRotation({ issuer: bank.tenant, newRoot, version: 2 }, oldRoot);
    const rotated = await post(svc, "/api/v1/issuers/signing-keys", bank.key, rotation);
    expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
    await witnessed();

    // Just after: the new root is younger than the delay for this merchant.
    const answer = await lookup();
    expect(await refusal(trust.verify(answer, card))).toBe("root");
    const newKey = `${bank.tenant} ${newRoot.signingKeyId}`;
    const firstSeen = seen.get(newKey);
    expect(firstSeen).toBeGreaterThan(0);
    // A second short of the delay after that sighting: still refused; at the delay: it verifies.
    const short = new Map([[newKey, (firstSeen as number) - DELAY + 120]]);
    expect(
      await refusal(createKeyTrust({ policy, baseUrl: svc.baseUrl, rootsSeen: short }).verify(answer, card)),
    ).toBe("root");
    const waited = new Map([[newKey, (firstSeen as number) - DELAY]]);
    await expect(
      createKeyTrust({ policy, baseUrl: svc.baseUrl, rootsSeen: waited }).verify(answer, card),
    ).resolves.toMatchObject({ issuer: bank.tenant, version: 1 });

    // A merchant pinned to the old root refuses; pinned to the new one (after its out-of-band check), at once.
    const pin = (s: IssuerSigner) =>
      base64url(new Uint8Array(createHash("sha256").update(Buffer.from(s.spki, "base64")).digest()));
    const pinnedOld = { ...policy, pinnedRoots: { [bank.tenant]: pin(oldRoot) } };
    expect(
      await refusal(createKeyTrust({ policy: pinnedOld, baseUrl: svc.baseUrl }).verify(answer, card)),
    ).toBe("signature");
    const pinnedNew = { ...policy, pinnedRoots: { [bank.tenant]: pin(newRoot) } };
    await expect(
      createKeyTrust({ policy: pinnedNew, baseUrl: svc.baseUrl }).verify(answer, card),
    ).resolves.toMatchObject({ issuer: bank.tenant });
  });
});
