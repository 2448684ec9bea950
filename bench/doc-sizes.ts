/**
 * Measures the BSON size of the documents the MongoDB store writes, for the capacity arithmetic of
 * docs/scaling.md. It runs the service in-process (embedded store), makes the records through the REST
 * API (payments with receipts of 2, 12 and 50 line items for both key suites, escrow, a grant, an
 * idempotent create), and sizes each record with the driver's own BSON serializer twice: as earlier
 * versions stored it (a copy of the record, bytes as base64 text, plus the `_id` the driver adds), and
 * as the MongoDB adapter stores it now (`receiptDoc`: bytes as BSON binary; a receipt's claim, `claimOf`).
 * Index entries are sized the same way (the key fields' BSON values plus an 8-byte record id): an
 * upper bound, since WiredTiger compresses index keys by prefix. Then the arithmetic of docs/scaling.md
 * ("Capacity") for 2 billion receipts a year.
 *
 *   npm run bench:sizes
 */
import { createHash, randomUUID } from "node:crypto";
import { BSON, ObjectId } from "mongodb";
import { buildApp } from "../src/app.js";
import { loadConfig } from "../src/config.js";
import { createApiKey } from "../src/domain/api-keys.js";
import { createLogger } from "../src/logging.js";
import { createMemoryStore } from "../src/store/memory/index.js";
import { receiptDoc } from "../src/store/mongo/receipt-docs.js";
import { claimOf } from "../src/store/mongo/receipts.js";
import { type ReceiptRecord, receiptOwnerOf, type Store } from "../src/store/types.js";
import { hashPan, P256_SUITE, postJson, RECEIPT_SIZES, RSA_SUITE, sizedReceiptText } from "./fixtures.js";

type Doc = Record<string, unknown>;

/** The index keys of a delivered receipt, of its claim and of its payment, as docs/scaling.md lists them. */
const INDEX_KEYS = {
  receipt: [
    ["_id"],
    ["panHash", "id"],
    ["panHash", "userId", "createdAt", "id"],
    ["merchantTenantId", "transactionId"],
    ["paymentId"],
  ],
  claim: [["_id"]],
  payment: [["_id"], ["merchantId", "transactionId"], ["paymentId"]],
  user: [["_id"], ["userId"], ["panHash"]],
  key: [["_id"], ["keyId"], ["userId"]],
} as const;

/** The document the adapter inserts: a copy of the record, plus the `_id` the driver adds. */

function size(doc: Doc): number {
  return BSON.calculateObjectSize(doc, { ignoreUndefined: true });
}

interface Row {
  what: string;
  text: number;
  binary: number;
}

/** A record's size as earlier versions stored it (`text`) and as the adapter stores it now (`binary`). */
function row(what: string, record: object, stored: object = record): Row {
  const _id = new ObjectId();
  return { what, text: size({ _id, ...record }), binary: size({ _id, ...stored }) };
}

/** A receipt's row: the adapter stores its bytes as binary. */
function receiptRow(what: string, receipt: ReceiptRecord): Row {
  return row(what, receipt, receiptDoc(receipt));
}

/** Bytes of a document's index entries (an upper bound: raw key values plus an 8-byte record id each). */
function indexBytes(record: object, indexes: readonly (readonly string[])[]): number {
  const doc: Doc = { _id: new ObjectId(), ...record };
  let total = 0;
  for (const fields of indexes) {
    const key = Object.fromEntries(fields.map((field, i) => [String(i), doc[field] ?? null]));
    total += size(key) - 5 + 8;
  }
  return total;
}

interface Service {
  base: string;
  store: Store;
  issuer: string;
  merchant: string;
  merchantKeyId: string;
  close(): Promise<void>;
}

async function startService(): Promise<Service> {
  const config = loadConfig({ RECEIPTS_ENV: "dev", LOG_LEVEL: "silent" });
  const store = createMemoryStore();
  await store.init();
  const app = await buildApp({ config, store, logger: createLogger("silent"), workers: 2 });
  const address = await app.server.listen(0, "127.0.0.1");
  const base = typeof address === "string" ? address : `http://127.0.0.1:${address.port}`;
  const now = new Date();
  const key = (role: "issuer" | "merchant", tenantId: string) =>
    createApiKey(store, "dev", { role, tier: "standard", tenantId }, now);
  const issuer = await key("issuer", "issuer-1");
  const merchant = await key("merchant", "merchant-1");
  return {
    base,
    store,
    issuer: issuer.key,
    merchant: merchant.key,
    merchantKeyId: merchant.record.id,
    close: () => app.close(),
  };
}

/** Receipts of every size for a card registered with a key of `algorithm`, plus the other records once. */
async function measureSuite(svc: Service, algorithm: string, rows: Row[], receipts: ReceiptRecord[]) {
  const { base, store, issuer, merchant } = svc;
  const suite = algorithm === RSA_SUITE ? "RSA" : "P-256";
  const keygen = algorithm === RSA_SUITE ? {} : { algorithm };
  const pair = await postJson(`${base}/api/v1/onboarding/generate-keys`, issuer, keygen);
  const hashedPan = hashPan(`doc-sizes-${suite}`);
  const registration = { hashedPan, publicKey: pair.publicKey, keyId: pair.keyId };
  const userId = String((await postJson(`${base}/api/v1/onboarding/register`, issuer, registration)).userId);
  const registered = await store.users.findById(userId);
  if (registered === undefined) throw new Error("the user was not stored");
  for (const items of RECEIPT_SIZES) {
    const body = JSON.parse(sizedReceiptText(hashedPan, items, 1_000)) as Doc;
    const payment = await postJson(`${base}/api/v1/payments/gateway_a/create`, merchant, body);
    const receipt = await store.receipts.findByPaymentId(
      String(payment.paymentId),
      receiptOwnerOf(registered),
    );
    if (receipt === undefined) throw new Error("the payment's receipt was not stored");
    rows.push(receiptRow(`receipt, ${suite}, ${items} items`, receipt));
    receipts.push(receipt);
  }
  const suiteKey = await store.users.findKey(String(pair.keyId));
  if (suiteKey !== undefined) rows.push(row(`key, ${suite}`, suiteKey));
  if (algorithm !== RSA_SUITE) return;
  const user = await store.users.findById(userId);
  const key = await store.users.findKey(String(pair.keyId));
  if (user === undefined || key === undefined) throw new Error("the user was not stored");
  rows.push(row("user", user));
  const cardholder =
    row("user", user).text +
    indexBytes(user, INDEX_KEYS.user) +
    row("key", key).binary +
    indexBytes(key, INDEX_KEYS.key);
  console.log(
    `per cardholder (user, RSA key, their index entries <= ${indexBytes(user, INDEX_KEYS.user) + indexBytes(key, INDEX_KEYS.key)} B): ${cardholder} B; 50 million: ${((cardholder * 5e7) / 1e9).toFixed(1)} GB`,
  );
  const grant = await postJson(`${base}/api/v1/keys/grant-access`, issuer, { userId, keyId: pair.keyId });
  const stored = await store.grants.findByHash(
    createHash("sha256").update(String(grant.tokenId)).digest("hex"),
  );
  if (stored !== undefined) rows.push(row("grant", stored));
  const [event] = await store.audit.list(1);
  if (event !== undefined) rows.push(row("audit event", event));
}

/** A payment, its claim, an escrowed receipt and an idempotency record (each once). */
async function measureOthers(svc: Service, rows: Row[], receipts: ReceiptRecord[]): Promise<object> {
  const { base, store, merchant } = svc;
  const [first] = receipts;
  const payment = await store.payments.findById(first?.paymentId ?? "");
  if (first === undefined || payment === undefined) throw new Error("no payment was stored");
  rows.push(row("payment (gateway_a)", payment));
  rows.push(row("receipt claim", claimOf(first)));
  const escrowPan = hashPan("doc-sizes-escrow");
  const escrowed = await postJson(
    `${base}/api/v1/receipts/encrypt`,
    merchant,
    JSON.parse(sizedReceiptText(escrowPan, 2)),
  );
  const inEscrow = await store.receipts.findByMerchantReceipt(
    String(escrowed.merchantId),
    String(escrowed.receiptId),
  );
  if (inEscrow !== undefined) rows.push(receiptRow("receipt in escrow (service key), 2 items", inEscrow));

  const idempotencyKey = randomUUID();
  const res = await fetch(`${base}/api/v1/payments/gateway_a/create`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": merchant, "idempotency-key": idempotencyKey },
    body: sizedReceiptText(hashPan("doc-sizes-idem"), 2, 1_000),
  });
  if (!res.ok) throw new Error(`idempotent create: ${res.status}`);
  const now = new Date();
  const storeKey = `${svc.merchantKeyId}:${idempotencyKey}`;
  const begun = await store.idempotency.begin(storeKey, "x", now, now, now);
  if (begun.kind === "completed") {
    const doc = {
      _id: storeKey,
      requestHash: begun.requestHash,
      expiresAt: now,
      leaseUntil: now,
      response: begun.response,
    };
    rows.push({ what: "idempotency record (a create's response)", text: size(doc), binary: size(doc) });
  }
  return payment;
}

function print(rows: Row[]): void {
  const width = Math.max(...rows.map((r) => r.what.length));
  console.log(`${"document".padEnd(width)}  earlier (text)  now (binary)  saved`);
  for (const r of rows) {
    const saved = r.text - r.binary;
    const share = r.text === 0 ? 0 : (100 * saved) / r.text;
    console.log(
      `${r.what.padEnd(width)}  ${String(r.text).padStart(14)}  ${String(r.binary).padStart(12)}  ${String(saved).padStart(5)} (${share.toFixed(1)}%)`,
    );
  }
}

/**
 * The capacity arithmetic of docs/scaling.md: 2 billion receipts a year, each with its claim, a payment
 * and its index entries.
 */
function capacity(rows: Row[], receipts: ReceiptRecord[], payment: object): void {
  const perYear = 2e9;
  const seconds = 365 * 86_400;
  const find = (what: string) => rows.find((r) => r.what === what);
  const claim = find("receipt claim")?.binary ?? 0;
  const paymentSize = find("payment (gateway_a)")?.binary ?? 0;
  const shardBytes = 2e12;
  console.log(`\nreceipts: ${(perYear / seconds).toFixed(1)}/s on average over a year`);
  console.log("per receipt (with its claim and a payment), and a year of 2e9 of them over 2 TB shards:");
  for (const receipt of receipts.filter((r) => r.keyBundle.algorithm === RSA_SUITE)) {
    const items = receipts.indexOf(receipt) % RECEIPT_SIZES.length;
    const r = find(`receipt, RSA, ${RECEIPT_SIZES[items]} items`);
    if (r === undefined) continue;
    const index =
      indexBytes(receipt, INDEX_KEYS.receipt) +
      indexBytes(claimOf(receipt), INDEX_KEYS.claim) +
      indexBytes(payment, INDEX_KEYS.payment);
    for (const [label, body] of [
      ["text", r.text],
      ["binary", r.binary],
    ] as const) {
      const each = body + claim + paymentSize + index;
      const year = (each * perYear) / 1e12;
      console.log(
        `  ${RECEIPT_SIZES[items]} items, ${label.padEnd(6)}: ${each} B (receipt ${body}, claim ${claim}, payment ${paymentSize}, index entries <= ${index}) -> ${year.toFixed(1)} TB/year, ${Math.ceil((each * perYear) / shardBytes)} shards of 2 TB`,
      );
    }
  }
}

async function main(): Promise<void> {
  const svc = await startService();
  const rows: Row[] = [];
  const receipts: ReceiptRecord[] = [];
  let payment: object;
  try {
    for (const algorithm of [RSA_SUITE, P256_SUITE]) await measureSuite(svc, algorithm, rows, receipts);
    payment = await measureOthers(svc, rows, receipts);
  } finally {
    await svc.close();
  }
  print(rows);
  capacity(rows, receipts, payment);
}

await main();
