import type { FastifyInstance } from "fastify";
import type { SealRequest } from "../src/crypto/crypto-pool.js";
import type { SealedReceiptText } from "../src/crypto/envelope.js";
import { ApiKeyGate, HASHED_PAN, invalid, panHash, refuse } from "./floor-parts.js";

/**
 * The "floor" of REST encrypt: the baseline's bare route plus the bookkeeping every real encrypt has
 * to do, written by hand as directly as we can: look the API key up by its SHA-256, count the call in
 * a rate-limit window, check every field of the receipt, find the recipient by the HMAC of its hashed
 * PAN, seal (on the service's worker threads, as the service seals), refuse a duplicate
 * `(merchantId, receiptId)`, keep the sealed record, and answer with the request id and rate-limit
 * headers. No framework, no protobuf, no interceptors, no store interface.
 *
 * It answers one question: how far can a bare implementation of encrypt with the service's
 * design (crypto on worker threads, everything else on the event loop) get on this machine? The
 * service's own ratio reads against this one: the distance between them is the cost of the service's
 * layers.
 */

/**
 * What the floor needs from the baseline: sealing on worker threads, as the service seals (the
 * service's own `CryptoPool`), so that the floor differs from the service only in what surrounds the
 * crypto. Sealed on the event loop instead, as the bare route does, the floor reached 77-99% of the
 * bare route; on the workers, 108-133% (three runs, 2026-11-22).
 */
export interface FloorDeps {
  seal(request: SealRequest): Promise<SealedReceiptText>;
}

interface Recipient {
  keyId: string;
  /** Base64 DER SPKI, as the service's store keeps a public key. */
  spki: string;
}

const LIMIT = 100_000_000;
const CURRENCY = /^[A-Za-z]{3}$/;
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;
const REQUIRED = ["receiptId", "merchantId", "merchantName", "transactionId", "currency"] as const;
const OPTIONAL = [
  "version",
  "merchantStreet",
  "merchantCity",
  "merchantState",
  "merchantPostalCode",
  "merchantCountry",
  "merchantTaxId",
  "merchantContactEmail",
  "transactionTimezone",
  "paymentMethod",
  "cardBrand",
  "cardLast4",
] as const;
const MONEY = ["subtotal", "taxAmount", "totalAmount"] as const;
const ITEM_MONEY = ["quantity", "unitPrice", "totalPrice"] as const;

const gate = new ApiKeyGate(LIMIT);
const recipients = new Map<string, Recipient>();
const stored = new Map<string, object>();

/** Registers the API key and the cardholders (hashed PAN -> key) the floor serves. */
export function setUpFloor(
  apiKey: string,
  cardholders: { hashedPan: string; keyId: string; spki: string }[],
) {
  gate.add(apiKey, { id: "key_floor", tenantId: "floor" });
  for (const c of cardholders) recipients.set(panHash(c.hashedPan), { keyId: c.keyId, spki: c.spki });
}

function isMoney(value: unknown): boolean {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

/** Every problem of the receipt, as the service words them (`field: reason`). */
function problemsOf(body: Record<string, unknown>): string[] {
  const problems: string[] = [];
  for (const name of REQUIRED) {
    const value = body[name];
    if (typeof value !== "string" || value === "" || value.length > 256)
      problems.push(`${name}: is required`);
  }
  for (const name of OPTIONAL) {
    const value = body[name];
    if (value !== undefined && (typeof value !== "string" || value.length > 256)) {
      problems.push(`${name}: must be a string`);
    }
  }
  for (const name of MONEY) {
    if (body[name] !== undefined && !isMoney(body[name])) problems.push(`${name}: must be an amount`);
  }
  const date = body.transactionDate;
  if (typeof date !== "string" || !RFC3339.test(date) || Number.isNaN(Date.parse(date))) {
    problems.push("transactionDate: must be an RFC 3339 timestamp");
  }
  if (typeof body.currency === "string" && !CURRENCY.test(body.currency))
    problems.push("currency: must be ISO 4217");
  const pan = body.recipientHashedPan;
  if (typeof pan !== "string" || !HASHED_PAN.test(pan)) problems.push("recipientHashedPan: must be 64 hex");
  const items = body.items ?? [];
  if (!Array.isArray(items) || items.length > 500) problems.push("items: must be a list of at most 500");
  else {
    items.forEach((item: Record<string, unknown>, i) => {
      if (typeof item?.name !== "string" || item.name.length > 256)
        problems.push(`items[${i}].name: is required`);
      for (const name of ITEM_MONEY) {
        if (!isMoney(item?.[name])) problems.push(`items[${i}].${name}: must be an amount`);
      }
    });
  }
  for (const key of Object.keys(body)) {
    if (!KNOWN.has(key)) problems.push(`${key}: unknown field`);
  }
  return problems;
}

const KNOWN = new Set<string>([
  ...REQUIRED,
  ...OPTIONAL,
  ...MONEY,
  "transactionDate",
  "recipientHashedPan",
  "items",
  "mockItems",
]);

/** Mounts `POST /floor/receipts/encrypt` on the baseline's Fastify app. */
export function registerFloor(app: FastifyInstance, deps: FloorDeps): void {
  app.post("/floor/receipts/encrypt", async (request, reply) => {
    const principal = gate.admit(request, reply);
    if (principal === undefined) return reply;
    const nowMs = Date.now();

    const body = request.body as Record<string, unknown>;
    const problems = problemsOf(body);
    if (problems.length > 0) return invalid(reply, problems);
    const { recipientHashedPan, mockItems: _mock, ...fields } = body;
    const hash = panHash(recipientHashedPan as string);
    const recipient = recipients.get(hash);
    if (recipient === undefined) return refuse(reply, 404, "not_found");
    const version = String(fields.version ?? "1.0");
    const sealed = await deps.seal({
      plaintext: JSON.stringify(fields),
      aad: `${version}\n${fields.receiptId}\n${fields.merchantId}\n${fields.transactionId}`,
      keyId: recipient.keyId,
      spki: recipient.spki,
    });
    const unique = `${fields.merchantId}\u0000${fields.receiptId}`;
    if (stored.has(unique)) return refuse(reply, 409, "conflict");
    const receipt = {
      version,
      receiptId: String(fields.receiptId),
      keyId: recipient.keyId,
      keyBundle: {
        encryptedAesKey: sealed.encryptedAesKey,
        keyId: recipient.keyId,
        algorithm: "RSA-OAEP-256",
      },
      ciphertext: sealed.ciphertext,
      iv: sealed.iv,
      authTag: sealed.authTag,
      merchantId: String(fields.merchantId),
      transactionId: String(fields.transactionId),
      createdAt: new Date(nowMs).toISOString(),
      isEscrowed: false,
    };
    stored.set(unique, { ...receipt, tenantId: principal.tenantId, panHash: hash });
    return { success: true, data: receipt };
  });
}
