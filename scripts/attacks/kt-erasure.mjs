#!/usr/bin/env node
/**
 * Erasure's revocation (issue 32), from outside, against a running server:
 *
 *   ADMIN_TOKEN=... node scripts/attacks/kt-erasure.mjs <baseUrl>
 *
 * The operator token sets the scene: a victim issuer tenant with requireBindings and a confirmed root,
 * another tenant with its own root, and bound cards of the victim. Then every way a stolen issuer API
 * key (or the other tenant) can try to erase a bound card without the victim's signed revocation: none
 * at all, a forged signature, a statement signed by an attacker's key under the victim's signing key
 * id, the other tenant's root, the card's own binding replayed as a revocation, a revocation of
 * another card, an old version, another key, reason "lost", the same revocation twice, the other
 * tenant's API key, the same on Connect; after each the card's binding must still be there (the
 * victim's self-check answers it). Then the proper revocation erases the card: the feed shows the
 * card's leaves erased, a second call is `not_found`; the card enrolled again and the old revocation
 * replayed against the new binding is refused. Then the card's old bindings, signed before the
 * erasure, sent again by a stolen API key (the sequence restarted at 1) over REST and Connect, for the
 * victim and for a tenant without requireBindings that erased unrevoked: refused, the card stays
 * unregistered; the bank's new binding enrols it again at version 1. Needs the built client library
 * (`npm run build`).
 * Exit 0 when every check held, 1 otherwise.
 */

import { attackScene } from "./kt-scene.mjs";

const {
  adminToken,
  client,
  call,
  must,
  expect,
  finish,
  randomBin,
  issuer: tenant,
  p256,
} = await attackScene();
const issuer = (name, requireBindings) => tenant(name, { bin: randomBin("6"), requireBindings });

async function boundCard(
  bank,
  hashedPan = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex"),
  version = 1,
) {
  const keyId = crypto.randomUUID();
  const publicKey = await p256();
  const statement = client.keyBindingStatement({
    issuer: bank.tenant,
    card: { hashedPan },
    bin: bank.bin,
    keyId,
    publicKey,
    version,
  });
  const binding = await client.signStatement(statement, bank.root);
  const data = must(
    await call("POST", "/api/v1/onboarding/register", bank.headers, {
      hashedPan,
      publicKey,
      keyId,
      cardBin: bank.bin,
      binding,
    }),
    "register",
  );
  return { hashedPan, keyId, publicKey, userId: data.userId, binding };
}

const revocationOf = (bank, card, extra = {}) =>
  client.keyRevocationStatement({
    issuer: bank.tenant,
    card: { hashedPan: card.hashedPan },
    bin: bank.bin,
    keyId: card.keyId,
    version: 2,
    reason: "erased",
    ...extra,
  });

/** The victim's self-check of the card: its key and binding version, or the refusal. */
async function selfCheck(bank, card) {
  const res = await call("POST", "/api/v1/kt/self-check", bank.headers, {
    recipientHashedPan: card.hashedPan,
    cardBin: bank.bin,
  });
  return res.status === 200
    ? `${res.body.data.keyId}:${res.body.data.binding ? "bound" : "unbound"}`
    : `${res.status}`;
}

async function erase(bank, card, revocations, { connect = false } = {}) {
  if (connect) {
    const res = await call("POST", "/receipts.v1.OnboardingService/DeleteUser", bank.headers, {
      userId: card.userId,
      ...(revocations ? { revocations } : {}),
    });
    return {
      status: res.status,
      code: res.body.code ?? (res.status === 200 ? "ok" : undefined),
      text: res.text,
    };
  }
  const res = await call(
    "DELETE",
    `/api/v1/users/${card.userId}`,
    bank.headers,
    revocations ? { revocations } : undefined,
  );
  return {
    status: res.status,
    code: res.body.error?.code ?? (res.status === 200 ? "ok" : undefined),
    text: res.text,
  };
}

/** One erasure attempt that must be refused with `code`, leaving the card bound as before. */
async function refused(what, bank, card, revocations, code, options) {
  const before = await selfCheck(card.owner, card);
  const res = await erase(bank, card, revocations, options);
  const after = await selfCheck(card.owner, card);
  expect(
    res.code === code && before === after && after.endsWith(":bound") && !res.text.includes(card.hashedPan),
    `${what} -> ${code}, nothing erased`,
    `${res.status} ${res.code} ${res.text.slice(0, 240)}; self-check ${before} -> ${after}`,
  );
}

async function main() {
  if (adminToken === "") throw new Error("ADMIN_TOKEN must be the server's operator token");
  const victim = await issuer("erase-victim", true);
  const other = await issuer("erase-other", true);
  const a = { ...(await boundCard(victim)), owner: victim };
  const b = { ...(await boundCard(victim)), owner: victim };
  const good = await client.signStatement(revocationOf(victim, a), victim.root);
  const attacker = await client.generateIssuerSigner("Ed25519");
  const forgedSig = Buffer.from(good.signature, "base64");
  forgedSig[0] ^= 1;

  await refused("no revocation at all (a stolen issuer key)", victim, a, undefined, "forbidden");
  await refused("an empty revocations list", victim, a, [], "forbidden");
  await refused(
    "a flipped signature bit",
    victim,
    a,
    [{ ...good, signature: forgedSig.toString("base64") }],
    "invalid_signature",
  );
  const attackerSigned = await client.signStatement(revocationOf(victim, a), attacker);
  await refused(
    "signed by an attacker's key under the victim's signingKeyId",
    victim,
    a,
    [{ ...attackerSigned, signingKeyId: victim.root.signingKeyId }],
    "invalid_signature",
  );
  await refused(
    "signed by the attacker's own (unknown) signing key",
    victim,
    a,
    [attackerSigned],
    "invalid_signature",
  );
  await refused(
    "signed by the other tenant's root",
    victim,
    a,
    [await client.signStatement(revocationOf(victim, a), other.root)],
    "invalid_signature",
  );
  await refused(
    "the other tenant's own revocation statement",
    victim,
    a,
    [await client.signStatement(revocationOf(other, a), other.root)],
    "invalid_request",
  );
  await refused("the card's own binding replayed as a revocation", victim, a, [a.binding], "invalid_request");
  await refused(
    "a revocation of another card of the victim",
    victim,
    a,
    [await client.signStatement(revocationOf(victim, b), victim.root)],
    "invalid_request",
  );
  await refused(
    "a replayed version 1",
    victim,
    a,
    [await client.signStatement(revocationOf(victim, a, { version: 1 }), victim.root)],
    "invalid_request",
  );
  await refused(
    "a version ahead (3)",
    victim,
    a,
    [await client.signStatement(revocationOf(victim, a, { version: 3 }), victim.root)],
    "invalid_request",
  );
  await refused(
    "another keyId",
    victim,
    a,
    [await client.signStatement(revocationOf(victim, a, { keyId: crypto.randomUUID() }), victim.root)],
    "invalid_request",
  );
  await refused(
    'reason "lost" for an erasure',
    victim,
    a,
    [await client.signStatement(revocationOf(victim, a, { reason: "lost" }), victim.root)],
    "invalid_request",
  );
  await refused("the same revocation twice", victim, a, [good, good], "invalid_request");
  await refused(
    "a malformed binding (not base64)",
    victim,
    a,
    [{ ...good, statement: "%%%" }],
    "invalid_request",
  );
  await refused("the other tenant's API key with the good revocation", other, a, [good], "not_found");
  await refused("no revocation over Connect", victim, a, undefined, "permission_denied", { connect: true });
  await refused(
    "a forged revocation over Connect",
    victim,
    a,
    [{ ...good, signature: forgedSig.toString("base64") }],
    "invalid_argument",
    { connect: true },
  );

  const erased = await erase(victim, a, [good]);
  expect(
    erased.status === 200,
    "the victim's own signed revocation erases the card",
    `${erased.status} ${erased.text.slice(0, 200)}`,
  );
  expect((await erase(victim, a, [good])).status === 404, "a second erasure is not_found", "");
  expect(
    (await selfCheck(victim, a)) === "404",
    "the erased card no longer self-checks",
    await selfCheck(victim, a),
  );
  const feed = must(await call("GET", "/api/v1/kt/entries?after=0", victim.headers), "feed").entries;
  const erasedEntries = feed.filter((e) => e.erased === true);
  expect(
    erasedEntries.length >= 2 &&
      erasedEntries.every((e) => e.statementWithoutCardRef === "" && e.opening === "" && e.userId === ""),
    "the feed shows the card's binding and revocation leaves erased (no statement, opening or user)",
    JSON.stringify(erasedEntries).slice(0, 200),
  );
  expect(!JSON.stringify(feed).includes(a.hashedPan), "the feed never holds the card reference", "");
  expect(
    (await selfCheck(victim, b)).endsWith(":bound"),
    "the victim's other card is still bound",
    await selfCheck(victim, b),
  );

  // The card enrolled again (its sequence restarted by the erasure): the old revocation replayed.
  const again = { ...(await boundCard(victim, a.hashedPan)), owner: victim };
  await refused(
    "the old revocation replayed against the card enrolled again",
    victim,
    again,
    [good],
    "invalid_request",
  );
  const fresh = await client.signStatement(revocationOf(victim, again), victim.root);
  expect(
    (await erase(victim, again, [fresh])).status === 200,
    "the new binding's own revocation erases it",
    "",
  );

  // An erasure restarts the card's sequence; a binding signed before it must not fit again.
  await replays(victim, [a, again]);
  const lax = await issuer("erase-lax", false);
  const c = { ...(await boundCard(lax)), owner: lax };
  const unrevoked = await erase(lax, c);
  expect(unrevoked.status === 200, "a tenant without requireBindings erases a bound card unrevoked", "");
  await replays(lax, [c]);
  const enrolled = await boundCard(lax, c.hashedPan);
  const version = JSON.parse(Buffer.from(enrolled.binding.statement, "base64").toString()).version;
  expect(
    (await selfCheck(lax, enrolled)).endsWith(":bound") && version === 1,
    "the bank's new binding enrols the erased card again, at version 1",
    `${await selfCheck(lax, enrolled)} version ${version}`,
  );

  finish();
}

/**
 * A stolen issuer API key re-registering an erased card with a binding the bank signed before the
 * erasure (still in its window; the erased device's key): refused over REST and Connect, the card
 * still unregistered, and merchants are answered no binding for it.
 */
async function replays(bank, cards) {
  for (const card of cards) {
    const request = {
      hashedPan: card.hashedPan,
      publicKey: card.publicKey,
      keyId: card.keyId,
      cardBin: bank.bin,
      binding: card.binding,
    };
    const rest = await call("POST", "/api/v1/onboarding/register", bank.headers, request);
    const connect = await call("POST", "/receipts.v1.OnboardingService/Register", bank.headers, request);
    expect(
      rest.status === 400 &&
        rest.body.error?.code === "invalid_request" &&
        String(rest.body.error?.details).includes("binding.statement") &&
        connect.status === 400 &&
        connect.body.code === "invalid_argument" &&
        !rest.text.includes(card.hashedPan) &&
        !connect.text.includes(card.hashedPan),
      `${bank.tenant.split("-").slice(0, 2).join("-")}: an erased card's old binding replayed -> invalid_request (REST), invalid_argument (Connect)`,
      `${rest.status} ${rest.text.slice(0, 200)} / ${connect.status} ${connect.text.slice(0, 200)}`,
    );
    expect(
      (await selfCheck(bank, card)) === "404",
      "the erased card stays unregistered after the replay",
      await selfCheck(bank, card),
    );
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
