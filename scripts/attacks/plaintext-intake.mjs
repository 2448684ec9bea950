#!/usr/bin/env node
/**
 * Attacks on an issuer's `plaintextIntake: "refuse"`, from outside, against a running server:
 *
 *   ADMIN_TOKEN=... node scripts/attacks/plaintext-intake.mjs [baseUrl]
 *
 * The operator token sets the scene (a careful bank owning an 8-digit BIN, a careless bank owning
 * another, a shop) and the careful bank's setting. A merchant then tries to get a receipt for the
 * careful bank's cards taken in the clear: by its BIN, by its 6 digits, with no BIN, with the careless
 * bank's BIN, by PAR, as a payment and as a refund; each must be refused with nothing stored (a later
 * sealed receipt under the same receiptId is taken). A sealed receipt is still taken. Once the bank's
 * root is confirmed, the operator alone may not turn the setting off. Prints each answer's status;
 * exit code 0 when every attack failed, 1 when one succeeded, 2 on a setup error. fetch only.
 */

import { attackScene } from "./kt-scene.mjs";

const s = await attackScene({ client: false });
const { run, call, hashedPan: hex64, par: newPar, apiKeyHeaders: apiKey } = s;
const admin = { authorization: `Bearer ${s.adminToken}` };

async function setup(path, body) {
  const res = await call("PUT", path, admin, body);
  if (res.status !== 200) throw new Error(`setup: ${path}: ${res.status} ${JSON.stringify(res.body)}`);
  return res;
}

const receipt = s.receipt;

let failures = 0;
function expectRefused(name, res, code = "forbidden") {
  const ok = res.status !== 200 && res.body?.error?.code === code;
  console.log(`${ok ? "held " : "BROKE"} ${name}: ${res.status} ${res.body?.error?.code ?? "ok"}`);
  if (!ok) failures += 1;
}
function expectTaken(name, res) {
  const ok = res.status === 200;
  console.log(`${ok ? "held " : "BROKE"} ${name}: ${res.status} ${res.body?.error?.code ?? "ok"}`);
  if (!ok) failures += 1;
}

async function main() {
  const careful = `careful-bank-${run}`;
  const careless = `careless-bank-${run}`;
  const bank = await apiKey(careful, "issuer");
  await apiKey(careless, "issuer");
  const shop = await apiKey(`shop-${run}`, "merchant");
  const bin = `4${String(Date.now()).slice(-7)}`;
  const otherBin = `5${String(Date.now()).slice(-7)}`;
  await setup(`/admin/v1/issuers/${careful}/bins`, { bins: [bin] });
  await setup(`/admin/v1/issuers/${careless}/bins`, { bins: [otherBin] });

  const hashedPan = hex64();
  const par = newPar();
  const keys = await call("POST", "/api/v1/onboarding/generate-keys", bank, {});
  const reg = await call("POST", "/api/v1/onboarding/register", bank, {
    hashedPan,
    par,
    keyId: keys.body.data.keyId,
    publicKey: keys.body.data.publicKey,
  });
  if (reg.status !== 200) throw new Error(`setup: register ${reg.status} ${JSON.stringify(reg.body)}`);
  const sale = await call(
    "POST",
    "/api/v1/payments/gateway_a/create",
    shop,
    receipt({ recipientHashedPan: hashedPan }, { totalAmount: undefined, amount: 300 }),
  );
  if (sale.status !== 200) throw new Error(`setup: sale ${sale.status} ${JSON.stringify(sale.body)}`);
  await setup(`/admin/v1/issuers/${careful}/plaintext-intake`, { plaintextIntake: "refuse" });

  const byHash = { recipientHashedPan: hashedPan };
  const refusedIds = [];
  const attempt = async (name, path, body, code) => {
    refusedIds.push(body.transactionId);
    expectRefused(name, await call("POST", path, shop, body), code);
  };
  const enc = "/api/v1/receipts/encrypt";
  await attempt("encrypt with the bank's BIN", enc, receipt({ ...byHash, cardBin: bin }));
  await attempt("encrypt with no BIN", enc, receipt(byHash));
  await attempt("encrypt by PAR", enc, receipt({ recipientPar: par }));
  await attempt("encrypt with another bank's BIN", enc, receipt({ ...byHash, cardBin: otherBin }));
  await attempt(
    "encrypt with the BIN's first 6 digits",
    enc,
    receipt({ ...byHash, cardBin: bin.slice(0, 6) }),
    "invalid_request",
  );
  await attempt(
    "an unregistered card of the bank's BIN",
    enc,
    receipt({ recipientHashedPan: hex64(), cardBin: bin }),
  );
  await attempt(
    "create (payment) in the clear",
    "/api/v1/payments/gateway_a/create",
    receipt({ ...byHash, cardBin: bin }, { totalAmount: undefined, amount: 300 }),
  );
  await attempt(
    "refund in the clear",
    `/api/v1/payments/${sale.body.data.paymentId}/refund`,
    receipt(byHash, {
      totalAmount: undefined,
      items: [],
      amount: 100,
      receiptType: "refund",
      originalReceiptId: sale.body.data.serviceMetadata?.receiptId ?? "",
    }),
  );
  await attempt(
    "encrypt with mixed-case hashed PAN",
    enc,
    receipt({ recipientHashedPan: hashedPan.toUpperCase() }),
  );

  // Nothing of the refused calls was stored: no transaction receipt can be read back.
  for (const id of refusedIds) {
    const read = await call("GET", `/api/v1/transactions/${id}/receipt?merchantId=shop-${run}`, shop);
    if (read.status !== 404) {
      console.log(`BROKE refused receipt of ${id} reads back: ${read.status}`);
      failures += 1;
    }
  }

  // A sealed receipt is still taken (the content here is random bytes: the service cannot tell).
  const look = await call("POST", "/api/v1/keys/lookup", shop, { ...byHash, cardBin: bin });
  const sealed = await call("POST", "/api/v1/receipts/sealed", shop, {
    receiptId: `sealed-${run}`,
    merchantId: `shop-${run}`,
    transactionId: `sealed-t-${run}`,
    ...byHash,
    cardBin: bin,
    keyBundle: {
      keyId: look.body.data.keyId,
      algorithm: look.body.data.algorithm,
      encryptedAesKey: Buffer.from(crypto.getRandomValues(new Uint8Array(256))).toString("base64"),
      ...(look.body.data.algorithm === "HPKE-P256-SHA256-A256GCM"
        ? { encapsulatedKey: Buffer.from(crypto.getRandomValues(new Uint8Array(65))).toString("base64") }
        : {}),
    },
    ciphertext: Buffer.from(crypto.getRandomValues(new Uint8Array(64))).toString("base64"),
    iv: Buffer.from(crypto.getRandomValues(new Uint8Array(12))).toString("base64"),
    authTag: Buffer.from(crypto.getRandomValues(new Uint8Array(16))).toString("base64"),
  });
  expectTaken("a sealed receipt for the same card is still taken", sealed);

  // The bank's confirmed root: the operator's word no longer changes the setting, nor a stranger's.
  const root = await crypto.subtle.generateKey("Ed25519", true, ["sign", "verify"]);
  const spki = Buffer.from(await crypto.subtle.exportKey("spki", root.publicKey)).toString("base64");
  const added = await call("POST", "/api/v1/issuers/signing-keys", bank, { publicKey: spki });
  if (added.status !== 200) throw new Error(`setup: root ${added.status} ${JSON.stringify(added.body)}`);
  await call(
    "POST",
    `/admin/v1/issuers/${careful}/signing-keys/${added.body.data.signingKeyId}/confirm`,
    admin,
  );
  const off = await call("PUT", `/admin/v1/issuers/${careful}/plaintext-intake`, admin, {
    plaintextIntake: "accept",
  });
  expectRefused("operator turns it off alone after the root", off, "invalid_signature");
  const forged = await call("PUT", `/admin/v1/issuers/${careful}/plaintext-intake`, admin, {
    plaintextIntake: "accept",
    statement: Buffer.from(
      `{"issuedAt":"2026-11-26T00:00:00Z","issuer":"${careful}","plaintextIntake":"accept","type":"receipts.v1/plaintext-intake","v":1,"version":1}`,
    ).toString("base64"),
    signature: Buffer.alloc(64, 7).toString("base64"),
  });
  expectRefused("a forged root statement", forged, "invalid_signature");
  const noToken = await call(
    "PUT",
    `/admin/v1/issuers/${careful}/plaintext-intake`,
    {},
    {
      plaintextIntake: "accept",
    },
  );
  expectRefused("without the operator token", noToken, "unauthorized");
  await attempt("encrypt after the attempts to turn it off", enc, receipt(byHash));

  console.log(failures === 0 ? "every attack failed" : `${failures} attack(s) succeeded`);
  process.exit(failures === 0 ? 0 : 1);
}

main().catch((err) => {
  console.error(err);
  process.exit(2);
});
