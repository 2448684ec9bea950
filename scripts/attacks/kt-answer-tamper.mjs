#!/usr/bin/env node
/**
 * Look-up answers changed on the way (issue 32), from outside, against a running server: a proxy in
 * front of the service rewrites the key directory's members of `LookupKey` answers (Connect, as the
 * client library calls it), and a merchant seals through it with its trust policy. Every lie must be
 * refused before anything is sealed, and nothing may reach the service after the look-up.
 *
 *   ADMIN_TOKEN=... node scripts/attacks/kt-answer-tamper.mjs <baseUrl> <policy.json>
 *
 * The policy is the merchant's (the log's vkey, three witnesses of two organisations or more, quorum):
 * the server must run with KT_LOG_PRIVATE_KEY and WITNESS_URLS pointing at those witnesses. The
 * operator token sets the scene: an issuer tenant with a root signing key the operator confirms, its
 * BIN, a card registered with a signed binding (register answers once it is logged), a merchant key.
 * Then an honest pass through the proxy (must store), and one pass per lie (must refuse, and the proxy
 * must see no StoreSealedReceipt). Needs the built client library (`npm run build`).
 * Exit code 0 when every lie was refused and the honest pass stored, 1 otherwise, 2 on a setup error.
 */
import { readFileSync } from "node:fs";
import { createServer } from "node:http";

const baseUrl = process.argv[2] ?? "http://127.0.0.1:8080";
const policy = JSON.parse(readFileSync(process.argv[3] ?? "policy.json", "utf8"));
const adminToken = process.env.ADMIN_TOKEN ?? "";
const root = new URL("../../", import.meta.url);
const client = await import(new URL("dist/src/client/index.js", root).href);
const { fromBinary, toBinary } = await import("@bufbuild/protobuf");
const { LookupKeyResponseSchema } = await import(new URL("dist/gen/receipts/v1/keys_pb.js", root).href);
const run = crypto.randomUUID().slice(0, 8);
const tenant = `kt-bank-${run}`;
// A BIN of this run's own (a prefix belongs to one tenant): the script runs again against one server.
const BIN = `4567${String(crypto.getRandomValues(new Uint32Array(1))[0] % 10_000).padStart(4, "0")}`;
const LOOKUP = "/receipts.v1.KeysService/LookupKey";

async function call(method, path, headers, body) {
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: await res.json() };
}
const admin = (method, path, body) => call(method, path, { authorization: `Bearer ${adminToken}` }, body);
function must(res, what) {
  if (res.status !== 200)
    throw new Error(`${what}: ${res.status} ${JSON.stringify(res.body.error ?? res.body)}`);
  return res.body.data;
}

async function scene() {
  const issuerKey = must(
    await admin("POST", "/admin/v1/api-keys", { tenant, role: "issuer", tier: "enterprise" }),
    "issuer key",
  ).apiKey;
  const merchantKey = must(
    await admin("POST", "/admin/v1/api-keys", {
      tenant: `kt-shop-${run}`,
      role: "merchant",
      tier: "enterprise",
    }),
    "merchant key",
  ).apiKey;
  must(await admin("PUT", `/admin/v1/issuers/${tenant}/bins`, { bins: [BIN] }), "BIN");
  const signer = await client.generateIssuerSigner("Ed25519");
  must(
    await call(
      "POST",
      "/api/v1/issuers/signing-keys",
      { "x-api-key": issuerKey },
      { publicKey: signer.spki },
    ),
    "root",
  );
  must(
    await admin("POST", `/admin/v1/issuers/${tenant}/signing-keys/${signer.signingKeyId}/confirm`),
    "confirm",
  );
  const pair = await crypto.subtle.generateKey({ name: "ECDH", namedCurve: "P-256" }, true, ["deriveBits"]);
  const publicKey = Buffer.from(await crypto.subtle.exportKey("spki", pair.publicKey)).toString("base64");
  const hashedPan = Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex");
  const keyId = crypto.randomUUID();
  const statement = client.keyBindingStatement({
    issuer: tenant,
    card: { hashedPan },
    bin: BIN,
    keyId,
    publicKey,
    version: 1,
  });
  const binding = await client.signStatement(statement, signer);
  const registered = must(
    await call(
      "POST",
      "/api/v1/onboarding/register",
      { "x-api-key": issuerKey },
      { hashedPan, publicKey, keyId, cardBin: BIN, binding },
    ),
    "register",
  );
  if (registered.proof === undefined) throw new Error("register answered no proof");
  return { merchantKey, hashedPan, keyId };
}

/** A proxy to the service that applies `lie` to look-up answers and records every path it forwards. */
async function proxy(lie) {
  const seen = [];
  const server = createServer((req, res) => {
    forward(req, res).catch((err) => {
      // A lie that cannot be applied is a bug of this script: say so instead of crashing the run.
      console.error(`proxy: ${err.message}`);
      res.writeHead(502).end();
    });
  });
  async function forward(req, res) {
    seen.push(req.url);
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const headers = { ...req.headers };
    delete headers.host;
    delete headers["content-length"];
    const upstream = await fetch(`${baseUrl}${req.url}`, {
      method: req.method,
      headers,
      ...(chunks.length > 0 ? { body: Buffer.concat(chunks) } : {}),
    });
    let body = new Uint8Array(await upstream.arrayBuffer());
    if (req.url === LOOKUP && upstream.status === 200 && lie !== undefined) {
      const answer = fromBinary(LookupKeyResponseSchema, body);
      lie(answer);
      body = toBinary(LookupKeyResponseSchema, answer);
    }
    const out = {};
    upstream.headers.forEach((value, name) => {
      if (name !== "content-length" && name !== "content-encoding" && name !== "transfer-encoding")
        out[name] = value;
    });
    res.writeHead(upstream.status, out);
    res.end(body);
  }
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    close: () => new Promise((r) => server.close(r)),
  };
}

const flip = (bytes) => {
  bytes[bytes.length >> 1] ^= 0x01;
  return bytes;
};
const flip64 = (text) => Buffer.from(flip(new Uint8Array(Buffer.from(text, "base64")))).toString("base64");
const LIES = {
  // Hashes and the opening travel as base64 strings (as the log keeps them): flip a bit of the bytes.
  "a bit of the leaf's inclusion proof": (a) => (a.proof.inclusion[0] = flip64(a.proof.inclusion[0])),
  "a bit of the snapshot's inclusion proof": (a) =>
    (a.directory.inclusion[0] = flip64(a.directory.inclusion[0])),
  "a bit of the opening": (a) => (a.opening = flip64(a.opening)),
  "a bit of the issuer's signature": (a) => (a.binding.signature = flip64(a.binding.signature)),
  "a bit of the statement": (a) => (a.binding.statement = flip64(a.binding.statement)),
  "the tree size of the checkpoint": (a) => (a.proof.treeSize += 1n),
  "another leaf index": (a) => (a.proof.leafIndex = a.directory.index),
  "the attacker's key under the card's binding": (a) => {
    a.publicKey =
      "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE/UlTifSaXrZeX7Te0H164QAhEG0lU7M780s3D271Pt+HFP2ZdT1ykTLjpJQPc8hYalRPYZ61P2d7gBSR/8acAg==";
  },
  "no proofs at all (the answer before issue 32)": (a) => {
    a.binding = undefined;
    a.opening = undefined;
    a.proof = undefined;
  },
  "a checkpoint without the witnesses' cosignatures": (a) => {
    a.proof.checkpoint =
      a.proof.checkpoint.split("\n\n")[0] +
      "\n\n" +
      a.proof.checkpoint.split("\n\n")[1].split("\n")[0] +
      "\n";
  },
};

async function seal(scene, lie, name) {
  const p = await proxy(lie);
  const trust = client.createKeyTrust({ policy, baseUrl: p.url });
  const merchant = client.createReceiptsClient({
    baseUrl: p.url,
    apiKey: scene.merchantKey,
    retry: { maxAttempts: 1 },
  });
  const receipt = {
    receiptId: `kt-${run}-${name.replace(/\W+/g, "-")}`,
    merchantId: `kt-shop-${run}`,
    merchantName: "Proxy Cafe",
    transactionId: `t-${crypto.randomUUID()}`,
    transactionDate: new Date().toISOString(),
    currency: "EUR",
    totalAmount: 450,
    recipientHashedPan: scene.hashedPan,
    cardBin: BIN,
  };
  let outcome;
  try {
    const stored = await client.sealAndStoreReceipt(merchant, receipt, { trust });
    outcome = `stored (${stored.kind})`;
  } catch (err) {
    outcome = `refused: ${err.name} ${err.check ?? err.code ?? ""} ${err.reason ?? err.message}`;
  }
  await p.close();
  return { outcome, sent: p.seen.filter((s) => !s.startsWith("/kt/v1/")) };
}

let failed = false;
try {
  const s = await scene();
  const honest = await seal(s, undefined, "honest");
  console.log(`honest answer: ${honest.outcome}; sent ${honest.sent.join(", ")}`);
  if (!honest.outcome.startsWith("stored")) failed = true;
  for (const [name, lie] of Object.entries(LIES)) {
    const r = await seal(s, lie, name);
    const leaked = r.sent.some((path) => path !== LOOKUP);
    console.log(`${name}: ${r.outcome}; sent after the look-up: ${leaked ? r.sent.join(", ") : "nothing"}`);
    if (!r.outcome.startsWith("refused") || leaked) failed = true;
  }
} catch (err) {
  console.error(`setup failed: ${err.message}`);
  process.exit(2);
}
process.exit(failed ? 1 : 0);
