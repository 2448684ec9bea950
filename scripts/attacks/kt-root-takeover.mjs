#!/usr/bin/env node
/**
 * The operator's paths to an issuer's root, from outside, against a running server, with the
 * operator token as the attacker's only power (it can mint API keys of any tenant):
 *
 *   ADMIN_TOKEN=... node scripts/attacks/kt-root-takeover.mjs [baseUrl]
 *
 * A bank registers and (with the operator's out-of-band check) confirms its root, owns a BIN and
 * endorses a signer. While the root is live, the operator tries to put a root of its own in its place:
 * an unsigned key with an issuer API key it minted for the bank, a key that introduces itself as
 * root, a rotation or a revocation signed by its own key or by the bank's signer, the confirm of its
 * own key (a pending root written into the store beside the live one is not reachable from outside:
 * test/domain/kt/root-rotation.test.ts covers it). The bank rotates its root: the rotation replayed,
 * and a later rotation signed by the retired root (a thief of the old key), are refused. The bank's new root
 * revokes itself: while the bank waits for its recovery root the operator's word does not stand for
 * `requireBindings`, a BIN added to the bank, or the bank's BIN moved to the operator's tenant at
 * once; once the bank registered its recovery root, the operator's own recovery root is refused and
 * its confirm is `not_found`. Finally the bank's listing must show the bank's recovery root and none
 * of the operator's keys. The scene (the calls, the tally) is kt-scene.mjs's; the statements are
 * written here and signed with the built client library (`npm run build`). Prints each check with the
 * answer's status and "n of m held"; exit code 0 when every attack failed, 1 when one succeeded, 2 on
 * a setup error.
 */

import { attackScene } from "./kt-scene.mjs";

const s = await attackScene();

/** An API key of `tenant` with `role`, minted by the operator token: the `x-api-key` header. */
async function apiKey(tenant, role) {
  return {
    "x-api-key": s.must(await s.admin("POST", "/admin/v1/api-keys", { tenant, role }), `key of ${tenant}`)
      .apiKey,
  };
}

/** A fresh Ed25519 key, its private half extractable by nobody: `spki`, `signingKeyId`, `privateKey`. */
const newKey = () => s.client.generateIssuerSigner("Ed25519");

/** The `statement` and `signature` members of `object` signed by `key` (any statement, any signer). */
async function sign(key, object) {
  const { statement, signature } = await s.client.signStatement(s.client.statementOf(object), key);
  return { statement, signature };
}

const now = () => `${new Date().toISOString().slice(0, 19)}Z`;
const introduces = (issuer, key, role, version) => ({
  v: 1,
  type: "receipts.v1/signing-key",
  issuer,
  signingKeyId: key.signingKeyId,
  algorithm: "Ed25519",
  spki: key.spki,
  role,
  version,
  issuedAt: now(),
});
const revokes = (issuer, id, version) => ({
  v: 1,
  type: "receipts.v1/signing-key-revocation",
  issuer,
  signingKeyId: id,
  version,
  revokedAt: now(),
});

/** An attack must be refused with a 4xx in the envelope (a 5xx is no refusal). */
function expectRefused(name, res) {
  const code = res.body?.error?.code ?? "ok";
  s.expect(res.status >= 400 && res.status < 500, `${name}: ${res.status} ${code}`, "not refused with a 4xx");
}

async function main() {
  const bank = `root-bank-${s.run}`;
  const mallory = `operator-bank-${s.run}`;
  const bankKey = await apiKey(bank, "issuer");
  // The operator's own API key for the bank's tenant: acting as the bank is within its power.
  const forged = await apiKey(bank, "issuer");
  await apiKey(mallory, "issuer");
  const bin = s.randomBin("6");
  s.must(await s.admin("PUT", `/admin/v1/issuers/${bank}/bins`, { bins: [bin] }), "bins");
  const keys = "/api/v1/issuers/signing-keys";
  const confirm = (id) => s.admin("POST", `/admin/v1/issuers/${bank}/signing-keys/${id}/confirm`);
  const root = await newKey();
  s.must(await s.call("POST", keys, bankKey, { publicKey: root.spki }), "root");
  s.must(await confirm(root.signingKeyId), "confirm");
  const signer = await newKey();
  s.must(
    await s.call("POST", keys, bankKey, {
      publicKey: signer.spki,
      ...(await sign(root, introduces(bank, signer, "signer", 1))),
    }),
    "signer",
  );

  // While the bank's root is live.
  const mine = await newKey();
  expectRefused(
    "an unsigned key registered with the operator's API key",
    await s.call("POST", keys, forged, { publicKey: mine.spki }),
  );
  expectRefused(
    "a key introducing itself as the root",
    await s.call("POST", keys, forged, {
      publicKey: mine.spki,
      ...(await sign(mine, introduces(bank, mine, "root", 2))),
    }),
  );
  expectRefused(
    "a rotation signed by the bank's signer",
    await s.call("POST", keys, forged, {
      publicKey: mine.spki,
      ...(await sign(signer, introduces(bank, mine, "root", 2))),
    }),
  );
  expectRefused("the confirm of the operator's own key", await confirm(mine.signingKeyId));
  expectRefused(
    "the bank's root revoked by a statement of the operator's key",
    await s.call(
      "POST",
      `${keys}/${root.signingKeyId}/revoke`,
      forged,
      await sign(mine, revokes(bank, root.signingKeyId, 2)),
    ),
  );
  expectRefused(
    "the bank's root revoked by its signer",
    await s.call(
      "POST",
      `${keys}/${root.signingKeyId}/revoke`,
      forged,
      await sign(signer, revokes(bank, root.signingKeyId, 2)),
    ),
  );
  expectRefused(
    "requireBindings by the operator's word",
    await s.admin("PUT", `/admin/v1/issuers/${bank}/require-bindings`, { requireBindings: true }),
  );

  // The bank rotates its root; the rotation replayed, and the retired root's later rotation.
  const next = await newKey();
  const rotation = { publicKey: next.spki, ...(await sign(root, introduces(bank, next, "root", 2))) };
  const rotated = s.must(await s.call("POST", keys, bankKey, rotation), "rotation");
  console.log(`info  the bank's rotation: 200 ${rotated.role} ${rotated.status}`);
  expectRefused("the bank's rotation replayed", await s.call("POST", keys, forged, rotation));
  expectRefused(
    "a rotation to the operator's key signed by the retired root",
    await s.call("POST", keys, forged, {
      publicKey: mine.spki,
      ...(await sign(root, introduces(bank, mine, "root", 3))),
    }),
  );
  expectRefused(
    "a signer endorsed by the retired root",
    await s.call("POST", keys, forged, {
      publicKey: mine.spki,
      ...(await sign(root, introduces(bank, mine, "signer", 3))),
    }),
  );

  // The bank's new root revokes itself: the bank waits for its recovery root.
  s.must(
    await s.call(
      "POST",
      `${keys}/${next.signingKeyId}/revoke`,
      bankKey,
      await sign(next, revokes(bank, next.signingKeyId, 3)),
    ),
    "revocation",
  );
  expectRefused(
    "requireBindings by the operator's word while the bank recovers",
    await s.admin("PUT", `/admin/v1/issuers/${bank}/require-bindings`, { requireBindings: false }),
  );
  expectRefused(
    "a BIN added to the bank by the operator's word while it recovers",
    await s.admin("PUT", `/admin/v1/issuers/${bank}/bins`, {
      bins: [bin, s.randomBin("6")],
    }),
  );
  const move = await s.admin("PUT", `/admin/v1/issuers/${mallory}/bins`, { bins: [bin] });
  console.log(
    `info  the operator's move of the bank's BIN: ${move.status} ${move.body?.error?.code ?? "taken"}`,
  );
  const owner = await s.admin("GET", `/admin/v1/issuers/${bank}/bins`);
  s.expect(
    owner.body.data?.bins?.includes(bin) === true,
    "the bank still owns its BIN after the move (announced, not at once)",
    `its BINs: ${JSON.stringify(owner.body.data?.bins)}`,
  );

  const recovery = await newKey();
  s.must(await s.call("POST", keys, bankKey, { publicKey: recovery.spki }), "recovery root");
  expectRefused(
    "the operator's own recovery root beside the bank's",
    await s.call("POST", keys, forged, { publicKey: mine.spki }),
  );
  expectRefused("the confirm of the operator's key", await confirm(mine.signingKeyId));
  expectRefused("the confirm of the retired root", await confirm(root.signingKeyId));
  // The confirm is conflict until the log has published the revocation from an earlier second.
  let confirmed = await confirm(recovery.signingKeyId);
  for (let i = 0; i < 50 && confirmed.status === 409; i++) {
    await new Promise((r) => setTimeout(r, 200));
    confirmed = await confirm(recovery.signingKeyId);
  }
  s.must(confirmed, "recovery confirm");
  expectRefused(
    "a second root over the confirmed recovery root",
    await s.call("POST", keys, forged, { publicKey: mine.spki }),
  );

  const listed = await s.call("GET", keys, bankKey);
  const list = listed.body.data?.signingKeys ?? [];
  const current = list.filter((k) => k.role === "root" && k.status === "current").map((k) => k.signingKeyId);
  s.expect(
    current.length === 1 &&
      current[0] === recovery.signingKeyId &&
      !list.some((k) => k.signingKeyId === mine.signingKeyId),
    `the bank's recovery root is its only current root, none of the operator's keys listed (${list.length} keys)`,
    `current roots ${current.join(", ")}`,
  );

  s.finish();
}

main().catch((err) => {
  console.error(err.message);
  process.exit(2);
});
