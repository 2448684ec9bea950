import { generateKeyPairSync } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeyTrust, createReceiptsClient, KeyVerificationError } from "../../src/client/index.js";
import {
  escrowKeyStatement,
  generateIssuerSigner,
  type IssuerSigner,
  signStatement,
} from "../../src/client/key-binding.js";
import { formatNoteSkey, generateNoteSigner } from "../../src/domain/kt/note-keys.js";
import { NOTE_ED25519 } from "../../src/kt/note.js";
import type { TrustPolicy } from "../../src/kt/policy.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { hashPan, post, startService, type TestService } from "../support/harness.js";
import { ORIGIN, PEPPER } from "../support/kt.js";
import { startWitnesses } from "../support/witnesses.js";

/**
 * Escrow answers under the merchant's trust policy, against a running service whose issuers sign
 * their escrow keys (`POST /issuers/escrow-keys` with `binding`): the signed, logged escrow key of
 * the issuer owning the card's own BIN verifies; the same answer for a card whose own BIN another
 * issuer owns, the service's escrow key without `allowServiceEscrow`, and an issuer escrow key
 * registered without a statement are each refused, before anything is sealed.
 */

const TOKEN = "kt-escrow-trust-test-admin-token-01234";
const WITNESSES = [
  { name: "w1.bank-a.example", organisation: "bank-a" },
  { name: "w2.bank-b.example", organisation: "bank-b" },
  { name: "w3.ngo.example", organisation: "ngo" },
];

describe("escrow answers under the merchant's trust policy", { timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "kt-escrow-trust-"));
  const logSigner = generateNoteSigner(ORIGIN, NOTE_ED25519);
  const store = createMemoryStore();
  const closers: Array<() => Promise<unknown>> = [];
  let svc: TestService;
  let policy: TrustPolicy;
  const signed = { tenant: "escrow-signed-bank", bin: "52000022", key: "" };
  const unsigned = { tenant: "escrow-unsigned-bank", bin: "52000033", key: "" };
  const unowned = "52000044";

  async function admin(method: string, path: string) {
    const res = await fetch(`${svc.baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(res.status).toBe(200);
  }

  async function rootOf(bank: { tenant: string; key: string }): Promise<IssuerSigner> {
    const signer = await generateIssuerSigner("Ed25519");
    const added = await post(svc, "/api/v1/issuers/signing-keys", bank.key, { publicKey: signer.spki });
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    await admin("POST", `/admin/v1/issuers/${bank.tenant}/signing-keys/${signer.signingKeyId}/confirm`);
    return signer;
  }

  function escrowPublicKey(): string {
    return generateKeyPairSync("ec", { namedCurve: "P-256" })
      .publicKey.export({ type: "spki", format: "der" })
      .toString("base64");
  }

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

  async function lookup(bin: string) {
    const res = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
      recipientHashedPan: hashPan(`${bin}00000001`),
      cardBin: bin,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.data.isEscrowed).toBe(true);
    return res.body.data as Record<string, unknown>;
  }

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
      // A development service: its roots count at once (KT_ROOT_DELAY 0).
      rootDelaySeconds: 0,
    };
    for (const bank of [signed, unsigned]) {
      bank.key = await svc.newKey({ role: "issuer", tier: "standard", tenantId: bank.tenant });
      const change = svc.app.domain.kt.pendingDirectoryChange("bins.set", bank.tenant);
      expect((await store.bins.set(bank.tenant, [bank.bin], new Date(), [change])).kind).toBe("set");
    }
    const root = await rootOf(signed);
    const publicKey = escrowPublicKey();
    const binding = await signStatement(
      escrowKeyStatement({ issuer: signed.tenant, keyId: "iek_signed-escrow-1", publicKey, version: 1 }),
      root,
    );
    // Through the client library, as an issuer would.
    const client = createReceiptsClient({ baseUrl: svc.baseUrl, apiKey: signed.key });
    const registered = await client.registerEscrowKey(publicKey, { binding });
    expect(registered.escrowKeyId).toBe("iek_signed-escrow-1");
    await rootOf(unsigned);
    const plain = await post(svc, "/api/v1/issuers/escrow-keys", unsigned.key, {
      publicKey: escrowPublicKey(),
    });
    expect(plain.status, JSON.stringify(plain.body)).toBe(200);
    await witnessed();
  });
  afterAll(async () => {
    for (const close of closers) await close();
    rmSync(dir, { recursive: true, force: true });
  });

  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      () => {
        throw new Error("the answer verified");
      },
      (err: unknown) => {
        expect(err).toBeInstanceOf(KeyVerificationError);
        return err as KeyVerificationError;
      },
    );

  it("verifies the signed, logged escrow key of the issuer owning the card's own BIN", async () => {
    const trust = createKeyTrust({ policy, baseUrl: svc.baseUrl });
    const answer = await lookup(signed.bin);
    expect(answer.keyId).toBe("iek_signed-escrow-1");
    const verified = await trust.verify(answer, {
      hashedPan: hashPan(`${signed.bin}00000001`),
      bin: signed.bin,
    });
    expect(verified).toMatchObject({
      keyId: "iek_signed-escrow-1",
      isEscrowed: true,
      issuer: signed.tenant,
      version: 1,
    });
  });

  it("refuses that answer for a card whose own BIN another issuer owns", async () => {
    const trust = createKeyTrust({ policy, baseUrl: svc.baseUrl });
    const answer = await lookup(signed.bin);
    const err = await refusal(
      trust.verify(answer, { hashedPan: hashPan(`${signed.bin}00000001`), bin: unsigned.bin }),
    );
    expect(err.check).toBe("escrow");
    const nobody = await refusal(
      trust.verify(answer, { hashedPan: hashPan(`${signed.bin}00000001`), bin: unowned }),
    );
    expect(nobody.check).toBe("escrow");
  });

  it("refuses the service's escrow key unless the policy allows it", async () => {
    const answer = await lookup(unowned);
    const card = { hashedPan: hashPan(`${unowned}00000001`), bin: unowned };
    const err = await refusal(createKeyTrust({ policy, baseUrl: svc.baseUrl }).verify(answer, card));
    expect(err.check).toBe("escrow");
    expect(err.reason).toContain("service escrow key");
    const allowed = createKeyTrust({ policy: { ...policy, allowServiceEscrow: true }, baseUrl: svc.baseUrl });
    expect(await allowed.verify(answer, card)).toMatchObject({ isEscrowed: true, issuer: null });
    // Not for a card of an issuer that has an escrow key of its own.
    const own = await refusal(allowed.verify(answer, { ...card, bin: signed.bin }));
    expect(own.check).toBe("escrow");
  });

  it("refuses an issuer escrow key registered without a signed statement", async () => {
    const trust = createKeyTrust({ policy, baseUrl: svc.baseUrl });
    const answer = await lookup(unsigned.bin);
    expect(answer.binding).toBeUndefined();
    const err = await refusal(
      trust.verify(answer, { hashedPan: hashPan(`${unsigned.bin}00000001`), bin: unsigned.bin }),
    );
    expect(err.check).toBe("statement");
  });
});
