#!/usr/bin/env node
/**
 * Attacks on the BINs of an issuer with a confirmed root, from outside, with the operator token as the
 * attacker's only power, against a running server:
 *
 *   ADMIN_TOKEN=... node scripts/attacks/bin-claims.mjs [baseUrl]
 *
 * A bank registers and (with the operator's out-of-band check) confirms its root, and owns a BIN. The
 * operator, acting alone, then tries to: add a prefix to the bank, remove its prefix, replay a claim
 * signed for another prefix, sign with a key of its own, give the bank's BIN to a tenant it controls
 * (at once, with a forged release, with the bank's release to someone else). A receipt for a card of
 * the BIN must still go to the bank's escrow after each attempt. Prints each answer's status; exit
 * code 0 when every attack failed, 1 when one succeeded, 2 on a setup error. fetch and WebCrypto only.
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

async function sign(key, object) {
  const bytes = new TextEncoder().encode(canonical(object));
  const signature = new Uint8Array(await crypto.subtle.sign("Ed25519", key.privateKey, bytes));
  return {
    statement: Buffer.from(bytes).toString("base64"),
    signature: Buffer.from(signature).toString("base64"),
  };
}

const statement = (issuer, type, prefix, version, extra = {}) => ({
  v: 1,
  type,
  issuer,
  prefix,
  kind: "bin",
  version,
  issuedAt: `${new Date().toISOString().slice(0, 19)}Z`,
  ...extra,
});

let failures = 0;
function expectRefused(name, res) {
  const ok = res.status >= 400 && res.status < 500;
  console.log(`${ok ? "held " : "BROKE"} ${name}: ${res.status} ${res.body?.error?.code ?? "ok"}`);
  if (!ok) failures += 1;
}

async function main() {
  const bank = `rooted-bank-${run}`;
  const mallory = `operator-bank-${run}`;
  const bankKey = await apiKey(bank, "issuer");
  await apiKey(mallory, "issuer");
  const shop = await apiKey(`shop-${run}`, "merchant");
  const bin = `6${String(Date.now()).slice(-7)}`;
  const set = await call("PUT", `/admin/v1/issuers/${bank}/bins`, admin, { bins: [bin] });
  if (set.status !== 200) throw new Error(`setup: bins ${set.status}`);
  const root = await crypto.subtle.generateKey("Ed25519", true, ["sign", "verify"]);
  const spki = Buffer.from(await crypto.subtle.exportKey("spki", root.publicKey)).toString("base64");
  const added = await call("POST", "/api/v1/issuers/signing-keys", bankKey, { publicKey: spki });
  if (added.status !== 200) throw new Error(`setup: root ${added.status}`);
  const confirm = `/admin/v1/issuers/${bank}/signing-keys/${added.body.data.signingKeyId}/confirm`;
  if ((await call("POST", confirm, admin)).status !== 200) throw new Error("setup: confirm");

  const mine = await crypto.subtle.generateKey("Ed25519", true, ["sign", "verify"]);
  const other = `6${String(Date.now() + 1).slice(-7)}`;
  const bins = (tenant, body) => call("PUT", `/admin/v1/issuers/${tenant}/bins`, admin, body);
  expectRefused("add a prefix to the bank alone", await bins(bank, { bins: [bin, other] }));
  expectRefused("remove the bank's prefix alone", await bins(bank, { bins: [] }));
  expectRefused(
    "add with a claim signed by the operator's own key",
    await bins(bank, {
      bins: [bin, other],
      statements: [await sign(mine, statement(bank, "receipts.v1/bin-claim", other, 1))],
    }),
  );
  const genuine = await sign(root, statement(bank, "receipts.v1/bin-claim", other, 1));
  const replayOther = `6${String(Date.now() + 2).slice(-7)}`;
  expectRefused(
    "replay the bank's claim of one prefix for another",
    await bins(bank, { bins: [bin, replayOther], statements: [genuine] }),
  );
  expectRefused(
    "remove the prefix with the bank's claim of another",
    await bins(bank, { bins: [other], statements: [genuine] }),
  );
  expectRefused(
    "a forged release of the bank's BIN to the operator's tenant",
    await bins(mallory, {
      bins: [bin],
      releases: [await sign(mine, statement(bank, "receipts.v1/bin-release", bin, 1, { to: mallory }))],
    }),
  );
  const toElse = await sign(root, statement(bank, "receipts.v1/bin-release", bin, 1, { to: `else-${run}` }));
  expectRefused(
    "the bank's release to someone else, used for the operator's tenant",
    await bins(mallory, { bins: [bin], releases: [toElse] }),
  );

  // The operator's unilateral move is taken, but only announced: the BIN stays the bank's.
  const move = await bins(mallory, { bins: [bin] });
  console.log(
    `info  the unilateral move: ${move.status}, mallory's bins now: ${JSON.stringify(move.body.data?.bins)}`,
  );
  const owner = await call("GET", `/admin/v1/issuers/${bank}/bins`, admin);
  const still = owner.body.data?.bins?.includes(bin) === true;
  console.log(`${still ? "held " : "BROKE"} the bank still owns its BIN after the announced move`);
  if (!still) failures += 1;
  const receipt = {
    receiptId: `r-${run}`,
    merchantId: `shop-${run}`,
    merchantName: "Attack Cafe",
    transactionId: `t-${run}`,
    transactionDate: "2026-11-21T09:30:00Z",
    currency: "EUR",
    recipientHashedPan: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex"),
    cardBin: bin,
    items: [{ lineItemId: "1", name: "Coffee", quantity: 1, unitPrice: 300, totalPrice: 300 }],
    totalAmount: 300,
  };
  const stored = await call("POST", "/api/v1/receipts/encrypt", shop, receipt);
  // Escrow counts by owner tenant (the bank has no escrow key of its own: the operator's view).
  const counts = await call("GET", "/admin/v1/escrow", admin);
  const rows = counts.body.data?.escrow ?? [];
  const of = (tenant) => rows.filter((r) => r.ownerTenantId === tenant).reduce((n, r) => n + r.count, 0);
  const bankSees = stored.status === 200 && of(bank) === 1 && of(mallory) === 0;
  console.log(
    `${bankSees ? "held " : "BROKE"} the receipt of the BIN is escrowed for the bank (bank ${of(bank)}, operator's tenant ${of(mallory)})`,
  );
  if (!bankSees) failures += 1;

  console.log(failures === 0 ? "every attack failed" : `${failures} attack(s) succeeded`);
  process.exit(failures === 0 ? 0 : 1);
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
