#!/usr/bin/env node
/**
 * Escrow release checked against the key directory (issue 32), from outside, against a running server:
 *
 *   ADMIN_TOKEN=... node scripts/attacks/kt-escrow-release.mjs <baseUrl>
 *
 * The operator token sets the scene: a victim issuer with requireBindings, a confirmed root, a BIN and
 * a signed escrow key of its own (whose private half this script holds, as the bank would); another
 * issuer tenant with its own root and BIN; a merchant. Receipts are escrowed for the victim's cards,
 * which then register with signed bindings. Then every release a stolen issuer API key (or the other
 * tenant) can try on `POST /api/v1/escrow/release` and on Connect: no card named, another card of
 * the victim, the other tenant's card, malformed card references, the other tenant's API key, bundles
 * naming another key, forged or cut bundles, receipts of another card, an unknown user, too many
 * receipts, and the proper release replayed (it releases the same bundles again from the receipts'
 * escrow copies: kt-escrow-copy.mjs attacks that path). After each, the card's receipts must still be escrowed
 * (the pending list is read again) and no error may echo a card reference. Then the service's own
 * release at registration for a requireBindings tenant without an escrow key of its own (escrow to
 * the service key): released to the bound key within the registration, and the registration sent
 * again releases nothing twice. A key row swapped in the store is not reachable from outside (the
 * store is the server's): test/domain/kt/registration-release.test.ts and
 * test/domain/kt/escrow-release-check.test.ts do it in process. Needs the built client library (`npm run build`).
 * Exit 0 when every check held, 1 otherwise.
 */
import { generateKeyPairSync } from "node:crypto";
import { attackScene } from "./kt-scene.mjs";

const {
  client,
  run,
  call,
  must,
  expect,
  finish,
  randomBin,
  issuer,
  merchant,
  receipt,
  settled,
  rewrapped,
  deviceKey,
  hashedPan,
} = await attackScene();

let merchantKey;
async function escrowReceipt(card, bin) {
  const body = receipt({ recipientHashedPan: card, cardBin: bin });
  const { receiptId } = body;
  const res = await settled(() =>
    call("POST", "/api/v1/receipts/encrypt", { "x-api-key": merchantKey }, body),
  );
  return { receiptId, merchantId: body.merchantId, data: must(res, "escrow a receipt") };
}

/** Registers `card` of `bank` with a signed binding of a new device key: its user id and key. */
async function register(bank, card) {
  const device = await deviceKey();
  const statement = client.keyBindingStatement({
    issuer: bank.tenant,
    card: { hashedPan: card },
    bin: bank.bin,
    keyId: device.keyId,
    publicKey: device.publicKey,
    version: 1,
  });
  const body = { hashedPan: card, ...device, binding: await client.signStatement(statement, bank.root) };
  const res = await settled(() => call("POST", "/api/v1/onboarding/register", bank.headers, body));
  return { ...must(res, "register"), device, body };
}

/** The card's receipts escrowed to the bank's own escrow keys (the pending list). */
async function pending(bank, card) {
  const res = await call("POST", "/api/v1/escrow/pending", bank.headers, { hashedPan: card });
  return must(res, "pending").receipts;
}

/** One release that must move nothing: its status and code, no card reference echoed, the pending list unchanged. */
async function refused(
  what,
  bank,
  card,
  body,
  want,
  { connect = false, headers = bank.headers, cards = [] } = {},
) {
  const before = (await pending(bank, card)).length;
  const res = connect
    ? await call("POST", "/receipts.v1.ReceiptsService/ReleaseEscrow", headers, body)
    : await call("POST", "/api/v1/escrow/release", headers, body);
  const code = connect ? res.body.code : res.body.error?.code;
  const after = (await pending(bank, card)).length;
  const echoed = [card, ...cards].some((c) => res.text.toLowerCase().includes(c.toLowerCase()));
  const released = res.body.data?.released ?? res.body.released ?? 0;
  const ok =
    (typeof want === "string" ? code === want : want(res)) && after === before && released === 0 && !echoed;
  expect(
    ok && res.status < 500,
    `${what} -> ${typeof want === "string" ? want : "refused per receipt"}, nothing moved`,
    `${res.status} ${code} ${res.text.slice(0, 200)}; pending ${before} -> ${after}; echoed ${echoed}`,
  );
  return res;
}

const failedAll = (reason) => (res) =>
  res.status === 200 &&
  res.body.data.released === 0 &&
  res.body.data.failed.length > 0 &&
  res.body.data.failed.every((f) => f.reason === reason);

async function main() {
  const victim = await issuer("release-victim", { bin: randomBin("6"), requireBindings: true });
  const other = await issuer("release-other", { bin: randomBin("5"), requireBindings: true });
  merchantKey = await merchant("release-shop");

  // The victim's own escrow key, signed by its root; the bank keeps the private half.
  const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const escrowPublic = pair.publicKey.export({ type: "spki", format: "der" }).toString("base64");
  const escrowPrivate = pair.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64");
  const escrowKeyId = `iek_release-${run}`;
  const escrowBinding = await client.signStatement(
    client.escrowKeyStatement({
      issuer: victim.tenant,
      keyId: escrowKeyId,
      publicKey: escrowPublic,
      version: 1,
    }),
    victim.root,
  );
  must(
    await call("POST", "/api/v1/issuers/escrow-keys", victim.headers, {
      publicKey: escrowPublic,
      binding: escrowBinding,
    }),
    "escrow key",
  );

  const [a, b, c] = [hashedPan(), hashedPan(), hashedPan()];
  for (const card of [a, a, a, b]) {
    const { data } = await escrowReceipt(card, victim.bin);
    expect(
      data.isEscrowed === true && data.keyId === escrowKeyId,
      "escrow for the victim's card goes to its signed escrow key",
      JSON.stringify(data),
    );
  }
  await escrowReceipt(c, other.bin);
  const userA = await register(victim, a);
  const userB = await register(victim, b);
  const userC = await register(other, c);
  const receiptsA = await pending(victim, a);
  expect(
    receiptsA.length === 3,
    "the victim's card has its 3 receipts pending after registration",
    receiptsA.length,
  );
  const toA = await rewrapped(receiptsA.slice(0, 2), escrowPrivate, userA.device);
  const proper = { userId: userA.userId, hashedPan: a, receipts: toA };

  // The card must be named, and be the user's own.
  await refused("no card named", victim, a, { userId: userA.userId, receipts: toA }, "forbidden", {
    cards: [a],
  });
  await refused(
    "no card named (Connect)",
    victim,
    a,
    { userId: userA.userId, receipts: toA },
    "permission_denied",
    {
      connect: true,
    },
  );
  await refused("another card of the victim", victim, a, { ...proper, hashedPan: b }, "invalid_request", {
    cards: [b],
  });
  await refused("the other tenant's card", victim, a, { ...proper, hashedPan: c }, "invalid_request", {
    cards: [c],
  });
  await refused(
    "the other tenant's card (Connect)",
    victim,
    a,
    { ...proper, hashedPan: c },
    "invalid_argument",
    {
      connect: true,
      cards: [c],
    },
  );
  for (const [what, ref] of [
    ["a hashedPan of 63 hex digits", { hashedPan: a.slice(1) }],
    ["a hashedPan that is not hex", { hashedPan: `${a.slice(0, 62)}zz` }],
    ["a hashedPan with a PAR beside it that is not one", { hashedPan: a, par: "not-a-par" }],
    ["a PAR of the wrong shape", { hashedPan: "", par: "A12" }],
    ["a hashedPan as a number", { hashedPan: 12345 }],
  ]) {
    await refused(what, victim, a, { ...proper, ...ref }, "invalid_request");
  }
  await refused("the other tenant's API key on the victim's user", victim, a, proper, "not_found", {
    headers: other.headers,
  });
  await refused("an unknown user", victim, a, { ...proper, userId: `usr_${run}nobody00` }, "not_found");
  await refused(
    "the other tenant's user with the victim's card",
    victim,
    a,
    { ...proper, userId: userC.userId },
    "not_found",
  );
  await refused(
    "the victim's other user with this card",
    victim,
    a,
    { ...proper, userId: userB.userId },
    "invalid_request",
  );
  await refused(
    "201 receipts in one call",
    victim,
    a,
    { ...proper, receipts: Array.from({ length: 201 }, () => toA[0]) },
    "invalid_request",
  );

  // Bundles: another key, forged, cut, missing.
  const attackerKey = await deviceKey();
  const toAttacker = await rewrapped(receiptsA.slice(0, 2), escrowPrivate, attackerKey);
  await refused(
    "bundles re-wrapped to the attacker's key",
    victim,
    a,
    { ...proper, receipts: toAttacker },
    failedAll("key_mismatch"),
  );
  const cut = toA.map((r) => ({
    ...r,
    keyBundle: { ...r.keyBundle, encryptedAesKey: r.keyBundle.encryptedAesKey.slice(0, 8) },
  }));
  await refused(
    "bundles with a cut encryptedAesKey",
    victim,
    a,
    { ...proper, receipts: cut },
    failedAll("invalid_key_bundle"),
  );
  const noBundle = toA.map(({ keyBundle: _k, ...r }) => r);
  await refused(
    "receipts without a bundle",
    victim,
    a,
    { ...proper, receipts: noBundle },
    failedAll("key_mismatch"),
  );
  const wrongSuite = toA.map((r) => ({ ...r, keyBundle: { ...r.keyBundle, algorithm: "RSA-OAEP-256" } }));
  await refused(
    "bundles claiming another suite",
    victim,
    a,
    { ...proper, receipts: wrongSuite },
    failedAll("invalid_key_bundle"),
  );
  const receiptsB = await pending(victim, b);
  const ofB = await rewrapped(receiptsB, escrowPrivate, userA.device);
  await refused(
    "another card's receipts into this user",
    victim,
    a,
    { ...proper, receipts: ofB },
    failedAll("not_found"),
  );
  await refused(
    "a receipt that does not exist",
    victim,
    a,
    { ...proper, receipts: [{ ...toA[0], receiptId: `r-${run}-none` }] },
    failedAll("not_found"),
  );

  // The proper release, then the same again.
  const ok = await call("POST", "/api/v1/escrow/release", victim.headers, proper);
  expect(
    ok.status === 200 && ok.body.data.released === 2 && (await pending(victim, a)).length === 1,
    "the proper release moves the 2 receipts re-wrapped to the bound key",
    `${ok.status} ${ok.text.slice(0, 200)}`,
  );
  // Replayed, it releases the two again from their escrow copies, with the same bundles: nothing else moves.
  const replay = await call("POST", "/api/v1/escrow/release", victim.headers, proper);
  const stored = must(
    await call("GET", `/api/v1/receipts/${userA.userId}`, victim.headers),
    "listing",
  ).receipts;
  expect(
    replay.status === 200 &&
      replay.body.data.released === 2 &&
      (await pending(victim, a)).length === 1 &&
      toA.every((r) =>
        stored.some(
          (s) => s.receiptId === r.receiptId && s.keyBundle?.encryptedAesKey === r.keyBundle.encryptedAesKey,
        ),
      ),
    "the proper release replayed releases the same bundles again, nothing else moved",
    `${replay.status} ${replay.text.slice(0, 200)}`,
  );
  // The service cannot tell a bundle wrapped to another public key under the user's keyId from the
  // right one (it never holds the AES key); whoever can re-wrap holds the escrow key already.
  const third = await rewrapped(receiptsA.slice(2), escrowPrivate, {
    ...attackerKey,
    keyId: userA.device.keyId,
  });
  const blind = await call("POST", "/api/v1/escrow/release", victim.headers, { ...proper, receipts: third });
  console.log(
    `note: a bundle for the user's keyId wrapped to another public key (needs the escrow private key) -> ${blind.status} released ${blind.body.data?.released}`,
  );

  // Nor a bundle of the right shape made of random bytes (no escrow key needed): a stolen API key
  // can swap it in, and the receipt no longer opens for anyone. Reported, not counted.
  const [ofBOne] = await rewrapped((await pending(victim, b)).slice(0, 1), escrowPrivate, userB.device);
  const random = (text) =>
    Buffer.from(crypto.getRandomValues(new Uint8Array(Buffer.from(text, "base64").length))).toString(
      "base64",
    );
  const forged = {
    ...ofBOne,
    keyBundle: { ...ofBOne.keyBundle, encryptedAesKey: random(ofBOne.keyBundle.encryptedAesKey) },
  };
  const junk = await call("POST", "/api/v1/escrow/release", victim.headers, {
    userId: userB.userId,
    hashedPan: b,
    receipts: [forged],
  });
  console.log(
    `note: a random encryptedAesKey of the right length for the user's key -> ${junk.status} released ${junk.body.data?.released} ${JSON.stringify(junk.body.data?.failed ?? junk.body.error?.code)}`,
  );

  // The service's own release at registration (the other tenant has no escrow key: the service's).
  const d = hashedPan();
  const escrowedD = [await escrowReceipt(d, other.bin), await escrowReceipt(d, other.bin)];
  expect(
    escrowedD.every((r) => r.data.isEscrowed === true && !String(r.data.keyId).startsWith("iek_")),
    "escrow for a card of a tenant without its own escrow key goes to the service key",
    JSON.stringify(escrowedD.map((r) => r.data.keyId)),
  );
  const userD = await register(other, d);
  expect(
    userD.releasedReceipts === 2 && userD.proof !== undefined,
    "a requireBindings registration releases the service's escrow once its binding is under a checkpoint",
    JSON.stringify({ releasedReceipts: userD.releasedReceipts, proof: userD.proof !== undefined }),
  );
  const again = await settled(() => call("POST", "/api/v1/onboarding/register", other.headers, userD.body));
  expect(
    again.status === 200 && again.body.data.releasedReceipts === 0,
    "the registration sent again releases nothing twice",
    `${again.status} ${again.text.slice(0, 200)}`,
  );
  const list = must(
    await call("GET", `/api/v1/receipts/${userD.userId}`, other.headers),
    "the user's receipts",
  ).receipts;
  expect(
    list.length === 2 && list.every((r) => r.keyBundle?.keyId === userD.device.keyId),
    "the released receipts are sealed to the bound key",
    JSON.stringify(list.map((r) => r.keyBundle?.keyId)),
  );

  finish();
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
