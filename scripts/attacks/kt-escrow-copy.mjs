#!/usr/bin/env node
/**
 * A stolen issuer API key releasing escrow with random bytes, and the bank's recovery (issue 32), from
 * outside, against a running server:
 *
 *   ADMIN_TOKEN=... node scripts/attacks/kt-escrow-copy.mjs <baseUrl>
 *
 * The operator token sets the scene: a victim issuer with requireBindings, a confirmed root, a BIN
 * and a signed escrow key of its own (whose private half this script holds, as the bank would), and
 * a second API key of the victim's tenant, the one stolen; another issuer tenant with its own root
 * and BIN; a plain issuer (no root) for the erasure; a merchant. Receipts are escrowed for the
 * victim's card, which registers a device key whose private half the script keeps (the device).
 *
 * The thief releases the card's escrow with bundles of the right shape holding random bytes: the
 * service cannot tell (it has no key that opens them) and the device can no longer open them. What
 * must hold: the operator revokes the stolen key and it is refused; the other tenant can neither
 * list the released receipts nor release them again (REST and Connect, naming the victim's user or
 * its own); the victim lists them with their escrow-wrapped keys, releases them again re-wrapped to
 * the device, and the device opens them; a release again to another key or without the card is
 * refused and changes nothing; after an erasure nothing is listed and nothing can be released again.
 * No answer is a 5xx and none echoes a card reference. The end of the escrow retention cannot be
 * reached from outside (30 days at least one day): test/domain/escrow-copy-recovery.test.ts moves the
 * clock. Needs the built client library (`npm run build`). Exit 0 when every check held, 1 otherwise.
 */
import { generateKeyPairSync } from "node:crypto";
import { attackScene } from "./kt-scene.mjs";

const {
  client,
  call,
  admin,
  must,
  expect,
  finish,
  randomBin,
  issuer,
  merchant,
  receipt,
  settled,
  rewrapped,
  hashedPan,
} = await attackScene();

/** Every answer seen: none may be a 5xx, none may carry a card reference. */
const seen = [];
const cards = [];
async function watched(method, path, headers, body) {
  const res = await call(method, path, headers, body);
  seen.push(res);
  return res;
}

let merchantKey;
async function escrowReceipt(card, bin) {
  const body = receipt({ recipientHashedPan: card, cardBin: bin });
  const { receiptId } = body;
  must(
    await settled(() => watched("POST", "/api/v1/receipts/encrypt", { "x-api-key": merchantKey }, body)),
    "escrow",
  );
  return receiptId;
}

/** A device key pair: id, base64 SPKI, and the private half (base64 PKCS#8) it keeps. */
function device() {
  const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
  return {
    keyId: crypto.randomUUID(),
    publicKey: pair.publicKey.export({ type: "spki", format: "der" }).toString("base64"),
    privateKey: pair.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64"),
  };
}

/** Registers `card` of `bank` to a new device (signed when the bank has a root): user id and device. */
async function register(bank, card) {
  const d = device();
  const body = { hashedPan: card, keyId: d.keyId, publicKey: d.publicKey };
  if (bank.root !== undefined) {
    const statement = client.keyBindingStatement({
      issuer: bank.tenant,
      card: { hashedPan: card },
      bin: bank.bin,
      keyId: d.keyId,
      publicKey: d.publicKey,
      version: 1,
    });
    body.binding = await client.signStatement(statement, bank.root);
  }
  const res = await settled(() => watched("POST", "/api/v1/onboarding/register", bank.headers, body));
  return { ...must(res, "register"), device: d };
}

/** The bank's escrow key (signed by its root when it has one): the private half, as the bank keeps it. */
async function escrowKey(bank) {
  const pair = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const publicKey = pair.publicKey.export({ type: "spki", format: "der" }).toString("base64");
  const body = { publicKey };
  if (bank.root !== undefined) {
    const statement = client.escrowKeyStatement({
      issuer: bank.tenant,
      keyId: `iek_copy-${bank.tenant}`,
      publicKey,
      version: 1,
    });
    body.binding = await client.signStatement(statement, bank.root);
  }
  must(await watched("POST", "/api/v1/issuers/escrow-keys", bank.headers, body), "escrow key");
  return pair.privateKey.export({ type: "pkcs8", format: "der" }).toString("base64");
}

const list = (headers, card, released) =>
  watched("POST", "/api/v1/escrow/pending", headers, {
    hashedPan: card,
    ...(released ? { released: true } : {}),
  });

/** Bundles for `to`'s key id of the right shape, the wrapped key random bytes (the thief needs no key). */
function randomBundles(receipts, to) {
  const random = (text) =>
    Buffer.from(crypto.getRandomValues(new Uint8Array(Buffer.from(text, "base64").length))).toString(
      "base64",
    );
  return receipts.map((r) => ({
    merchantId: r.merchantId,
    receiptId: r.receiptId,
    keyBundle: {
      keyId: to.keyId,
      algorithm: r.keyBundle.algorithm,
      encryptedAesKey: random(r.keyBundle.encryptedAesKey),
      // Any valid point will do (the escrowed bundle's is one); the wrapped key is random.
      encapsulatedKey: r.keyBundle.encapsulatedKey,
    },
  }));
}

/** How many of the user's receipts the device opens, of how many it has. */
async function opened(bank, user) {
  const receipts = must(
    await watched("GET", `/api/v1/receipts/${user.userId}`, bank.headers),
    "listing",
  ).receipts;
  let ok = 0;
  for (const r of receipts) {
    try {
      await client.openReceipt(r, user.device.privateKey);
      ok += 1;
    } catch {}
  }
  return { ok, of: receipts.length };
}

async function main() {
  const victim = await issuer("copy-victim", { bin: randomBin("6"), requireBindings: true });
  const other = await issuer("copy-other", { bin: randomBin("5"), requireBindings: true });
  const plain = await issuer("copy-plain", { bin: randomBin("4"), withRoot: false });
  merchantKey = await merchant("copy-shop");
  const escrowPrivate = await escrowKey(victim);
  const plainEscrow = await escrowKey(plain);
  const stolen = must(
    await admin("POST", "/admin/v1/api-keys", { tenant: victim.tenant, role: "issuer", tier: "standard" }),
    "the key to steal",
  );
  const thief = { "x-api-key": stolen.apiKey };

  const a = hashedPan();
  const c = hashedPan();
  cards.push(a, c);
  for (let i = 0; i < 3; i++) await escrowReceipt(a, victim.bin);
  const user = await register(victim, a);
  const userC = await register(other, c);

  // The thief's release: random bytes of the right shape, naming the card (requireBindings).
  const pendingA = must(await list(thief, a), "pending").receipts;
  const junk = await watched("POST", "/api/v1/escrow/release", thief, {
    userId: user.userId,
    hashedPan: a,
    receipts: randomBundles(pendingA, user.device),
  });
  const afterJunk = await opened(victim, user);
  console.log(
    `note: the stolen key's release of random bytes -> ${junk.status} released ${junk.body.data?.released}; the device opens ${afterJunk.ok} of ${afterJunk.of}`,
  );

  // The bank has the key revoked.
  must(await admin("DELETE", `/admin/v1/api-keys/${stolen.apiKeyId}`), "revoke");
  let revoked;
  for (let i = 0; i < 100; i++) {
    revoked = await watched("POST", "/api/v1/escrow/pending", thief, { hashedPan: a, released: true });
    if (revoked.status === 401) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  expect(revoked.status === 401, "the revoked stolen key is refused", `${revoked.status}`);

  // The other tenant: nothing to list, nothing to release again.
  const otherList = await list(other.headers, a, true);
  expect(
    otherList.status === 200 && otherList.body.data.receipts.length === 0,
    "the other tenant lists none of the victim's released receipts",
    otherList.text.slice(0, 200),
  );
  const released = must(await list(victim.headers, a, true), "released").receipts;
  const proper = await rewrapped(released, escrowPrivate, user.device);
  for (const [what, path, headers, body, want] of [
    [
      "naming the victim's user",
      "/api/v1/escrow/release",
      other.headers,
      { userId: user.userId, hashedPan: a, receipts: proper },
      (r) => r.body.error?.code === "not_found",
    ],
    [
      "naming the victim's user (Connect)",
      "/receipts.v1.ReceiptsService/ReleaseEscrow",
      other.headers,
      { userId: user.userId, hashedPan: a, receipts: proper },
      (r) => r.body.code === "not_found",
    ],
    [
      "naming its own user and the victim's card",
      "/api/v1/escrow/release",
      other.headers,
      { userId: userC.userId, hashedPan: a, receipts: proper },
      (r) => r.status === 400,
    ],
    [
      "naming its own user and card",
      "/api/v1/escrow/release",
      other.headers,
      { userId: userC.userId, hashedPan: c, receipts: proper },
      (r) =>
        r.status === 200 &&
        r.body.data.released === 0 &&
        r.body.data.failed.every((f) => f.reason === "not_found"),
    ],
  ]) {
    const res = await watched("POST", path, headers, body);
    const after = await opened(victim, user);
    expect(
      want(res) && after.ok === 0,
      `the other tenant's release again ${what} is refused, nothing moved`,
      `${res.status} ${res.text.slice(0, 200)}; opens ${after.ok}`,
    );
  }

  // The victim's own release again: refused to another key, without the card; then the right one.
  expect(
    released.length === 3 &&
      released.every((r) => r.isEscrowed === false && r.keyBundle.keyId.startsWith("iek_")),
    "the victim lists its 3 released receipts with their escrow-wrapped keys",
    JSON.stringify(released.map((r) => [r.isEscrowed, r.keyBundle?.keyId])),
  );
  const attacker = device();
  const toAttacker = await rewrapped(released, escrowPrivate, attacker);
  const wrongKey = await watched("POST", "/api/v1/escrow/release", victim.headers, {
    userId: user.userId,
    hashedPan: a,
    receipts: toAttacker,
  });
  expect(
    wrongKey.status === 200 &&
      wrongKey.body.data.released === 0 &&
      wrongKey.body.data.failed.every((f) => f.reason === "key_mismatch"),
    "a release again to a key that is not the user's active one is key_mismatch",
    wrongKey.text.slice(0, 200),
  );
  const noCard = await watched("POST", "/api/v1/escrow/release", victim.headers, {
    userId: user.userId,
    receipts: proper,
  });
  expect(
    noCard.body.error?.code === "forbidden",
    "a release again without the card (requireBindings) is forbidden",
    noCard.text.slice(0, 200),
  );
  const again = await watched("POST", "/api/v1/escrow/release", victim.headers, {
    userId: user.userId,
    hashedPan: a,
    receipts: proper,
  });
  const recovered = await opened(victim, user);
  expect(
    again.status === 200 && again.body.data.released === 3 && recovered.ok === 3 && recovered.of === 3,
    "the bank's release again re-wrapped from its escrow copy: the device opens all 3",
    `${again.status} ${again.text.slice(0, 200)}; opens ${recovered.ok} of ${recovered.of}`,
  );
  const audit = must(await watched("GET", "/api/v1/audit", victim.headers), "audit").events ?? [];
  const noted = audit.filter((e) => String(e.subject ?? "").endsWith("released again"));
  expect(noted.length === 3, "each release again is in the victim's audit", JSON.stringify(noted.length));

  // Erasure: the copy goes with the receipt.
  const b = hashedPan();
  cards.push(b);
  for (let i = 0; i < 2; i++) await escrowReceipt(b, plain.bin);
  const userB = await register(plain, b);
  const pendingB = must(await list(plain.headers, b), "pending").receipts;
  const first = await watched("POST", "/api/v1/escrow/release", plain.headers, {
    userId: userB.userId,
    receipts: await rewrapped(pendingB, plainEscrow, userB.device),
  });
  must(first, "release");
  const erased = await watched("DELETE", `/api/v1/users/${userB.userId}`, plain.headers);
  expect(erased.status === 200, "the plain bank erases its user", erased.text.slice(0, 200));
  const afterErasure = await list(plain.headers, b, true);
  expect(
    afterErasure.status === 200 && afterErasure.body.data.receipts.length === 0,
    "after erasure no released receipt of the card is listed",
    afterErasure.text.slice(0, 200),
  );
  const late = await watched("POST", "/api/v1/escrow/release", plain.headers, {
    userId: userB.userId,
    receipts: await rewrapped(pendingB, plainEscrow, userB.device),
  });
  expect(
    late.body.error?.code === "not_found",
    "a release again after erasure is not_found",
    late.text.slice(0, 200),
  );

  const fives = seen.filter((r) => r.status >= 500);
  expect(
    fives.length === 0,
    "no answer was a 5xx",
    fives.map((r) => `${r.status} ${r.text.slice(0, 100)}`).join("; "),
  );
  const echoed = seen.filter((r) => cards.some((card) => r.text.toLowerCase().includes(card)));
  expect(echoed.length === 0, "no answer echoed a card reference", `${echoed.length} answers`);
  console.log(`${seen.length} requests`);
  finish();
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
