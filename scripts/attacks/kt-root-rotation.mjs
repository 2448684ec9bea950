#!/usr/bin/env node
/**
 * The answer's `rootRotation` (an issuer's own root rotation counts at once for merchants), from
 * outside, against a running server with its key log and witnesses (`scripts/start-kt.mjs` prints the
 * merchant's policy file):
 *
 *   ADMIN_TOKEN=... node scripts/attacks/kt-root-rotation.mjs <baseUrl> <policy.json>
 *
 * The merchant verifies with the policy's log and witnesses and the default root delay (72 h, the
 * policy's `rootDelaySeconds` dropped), having counted the bank's first root (and another bank's) for
 * long. A bank rotates its root: a binding its new root signs must verify and seal at once, and the
 * bank's self-check and a dual registration's PAR answer carry the rotation (REST, Connect). Then every
 * forged `rootRotation` put into that answer must keep the delay: signed by the bank's signer, a
 * signer's signature claimed as the old root's, another bank's root, another bank's name, the old
 * root naming another key, a statement of another type, bytes that are not a statement. The bank's
 * new root revokes itself; the thief of that root (who also holds an issuer API key of the bank) tries
 * to register the recovery root as its "rotation", and the operator tries to confirm the recovery root
 * before the log published the revocation; once confirmed, the answers must carry no `rootRotation`,
 * the recovery root must wait the delay, and the thief's rotations (by the revoked root, or by the root
 * the rotation retired) put into the answer must not shorten it. Needs the built client library.
 * Exit code 0 when everything held, 1 otherwise, 2 on a setup error.
 */
import { readFileSync } from "node:fs";
import { attackScene } from "./kt-scene.mjs";

const s = await attackScene();
const c = s.client;
const { rootDelaySeconds: _ignored, ...policy } = JSON.parse(
  readFileSync(process.argv[3] ?? "kt-policy.json", "utf8"),
);
const keys = "/api/v1/issuers/signing-keys";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const bank = await s.issuer("rot-bank", { bin: s.randomBin("5") });
  const other = await s.issuer("rot-other", { bin: s.randomBin("5") });
  const merchantKey = await s.merchant("rot-merchant");
  const merchant = { "x-api-key": merchantKey };
  const oldRoot = bank.root;
  const longKnown = () =>
    new Map([
      [`${bank.tenant} ${oldRoot.signingKeyId}`, 0],
      [`${other.tenant} ${other.root.signingKeyId}`, 0],
    ]);
  const verdict = async (answer, card, seen = longKnown()) => {
    try {
      await c
        .createKeyTrust({ policy, baseUrl: s.baseUrl, rootsSeen: seen })
        .verify(structuredClone(answer), card);
      return "verified";
    } catch (err) {
      return err instanceof c.KeyVerificationError ? err.check : `error: ${err.message}`;
    }
  };
  let version = 0;
  const signerKey = await c.generateIssuerSigner("Ed25519");
  const endorsement = await c.signStatement(
    c.statementOf({
      v: 1,
      type: "receipts.v1/signing-key",
      issuer: bank.tenant,
      signingKeyId: signerKey.signingKeyId,
      algorithm: signerKey.algorithm,
      spki: signerKey.spki,
      role: "signer",
      version: ++version,
      issuedAt: `${new Date().toISOString().slice(0, 19)}Z`,
    }),
    oldRoot,
  );
  s.must(
    await s.call("POST", keys, bank.headers, {
      publicKey: signerKey.spki,
      statement: endorsement.statement,
      signature: endorsement.signature,
    }),
    "signer",
  );

  /** A new card of the bank bound by `by`: the card and the register answer. */
  async function registered(by) {
    const device = await s.deviceKey();
    const hashedPan = s.hashedPan();
    const binding = await c.signStatement(
      c.keyBindingStatement({
        issuer: bank.tenant,
        card: { hashedPan },
        bin: bank.bin,
        keyId: device.keyId,
        publicKey: device.publicKey,
        version: 1,
      }),
      by,
    );
    const answer = s.must(
      await s.call("POST", "/api/v1/onboarding/register", bank.headers, {
        hashedPan,
        cardBin: bank.bin,
        ...device,
        binding,
      }),
      "register",
    );
    return { card: { hashedPan, bin: bank.bin }, answer };
  }
  /**
   * The bank's self-check of `card` and a dual registration's PAR answer carry the rotation too, over
   * REST and Connect, and the self-check answer verifies at once for a merchant that counted the old root.
   */
  async function selfCheckAndPar(card, rotation) {
    const ask = { recipientHashedPan: card.hashedPan, cardBin: card.bin };
    const rest = s.must(await s.call("POST", "/api/v1/kt/self-check", bank.headers, ask), "self-check");
    const connect = await s.call("POST", "/receipts.v1.KeysService/KtSelfCheck", bank.headers, ask);
    const mark = (a) => a?.rootRotation?.statement === rotation.statement;
    const v = await verdict(rest, card);
    s.expect(
      mark(rest) && mark(connect.body) && v === "verified",
      "the self-check carries the rotation (REST, Connect) and verifies at once",
      `${JSON.stringify(rest.rootRotation)?.slice(0, 80)} / ${connect.status} / ${v}`,
    );
    for (const [surface, path] of [
      ["REST", "/api/v1/onboarding/register"],
      ["Connect", "/receipts.v1.OnboardingService/Register"],
    ]) {
      const dual = { hashedPan: s.hashedPan(), par: s.par() };
      const fresh = await s.deviceKey();
      const signed = await c.signCardBindings(
        { issuer: bank.tenant, card: dual, bin: bank.bin, ...fresh, versions: { hashedPan: 1, par: 1 } },
        newRoot,
      );
      const res = await s.call("POST", path, bank.headers, {
        ...dual,
        cardBin: bank.bin,
        ...fresh,
        ...signed,
      });
      const answer = surface === "REST" ? res.body.data : res.body;
      s.expect(
        res.status === 200 && mark(answer) && mark(answer?.parAnswer) && !res.text.includes(dual.par),
        `a dual registration's PAR answer carries the rotation (${surface})`,
        `${res.status} ${res.text.slice(0, 160)}`,
      );
    }
  }
  /** The lookup answer for `card`, once the merchant's checks other than the root delay pass (the log caught up). */
  async function lookup(card, seen) {
    let answer;
    for (let i = 0; i < 50; i++) {
      answer = s.must(
        await s.call("POST", "/api/v1/keys/lookup", merchant, {
          recipientHashedPan: card.hashedPan,
          cardBin: card.bin,
        }),
        "lookup",
      );
      const v = await verdict(answer, card, seen);
      if (v === "verified" || v === "root") return answer;
      await sleep(200);
    }
    return answer;
  }
  const forged = async (
    introduced,
    by,
    { signingKeyId = by.signingKeyId, issuer = bank.tenant, v = 2 } = {},
  ) => {
    const signed = await c.signRootRotation({ issuer, newRoot: introduced, version: v }, by);
    return { statement: signed.statement, signature: signed.signature, signingKeyId };
  };

  // The bank rotates its root; a card its new root binds.
  const newRoot = await c.generateIssuerSigner("Ed25519");
  const rotation = await c.signRootRotation({ issuer: bank.tenant, newRoot, version: ++version }, oldRoot);
  s.must(await s.call("POST", keys, bank.headers, rotation), "rotation");
  const first = await registered(newRoot);
  s.expect(
    first.answer.rootRotation?.signingKeyId === oldRoot.signingKeyId &&
      first.answer.rootRotation?.statement === rotation.statement,
    "the register answer carries the bank's rotation",
    JSON.stringify(first.answer.rootRotation),
  );
  const looked = await lookup(first.card);
  s.expect(
    looked.rootRotation?.statement === rotation.statement,
    "the lookup answer carries the bank's rotation",
    JSON.stringify(looked.rootRotation),
  );
  const honest = await verdict(looked, first.card);
  s.expect(
    honest === "verified",
    "a merchant that counted the old root verifies the new root's binding at once",
    honest,
  );
  const client = c.createReceiptsClient({
    baseUrl: s.baseUrl,
    apiKey: merchantKey,
    retry: { maxAttempts: 1 },
  });
  const receipt = {
    receiptId: `r-rot-${s.run}`,
    merchantId: "merchant-001",
    merchantName: "Rotation Cafe",
    transactionId: `txn-rot-${s.run}`,
    transactionDate: "2026-01-01T09:30:00Z",
    currency: "eur",
    items: [{ lineItemId: "li-1", name: "Flat white", quantity: 1, unitPrice: 350, totalPrice: 350 }],
    totalAmount: 350,
    recipientHashedPan: first.card.hashedPan,
    cardBin: first.card.bin,
  };
  try {
    const stored = await c.sealAndStoreReceipt(client, receipt, {
      trust: c.createKeyTrust({ policy, baseUrl: s.baseUrl, rootsSeen: longKnown() }),
    });
    s.expect(stored.kind === "receipt", "the merchant seals and stores to it at once (Connect)", stored.kind);
  } catch (err) {
    s.expect(false, "the merchant seals and stores to it at once (Connect)", err.message);
  }
  await selfCheckAndPar(first.card, rotation);
  const never = await verdict(looked, first.card, new Map());
  s.expect(never === "root", "a merchant that never counted the old root still waits the delay", never);

  const stranger = await c.generateIssuerSigner("Ed25519");
  const garbage = {
    statement: Buffer.from("not a statement").toString("base64"),
    signature: rotation.signature,
    signingKeyId: oldRoot.signingKeyId,
  };
  const revocationByOld = await c.signSigningKeyRevocation(
    { issuer: bank.tenant, signingKeyId: newRoot.signingKeyId, version: 2 },
    oldRoot,
  );
  const forgeries = [
    ["signed by the bank's signer", await forged(newRoot, signerKey)],
    [
      "a signer's signature claimed as the old root's",
      await forged(newRoot, signerKey, { signingKeyId: oldRoot.signingKeyId }),
    ],
    ["signed by another bank's root", await forged(newRoot, other.root)],
    [
      "the old root's statement in another bank's name",
      await forged(newRoot, oldRoot, { issuer: other.tenant }),
    ],
    ["the old root naming another key", await forged(stranger, oldRoot)],
    ["the old root's statement of another type", { ...revocationByOld, signingKeyId: oldRoot.signingKeyId }],
    ["bytes that are not a statement", garbage],
  ];
  for (const [what, rootRotation] of forgeries) {
    const v = await verdict({ ...looked, rootRotation }, first.card);
    s.expect(v === "root", `a forged rootRotation keeps the delay: ${what}`, v);
  }

  // The bank's new root revokes itself (stolen); the thief holds it and an issuer API key of the bank.
  const revocation = await c.signSigningKeyRevocation(
    { issuer: bank.tenant, signingKeyId: newRoot.signingKeyId, version: ++version },
    newRoot,
  );
  s.must(
    await s.call("POST", `${keys}/${newRoot.signingKeyId}/revoke`, bank.headers, revocation),
    "revocation",
  );
  const recovery = await c.generateIssuerSigner("Ed25519");
  const asRotation = await c.signRootRotation(
    { issuer: bank.tenant, newRoot: recovery, version: version + 1 },
    newRoot,
  );
  const thief = await s.call("POST", keys, bank.headers, asRotation);
  s.expect(
    thief.status >= 400 && thief.status < 500,
    "the recovery root registered as a rotation by the revoked root is refused",
    `${thief.status}`,
  );
  s.must(await s.call("POST", keys, bank.headers, { publicKey: recovery.spki }), "recovery root");
  const confirmPath = `/admin/v1/issuers/${bank.tenant}/signing-keys/${recovery.signingKeyId}/confirm`;
  let confirmed = await s.admin("POST", confirmPath);
  s.expect(
    confirmed.status === 409,
    "the operator's confirm at once after the revocation is conflict (the log has not published it from an earlier second)",
    `${confirmed.status}`,
  );
  for (let i = 0; i < 50 && confirmed.status === 409; i++) {
    await sleep(200);
    confirmed = await s.admin("POST", confirmPath);
  }
  s.must(confirmed, "recovery confirm");
  const second = await registered(recovery);
  s.expect(
    second.answer.rootRotation === undefined,
    "the register answer for the recovery root carries no rotation",
    JSON.stringify(second.answer.rootRotation),
  );
  const seenAll = () => new Map([...longKnown(), [`${bank.tenant} ${newRoot.signingKeyId}`, 0]]);
  const recovered = await lookup(second.card, seenAll());
  s.expect(
    recovered.rootRotation === undefined,
    "the lookup answer for the recovery root carries no rotation",
    JSON.stringify(recovered.rootRotation),
  );
  const waits = await verdict(recovered, second.card, seenAll());
  s.expect(
    waits === "root",
    "the recovery root waits the delay for a merchant that counted both earlier roots",
    waits,
  );
  for (const [what, rootRotation] of [
    ["by the self-revoked root", await forged(recovery, newRoot, { v: version })],
    ["by the root the rotation retired", await forged(recovery, oldRoot, { v: version })],
  ]) {
    const v = await verdict({ ...recovered, rootRotation }, second.card, seenAll());
    s.expect(v === "root", `the thief's rotation of the recovery root keeps the delay: ${what}`, v);
  }
  s.finish();
}

main().catch((err) => {
  console.error(err.message);
  process.exit(2);
});
