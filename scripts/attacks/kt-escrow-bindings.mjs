#!/usr/bin/env node
/**
 * Signed issuer escrow keys and server-side sealing (issue 32), from outside, against a running server:
 *
 *   ADMIN_TOKEN=... node scripts/attacks/kt-escrow-bindings.mjs <baseUrl>
 *
 * The operator token sets the scene: two issuer tenants with confirmed roots and BINs (the victim with
 * requireBindings), a merchant key. Then every forgery of `POST /api/v1/issuers/escrow-keys` the
 * victim's stolen API key (or the other tenant) can try, on REST and on Connect: unsigned, signed by
 * the other tenant, the other tenant's own statement, another key's statement, a service escrow key's
 * id, a tampered signature, a replayed version, non-canonical JSON, another tenant's keyId, malformed
 * bindings. Each must be refused with its code and write nothing (the victim's list of escrow keys is
 * read after each). Then the substitution a stolen issuer key can try on a bound card (an unsigned
 * rotation: forbidden, and encrypt still seals to the bound key), and server-side sealing seen from
 * outside: encrypt for the victim's card seals to its bound key; escrow for its BIN is refused while
 * its current escrow key is one registered unsigned before requireBindings (`integrity_failure`, no
 * receipt stored) and sealed once it registers a signed one. A store writer swapping a key row is not
 * reachable from outside (the store is the server's); test/domain/kt/seal-check.test.ts does it in process.
 * Needs the built client library (`npm run build`). Exit 0 when every check held, 1 otherwise.
 */

import { attackScene } from "./kt-scene.mjs";

const {
  client,
  run,
  call,
  admin,
  must,
  expect,
  finish,
  issuer: tenant,
  confirmRoot,
  p256,
} = await attackScene();
const issuer = (name, bin, requireBindings) => tenant(name, { bin, requireBindings, withRoot: false });

const escrowKeys = async (bank) =>
  must(await call("GET", "/api/v1/issuers/escrow-keys", bank.headers), "list").escrowKeys.length;

let ids = 0;
const statementFor = (bank, publicKey, extra = {}) =>
  client.escrowKeyStatement({
    issuer: bank.tenant,
    keyId: `iek_attack-${run}-${++ids}`,
    publicKey,
    version: 1,
    ...extra,
  });

/** Sends one forged escrow-key registration (REST, or Connect JSON) and checks the code and that nothing was written. */
async function refused(what, bank, body, code, { connect = false, raw } = {}) {
  const before = await escrowKeys(bank);
  const res = connect
    ? await call("POST", "/receipts.v1.KeysService/RegisterEscrowKey", bank.headers, body, raw)
    : await call("POST", "/api/v1/issuers/escrow-keys", bank.headers, body, raw);
  const got = connect ? res.body.code : res.body.error?.code;
  const after = await escrowKeys(bank);
  expect(
    got === code && after === before && res.status < 500,
    `${what} -> ${code}, nothing written`,
    `${res.status} ${got} ${JSON.stringify(res.body.error?.details ?? res.body.message ?? "")}, keys ${before} -> ${after}`,
  );
}

async function encrypt(merchantKey, hashedPan, cardBin) {
  const receiptId = `r-${crypto.randomUUID()}`;
  const res = await call(
    "POST",
    "/api/v1/receipts/encrypt",
    { "x-api-key": merchantKey },
    {
      receiptId,
      merchantId: `m-${run}`,
      merchantName: "Attack Cafe",
      transactionId: `t-${receiptId}`,
      transactionDate: "2026-01-01T09:30:00Z",
      currency: "eur",
      recipientHashedPan: hashedPan,
      cardBin,
      items: [{ lineItemId: "li-1", name: "Flat white", quantity: 1, unitPrice: 350, totalPrice: 350 }],
      totalAmount: 350,
    },
  );
  return { res, receiptId };
}

async function until(what, probe) {
  for (let i = 0; i < 200; i++) {
    const value = await probe();
    if (value) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

try {
  const victim = await issuer(
    "escrow-victim",
    `6${run.replace(/\D/g, "7").padEnd(7, "7").slice(0, 7)}`,
    true,
  );
  const other = await issuer("escrow-other", `5${run.replace(/\D/g, "3").padEnd(7, "3").slice(0, 7)}`, false);
  const merchantKey = must(
    await admin("POST", "/admin/v1/api-keys", {
      tenant: `escrow-shop-${run}`,
      role: "merchant",
      tier: "enterprise",
    }),
    "merchant",
  ).apiKey;
  // Before the victim has a root: an unsigned escrow key is forbidden already (requireBindings).
  await refused(
    "unsigned escrow key under requireBindings",
    victim,
    { publicKey: await p256() },
    "forbidden",
  );
  await refused(
    "unsigned escrow key under requireBindings (Connect)",
    victim,
    { publicKey: await p256() },
    "permission_denied",
    { connect: true },
  );
  await confirmRoot(victim);
  await confirmRoot(other);

  const key = await p256();
  await refused(
    "statement signed by another tenant's root",
    victim,
    { publicKey: key, binding: await client.signStatement(statementFor(victim, key), other.root) },
    "invalid_signature",
  );
  await refused(
    "the other tenant's own statement, submitted by the victim's key",
    victim,
    { publicKey: key, binding: await client.signStatement(statementFor(other, key), other.root) },
    "invalid_request",
  );
  await refused(
    "a statement about another public key",
    victim,
    { publicKey: key, binding: await client.signStatement(statementFor(victim, await p256()), victim.root) },
    "invalid_request",
  );
  await refused(
    "a statement naming a service escrow key id (esc_)",
    victim,
    {
      publicKey: key,
      binding: await client.signStatement(
        statementFor(victim, key, { keyId: "esc_0123456789abcdef" }),
        victim.root,
      ),
    },
    "invalid_request",
  );
  await refused(
    "a statement claiming to supersede a key that is not current",
    victim,
    {
      publicKey: key,
      binding: await client.signStatement(
        statementFor(victim, key, { supersedes: "iek_nothing-here" }),
        victim.root,
      ),
    },
    "invalid_request",
  );
  const good = await client.signStatement(statementFor(victim, key), victim.root);
  const sig = Buffer.from(good.signature, "base64");
  sig[7] ^= 1;
  await refused(
    "a tampered signature",
    victim,
    { publicKey: key, binding: { ...good, signature: sig.toString("base64") } },
    "invalid_signature",
  );
  await refused(
    "a tampered signature (Connect)",
    victim,
    { publicKey: key, binding: { ...good, signature: sig.toString("base64") } },
    "invalid_argument",
    { connect: true },
  );
  const text = Buffer.from(good.statement, "base64").toString("utf8");
  const spaced = JSON.stringify(JSON.parse(text), null, 1);
  const spacedSig = Buffer.from(
    await crypto.subtle.sign("Ed25519", victim.root.privateKey, new TextEncoder().encode(spaced)),
  ).toString("base64");
  await refused(
    "non-canonical JSON, validly signed",
    victim,
    {
      publicKey: key,
      binding: {
        statement: Buffer.from(spaced).toString("base64"),
        signature: spacedSig,
        signingKeyId: good.signingKeyId,
      },
    },
    "invalid_request",
  );
  await refused("binding as a string", victim, { publicKey: key, binding: "x" }, "invalid_request");
  await refused(
    "binding members of the wrong type",
    victim,
    { publicKey: key, binding: { statement: 5, signature: [], signingKeyId: null } },
    "invalid_request",
  );
  await refused(
    "a 100 kB statement",
    victim,
    { publicKey: key, binding: { ...good, statement: "A".repeat(100_000) } },
    "invalid_request",
  );

  // The honest one is stored under the statement's keyId; replaying it (same version) is refused.
  const stored = must(
    await call("POST", "/api/v1/issuers/escrow-keys", victim.headers, { publicKey: key, binding: good }),
    "signed escrow key",
  );
  expect(
    stored.escrowKeyId === JSON.parse(text).keyId,
    "a signed escrow key is stored under its statement's keyId",
    stored.escrowKeyId,
  );
  await refused(
    "a replay of the same statement (version taken)",
    victim,
    { publicKey: key, binding: good },
    "invalid_request",
  );
  const otherKey = await p256();
  await refused(
    "the victim's keyId taken by the other tenant",
    other,
    {
      publicKey: otherKey,
      binding: await client.signStatement(
        statementFor(other, otherKey, { keyId: stored.escrowKeyId }),
        other.root,
      ),
    },
    "conflict",
  );

  // A card of the victim, bound; the stolen issuer key's unsigned rotation is forbidden.
  const hashedPan = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex");
  const keyId = crypto.randomUUID();
  const devicePublicKey = await p256();
  const binding = await client.signStatement(
    client.keyBindingStatement({
      issuer: victim.tenant,
      card: { hashedPan },
      bin: victim.bin,
      keyId,
      publicKey: devicePublicKey,
      version: 1,
    }),
    victim.root,
  );
  must(
    await call("POST", "/api/v1/onboarding/register", victim.headers, {
      hashedPan,
      publicKey: devicePublicKey,
      keyId,
      cardBin: victim.bin,
      binding,
    }),
    "register",
  );
  const rotation = await call("POST", "/api/v1/onboarding/register", victim.headers, {
    hashedPan,
    publicKey: await p256(),
    keyId: crypto.randomUUID(),
    cardBin: victim.bin,
  });
  expect(
    rotation.body.error?.code === "forbidden",
    "a stolen issuer key's unsigned rotation of a bound card -> forbidden",
    rotation.status,
  );
  const sealed = await until("the binding under a checkpoint", async () => {
    const attempt = await encrypt(merchantKey, hashedPan, victim.bin);
    return attempt.res.status === 200 ? attempt : undefined;
  });
  expect(sealed.res.body.data.keyId === keyId, "encrypt seals to the bound key", sealed.res.body.data.keyId);

  // Server-side sealing from outside: a third tenant with an unsigned escrow key, then requireBindings.
  const late = await issuer("escrow-late", `4${run.replace(/\D/g, "5").padEnd(7, "5").slice(0, 7)}`, false);
  must(
    await call("POST", "/api/v1/issuers/escrow-keys", late.headers, { publicKey: await p256() }),
    "unsigned escrow key",
  );
  must(
    await admin("PUT", `/admin/v1/issuers/${late.tenant}/require-bindings`, { requireBindings: true }),
    "requireBindings",
  );
  const unregistered = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex");
  const escrowOf = async () =>
    JSON.stringify(
      must(await admin("GET", "/admin/v1/escrow"), "escrow counts").escrow.filter(
        (e) => e.ownerTenantId === late.tenant,
      ),
    );
  const escrowBefore = await escrowOf();
  const { res: refusedSeal } = await encrypt(merchantKey, unregistered, late.bin);
  expect(
    refusedSeal.status === 422 && refusedSeal.body.error?.code === "integrity_failure",
    "escrow to an unsigned issuer escrow key under requireBindings -> integrity_failure",
    `${refusedSeal.status} ${JSON.stringify(refusedSeal.body.error)}`,
  );
  const escrowAfter = await escrowOf();
  expect(
    escrowAfter === escrowBefore,
    "the refused receipt is not stored (the operator's escrow counts)",
    `${escrowBefore} -> ${escrowAfter}`,
  );
  await confirmRoot(late);
  const lateKey = await p256();
  const current = must(
    await call("GET", "/api/v1/issuers/escrow-keys", late.headers),
    "list",
  ).currentEscrowKeyId;
  must(
    await call("POST", "/api/v1/issuers/escrow-keys", late.headers, {
      publicKey: lateKey,
      binding: await client.signStatement(statementFor(late, lateKey, { supersedes: current }), late.root),
    }),
    "signed escrow key",
  );
  const escrowed = await until("the escrow key under a checkpoint", async () => {
    const attempt = await encrypt(merchantKey, unregistered, late.bin);
    return attempt.res.status === 200 ? attempt : undefined;
  });
  expect(
    escrowed.res.body.data.keyId.startsWith("iek_attack-"),
    "then escrow seals to the signed escrow key",
    escrowed.res.body.data.keyId,
  );
} catch (err) {
  console.error(`setup error: ${err.message}`);
  process.exit(2);
}
finish();
