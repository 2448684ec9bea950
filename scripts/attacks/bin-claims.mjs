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
 * the BIN must still go to the bank's escrow after each attempt. Then the same against the bank's
 * token BINs (kind token-bin), with a card-BIN claim passed off as a token-BIN claim, and a tap's
 * receipt (PAR, the token BIN as cardBin) must go to the bank. Prints each answer's status; exit
 * code 0 when every attack failed, 1 when one succeeded, 2 on a setup error. fetch and WebCrypto only.
 */

import { attackScene } from "./kt-scene.mjs";

const s = await attackScene({ client: false });
const { run, call, apiKeyHeaders: apiKey } = s;
const admin = { authorization: `Bearer ${s.adminToken}` };

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
  const receipt = s.receipt(
    { recipientHashedPan: s.hashedPan(), cardBin: bin },
    { receiptId: `r-${run}`, transactionId: `t-${run}` },
  );
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

  await tokenBinAttacks({
    bank,
    mallory,
    root,
    mine,
    bins,
    shop,
    bin,
    genuine,
    escrowOf: async (t) => {
      const rows = (await call("GET", "/admin/v1/escrow", admin)).body.data?.escrow ?? [];
      return rows.filter((r) => r.ownerTenantId === t).reduce((n, r) => n + r.count, 0);
    },
  });

  console.log(failures === 0 ? "every attack failed" : `${failures} attack(s) succeeded`);
  process.exit(failures === 0 ? 0 : 1);
}

/**
 * The same attacks on the bank's token BINs (a wallet token's first 8 digits, what a tap gives as
 * cardBin): claims and releases of kind token-bin signed by the bank's root are the only way in or out.
 */
async function tokenBinAttacks(w) {
  const { bank, mallory, root, mine, bins, shop, bin } = w;
  const token = `7${String(Date.now()).slice(-7)}`;
  const tokenOther = `7${String(Date.now() + 1).slice(-7)}`;
  const tokenStatement = (type, prefix, version, extra = {}) => ({
    ...statement(bank, type, prefix, version, extra),
    kind: "token-bin",
  });
  expectRefused("add a token BIN to the bank alone", await bins(bank, { bins: [bin], tokenBins: [token] }));
  expectRefused(
    "add a token BIN with a claim signed by the operator's own key",
    await bins(bank, {
      bins: [bin],
      tokenBins: [token],
      statements: [await sign(mine, tokenStatement("receipts.v1/bin-claim", token, 1))],
    }),
  );
  const asCard = await sign(root, statement(bank, "receipts.v1/bin-claim", token, 1));
  expectRefused(
    "the bank's claim of a card BIN used as a claim of the token BIN of the same digits",
    await bins(bank, { bins: [bin], tokenBins: [token], statements: [asCard] }),
  );
  expectRefused(
    "the bank's card-BIN claim of another prefix replayed for a token BIN",
    await bins(bank, { bins: [bin], tokenBins: [token], statements: [w.genuine] }),
  );
  // The bank's own claim, as it would give it: taken.
  const claim = await sign(root, tokenStatement("receipts.v1/bin-claim", token, 1));
  const taken = await bins(bank, { bins: [bin], tokenBins: [token], statements: [claim] });
  if (taken.status !== 200) throw new Error(`setup: the bank's token-BIN claim: ${taken.status}`);
  console.log(
    `info  the bank's own token-BIN claim: ${taken.status}, token BINs ${JSON.stringify(taken.body.data?.tokenBins)}`,
  );
  expectRefused(
    "replay the bank's token-BIN claim to add another token BIN",
    await bins(bank, { bins: [bin], tokenBins: [token, tokenOther], statements: [claim] }),
  );
  expectRefused("remove the bank's token BIN alone", await bins(bank, { bins: [bin], tokenBins: [] }));
  expectRefused(
    "take the bank's token BIN as a card BIN of the operator's tenant (one owner per prefix)",
    await bins(mallory, { bins: [token] }),
  );
  expectRefused(
    "a forged release of the bank's token BIN to the operator's tenant",
    await bins(mallory, {
      bins: [],
      tokenBins: [token],
      releases: [await sign(mine, tokenStatement("receipts.v1/bin-release", token, 2, { to: mallory }))],
    }),
  );
  const toElse = await sign(root, tokenStatement("receipts.v1/bin-release", token, 2, { to: `else-${run}` }));
  expectRefused(
    "the bank's token-BIN release to someone else, used for the operator's tenant",
    await bins(mallory, { bins: [], tokenBins: [token], releases: [toElse] }),
  );
  const move = await bins(mallory, { bins: [], tokenBins: [token] });
  console.log(
    `info  the unilateral token-BIN move: ${move.status}, its token BINs now: ${JSON.stringify(move.body.data?.tokenBins)}`,
  );
  const owner = await call("GET", `/admin/v1/issuers/${bank}/bins`, admin);
  const still = owner.body.data?.tokenBins?.includes(token) === true;
  console.log(`${still ? "held " : "BROKE"} the bank still owns its token BIN after the announced move`);
  if (!still) failures += 1;
  const [bankBefore, malloryBefore] = [await w.escrowOf(bank), await w.escrowOf(mallory)];
  const tap = {
    receiptId: `tap-${run}`,
    merchantId: `shop-${run}`,
    merchantName: "Attack Cafe",
    transactionId: `tap-${run}`,
    transactionDate: "2026-11-21T09:31:00Z",
    currency: "EUR",
    recipientPar: `Q${run.toUpperCase().replace(/[^A-Z0-9]/g, "0")}${"1".repeat(20)}`,
    cardBin: token,
    items: [{ lineItemId: "1", name: "Tea", quantity: 1, unitPrice: 250, totalPrice: 250 }],
    totalAmount: 250,
  };
  const stored = await call("POST", "/api/v1/receipts/encrypt", shop, tap);
  const bankGot = (await w.escrowOf(bank)) - bankBefore;
  const malloryGot = (await w.escrowOf(mallory)) - malloryBefore;
  const held = stored.status === 200 && bankGot === 1 && malloryGot === 0;
  console.log(
    `${held ? "held " : "BROKE"} a tap's receipt (PAR, token BIN) is escrowed for the bank (${stored.status}; bank +${bankGot}, operator's tenant +${malloryGot})`,
  );
  if (!held) failures += 1;
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
