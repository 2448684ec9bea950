import { createHash } from "node:crypto";

/**
 * The data a benchmark run needs: receipts with fresh ids, cardholders registered through the REST
 * API (key pair, registration, one payment each, for decrypt), a cardholder with a fixed number of
 * receipts (for listing), and grants obtained right before each decrypt phase (they expire after
 * three minutes).
 */

/** The development API keys a service prints at start-up. */
export interface ApiKeys {
  issuer: string;
  merchant: string;
}

/** The development API keys in a service's output, once both are printed. */
export function parseDevKeys(log: string): ApiKeys | undefined {
  const issuer = /issuer\s+\(tenant [^)]*\):\s+(rk_dev_\S+)/.exec(log)?.[1];
  const merchant = /merchant\s+\(tenant [^)]*\):\s+(rk_dev_\S+)/.exec(log)?.[1];
  return issuer === undefined || merchant === undefined ? undefined : { issuer, merchant };
}

/** SHA-256 hex of a (test) card number, as an issuer app sends it. */
export function hashPan(pan: string): string {
  return createHash("sha256").update(pan).digest("hex");
}

const runTag = Date.now().toString(36);
let counter = 0;

/** A fresh id for this run: receiptIds and transactionIds must be unique per merchant. */
export function nextId(): string {
  return `${runTag}-${(counter++).toString(36)}`;
}

/** A realistic receipt body for encrypt (or, with `amount`, for create payment), two line items. */
export function receiptJson(recipientHashedPan: string, amount?: number): Record<string, unknown> {
  const id = nextId();
  return {
    receiptId: `r-${id}`,
    merchantId: "m-bench",
    merchantName: "Corner Coffee",
    transactionId: `t-${id}`,
    transactionDate: "2026-01-01T09:30:00Z",
    currency: "EUR",
    recipientHashedPan,
    merchantCity: "Lisbon",
    paymentMethod: "card",
    cardLast4: "4242",
    cardBrand: "visa",
    items: [
      { lineItemId: "1", name: "Flat white", quantity: 2, unitPrice: 350, totalPrice: 700 },
      { lineItemId: "2", name: "Croissant", quantity: 1, unitPrice: 250, totalPrice: 250 },
    ],
    totalAmount: 950,
    ...(amount === undefined ? {} : { amount }),
  };
}

/** The receipt sizes the bench measures, in line items: a coffee, a lunch, a week's groceries. */
export const RECEIPT_SIZES = [2, 12, 50] as const;

/** The JSON text of `count` line items, each with one or two taxes, and their sum with taxes. */
function itemsJson(count: number): { text: string; subtotal: number; tax: number } {
  const items: unknown[] = [];
  let subtotal = 0;
  let tax = 0;
  for (let i = 0; i < count; i++) {
    const quantity = 1 + (i % 3);
    const unitPrice = 199 + ((i * 137) % 2400);
    const totalPrice = quantity * unitPrice;
    const vat = Math.round(totalPrice * 0.23);
    const taxes: { name: string; rate: number; amount: number }[] = [
      { name: "VAT", rate: 0.23, amount: vat },
    ];
    let itemTax = vat;
    if (i % 4 === 3) {
      const deposit = Math.round(totalPrice * 0.01);
      taxes.push({ name: "Packaging levy", rate: 0.01, amount: deposit });
      itemTax += deposit;
    }
    items.push({
      lineItemId: String(i + 1),
      name: `Item ${i + 1} - organic whole grain ${["bread", "coffee beans", "olive oil", "tomatoes"][i % 4]}`,
      quantity,
      unitPrice,
      totalPrice,
      category: ["bakery", "pantry", "produce", "beverages"][i % 4],
      taxes,
    });
    subtotal += totalPrice;
    tax += itemTax;
  }
  return { text: JSON.stringify(items), subtotal, tax };
}

const sizedParts = new Map<number, { text: string; subtotal: number; tax: number }>();

/**
 * A full receipt body of `itemCount` line items, taxes on each item and the full merchant address, as
 * JSON text (or, with `amount`, for create payment with gateway_a). The items are built once per size
 * and spliced in, so the load generator spends the same little CPU on each request whatever the size.
 */
export function sizedReceiptText(recipientHashedPan: string, itemCount: number, amount?: number): string {
  let parts = sizedParts.get(itemCount);
  if (parts === undefined) {
    parts = itemsJson(itemCount);
    sizedParts.set(itemCount, parts);
  }
  const id = nextId();
  const head = JSON.stringify({
    receiptId: `r-${id}`,
    merchantId: "m-bench",
    merchantName: "Mercearia Central do Bairro Alto",
    transactionId: `t-${id}`,
    transactionDate: "2026-01-01T09:30:00Z",
    currency: "EUR",
    recipientHashedPan,
    merchantStreet: "Rua da Misericordia 118, loja 2",
    merchantCity: "Lisbon",
    merchantState: "Lisboa",
    merchantPostalCode: "1200-273",
    merchantCountry: "PT",
    merchantTaxId: "PT509876543",
    merchantContactEmail: "receipts@mercearia-central.example",
    transactionTimezone: "Europe/Lisbon",
    paymentMethod: "card",
    cardLast4: "4242",
    cardBrand: "visa",
    subtotal: parts.subtotal,
    taxAmount: parts.tax,
    totalAmount: parts.subtotal + parts.tax,
    ...(amount === undefined ? {} : { amount }),
  });
  return `${head.slice(0, -1)},"items":${parts.text}}`;
}

/** A registered cardholder: its key pair and a payment whose receipt is sealed to it. */
export interface Cardholder {
  userId: string;
  keyId: string;
  publicKey: string;
  privateKey: string;
  hashedPan: string;
  paymentId: string;
}

/** What the service was seeded with. */
export interface Seed {
  /** Recipients of encrypts and payments, and owners of the payments decrypted. */
  cardholders: Cardholder[];
  /** A cardholder holding exactly `listCount` receipts, never a recipient afterwards. */
  lister: Cardholder;
  listCount: number;
  /** The suite of every key of the seed. */
  algorithm: KeyAlgorithm;
}

/** The two key suites, as `generate-keys` names them. */
export type KeyAlgorithm = "RSA-OAEP-256" | "HPKE-P256-SHA256-A256GCM";
export const RSA_SUITE: KeyAlgorithm = "RSA-OAEP-256";
export const P256_SUITE: KeyAlgorithm = "HPKE-P256-SHA256-A256GCM";

/** The body of a generate-keys call for `algorithm`: `{}` for RSA, as the bench has always sent. */
export function generateKeysBody(algorithm: KeyAlgorithm): string {
  return algorithm === RSA_SUITE ? "{}" : JSON.stringify({ algorithm });
}

/** POSTs JSON and returns the `data` of the envelope; throws with the error envelope otherwise. */
export async function postJson(url: string, apiKey: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": apiKey },
    body: JSON.stringify(body),
  });
  const envelope = (await res.json()) as { success: boolean; data?: Record<string, unknown> };
  if (!res.ok || envelope.data === undefined) {
    throw new Error(`POST ${url}: ${res.status} ${JSON.stringify(envelope)}`);
  }
  return envelope.data;
}

/** A cardholder with a key pair of `algorithm`, registered, with one payment sealed to it. */
export async function cardholder(
  base: string,
  keys: ApiKeys,
  name: string,
  algorithm: KeyAlgorithm = RSA_SUITE,
): Promise<Cardholder> {
  const pair = await postJson(
    `${base}/api/v1/onboarding/generate-keys`,
    keys.issuer,
    JSON.parse(generateKeysBody(algorithm)),
  );
  const hashedPan = hashPan(`bench-card-${runTag}-${name}`);
  const user = await postJson(`${base}/api/v1/onboarding/register`, keys.issuer, {
    hashedPan,
    publicKey: pair.publicKey,
    keyId: pair.keyId,
  });
  const payment = await postJson(
    `${base}/api/v1/payments/gateway_a/create`,
    keys.merchant,
    receiptJson(hashedPan, 950),
  );
  return {
    userId: String(user.userId),
    keyId: String(pair.keyId),
    publicKey: String(pair.publicKey),
    privateKey: String(pair.privateKey),
    hashedPan,
    paymentId: String(payment.paymentId),
  };
}

/**
 * Registers `count` cardholders and a lister with `listCount` receipts on the service at `base`, every
 * key of suite `algorithm` (RSA unless told).
 */
export async function seedService(
  base: string,
  keys: ApiKeys,
  count: number,
  listCount: number,
  algorithm: KeyAlgorithm = RSA_SUITE,
): Promise<Seed> {
  const tag = algorithm === RSA_SUITE ? "" : "p256-";
  const cardholders: Cardholder[] = [];
  for (let i = 0; i < count; i++) {
    cardholders.push(await cardholder(base, keys, `${tag}holder-${i}`, algorithm));
  }
  const lister = await listerWith(base, keys, `${tag}lister`, listCount, algorithm);
  return { cardholders, lister, listCount, algorithm };
}

/** A cardholder of `algorithm` holding exactly `listCount` receipts (its payment's and encrypts). */
export async function listerWith(
  base: string,
  keys: ApiKeys,
  name: string,
  listCount: number,
  algorithm: KeyAlgorithm,
): Promise<Cardholder> {
  const lister = await cardholder(base, keys, name, algorithm);
  for (let i = 1; i < listCount; i++) {
    await postJson(`${base}/api/v1/receipts/encrypt`, keys.merchant, receiptJson(lister.hashedPan));
  }
  return lister;
}

/** A fresh grant per cardholder (tokenIds, in the order of `cardholders`). */
export async function grantAll(base: string, keys: ApiKeys, cardholders: Cardholder[]): Promise<string[]> {
  const tokens: string[] = [];
  for (const c of cardholders) {
    const grant = await postJson(`${base}/api/v1/keys/grant-access`, keys.issuer, {
      userId: c.userId,
      keyId: c.keyId,
    });
    tokens.push(String(grant.tokenId));
  }
  return tokens;
}

/** Round-robin over the cardholders: the next one, for recipients and decrypts. */
export function rotation<T>(items: readonly T[]): () => T {
  let i = 0;
  return () => {
    const item = items[i++ % items.length];
    if (item === undefined) throw new Error("empty rotation");
    return item;
  };
}
