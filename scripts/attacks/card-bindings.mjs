#!/usr/bin/env node
/**
 * Registrations by both card references and the operator's card transfer in the key log (issues 32
 * and 33), from outside, against a running server:
 *
 *   ADMIN_TOKEN=... node scripts/attacks/card-bindings.mjs <baseUrl>
 *
 * The operator token sets the scene: a victim issuer (confirmed root, a BIN, requireBindings) and an
 * attacker issuer (its own root), a merchant key. Then every forged dual registration the victim's
 * stolen API key can send: the PAR's binding for the wrong reference, both halves swapped, the PAR's
 * binding signed by the attacker's root or stating the attacker as issuer, the two halves for
 * different keys, versions out of order, one half missing. Each must be refused with its code, name
 * the field, carry no card reference in the error, and register nothing (a lookup by either
 * reference still answers escrow). Then an honest dual registration (a lookup by each reference
 * answers its own binding), its replay, and the transfer: replayed, to the tenant holding it, of an
 * unknown user; the old issuer's registration after the move; the new issuer's binding at the wrong
 * version and at the right one; the transfer entry as issuers read it from /kt/v1/entries (no card
 * reference in it). Needs the built client library (`npm run build`). Exit 0 when every check held.
 */

import { attackScene } from "./kt-scene.mjs";

const {
  client,
  run,
  call,
  admin,
  expect,
  finish,
  digits,
  issuer,
  deviceKey,
  merchant: merchantOf,
} = await attackScene();

function card() {
  const hashedPan = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex");
  const par = `A${Array.from(crypto.getRandomValues(new Uint8Array(28)), (b) => "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"[b % 34]).join("")}`;
  return { hashedPan, par };
}
const sign = (bank, signer, c, device, versions = { hashedPan: 1, par: 1 }, extra = {}) =>
  client.signCardBindings(
    { issuer: bank.tenant, card: c, bin: bank.bin, ...device, versions, ...extra },
    signer,
  );

let merchant;
const lookup = (ref, bin) =>
  call("POST", "/api/v1/keys/lookup", { "x-api-key": merchant }, { ...ref, cardBin: bin });

/** One forged registration: its code, the field named, no card reference echoed, nothing registered. */
async function refused(what, bank, c, body, code, field) {
  const res = await call("POST", "/api/v1/onboarding/register", bank.headers, {
    ...c,
    cardBin: bank.bin,
    ...body,
  });
  const got = res.body.error?.code;
  const details = res.body.error?.details ?? "";
  const echoed = res.text.includes(c.par) || res.text.toLowerCase().includes(c.hashedPan);
  const byPar = await lookup({ recipientPar: c.par }, bank.bin);
  const byPan = await lookup({ recipientHashedPan: c.hashedPan }, bank.bin);
  const nothing = byPar.body.data?.isEscrowed === true && byPan.body.data?.isEscrowed === true;
  expect(
    got === code && details.startsWith(field) && !echoed && nothing,
    `${what} -> ${code} naming ${field}, nothing registered`,
    `${res.status} ${got} ${details} echoed=${echoed} registered=${!nothing}`,
  );
}

async function forgeries(victim, attacker) {
  const d = await deviceKey();
  const c = card();
  const honest = await sign(victim, victim.root, c, d);
  await refused(
    "PAR binding for the hashed PAN",
    victim,
    c,
    { ...d, binding: honest.binding, parBinding: honest.binding },
    "invalid_request",
    "parBinding.statement.cardRef",
  );
  await refused(
    "halves swapped",
    victim,
    c,
    { ...d, binding: honest.parBinding, parBinding: honest.binding },
    "invalid_request",
    "binding.statement.cardRef",
  );
  const theirs = await sign(victim, attacker.root, c, d);
  await refused(
    "PAR binding signed by another tenant's root",
    victim,
    c,
    { ...d, binding: honest.binding, parBinding: theirs.parBinding },
    "invalid_signature",
    "parBinding",
  );
  const asThem = await sign(attacker, attacker.root, c, d);
  await refused(
    "PAR binding stating another issuer",
    victim,
    c,
    { ...d, binding: honest.binding, parBinding: asThem.parBinding },
    "invalid_request",
    "parBinding.statement",
  );
  const other = await sign(victim, victim.root, c, await deviceKey());
  await refused(
    "PAR binding of another key",
    victim,
    c,
    { ...d, binding: honest.binding, parBinding: other.parBinding },
    "invalid_request",
    "parBinding.statement.keyId",
  );
  const ahead = await sign(victim, victim.root, c, d, { hashedPan: 1, par: 2 });
  await refused(
    "PAR binding at version 2 first",
    victim,
    c,
    { ...d, ...ahead },
    "invalid_request",
    "parBinding.statement.version",
  );
  const behind = await sign(victim, victim.root, c, d, { hashedPan: 2, par: 1 });
  await refused(
    "hashed-PAN binding at version 2 first",
    victim,
    c,
    { ...d, ...behind },
    "invalid_request",
    "binding.statement.version",
  );
  await refused(
    "PAR binding missing (requireBindings)",
    victim,
    c,
    { ...d, binding: honest.binding },
    "forbidden",
    "parBinding",
  );
  await refused(
    "hashed-PAN binding missing (requireBindings)",
    victim,
    c,
    { ...d, parBinding: honest.parBinding },
    "forbidden",
    "binding",
  );
}

async function honestThenTransfer(victim, attacker) {
  // A card whose BIN nobody owns (a PAR without a token BIN): no BIN rule settles who holds it, so the
  // operator's transfer is the remedy. (Inside its own BIN, the BIN owner takes a card back by
  // registering it, transferred or not: the BIN rule.)
  const d = await deviceKey();
  const c = card();
  const unowned = { ...victim, bin: `9${digits(5)}` };
  const both = await sign(unowned, victim.root, c, d);
  const body = { ...c, ...d, ...both };
  const first = await call("POST", "/api/v1/onboarding/register", victim.headers, body);
  expect(
    first.status === 200 && first.body.data.parAnswer?.binding?.statement === both.parBinding.statement,
    "honest dual registration answers both bindings",
    `${first.status} ${first.text.slice(0, 200)}`,
  );
  const byPar = await lookup({ recipientPar: c.par }, unowned.bin);
  const byPan = await lookup({ recipientHashedPan: c.hashedPan }, unowned.bin);
  expect(
    byPar.body.data?.binding?.statement === both.parBinding.statement &&
      byPan.body.data?.binding?.statement === both.binding.statement,
    "a lookup by each reference answers its own binding",
    `${byPar.text.slice(0, 120)}`,
  );
  const again = await call("POST", "/api/v1/onboarding/register", victim.headers, body);
  expect(
    again.status === 200 && again.body.data.userId === first.body.data.userId,
    "the same dual registration replayed answers the same user",
    `${again.status}`,
  );
  const userId = first.body.data.userId;
  const before = (await call("GET", "/kt/v1/checkpoint", {})).text.split("\n")[1];
  const moved = await admin("POST", "/admin/v1/cards/transfer", { userId, toTenant: attacker.tenant });
  expect(moved.status === 200, "the operator's transfer", `${moved.status} ${moved.text}`);
  const replay = await admin("POST", "/admin/v1/cards/transfer", { userId, toTenant: attacker.tenant });
  expect(
    replay.body.error?.code === "not_found",
    "the transfer replayed -> not_found",
    `${replay.status} ${replay.text}`,
  );
  const same = await admin("POST", "/admin/v1/cards/transfer", {
    userId: moved.body.data.userId,
    toTenant: attacker.tenant,
  });
  expect(
    same.body.error?.code === "invalid_request",
    "a transfer to the tenant holding the card -> invalid_request",
    `${same.status}`,
  );
  const unknown = await admin("POST", "/admin/v1/cards/transfer", {
    userId: `usr_${run}nobody`,
    toTenant: attacker.tenant,
  });
  expect(
    unknown.body.error?.code === "not_found",
    "a transfer of an unknown user -> not_found",
    `${unknown.status}`,
  );
  const d2 = await deviceKey();
  const back = await sign(unowned, victim.root, c, d2, { hashedPan: 3, par: 3 });
  const old = await call("POST", "/api/v1/onboarding/register", victim.headers, { ...c, ...d2, ...back });
  expect(
    old.body.error?.code === "conflict",
    "the old issuer re-registering after the move -> conflict",
    `${old.status} ${old.text.slice(0, 200)}`,
  );
  const d3 = await deviceKey();
  const wrong = await sign(attacker, attacker.root, c, d3, { hashedPan: 1, par: 1 });
  const early = await call("POST", "/api/v1/onboarding/register", attacker.headers, {
    ...c,
    cardBin: attacker.bin,
    ...d3,
    ...wrong,
  });
  expect(
    early.body.error?.code === "invalid_request" && early.text.includes("version must be 3"),
    "the new issuer's binding at version 1 -> names version 3",
    `${early.status} ${early.text.slice(0, 200)}`,
  );
  const right = await sign(attacker, attacker.root, c, d3, { hashedPan: 3, par: 3 });
  const bound = await call("POST", "/api/v1/onboarding/register", attacker.headers, {
    ...c,
    cardBin: attacker.bin,
    ...d3,
    ...right,
  });
  expect(
    bound.status === 200 && bound.body.data.userId === moved.body.data.userId,
    "the new issuer's binding at version 3, superseding nothing",
    `${bound.status} ${bound.text.slice(0, 200)}`,
  );
  return { c, before: Number(before) };
}

async function transferEntries(victim, { c, before }) {
  let entries = [];
  for (let i = 0; i < 100 && entries.length === 0; i++) {
    const size = Number((await call("GET", "/kt/v1/checkpoint", {})).text.split("\n")[1]);
    const res = await call("GET", `/kt/v1/entries?start=${before}&end=${size}`, victim.headers);
    entries = (res.body.data?.entries ?? [])
      .map((e) => Buffer.from(e.leaf, "base64"))
      .filter((b) => b[0] === 3 && b.subarray(1).toString("utf8").includes("card-transfer"));
    if (entries.length === 0) await new Promise((r) => setTimeout(r, 200));
  }
  const texts = entries.map((b) => b.subarray(1).toString("utf8"));
  const mine = texts.map((t) => JSON.parse(t)).filter((t) => t.from === victim.tenant);
  expect(
    mine.length === 2 && new Set(mine.map((t) => t.transfer)).size === 1,
    "two transfer entries (one per reference), one transfer id, from the victim",
    texts.join(" | ").slice(0, 300),
  );
  const leaked = texts.some((t) => t.includes(c.par) || t.toLowerCase().includes(c.hashedPan));
  expect(!leaked, "no card reference in the transfer entries", "a card reference is in the leaf");
}

const victim = await issuer("victim", { bin: `4${digits(5)}`, requireBindings: true });
const attacker = await issuer("attacker", { bin: `5${digits(5)}` });
merchant = await merchantOf("m");
await forgeries(victim, attacker);
await transferEntries(victim, await honestThenTransfer(victim, attacker));
finish();
