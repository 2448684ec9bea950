#!/usr/bin/env node
/* Over 400 lines on purpose: one stranger's session, its checks run in order against one server, each
 * on the tenants, BINs and cards the earlier ones set up; split, every part would rebuild that scene. */
/**
 * A stranger's attack on the key directory (issue 32), from outside, against a running server with its
 * key log and witnesses (`scripts/start-kt.mjs` prints the merchant's policy file), trying what the
 * other kt-*.mjs scripts do not:
 *
 *   ADMIN_TOKEN=... node scripts/attacks/kt-stranger.mjs <baseUrl> <policy.json>
 *
 * With the operator token, an issuer API key of one bank and a merchant key: the public reads at the
 * edges of the tree (consistency proofs from 0, to the size, beyond it, past 2^53; inclusion at the
 * last index; `/kt/v1/entries` pages at and past the size, 1,000 and 1,001 wide, with a merchant's
 * key, no key, a made-up auditor token; tile paths at level 63, `.p/0`, `.p/256`; a snapshot's SHA-256
 * upper-case); signed statements that are not their RFC 8785 spelling (escaped letters, `1.0` and
 * `1e0` for a version, a byte-order mark, a trailing newline, members reordered, a lone surrogate, a
 * version past 2^53); validity windows at their edges (empty, exactly `KT_MAX_BINDING_DAYS`, one
 * second more, starting tomorrow, over yesterday, 30 February, 24:00, a leap second); one bank's
 * signed binding sent with another bank's API key, and a binding stating the other bank; BIN
 * prefixes of 6 and 8 digits overlapping between two banks (the operator's word for a bank without a
 * root); one card's hashed PAN and PAR held by two banks; two registrations of one card raced, each
 * with its own issuer-signed version 1. A merchant then seals with its trust policy (sealAndStoreReceipt):
 * to the bank's key for its card, never for the card's BIN given as 6 digits of an 8-digit prefix, a
 * token BIN for a card BIN, or a binding whose window has not begun. No answer may be a 5xx or echo
 * a card reference. Needs the built client library (`npm run build`).
 * Exit 0 when every check held, 1 otherwise, 2 on a setup error.
 */

import { readFileSync } from "node:fs";
import { attackScene } from "./kt-scene.mjs";

const s = await attackScene();
const { client, call, admin, expect, finish, issuer, deviceKey, merchant: merchantOf, settled } = s;
const policy = JSON.parse(readFileSync(process.argv[3] ?? "policy.json", "utf8"));
const DAY = 86_400_000;
const b64 = (bytes) => Buffer.from(bytes).toString("base64");
const isoSeconds = (ms) => `${new Date(ms).toISOString().slice(0, 19)}Z`;

let fiveHundreds = 0;
/** Every answer: never a 5xx; an error always in the envelope with a code. */
function sane(res, what) {
  if (res.status >= 500) {
    fiveHundreds += 1;
    console.log(`  5xx on ${what}: ${res.status} ${res.text.slice(0, 200)}`);
  }
  return res;
}
const okOr4xx = (res) => res.status < 500 && (res.status < 400 || typeof res.body.error?.code === "string");

// ---------------------------------------------------------------- the reads at the tree's edges

async function treeSize() {
  const note = await call("GET", "/kt/v1/checkpoint", {});
  return Number(note.text.split("\n")[1]);
}

async function reads(issuerHeaders, merchantHeaders) {
  const size = await treeSize();
  const consistency = [
    [0, 0, "invalid_request"],
    [0, size, "invalid_request"],
    [size, size, 200],
    [1, size, 200],
    [size - 1, size, 200],
    [size, size + 1, "invalid_request"],
    [size + 1, size + 1, "invalid_request"],
    [size, 1, "invalid_request"],
    [9007199254740991, 9007199254740991, "invalid_request"],
    ["9007199254740992", size, "invalid_request"],
    ["-1", size, "invalid_request"],
    ["01", size, "invalid_request"],
    ["1e1", size, "invalid_request"],
    ["", size, "invalid_request"],
    ["0x1", size, "invalid_request"],
  ];
  for (const [from, to, want] of consistency) {
    const path = `/kt/v1/proof/consistency?from=${from}&to=${to}`;
    const res = sane(await call("GET", path, {}), path);
    const got = res.status === 200 ? 200 : res.body.error?.code;
    // 0 -> n: an empty proof is all RFC 9162 gives; the service may answer it or refuse it, never 5xx.
    const fine = from === 0 && to === size ? okOr4xx(res) : got === want;
    expect(
      fine,
      `consistency ${from} -> ${to} (size ${size}) -> ${want}`,
      `${res.status} ${res.text.slice(0, 120)}`,
    );
  }
  const twice = sane(
    await call("GET", `/kt/v1/proof/consistency?from=1&from=2&to=${size}`, {}),
    "from twice",
  );
  expect(
    twice.body.error?.code === "invalid_request",
    "consistency with from twice -> invalid_request",
    `${twice.status}`,
  );
  const inclusion = [
    [size - 1, size, 200],
    [size, size, "invalid_request"],
    [0, 0, "invalid_request"],
    [0, size + 1, "invalid_request"],
  ];
  for (const [index, sz, want] of inclusion) {
    const path = `/kt/v1/proof/inclusion?index=${index}&size=${sz}`;
    const res = sane(await call("GET", path, {}), path);
    const got = res.status === 200 ? 200 : res.body.error?.code;
    expect(
      got === want,
      `inclusion ${index} in ${sz} (size ${size}) -> ${want}`,
      `${res.status} ${res.text.slice(0, 120)}`,
    );
  }
  const entries = [
    [0, 0, issuerHeaders, "invalid_request"],
    [size - 1, size, issuerHeaders, 200, 1],
    [size, size, issuerHeaders, "invalid_request"],
    [size, size + 1, issuerHeaders, "invalid_request"],
    [1, 0, issuerHeaders, "invalid_request"],
    [0, 1000, issuerHeaders, size <= 1000 ? "invalid_request" : 200],
    [0, 1001, issuerHeaders, "invalid_request"],
    [0, 1, merchantHeaders, "forbidden"],
    [0, 1, {}, "unauthorized"],
    [0, 1, { authorization: "Bearer not-an-auditor" }, "unauthorized"],
    [0, 1, { authorization: `Bearer ${s.adminToken}` }, "unauthorized"],
  ];
  for (const [start, end, headers, want, count] of entries) {
    const path = `/kt/v1/entries?start=${start}&end=${end}`;
    const res = sane(await call("GET", path, headers), path);
    const got = res.status === 200 ? 200 : res.body.error?.code;
    const n = res.body.data?.entries?.length;
    expect(
      got === want && (count === undefined || n === count),
      `entries ${start}..${end} (size ${size}, ${Object.keys(headers)[0] ?? "no key"}) -> ${want}${count === undefined ? "" : `, ${count} entries`}`,
      `${res.status} ${got} n=${n}`,
    );
  }
  for (const tile of [
    "63/000",
    "63/x999/999/999/999/999/999",
    "0/000.p/0",
    "0/000.p/256",
    "0/000.p/257",
    "0/00",
    "64/000",
    "0/x000/001",
  ]) {
    const res = sane(await call("GET", `/kt/v1/tile/${tile}`, {}), tile);
    expect(
      res.status < 500 && res.status !== 200,
      `tile ${tile} -> 4xx`,
      `${res.status} ${res.text.slice(0, 100)}`,
    );
  }
  const sha = "A".repeat(64);
  const dir = sane(await call("GET", `/kt/v1/directory/${sha}`, {}), "directory upper");
  expect(
    dir.body.error?.code === "invalid_request",
    "directory by upper-case SHA-256 -> invalid_request",
    `${dir.status}`,
  );
  const unknown = sane(await call("GET", `/kt/v1/directory/${"0".repeat(64)}`, {}), "directory unknown");
  expect(unknown.body.error?.code === "not_found", "directory unknown -> not_found", `${unknown.status}`);
}

/** The issuer's own feed (`/api/v1/kt/entries`): paging and token edges, another tenant's token. */
async function feed(bank, other) {
  const first = sane(await call("GET", "/api/v1/kt/entries?pageSize=1", bank.headers), "feed");
  const token = first.body.data?.nextPageToken;
  expect(
    first.status === 200 && typeof token === "string" && token !== "",
    "the bank's feed pages by one",
    `${first.status} ${first.text.slice(0, 120)}`,
  );
  const cases = [
    ["after=-1", bank.headers],
    ["after=9223372036854775808", bank.headers],
    ["after=1e3", bank.headers],
    ["after=abc", bank.headers],
    ["pageSize=-1", bank.headers],
    ["pageSize=2147483648", bank.headers],
    ["pageSize=100000", bank.headers],
    ["pageToken=not-a-token", bank.headers],
    [`pageToken=${encodeURIComponent(`${token ?? ""}x`)}`, bank.headers],
    [`pageToken=${encodeURIComponent((token ?? "").slice(0, -2))}`, bank.headers],
    [`pageToken=${encodeURIComponent(token ?? "")}`, other.headers],
    [`pageToken=${encodeURIComponent(token ?? "")}&after=0`, bank.headers],
  ];
  for (const [query, headers] of cases) {
    const res = sane(await call("GET", `/api/v1/kt/entries?${query}`, headers), `feed ${query}`);
    const issuers = (res.body.data?.entries ?? []).map((e) => {
      try {
        return JSON.parse(Buffer.from(e.statementWithoutCardRef ?? "", "base64").toString("utf8")).issuer;
      } catch {
        return undefined;
      }
    });
    const theirs = headers === other.headers && issuers.includes(bank.tenant);
    expect(
      okOr4xx(res) && !theirs,
      `feed ${query.slice(0, 40)}${headers === other.headers ? " (the other bank)" : ""} -> no 5xx, nothing of another bank`,
      `${res.status} ${res.text.slice(0, 120)}`,
    );
  }
}

// ---------------------------------------------------------------- statements and windows

/** Signs `bytes` as they are (no canonical check): the `binding` member of register. */
async function rawBinding(signer, bytes) {
  const params = signer.algorithm === "Ed25519" ? { name: "Ed25519" } : { name: "ECDSA", hash: "SHA-256" };
  const signature = new Uint8Array(await crypto.subtle.sign(params, signer.privateKey, bytes));
  return { statement: b64(bytes), signature: b64(signature), signingKeyId: signer.signingKeyId };
}
const hashedPan = () => Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex");
/** The canonical statement of a fresh card's binding, as an object. */
function bindingObject(bank, card, device, extra = {}) {
  const bytes = client.keyBindingStatement({
    issuer: bank.tenant,
    card,
    bin: bank.bin,
    ...device,
    version: 1,
  });
  return { ...JSON.parse(Buffer.from(bytes).toString("utf8")), ...extra };
}
const canonical = (o) =>
  `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${JSON.stringify(o[k])}`)
    .join(",")}}`;

let merchant;
const lookup = (ref, bin) =>
  call("POST", "/api/v1/keys/lookup", { "x-api-key": merchant }, { ...ref, cardBin: bin });
async function registered(ref, bin) {
  const res = sane(await lookup(ref, bin), "lookup");
  return res.body.data?.isEscrowed === false ? res.body.data : undefined;
}

/** A register that must be refused with a 4xx code in the envelope, echo no card reference, register nothing. */
async function refusedRegister(what, bank, pan, body) {
  const res = sane(
    await call("POST", "/api/v1/onboarding/register", bank.headers, {
      hashedPan: pan,
      cardBin: bank.bin,
      ...body,
    }),
    what,
  );
  const echoed = res.text.toLowerCase().includes(pan);
  const nothing = (await registered({ recipientHashedPan: pan }, bank.bin)) === undefined;
  expect(
    res.status >= 400 && res.status < 500 && typeof res.body.error?.code === "string" && !echoed && nothing,
    `${what} -> refused, nothing registered`,
    `${res.status} ${res.body.error?.code} ${res.body.error?.details ?? ""} echoed=${echoed} registered=${!nothing}`,
  );
}

async function spellings(bank) {
  const cases = {
    "the issuer with an escaped letter": (text, o) =>
      text.replace(`"issuer":"${o.issuer[0]}`, `"issuer":"\\u00${o.issuer.charCodeAt(0).toString(16)}`),
    "version written 1.0": (text) => text.replace('"version":1', '"version":1.0'),
    "version written 1e0": (text) => text.replace('"version":1', '"version":1e0'),
    "version written 01": (text) => text.replace('"version":1', '"version":01'),
    "a byte-order mark first": (text) => `\ufeff${text}`,
    "a trailing newline": (text) => `${text}\n`,
    "a space after a colon": (text) => text.replace('"v":1', '"v": 1'),
    "members in reverse order": (_text, o) => JSON.stringify(Object.fromEntries(Object.entries(o).reverse())),
    "a hyphen escaped in the keyId": (text, o) =>
      text.replace(`"keyId":"${o.keyId}"`, `"keyId":"${o.keyId.replace("-", "\\u002d")}"`),
    "a lone surrogate in the keyId": (text, o) =>
      text.replace(`"keyId":"${o.keyId}"`, `"keyId":"${o.keyId}\\ud800"`),
    "version 2^53 + 1": (text) => text.replace('"version":1', '"version":9007199254740993'),
    "an extra member": (_text, o) => canonical({ ...o, note: "x" }),
    "v 2": (text) => text.replace('"v":1', '"v":2'),
  };
  for (const [what, spell] of Object.entries(cases)) {
    // A card and a device of its own per case: one refusal that wrote something does not hide the next.
    const device = await deviceKey();
    const pan = hashedPan();
    const o = bindingObject(bank, { hashedPan: pan }, device);
    const binding = await rawBinding(bank.root, new TextEncoder().encode(spell(canonical(o), o)));
    await refusedRegister(`statement with ${what}`, bank, pan, { ...device, binding });
  }
  // Not UTF-8 at all: the statement's bytes with a stray continuation byte.
  const device = await deviceKey();
  const pan = hashedPan();
  const text = canonical(bindingObject(bank, { hashedPan: pan }, device));
  const bad = new Uint8Array([...new TextEncoder().encode(text.slice(0, -1)), 0x80, 0x7d]);
  await refusedRegister("statement that is not UTF-8", bank, pan, {
    ...device,
    binding: await rawBinding(bank.root, bad),
  });
  // An issuer escrow key whose statement starts with a byte-order mark: refused, the list unchanged.
  const list = async () =>
    (await call("GET", "/api/v1/issuers/escrow-keys", bank.headers)).body.data?.escrowKeys?.length;
  const before = await list();
  const escrowKey = (await deviceKey()).publicKey;
  const statement = client.escrowKeyStatement({
    issuer: bank.tenant,
    keyId: `iek_stranger-${s.run}`,
    publicKey: escrowKey,
    version: 1,
  });
  const bom = new Uint8Array([0xef, 0xbb, 0xbf, ...statement]);
  const res = sane(
    await call("POST", "/api/v1/issuers/escrow-keys", bank.headers, {
      publicKey: escrowKey,
      binding: await rawBinding(bank.root, bom),
    }),
    "escrow key BOM",
  );
  const after = await list();
  expect(
    res.status >= 400 && res.status < 500 && after === before,
    "an escrow-key statement with a byte-order mark first -> refused, no escrow key added",
    `${res.status} ${res.body.error?.code} ${res.body.error?.details ?? ""} keys ${before} -> ${after}`,
  );
}

async function windows(bank) {
  const now = Date.now();
  const max = 35 * DAY;
  const cases = [
    ["an empty window", isoSeconds(now - 60_000), isoSeconds(now - 60_000)],
    ["a window one second over the maximum", isoSeconds(now - 60_000), isoSeconds(now - 60_000 + max + 1000)],
    ["a window ending yesterday", isoSeconds(now - 3 * DAY), isoSeconds(now - DAY)],
    ["30 February", "2026-02-30T00:00:00Z", "2026-03-05T00:00:00Z"],
    ["24:00", `${isoSeconds(now).slice(0, 11)}24:00:00Z`, isoSeconds(now + 3 * DAY)],
    ["a leap second", `${isoSeconds(now - DAY).slice(0, 11)}23:59:60Z`, isoSeconds(now + 3 * DAY)],
    ["lower-case z", isoSeconds(now - 60_000).replace("Z", "z"), isoSeconds(now + DAY)],
    ["milliseconds", `${isoSeconds(now - 60_000).slice(0, 19)}.000Z`, isoSeconds(now + DAY)],
    ["an offset", `${isoSeconds(now - 60_000).slice(0, 19)}+00:00`, isoSeconds(now + DAY)],
    ["a year 10000", isoSeconds(now - 60_000), "+010000-01-01T00:00:00Z"],
  ];
  for (const [what, notBefore, notAfter] of cases) {
    const device = await deviceKey();
    const pan = hashedPan();
    const o = bindingObject(bank, { hashedPan: pan }, device, { notBefore, notAfter });
    const binding = await rawBinding(bank.root, new TextEncoder().encode(canonical(o)));
    await refusedRegister(`binding with ${what}`, bank, pan, { ...device, binding });
  }
  // Exactly the maximum: accepted (the rule is "at most").
  const device = await deviceKey();
  const pan = hashedPan();
  const o = bindingObject(bank, { hashedPan: pan }, device, {
    notBefore: isoSeconds(now - 60_000),
    notAfter: isoSeconds(now - 60_000 + max),
  });
  const binding = await rawBinding(bank.root, new TextEncoder().encode(canonical(o)));
  const res = sane(
    await settled(() =>
      call("POST", "/api/v1/onboarding/register", bank.headers, {
        hashedPan: pan,
        cardBin: bank.bin,
        ...device,
        binding,
      }),
    ),
    "max window",
  );
  expect(
    res.status === 200,
    "a window of exactly KT_MAX_BINDING_DAYS is taken",
    `${res.status} ${res.text.slice(0, 160)}`,
  );
}

// ---------------------------------------------------------------- tenants, BINs, aliases, races

async function acrossTenants(victim, other) {
  const device = await deviceKey();
  const pan = hashedPan();
  const statement = client.keyBindingStatement({
    issuer: victim.tenant,
    card: { hashedPan: pan },
    bin: victim.bin,
    ...device,
    version: 1,
  });
  const binding = await client.signStatement(statement, victim.root);
  await refusedRegister(
    "the victim's signed binding sent with the other bank's API key",
    { ...other, bin: victim.bin },
    pan,
    { ...device, binding },
  );
  const own = client.keyBindingStatement({
    issuer: victim.tenant,
    card: { hashedPan: pan },
    bin: victim.bin,
    ...device,
    version: 1,
  });
  await refusedRegister(
    "a binding stating the victim, signed by the other bank's root, sent by the other bank",
    { ...other, bin: victim.bin },
    pan,
    {
      ...device,
      binding: await client.signStatement(own, other.root),
    },
  );
  await refusedRegister("the same, sent with the victim's (stolen) API key", victim, pan, {
    ...device,
    binding: await client.signStatement(own, other.root),
  });
  const mine = client.keyBindingStatement({
    issuer: other.tenant,
    card: { hashedPan: pan },
    bin: victim.bin,
    ...device,
    version: 1,
  });
  await refusedRegister(
    "the other bank's own binding for a card in the victim's BIN",
    { ...other, bin: victim.bin },
    pan,
    {
      ...device,
      binding: await client.signStatement(mine, other.root),
    },
  );
  const merchantRegister = sane(
    await call(
      "POST",
      "/api/v1/onboarding/register",
      { "x-api-key": merchant },
      { hashedPan: pan, cardBin: victim.bin, ...device, binding },
    ),
    "merchant register",
  );
  expect(
    merchantRegister.body.error?.code === "forbidden",
    "a merchant key registering a card -> forbidden",
    `${merchantRegister.status}`,
  );
}

async function overlaps(victim8, victim6) {
  // The operator's word for a bank without a root: a prefix nested in (or around) a rooted bank's BIN.
  const plain = await issuer("nested", { withRoot: false });
  const inner = `${victim6.bin.slice(0, 6)}99`;
  for (const [what, bins] of [
    ["an 8-digit prefix inside the rooted bank's 6-digit BIN", [inner]],
    ["the 6-digit prefix around the rooted bank's 8-digit BIN", [victim8.bin.slice(0, 6)]],
    ["both, beside its own BIN", [plain.bin, inner, victim8.bin.slice(0, 6)]],
  ]) {
    const res = sane(await admin("PUT", `/admin/v1/issuers/${plain.tenant}/bins`, { bins }), what);
    expect(
      res.body.error?.code === "conflict",
      `operator gives a rootless bank ${what} -> conflict`,
      `${res.status} ${res.text.slice(0, 160)}`,
    );
  }
  const own = sane(await admin("GET", `/admin/v1/issuers/${plain.tenant}/bins`), "list bins");
  expect(
    !own.text.includes(inner) && !own.text.includes(`"${victim8.bin.slice(0, 6)}"`),
    "the rootless bank holds no prefix overlapping either",
    own.text.slice(0, 160),
  );
}

/** A merchant's sealAndStoreReceipt with its trust policy: "stored" or the refusal's check. */
async function seal(receiptCard) {
  const trust = client.createKeyTrust({ policy, baseUrl: s.baseUrl });
  const m = client.createReceiptsClient({ baseUrl: s.baseUrl, apiKey: merchant, retry: { maxAttempts: 1 } });
  try {
    const stored = await client.sealAndStoreReceipt(m, s.receipt(receiptCard), { trust });
    return `stored ${stored.kind}`;
  } catch (err) {
    return `refused ${err.check ?? err.code ?? err.name}: ${err.reason ?? err.message}`;
  }
}

async function registerSigned(bank, card, device, extra = {}) {
  const statement = client.keyBindingStatement({
    issuer: bank.tenant,
    card,
    bin: bank.bin,
    ...device,
    version: 1,
    ...extra,
  });
  const binding = await client.signStatement(statement, bank.root);
  const ref = "hashedPan" in card ? { hashedPan: card.hashedPan } : { par: card.par };
  return sane(
    await settled(() =>
      call("POST", "/api/v1/onboarding/register", bank.headers, {
        ...ref,
        cardBin: bank.bin,
        ...device,
        binding,
      }),
    ),
    "register",
  );
}

async function sealing(bank8) {
  const device = await deviceKey();
  const pan = hashedPan();
  const reg = await registerSigned(bank8, { hashedPan: pan }, device);
  expect(reg.status === 200, "the bank's signed registration", `${reg.status} ${reg.text.slice(0, 160)}`);
  const honest = await seal({ recipientHashedPan: pan, cardBin: bank8.bin });
  expect(honest.startsWith("stored"), "the merchant seals to the bank's key for its card", honest);
  const six = await seal({ recipientHashedPan: pan, cardBin: bank8.bin.slice(0, 6) });
  expect(
    six.startsWith("refused"),
    "the card's BIN given as 6 digits of the bank's 8-digit prefix: refused",
    six,
  );
  const token = await seal({ recipientHashedPan: pan, tokenBin: bank8.bin });
  expect(token.startsWith("refused"), "the card BIN passed as a wallet token BIN: refused", token);
  // A binding whose window begins tomorrow: the service may log it, the merchant must not seal to it.
  const later = await deviceKey();
  const pan2 = hashedPan();
  const res = await registerSigned(bank8, { hashedPan: pan2 }, later, { notBefore: Date.now() + DAY });
  if (res.status === 200) {
    const early = await seal({ recipientHashedPan: pan2, cardBin: bank8.bin });
    expect(
      early.startsWith("refused"),
      "a binding whose window begins tomorrow: the merchant refuses it",
      early,
    );
  } else {
    expect(
      okOr4xx(res),
      "a binding whose window begins tomorrow: refused by the service in the envelope",
      `${res.status}`,
    );
  }
}

async function aliases(victim, other) {
  // One card: the victim holds its hashed PAN, the other bank (its own root and BIN) registers its PAR.
  const pan = hashedPan();
  const par = s.par();
  const device = await deviceKey();
  const a = await registerSigned(victim, { hashedPan: pan }, device);
  expect(a.status === 200, "the victim registers the card by its hashed PAN", `${a.status}`);
  const thief = await deviceKey();
  const b = await registerSigned(other, { par }, thief);
  // The service cannot know that the PAR is the victim's card (it was never told): taking it is allowed
  // inside the other bank's own BIN, but a merchant with the card's own BIN must not seal to it.
  const viaPar = await seal({ recipientPar: par, cardBin: victim.bin });
  expect(
    viaPar.startsWith("refused"),
    `the other bank's PAR binding (register ${b.status}) sealed for the victim's card BIN: refused`,
    viaPar,
  );
  const viaPanOther = await seal({ recipientHashedPan: pan, cardBin: other.bin });
  expect(
    viaPanOther.startsWith("refused"),
    "the victim's card sealed with the other bank's BIN: refused",
    viaPanOther,
  );
}

async function race(bank) {
  const pan = hashedPan();
  const devices = await Promise.all(Array.from({ length: 6 }, () => deviceKey()));
  const bodies = await Promise.all(
    devices.map(async (d) => ({
      hashedPan: pan,
      cardBin: bank.bin,
      ...d,
      binding: await client.signStatement(
        client.keyBindingStatement({
          issuer: bank.tenant,
          card: { hashedPan: pan },
          bin: bank.bin,
          ...d,
          version: 1,
        }),
        bank.root,
      ),
    })),
  );
  const answers = await Promise.all(
    bodies.map((body) => settled(() => call("POST", "/api/v1/onboarding/register", bank.headers, body))),
  );
  for (const r of answers) sane(r, "race");
  const won = answers.filter((r) => r.status === 200);
  const codes = answers.map((r) => r.body.error?.code ?? r.status).join(",");
  const winners = new Set(won.map((r) => r.body.data.keyId));
  expect(
    winners.size === 1 && answers.every(okOr4xx),
    "six version-1 bindings of one card raced: exactly one key registered, the others refused in the envelope",
    `${winners.size} keys won (${codes})`,
  );
  const now = await registered({ recipientHashedPan: pan }, bank.bin);
  expect(
    now !== undefined && winners.has(now.keyId) && now.binding !== undefined,
    "the lookup answers the winner's key with its binding",
    JSON.stringify(now ?? {}).slice(0, 120),
  );
  const self = sane(
    await call("POST", "/api/v1/kt/self-check", bank.headers, { recipientHashedPan: pan, cardBin: bank.bin }),
    "self-check",
  );
  expect(
    self.status >= 500 ? false : self.status !== 200 || self.body.data?.keyId === now?.keyId,
    "the bank's self-check answers the same key",
    `${self.status} ${self.text.slice(0, 160)}`,
  );
}

try {
  merchant = await merchantOf("stranger-shop");
  const bank8 = await issuer("bank8", { bin: s.randomBin("5"), requireBindings: true });
  const bank6 = await issuer("bank6", { bin: `7${s.digits(5)}`, requireBindings: true });
  const other = await issuer("other", { bin: s.randomBin("3") });
  const seed = await registerSigned(bank8, { hashedPan: hashedPan() }, await deviceKey());
  await registerSigned(bank8, { hashedPan: hashedPan() }, await deviceKey());
  if (seed.status !== 200) throw new Error(`setup: register ${seed.status} ${seed.text.slice(0, 200)}`);
  await reads(bank8.headers, { "x-api-key": merchant });
  await feed(bank8, other);
  await spellings(bank8);
  await windows(bank8);
  await acrossTenants(bank8, other);
  await overlaps(bank8, bank6);
  await sealing(bank8);
  await aliases(bank8, other);
  await race(bank8);
} catch (err) {
  console.log(`setup error: ${err.stack ?? err.message}`);
  process.exit(2);
}
expect(fiveHundreds === 0, "no answer was a 5xx", `${fiveHundreds} 5xx answers`);
finish();
