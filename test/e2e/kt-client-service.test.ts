import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EXIT, runCli } from "../../src/cli/main.js";
import { createKeyTrust, KeyVerificationError } from "../../src/client/index.js";
import { type IssuerDetails, storeDirectorySource } from "../../src/domain/kt/directory-source.js";
import { base64 } from "../../src/kt/bytes.js";
import { NOTE_ED25519 } from "../../src/kt/note.js";
import { formatNoteSkey, generateNoteSigner } from "../../src/kt/note-keys.js";
import type { TrustPolicy } from "../../src/kt/policy.js";
import type { KtLookupAnswer } from "../../src/kt/wire.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { makeIssuer, makeUserKey } from "../kt/world.js";
import { startService, type TestService } from "../support/harness.js";
import { ORIGIN, PEPPER, pendingOf, signedBinding, TestSigningKeys, testCard } from "../support/kt.js";
import { untilSequenced } from "../support/kt-issuers.js";
import { startWitnesses } from "../support/witnesses.js";

/**
 * The client library and the issuer's monitor against the service's own key log (issue 32): a
 * running service whose sequencer signs checkpoints that three witness servers cosign, read over its
 * real `/kt/v1` routes. The merchant's KeyTrust verifies an answer built from the log's proofs and
 * fetches the snapshot from `GET /kt/v1/directory/{sha256}`; the monitor command of a second issuer
 * reads checkpoint, consistency proofs and leaves over HTTP, and reports the operator moving its BIN.
 * (Lookup does not carry proofs yet: the answer is assembled here from what the log proves.)
 */

const WITNESSES = [
  { name: "w1.bank-a.example", organisation: "bank-a" },
  { name: "w2.bank-b.example", organisation: "bank-b" },
  { name: "w3.ngo.example", organisation: "ngo" },
];

function capture(): Writable & { text: () => string } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      chunks.push(String(chunk));
      done();
    },
  });
  return Object.assign(stream, { text: () => chunks.join("") });
}

describe("the client library and the monitor on the service's key log", { timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "kt-client-service-"));
  const logSigner = generateNoteSigner(ORIGIN, NOTE_ED25519);
  const bank = makeIssuer("issuer-1");
  const watcher = makeIssuer("issuer-2");
  const keys = new TestSigningKeys();
  keys.add(bank);
  keys.add(watcher);
  const store = createMemoryStore();
  const closers: Array<() => Promise<unknown>> = [];
  let svc: TestService;
  let policy: TrustPolicy;
  let watcherKey: string;
  let bankCard: { hashedPan: string; cardKey: string; statement: Uint8Array } | undefined;

  const details: IssuerDetails = {
    tenants: async () => ["issuer-1", "issuer-2"],
    details: async (tenant) => {
      const issuer = tenant === bank.tenant ? bank : tenant === watcher.tenant ? watcher : undefined;
      if (issuer === undefined) return {};
      const key = {
        signingKeyId: issuer.signingKeyId,
        algorithm: "Ed25519" as const,
        spki: base64(issuer.spki),
        role: "root" as const,
        status: "current" as const,
        effectiveFrom: "2026-01-01T00:00:00Z",
      };
      return { signingKeys: [key] };
    },
  };

  /** Waits until the newest checkpoint covers the head and every witness cosigned it. */
  const witnessed = () => untilSequenced(svc, WITNESSES.length);

  async function setBins(tenant: string, bins: string[]): Promise<void> {
    const change = svc.app.domain.kt.pendingDirectoryChange("bins.set", tenant);
    expect((await store.bins.set(tenant, bins, new Date(), [change])).kind).toBe("set");
    svc.app.domain.kt.notify();
  }

  beforeAll(async () => {
    const witnesses = await startWitnesses(ORIGIN, logSigner.key, dir, closers, WITNESSES);
    svc = await startService({
      store,
      env: {
        KT_LOG_PRIVATE_KEY: formatNoteSkey(logSigner),
        HASHED_PAN_PEPPER: PEPPER,
        WITNESS_URLS: witnesses.map((w) => `${w.url} ${w.vkey}`).join(","),
        KT_ANSWER_COSIGNATURES: "3",
        KT_SEQUENCER_POLL_MS: "20",
        KT_READS_PER_MINUTE: "10000",
      },
      kt: { signingKeys: keys, directory: storeDirectorySource(store, undefined, details) },
    });
    closers.unshift(() => svc.close());
    watcherKey = await svc.newKey({ role: "issuer", tier: "standard", tenantId: watcher.tenant });
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
    await setBins(bank.tenant, ["411111"]);
    await setBins(watcher.tenant, ["522222"]);
    await witnessed();
  });
  afterAll(async () => {
    for (const close of closers) await close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("verifies a key under the log's witnessed checkpoint, with the snapshot from /kt/v1/directory", async () => {
    const device = makeUserKey();
    const card = testCard();
    const signed = signedBinding(bank, card, device, {}, Date.now());
    const pending = pendingOf({ log: svc.app.domain.kt } as never, bank, card, signed);
    pending.userId = "usr_bank_card";
    bankCard = { hashedPan: card.hashedPan, cardKey: card.cardKey, statement: signed.bytes };
    expect(await store.ktLog.enqueue([pending])).toEqual({ kind: "enqueued" });
    svc.app.domain.kt.notify();
    const { proof } = await svc.app.domain.kt.waitForLeaf(pending.id);
    await witnessed();
    const proofs = await svc.app.domain.kt.proofs({ leafIndex: proof.leafIndex });
    const answer: KtLookupAnswer = {
      keyId: device.keyId,
      algorithm: "HPKE-P256-SHA256-A256GCM",
      publicKey: base64(device.spki),
      isEscrowed: false,
      binding: {
        statement: base64(signed.bytes),
        signature: base64(signed.signature),
        signingKeyId: bank.signingKeyId,
      },
      opening: pending.opening,
      proof: proofs.proof as NonNullable<typeof proofs.proof>,
      directory: proofs.directory,
    };
    const fetched: string[] = [];
    const trust = createKeyTrust({
      policy,
      baseUrl: svc.baseUrl,
      fetch: (input, init) => {
        fetched.push(new URL(String(input)).pathname);
        return fetch(input, init);
      },
    });
    const cardId = { hashedPan: card.hashedPan, bin: "41111111" };
    const verified = await trust.verify(answer, cardId);
    expect(verified).toMatchObject({ keyId: device.keyId, treeSize: proofs.treeSize });
    expect(fetched).toEqual([`/kt/v1/directory/${proofs.directory.sha256}`]);
    expect(answer.proof?.checkpoint).toBe(await (await fetch(`${svc.baseUrl}/kt/v1/checkpoint`)).text());

    // The same answer with the directory snapshot's proof in place of the leaf's, or under another card.
    const wrongProof = {
      ...answer,
      proof: {
        ...(answer.proof as NonNullable<typeof answer.proof>),
        leafIndex: proofs.directory.index,
        inclusion: proofs.directory.inclusion,
      },
    };
    await expect(trust.verify(wrongProof, cardId)).rejects.toBeInstanceOf(KeyVerificationError);
    await expect(
      trust.verify(answer, { hashedPan: testCard().hashedPan, bin: "41111111" }),
    ).rejects.toBeInstanceOf(KeyVerificationError);
    // A card of the other issuer's BIN: the binding's issuer does not own it.
    await expect(trust.verify(answer, { hashedPan: card.hashedPan, bin: "52222222" })).rejects.toBeInstanceOf(
      KeyVerificationError,
    );
  });

  it("runs the issuer's monitor over /kt/v1 and reports the operator giving its BIN away", async () => {
    const files = {
      policy: join(dir, "policy.json"),
      records: join(dir, "records.json"),
      state: join(dir, "monitor.state"),
    };
    writeFileSync(files.policy, JSON.stringify(policy));
    writeFileSync(
      files.records,
      JSON.stringify({
        issuer: watcher.tenant,
        signingKeys: [base64(watcher.spki)],
        prefixes: ["522222"],
        cards: [],
        signed: [],
      }),
    );
    const monitor = async () => {
      const out = capture();
      const err = capture();
      const args = ["kt", "monitor", "--url", svc.baseUrl, "--issuer-key", watcherKey];
      const code = await runCli(
        [...args, "--policy", files.policy, "--records", files.records, "--state", files.state],
        out,
        err,
      );
      return { code, out: out.text(), err: err.text() };
    };
    await witnessed();
    const first = await monitor();
    expect(first, first.err).toMatchObject({ code: EXIT.ok });
    const size = (await store.ktLog.latestCheckpoint())?.size as number;
    expect(first.out).toBe(`ok: tree size ${size}, ${size} new leaves, nothing to report\n`);
    expect(JSON.parse(readFileSync(files.state, "utf8")).checkpoint.size).toBe(size);

    // The operator moves the watcher's BIN to the other issuer: the next run, over a larger tree
    // (consistency proved over HTTP), says so, once per snapshot that shows it, with exit code 3.
    await setBins(watcher.tenant, []);
    await setBins(bank.tenant, ["411111", "522222"]);
    await witnessed();
    const second = await monitor();
    expect(second.code, second.err).toBe(3);
    expect(second.out).toMatch(/^alert: leaf \d+: the directory gives your prefix 522222 to issuer-1$/m);
    expect(
      second.out
        .trim()
        .split("\n")
        .every((line) => line.startsWith("alert: ")),
    ).toBe(true);
    const after = JSON.parse(readFileSync(files.state, "utf8"));
    expect(after.checkpoint.size).toBeGreaterThan(size);

    // Nothing new: nothing to report, and the state keeps its place in the log.
    const third = await monitor();
    expect(third.code, third.err).toBe(EXIT.ok);
    expect(third.out).toBe(`ok: tree size ${after.checkpoint.size}, 0 new leaves, nothing to report\n`);
    const last = JSON.parse(readFileSync(files.state, "utf8"));
    expect([last.checkpoint, last.range, last.core.next]).toEqual([
      after.checkpoint,
      after.range,
      after.core.next,
    ]);
  });

  it("runs the BIN owner's monitor through its feed, and reports a binding of its card it did not sign", async () => {
    const card = bankCard as NonNullable<typeof bankCard>;
    const files = {
      policy: join(dir, "policy-bank.json"),
      records: join(dir, "records-bank.json"),
      state: join(dir, "bank.state"),
    };
    writeFileSync(files.policy, JSON.stringify(policy));
    const sha = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
    writeFileSync(
      files.records,
      JSON.stringify({
        issuer: bank.tenant,
        signingKeys: [base64(bank.spki)],
        prefixes: ["411111"],
        cards: [{ cardRef: card.hashedPan, userId: "usr_bank_card" }],
        signed: [sha(card.statement)],
      }),
    );
    const run = async () => {
      const out = capture();
      const err = capture();
      const code = await runCli(
        [
          "kt",
          "monitor",
          "--url",
          svc.baseUrl,
          "--issuer-key",
          svc.issuerKey,
          "--policy",
          files.policy,
          "--records",
          files.records,
          "--state",
          files.state,
        ],
        out,
        err,
      );
      return { code, out: out.text(), err: err.text() };
    };
    await witnessed();
    const first = await run();
    expect(first.code, `${first.out}${first.err}`).toBe(EXIT.ok);
    expect(first.out).toMatch(/^ok: tree size \d+, \d+ new leaves, nothing to report\n$/);

    // Someone with the bank's signing key (or the store) binds the card to their own key: the
    // statement is valid, in order, and logged, and the bank's records say it never signed it.
    const attacker = makeUserKey();
    const forged = signedBinding(
      bank,
      card,
      attacker,
      {
        version: 2,
        supersedes: (JSON.parse(new TextDecoder().decode(card.statement)) as { keyId: string }).keyId,
      },
      Date.now(),
    );
    const pending = pendingOf({ log: svc.app.domain.kt } as never, bank, card, forged);
    pending.userId = "usr_bank_card";
    expect(await store.ktLog.enqueue([pending])).toEqual({ kind: "enqueued" });
    svc.app.domain.kt.notify();
    const { proof } = await svc.app.domain.kt.waitForLeaf(pending.id);
    await witnessed();
    const second = await run();
    expect(second.code, second.err).toBe(3);
    expect(second.out).toBe(
      `alert: leaf ${proof.leafIndex}: a statement under your signing key that you did not sign\n`,
    );
  });

  // Last: its leaves, under the bank's key for a user the store does not hold, are no feed's to open.
  it("refuses a card's earlier binding, proven again under the newest checkpoint, once it has verified the newer one", async () => {
    const card = testCard();
    const DAY = 86_400_000;
    /** A binding of `key` for the card, signed at `at` (it starts a day before), logged and sequenced. */
    const logged = async (
      key: ReturnType<typeof makeUserKey>,
      changes: Record<string, number | string>,
      at: number,
    ) => {
      const signed = signedBinding(bank, card, key, changes, at);
      const pending = pendingOf({ log: svc.app.domain.kt } as never, bank, card, signed);
      pending.userId = "usr_rotated_card";
      expect(await store.ktLog.enqueue([pending])).toEqual({ kind: "enqueued" });
      svc.app.domain.kt.notify();
      const { proof } = await svc.app.domain.kt.waitForLeaf(pending.id);
      return { key, signed, opening: pending.opening, leafIndex: proof.leafIndex };
    };
    /** What the service can answer for a logged binding: its leaf proven under the newest checkpoint. */
    const answerOf = async (b: Awaited<ReturnType<typeof logged>>): Promise<KtLookupAnswer> => {
      await witnessed();
      const proofs = await svc.app.domain.kt.proofs({ leafIndex: b.leafIndex });
      return {
        keyId: b.key.keyId,
        algorithm: "HPKE-P256-SHA256-A256GCM",
        publicKey: base64(b.key.spki),
        isEscrowed: false,
        binding: {
          statement: base64(b.signed.bytes),
          signature: base64(b.signed.signature),
          signingKeyId: bank.signingKeyId,
        },
        opening: b.opening,
        proof: proofs.proof as NonNullable<typeof proofs.proof>,
        directory: proofs.directory,
      };
    };
    const lost = makeUserKey();
    const first = await logged(lost, {}, Date.now() - 2 * DAY);
    const second = await logged(makeUserKey(), { version: 2, supersedes: lost.keyId }, Date.now());
    const cardId = { hashedPan: card.hashedPan, bin: "41111111" };
    const trust = createKeyTrust({ policy, baseUrl: svc.baseUrl });
    expect((await trust.verify(await answerOf(second), cardId)).version).toBe(2);
    // The lost device's key, answered again: its leaf still proves, and no new leaf is written.
    const replay = await answerOf(first);
    const refused = await trust.verify(replay, cardId).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(KeyVerificationError);
    expect((refused as KeyVerificationError).check).toBe("stale");
    // A merchant that never verified version 2 cannot tell: what the binding's window bounds.
    const stranger = createKeyTrust({ policy, baseUrl: svc.baseUrl });
    expect((await stranger.verify(replay, cardId)).version).toBe(1);
  });
});
