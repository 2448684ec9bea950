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
 * test/http/kt-root-rotation.test.ts covers it). The bank rotates its root: the rotation replayed, and a later
 * rotation signed by the retired root (a thief of the old key), are refused. The bank's new root
 * revokes itself: while the bank waits for its recovery root the operator's word does not stand for
 * `requireBindings`, a BIN added to the bank, or the bank's BIN moved to the operator's tenant at
 * once; once the bank registered its recovery root, the operator's own recovery root is refused and
 * its confirm is `not_found`. Finally the bank's listing must show the bank's recovery root and none
 * of the operator's keys. Prints each answer's status; exit code 0 when every attack failed, 1 when
 * one succeeded, 2 on a setup error. fetch and WebCrypto only.
 */

const baseUrl = process.argv[2] ?? process.env.RECEIPTS_URL ?? "http://127.0.0.1:8080";
const adminToken = process.env.ADMIN_TOKEN ?? "";
const run = crypto.randomUUID().slice(0, 8);
const admin = { authorization: `Bearer ${adminToken}` };

async function call(method, path, headers, body) {
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  let parsed;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = { raw: text };
  }
  return { status: res.status, body: parsed };
}

async function apiKey(tenant, role) {
  const res = await call("POST", "/admin/v1/api-keys", admin, { tenant, role });
  if (res.status !== 200) throw new Error(`setup: api key for ${tenant}: ${res.status}`);
  return { "x-api-key": res.body.data.apiKey };
}

/** RFC 8785 for these flat statements: members sorted, no spaces. */
function canonical(object) {
  return JSON.stringify(Object.fromEntries(Object.entries(object).sort(([a], [b]) => (a < b ? -1 : 1))));
}

async function newKey() {
  const pair = await crypto.subtle.generateKey("Ed25519", true, ["sign", "verify"]);
  const spki = new Uint8Array(await crypto.subtle.exportKey("spki", pair.publicKey));
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", spki));
  const id = `sk_${Buffer.from(digest.slice(0, 16)).toString("hex")}`;
  return { ...pair, spki: Buffer.from(spki).toString("base64"), id };
}

async function sign(key, object) {
  const bytes = new TextEncoder().encode(canonical(object));
  const signature = new Uint8Array(await crypto.subtle.sign("Ed25519", key.privateKey, bytes));
  return {
    statement: Buffer.from(bytes).toString("base64"),
    signature: Buffer.from(signature).toString("base64"),
  };
}

const now = () => `${new Date().toISOString().slice(0, 19)}Z`;
const introduces = (issuer, key, role, version) => ({
  v: 1,
  type: "receipts.v1/signing-key",
  issuer,
  signingKeyId: key.id,
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

let failures = 0;
let held = 0;
function expectRefused(name, res) {
  const ok = res.status >= 400 && res.status < 500;
  console.log(`${ok ? "held " : "BROKE"} ${name}: ${res.status} ${res.body?.error?.code ?? "ok"}`);
  if (ok) held += 1;
  else failures += 1;
}
function expectTrue(name, ok) {
  console.log(`${ok ? "held " : "BROKE"} ${name}`);
  if (ok) held += 1;
  else failures += 1;
}
function setup(name, res) {
  if (res.status !== 200) throw new Error(`setup: ${name}: ${res.status} ${JSON.stringify(res.body)}`);
  return res;
}

async function main() {
  const bank = `root-bank-${run}`;
  const mallory = `operator-bank-${run}`;
  const bankKey = await apiKey(bank, "issuer");
  // The operator's own API key for the bank's tenant: acting as the bank is within its power.
  const forged = await apiKey(bank, "issuer");
  await apiKey(mallory, "issuer");
  const bin = `6${String(Date.now()).slice(-7)}`;
  setup("bins", await call("PUT", `/admin/v1/issuers/${bank}/bins`, admin, { bins: [bin] }));
  const keys = "/api/v1/issuers/signing-keys";
  const confirm = (id) => call("POST", `/admin/v1/issuers/${bank}/signing-keys/${id}/confirm`, admin);
  const root = await newKey();
  setup("root", await call("POST", keys, bankKey, { publicKey: root.spki }));
  setup("confirm", await confirm(root.id));
  const signer = await newKey();
  setup(
    "signer",
    await call("POST", keys, bankKey, {
      publicKey: signer.spki,
      ...(await sign(root, introduces(bank, signer, "signer", 1))),
    }),
  );

  // While the bank's root is live.
  const mine = await newKey();
  expectRefused(
    "an unsigned key registered with the operator's API key",
    await call("POST", keys, forged, { publicKey: mine.spki }),
  );
  expectRefused(
    "a key introducing itself as the root",
    await call("POST", keys, forged, {
      publicKey: mine.spki,
      ...(await sign(mine, introduces(bank, mine, "root", 2))),
    }),
  );
  expectRefused(
    "a rotation signed by the bank's signer",
    await call("POST", keys, forged, {
      publicKey: mine.spki,
      ...(await sign(signer, introduces(bank, mine, "root", 2))),
    }),
  );
  expectRefused("the confirm of the operator's own key", await confirm(mine.id));
  expectRefused(
    "the bank's root revoked by a statement of the operator's key",
    await call("POST", `${keys}/${root.id}/revoke`, forged, await sign(mine, revokes(bank, root.id, 2))),
  );
  expectRefused(
    "the bank's root revoked by its signer",
    await call("POST", `${keys}/${root.id}/revoke`, forged, await sign(signer, revokes(bank, root.id, 2))),
  );
  expectRefused(
    "requireBindings by the operator's word",
    await call("PUT", `/admin/v1/issuers/${bank}/require-bindings`, admin, { requireBindings: true }),
  );

  // The bank rotates its root; the rotation replayed, and the retired root's later rotation.
  const next = await newKey();
  const rotation = { publicKey: next.spki, ...(await sign(root, introduces(bank, next, "root", 2))) };
  const rotated = setup("rotation", await call("POST", keys, bankKey, rotation));
  console.log(
    `info  the bank's rotation: ${rotated.status} ${rotated.body.data?.role} ${rotated.body.data?.status}`,
  );
  expectRefused("the bank's rotation replayed", await call("POST", keys, forged, rotation));
  expectRefused(
    "a rotation to the operator's key signed by the retired root",
    await call("POST", keys, forged, {
      publicKey: mine.spki,
      ...(await sign(root, introduces(bank, mine, "root", 3))),
    }),
  );
  expectRefused(
    "a signer endorsed by the retired root",
    await call("POST", keys, forged, {
      publicKey: mine.spki,
      ...(await sign(root, introduces(bank, mine, "signer", 3))),
    }),
  );

  // The bank's new root revokes itself: the bank waits for its recovery root.
  setup(
    "revocation",
    await call("POST", `${keys}/${next.id}/revoke`, bankKey, await sign(next, revokes(bank, next.id, 3))),
  );
  expectRefused(
    "requireBindings by the operator's word while the bank recovers",
    await call("PUT", `/admin/v1/issuers/${bank}/require-bindings`, admin, { requireBindings: false }),
  );
  expectRefused(
    "a BIN added to the bank by the operator's word while it recovers",
    await call("PUT", `/admin/v1/issuers/${bank}/bins`, admin, {
      bins: [bin, `6${String(Date.now() + 7).slice(-7)}`],
    }),
  );
  const move = await call("PUT", `/admin/v1/issuers/${mallory}/bins`, admin, { bins: [bin] });
  console.log(
    `info  the operator's move of the bank's BIN: ${move.status} ${move.body?.error?.code ?? "taken"}`,
  );
  const owner = await call("GET", `/admin/v1/issuers/${bank}/bins`, admin);
  expectTrue(
    "the bank still owns its BIN after the move (announced, not at once)",
    owner.body.data?.bins?.includes(bin) === true,
  );

  const recovery = await newKey();
  setup("recovery root", await call("POST", keys, bankKey, { publicKey: recovery.spki }));
  expectRefused(
    "the operator's own recovery root beside the bank's",
    await call("POST", keys, forged, { publicKey: mine.spki }),
  );
  expectRefused("the confirm of the operator's key", await confirm(mine.id));
  expectRefused("the confirm of the retired root", await confirm(root.id));
  // The confirm is conflict until the log has published the revocation from an earlier second.
  let confirmed = await confirm(recovery.id);
  for (let i = 0; i < 50 && confirmed.status === 409; i++) {
    await new Promise((r) => setTimeout(r, 200));
    confirmed = await confirm(recovery.id);
  }
  setup("recovery confirm", confirmed);
  expectRefused(
    "a second root over the confirmed recovery root",
    await call("POST", keys, forged, { publicKey: mine.spki }),
  );

  const listed = await call("GET", keys, bankKey);
  const list = listed.body.data?.signingKeys ?? [];
  const current = list.filter((k) => k.role === "root" && k.status === "current").map((k) => k.signingKeyId);
  expectTrue(
    `the bank's recovery root is its only current root, none of the operator's keys listed (${list.length} keys)`,
    current.length === 1 && current[0] === recovery.id && !list.some((k) => k.signingKeyId === mine.id),
  );

  console.log(`${held} held, ${failures} broke`);
  console.log(failures === 0 ? "every attack failed" : `${failures} attack(s) succeeded`);
  process.exit(failures === 0 ? 0 : 1);
}

main().catch((err) => {
  console.error(err.message);
  process.exit(2);
});
