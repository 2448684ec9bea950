#!/usr/bin/env node
/**
 * Attacks on a card registered by both its hashed PAN and its PAR, from outside, against a running
 * server:
 *
 *   ADMIN_TOKEN=... node scripts/attacks/card-aliases.mjs [baseUrl]
 *
 * The operator token only sets the scene (API keys for the victim's bank, the attacker's bank and a
 * shop; the victim bank's BIN). The victim registers a card by both references. The attacker bank then
 * tries to take either reference (alone, beside a card of its own, inside the victim's BIN), and to
 * tell from the answers which reference is taken; taps by the PAR must still reach the victim; the
 * operator API without the token must answer nothing; after the victim erases the user, both
 * references route to escrow again. Prints each answer's status; exit code 0 when every attack
 * failed, 1 when one succeeded, 2 on a setup error. fetch only.
 */

import { attackScene } from "./kt-scene.mjs";

const s = await attackScene({ client: false });
const { run, call, hashedPan: hex64, par: newPar, apiKeyHeaders: apiKey } = s;
const admin = { authorization: `Bearer ${s.adminToken}` };

async function register(issuer, card) {
  const keys = await call("POST", "/api/v1/onboarding/generate-keys", issuer, {});
  if (keys.status !== 200) throw new Error(`setup: generate-keys ${keys.status}`);
  const { keyId, publicKey } = keys.body.data;
  const reg = await call("POST", "/api/v1/onboarding/register", issuer, { ...card, keyId, publicKey });
  return { ...reg, keyId };
}

const tap = s.receipt;

async function main() {
  const victim = await apiKey(`victim-bank-${run}`, "issuer");
  const attacker = await apiKey(`attacker-bank-${run}`, "issuer");
  const shop = await apiKey(`shop-${run}`, "merchant");
  const bin = `5${String(Date.now()).slice(-7)}`;
  const bins = await call("PUT", `/admin/v1/issuers/victim-bank-${run}/bins`, admin, { bins: [bin] });
  if (bins.status !== 200) throw new Error(`setup: bins ${bins.status} ${JSON.stringify(bins.body)}`);

  const [hashedPan, par] = [hex64(), newPar()];
  const card = await register(victim, { hashedPan, par, cardBin: bin });
  if (card.status !== 200)
    throw new Error(`setup: victim register ${card.status} ${JSON.stringify(card.body)}`);
  const userId = card.body.data.userId;

  let broken = 0;
  const expectStatus = (name, answer, wanted) => {
    const ok = wanted.includes(answer.status);
    const leak = [userId, card.keyId, hashedPan, par].some((v) => JSON.stringify(answer.body).includes(v));
    console.log(
      `${ok && !leak ? "held " : "BROKE"} ${name}: ${answer.status} ${answer.body.error?.code ?? ""}${leak ? " (leaked the victim's data)" : ""}`,
    );
    if (!ok || leak) broken++;
    return answer;
  };

  const messages = new Set();
  for (const [name, body] of [
    ["the victim's PAR alone", { par }],
    ["the victim's hashed PAN alone", { hashedPan }],
    ["the victim's PAR beside a card of the attacker", { hashedPan: hex64(), par }],
    ["the victim's hashed PAN beside a new PAR", { hashedPan, par: newPar() }],
  ]) {
    const answer = expectStatus(`attacker registers ${name}`, await register(attacker, body), [409]);
    messages.add(answer.body.error?.message);
  }
  console.log(
    `${messages.size === 1 ? "held " : "BROKE"} one message for every taken reference (${messages.size} distinct)`,
  );
  if (messages.size !== 1) broken++;
  expectStatus(
    "attacker registers the PAR inside the victim's BIN",
    await register(attacker, { par, cardBin: bin }),
    [403],
  );
  expectStatus(
    "attacker registers a fresh PAR inside the victim's BIN",
    await register(attacker, { par: newPar(), cardBin: bin }),
    [403],
  );
  expectStatus(
    "attacker lists the victim's receipts",
    await call("GET", `/api/v1/receipts/${userId}`, attacker),
    [403, 404],
  );
  expectStatus(
    "attacker erases the victim's user",
    await call("DELETE", `/api/v1/users/${userId}`, attacker),
    [403, 404],
  );
  expectStatus(
    "transfer without the operator token",
    await call("POST", "/admin/v1/cards/transfer", attacker, { userId, toTenant: `attacker-bank-${run}` }),
    [401, 404],
  );
  const routed = await call("POST", "/api/v1/receipts/encrypt", shop, tap({ recipientPar: par }));
  const toVictim = routed.status === 200 && routed.body.data.keyId === card.keyId;
  console.log(
    `${toVictim ? "held " : "BROKE"} a tap by the PAR still reaches the victim's key: ${routed.status}`,
  );
  if (!toVictim) broken++;

  const erased = await call("DELETE", `/api/v1/users/${userId}`, victim);
  console.log(
    `erasure by the victim: ${erased.status} ${JSON.stringify(erased.body.data ?? erased.body.error)}`,
  );
  for (const [name, ref] of [
    ["PAR", { recipientPar: par }],
    ["hashed PAN", { recipientHashedPan: hashedPan }],
  ]) {
    const lookup = await call("POST", "/api/v1/keys/lookup", shop, ref);
    const escrowed = lookup.status === 200 && lookup.body.data.isEscrowed === true;
    console.log(
      `${escrowed ? "held " : "BROKE"} after erasure the ${name} routes to escrow: ${lookup.status}`,
    );
    if (!escrowed) broken++;
  }
  console.log(broken === 0 ? "every attack failed" : `${broken} attack(s) succeeded`);
  process.exit(broken === 0 ? 0 : 1);
}

main().catch((err) => {
  console.error(err.message);
  process.exit(2);
});
