import { generateKeyPairSync } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fromBinary, toBinary } from "@bufbuild/protobuf";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LookupKeyResponse, LookupKeyResponseSchema } from "../../gen/receipts/v1/keys_pb.js";
import {
  createKeyTrust,
  createReceiptsClient,
  type KeyTrust,
  KeyVerificationError,
  type MerchantReceipt,
  sealAndStoreReceipt,
} from "../../src/client/index.js";
import { type IssuerDetails, storeDirectorySource } from "../../src/domain/kt/directory-source.js";
import { base64 } from "../../src/kt/bytes.js";
import { NOTE_ED25519 } from "../../src/kt/note.js";
import { formatNoteSkey, generateNoteSigner } from "../../src/kt/note-keys.js";
import type { TrustPolicy } from "../../src/kt/policy.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { makeIssuer, makeUserKey } from "../kt/world.js";
import { post, receiptBody, startService, type TestService } from "../support/harness.js";
import { ORIGIN, PEPPER, pendingOf, signedBinding, TestSigningKeys, testCard } from "../support/kt.js";
import { untilSequenced } from "../support/kt-issuers.js";
import { startWitnesses } from "../support/witnesses.js";

/**
 * Look-up answers carry the key directory's proofs (issue 32): a card registered at the service whose
 * binding the issuer signed and the log holds is answered with the binding (rebuilt with the card
 * reference asked for), the opening, the leaf's inclusion proof under the witnessed checkpoint and the
 * snapshot's proof, on REST and on the client's Connect calls; the merchant's client library verifies
 * them end to end before sealing, and refuses, sending nothing, when any bit of them is changed on the
 * way. The self-check answers the issuer the same, for its own users only.
 */

const WITNESSES = [
  { name: "w1.bank-a.example", organisation: "bank-a" },
  { name: "w2.bank-b.example", organisation: "bank-b" },
  { name: "w3.ngo.example", organisation: "ngo" },
];

const LOOKUP_PATH = "/receipts.v1.KeysService/LookupKey";

describe("look-up answers with the key directory's proofs", { timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "kt-lookup-proofs-"));
  const logSigner = generateNoteSigner(ORIGIN, NOTE_ED25519);
  const bank = makeIssuer("issuer-1");
  const keys = new TestSigningKeys();
  keys.add(bank);
  const store = createMemoryStore();
  const closers: Array<() => Promise<unknown>> = [];
  let svc: TestService;
  let policy: TrustPolicy;
  let trust: KeyTrust;
  const device = makeUserKey();
  const card = testCard();
  const bin = "41111111";
  let userId = "";

  const details: IssuerDetails = {
    tenants: async () => [bank.tenant],
    details: async (tenant) =>
      tenant !== bank.tenant
        ? {}
        : {
            signingKeys: [
              {
                signingKeyId: bank.signingKeyId,
                algorithm: "Ed25519" as const,
                spki: base64(bank.spki),
                role: "root" as const,
                status: "current" as const,
                effectiveFrom: "2026-01-01T00:00:00Z",
              },
            ],
          },
  };

  const witnessed = () => untilSequenced(svc, WITNESSES.length);

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
        KT_READS_PER_MINUTE: "100000",
      },
      kt: { signingKeys: keys, directory: storeDirectorySource(store, undefined, details) },
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
    trust = createKeyTrust({ policy, baseUrl: svc.baseUrl });
    const change = svc.app.domain.kt.pendingDirectoryChange("bins.set", bank.tenant);
    expect((await store.bins.set(bank.tenant, ["411111"], new Date(), [change])).kind).toBe("set");
    // The card's key, registered by its issuer; its binding appended through the log as the intake will.
    const registered = await post(svc, "/api/v1/onboarding/register", svc.issuerKey, {
      hashedPan: card.hashedPan,
      publicKey: base64(device.spki),
      keyId: device.keyId,
      cardBin: bin,
    });
    expect(registered.status, JSON.stringify(registered.body)).toBe(200);
    userId = registered.body.data.userId;
    const signed = signedBinding(bank, card, device, {}, Date.now());
    const pending = pendingOf({ log: svc.app.domain.kt } as never, bank, card, signed);
    pending.userId = userId;
    expect(await store.ktLog.enqueue([pending])).toEqual({ kind: "enqueued" });
    svc.app.domain.kt.notify();
    await svc.app.domain.kt.waitForLeaf(pending.id);
    await witnessed();
  });
  afterAll(async () => {
    for (const close of closers) await close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("answers REST look-ups with the binding, opening and proofs, which the merchant verifies", async () => {
    const lookup = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
      recipientHashedPan: card.hashedPan.toUpperCase(),
      cardBin: bin,
    });
    expect(lookup.status, JSON.stringify(lookup.body)).toBe(200);
    const data = lookup.body.data;
    expect(data).toMatchObject({ keyId: device.keyId, isEscrowed: false });
    const statement = JSON.parse(Buffer.from(data.binding.statement, "base64").toString("utf8"));
    // The service keeps the statement without cardRef and puts back the one asked for (lower case).
    expect(statement.cardRef).toBe(card.hashedPan);
    expect(typeof data.proof.leafIndex).toBe("number");
    expect(typeof data.directory.index).toBe("number");
    expect(data.proof.treeSize).toBe((await store.ktLog.latestCheckpoint())?.size);
    const verified = await trust.verify(data, { hashedPan: card.hashedPan, bin });
    expect(verified).toMatchObject({ keyId: device.keyId, issuer: bank.tenant, version: 1 });
    // An unregistered card of the BIN: escrow (the service's key), with the snapshot and checkpoint only.
    const escrow = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
      recipientHashedPan: testCard().hashedPan,
      cardBin: bin,
    });
    expect(escrow.body.data.isEscrowed).toBe(true);
    expect(escrow.body.data.binding).toBeUndefined();
    expect(escrow.body.data.checkpoint).toContain(ORIGIN);
    expect(escrow.body.data.directory.sha256).toBe(data.directory.sha256);
  });

  /** A merchant client whose every request is recorded, and whose look-up answers `tamper` may change. */
  function merchant(tamper?: (answer: LookupKeyResponse) => void) {
    const seen: string[] = [];
    const client = createReceiptsClient({
      baseUrl: svc.baseUrl,
      apiKey: svc.merchantKey,
      retry: { maxAttempts: 1 },
      fetch: async (input, init) => {
        const path = new URL(String(input instanceof Request ? input.url : input)).pathname;
        seen.push(path);
        const response = await fetch(input, init);
        if (tamper === undefined || path !== LOOKUP_PATH || response.status !== 200) return response;
        const answer = fromBinary(LookupKeyResponseSchema, new Uint8Array(await response.arrayBuffer()));
        tamper(answer);
        return new Response(toBinary(LookupKeyResponseSchema, answer), {
          status: 200,
          headers: response.headers,
        });
      },
    });
    return { client, seen };
  }

  const receipt = (receiptId: string): MerchantReceipt => ({
    ...(receiptBody({ receiptId, merchantName: "Proof Cafe" }) as unknown as MerchantReceipt),
    recipientHashedPan: card.hashedPan,
    cardBin: bin,
  });

  it("seals and stores through the client library once the answer verifies", async () => {
    const { client, seen } = merchant();
    const stored = await sealAndStoreReceipt(client, receipt("r-kt-proofs-ok"), { trust });
    if (stored.kind !== "receipt") throw new Error("expected a stored receipt");
    expect(stored.receipt.keyId).toBe(device.keyId);
    expect(seen).toEqual([LOOKUP_PATH, "/receipts.v1.ReceiptsService/StoreSealedReceipt"]);
  });

  it("refuses and sends nothing when any bit of the answer's proofs is changed", async () => {
    // Each target gives the bytes to change (every member travels as base64) and writes them back.
    const in64 = <T extends object>(holder: T, member: keyof T) => {
      const bytes = new Uint8Array(Buffer.from(String(holder[member]), "base64"));
      return { bytes, done: () => Object.assign(holder, { [member]: base64(bytes) }) };
    };
    const need = <T>(value: T | undefined): T => {
      if (value === undefined) throw new Error("the answer lacks a member the test changes");
      return value;
    };
    const targets: Array<(a: LookupKeyResponse) => { bytes: Uint8Array; done: () => unknown }> = [
      (a) => in64(need(a.proof).inclusion, 0),
      (a) => in64(need(a.proof).inclusion, need(a.proof).inclusion.length - 1),
      (a) => in64(need(a.directory).inclusion, 0),
      (a) => in64(a, "opening"),
      (a) => in64(need(a.binding), "signature"),
      (a) => in64(need(a.binding), "statement"),
    ];
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: targets.length - 1 }),
        fc.nat(),
        fc.integer({ min: 0, max: 7 }),
        async (which, at, bit) => {
          runs++;
          const { client, seen } = merchant((answer) => {
            const { bytes, done } = (targets[which] as (typeof targets)[number])(answer);
            const i = at % bytes.length;
            bytes[i] = (bytes[i] as number) ^ (1 << bit);
            done();
          });
          const sealing = sealAndStoreReceipt(client, receipt(`r-kt-tamper-${runs}`), { trust });
          await expect(sealing).rejects.toBeInstanceOf(KeyVerificationError);
          expect(seen).toEqual([LOOKUP_PATH]);
        },
      ),
      { numRuns: 24 },
    );
  });

  it("refuses a changed checkpoint, leaf index, tree size, dropped proof or another key", async () => {
    const lies: Array<(a: LookupKeyResponse) => void> = [
      (a) => {
        if (a.proof)
          a.proof.checkpoint = a.proof.checkpoint.replace(/\n\d+\n/, (m) => `\n${Number(m) + 1}\n`);
      },
      (a) => {
        if (a.proof) a.proof.leafIndex += 1n;
      },
      (a) => {
        if (a.proof) a.proof.treeSize -= 1n;
      },
      (a) => {
        if (a.directory) a.directory.index += 1n;
      },
      (a) => {
        a.proof = undefined;
      },
      (a) => {
        a.binding = undefined;
      },
      (a) => {
        a.publicKey = base64(makeUserKey().spki);
      },
    ];
    for (const [i, lie] of lies.entries()) {
      const { client, seen } = merchant(lie);
      await expect(sealAndStoreReceipt(client, receipt(`r-kt-lie-${i}`), { trust })).rejects.toBeInstanceOf(
        KeyVerificationError,
      );
      expect(seen, `lie ${i}`).toEqual([LOOKUP_PATH]);
    }
  });

  it("answers the issuer's self-check with what look-up answers, for its own users only", async () => {
    const self = await post(svc, "/api/v1/kt/self-check", svc.issuerKey, {
      recipientHashedPan: card.hashedPan,
      cardBin: bin,
    });
    expect(self.status, JSON.stringify(self.body)).toBe(200);
    const lookup = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
      recipientHashedPan: card.hashedPan,
      cardBin: bin,
    });
    const { userId: selfUser, ...answer } = self.body.data;
    expect(selfUser).toBe(userId);
    expect(answer).toEqual(lookup.body.data);
    await trust.verify(answer, { hashedPan: card.hashedPan, bin });

    const other = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "issuer-2" });
    for (const [key, hashedPan] of [
      [other, card.hashedPan],
      [svc.issuerKey, testCard().hashedPan],
    ] as const) {
      const refused = await post(svc, "/api/v1/kt/self-check", key, {
        recipientHashedPan: hashedPan,
        cardBin: bin,
      });
      expect(refused.status).toBe(404);
      expect(refused.body.error?.code).toBe("not_found");
    }
    const merchantCall = await post(svc, "/api/v1/kt/self-check", svc.merchantKey, {
      recipientHashedPan: card.hashedPan,
    });
    expect(merchantCall.status).toBe(403);
    const bad = await post(svc, "/api/v1/kt/self-check", svc.issuerKey, { recipientHashedPan: "xyz" });
    expect(bad.status).toBe(400);
    expect(bad.body.error?.code).toBe("invalid_request");
  });

  it("answers an issuer escrow key the log holds no statement for with the snapshot and checkpoint, which the merchant refuses on the statement", async () => {
    // Another issuer owns a BIN and sent its escrow key unsigned (it does not require bindings): the
    // snapshot lists the key as the BIN owner's current escrow key, and no escrow-key statement exists.
    const tenantId = "issuer-3";
    const issuerKey = await svc.newKey({ role: "issuer", tier: "standard", tenantId });
    const change = svc.app.domain.kt.pendingDirectoryChange("bins.set", tenantId);
    expect((await store.bins.set(tenantId, ["422222"], new Date(), [change])).kind).toBe("set");
    const { publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const spki = publicKey.export({ type: "spki", format: "der" }).toString("base64");
    const added = await post(svc, "/api/v1/issuers/escrow-keys", issuerKey, { publicKey: spki });
    expect(added.status, JSON.stringify(added.body)).toBe(200);
    const escrowKeyId = added.body.data.escrowKeyId as string;
    expect(await store.ktLog.lastOfSequence(`escrow:${tenantId}`)).toBeUndefined();
    const escrowCard = { hashedPan: testCard().hashedPan, bin: "42222222" };
    const lookUp = async () => {
      const res = await post(svc, "/api/v1/keys/lookup", svc.merchantKey, {
        recipientHashedPan: escrowCard.hashedPan,
        cardBin: escrowCard.bin,
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.data;
    };
    // Until the snapshot naming the key is logged and witnessed, every answer still carries a snapshot
    // and the checkpoint it is proven under: a merchant checks both before anything about the key.
    let answer = await lookUp();
    let listed = false;
    for (let i = 0; i < 500 && !listed; i++) {
      expect(answer).toMatchObject({ isEscrowed: true, keyId: escrowKeyId, publicKey: spki });
      expect(answer.binding).toBeUndefined();
      expect(answer.opening).toBeUndefined();
      expect(answer.proof).toBeUndefined();
      expect(answer.checkpoint).toContain(ORIGIN);
      expect(answer.directory.sha256).toMatch(/^[0-9a-f]{64}$/);
      const snapshot = await fetch(`${svc.baseUrl}/kt/v1/directory/${answer.directory.sha256}`);
      const owner = (
        (await snapshot.json()) as { issuers: Array<{ issuer: string; escrowKey: unknown }> }
      ).issuers.find((entry) => entry.issuer === tenantId);
      if (owner?.escrowKey !== undefined && owner.escrowKey !== null) {
        expect(owner.escrowKey).toMatchObject({ keyId: escrowKeyId });
        await witnessed();
        listed = true;
        break;
      }
      svc.app.domain.kt.notify();
      await new Promise((r) => setTimeout(r, 20));
      answer = await lookUp();
    }
    expect(listed, "the snapshot never listed the issuer's escrow key").toBe(true);
    answer = await lookUp();
    // The merchant's verification gets past the checkpoint, the snapshot and the key, and refuses on
    // the escrow rule's missing signed statement: the key is the owner's, but nobody vouched for it.
    const refused = await trust.verify(answer, escrowCard).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(KeyVerificationError);
    expect(refused).toMatchObject({ check: "statement", reason: "the answer carries no signed statement" });
  });
});
