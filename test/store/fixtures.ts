import { createHash, randomBytes, randomUUID } from "node:crypto";
import {
  type ApiKeyRecord,
  type AuditEvent,
  ESCROW_PAGE_MAX,
  type EscrowQuery,
  type GrantRecord,
  type KeyRecord,
  type PaymentRecord,
  type ReceiptOwner,
  type ReceiptRecord,
  type Store,
} from "../../src/store/types.js";

/**
 * Record builders for the store contract. Times are relative to {@link T0}, a day in the future, so
 * that a real MongoDB's TTL monitor (which uses the server's clock) never deletes a record mid-test.
 */
export const T0 = new Date(Math.ceil((Date.now() + 86_400_000) / 1000) * 1000);

/** The instant `seconds` after {@link T0}. */
export function at(seconds: number): Date {
  return new Date(T0.getTime() + seconds * 1000);
}

/** A fresh id with a prefix, e.g. `rcp_3f9a...`. */
export function uid(prefix: string): string {
  return `${prefix}_${randomBytes(8).toString("hex")}`;
}

/** A fresh 64-hex value, standing in for a SHA-256 or an HMAC. */
export function hex64(): string {
  return randomBytes(32).toString("hex");
}

export function apiKey(overrides: Partial<ApiKeyRecord> = {}): ApiKeyRecord {
  return {
    id: uid("key"),
    keyHash: hex64(),
    prefix: "rk_dev_ab12",
    env: "dev",
    tenantId: "tnt_merchant",
    role: "merchant",
    tier: "standard",
    merchantIds: ["m-1", "m-2"],
    name: "POS backend",
    createdAt: at(0),
    ...overrides,
  };
}

/** A key as generate-keys stores it: pending, no user. */
export function pendingKey(overrides: Partial<KeyRecord> = {}): KeyRecord {
  return {
    keyId: randomUUID(),
    tenantId: "tnt_issuer",
    publicKey: `MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA${randomBytes(6).toString("hex")}`,
    algorithm: "RSA-OAEP-256",
    status: "pending",
    createdAt: at(0),
    ...overrides,
  };
}

/** The card (panHash) of a user of these fixtures: the same for every receipt of that user. */
export function cardOf(userId: string): string {
  return createHash("sha256").update(`card of ${userId}`).digest("hex");
}

/** The owner of a user's receipts, on its card (`cardOf`) unless another is named. */
export function owner(userId: string, panHash = cardOf(userId)): ReceiptOwner {
  return { userId, panHash };
}

/** A receipt delivered to `userId` (not escrowed), on its card ({@link cardOf}). */
export function receipt(userId: string, overrides: Partial<ReceiptRecord> = {}): ReceiptRecord {
  return {
    id: uid("rcp"),
    receiptId: uid("R"),
    merchantId: "m-1",
    transactionId: uid("txn"),
    version: "1.0",
    merchantTenantId: "tnt_merchant",
    panHash: cardOf(userId),
    userId,
    issuerTenantId: "tnt_issuer",
    keyBundle: {
      keyId: randomUUID(),
      algorithm: "RSA-OAEP-256",
      encryptedAesKey: randomBytes(16).toString("base64"),
    },
    ciphertext: randomBytes(24).toString("base64"),
    iv: randomBytes(12).toString("base64"),
    authTag: randomBytes(16).toString("base64"),
    createdAt: at(0),
    isEscrowed: false,
    ...overrides,
  };
}

/** A receipt for an unregistered panHash, wrapped to the escrow key until `expiresAt`. */
export function escrowedReceipt(panHash: string, expiresAt: Date, overrides: Partial<ReceiptRecord> = {}) {
  const { userId: _userId, issuerTenantId: _tenant, ...base } = receipt("unused");
  const record: ReceiptRecord = {
    ...base,
    panHash,
    keyBundle: {
      keyId: "escrow-1",
      algorithm: "RSA-OAEP-256",
      encryptedAesKey: randomBytes(16).toString("base64"),
    },
    isEscrowed: true,
    escrowKeyId: "escrow-1",
    expiresAt,
    ...overrides,
  };
  return record;
}

export function payment(overrides: Partial<PaymentRecord> = {}): PaymentRecord {
  return {
    paymentId: uid("pay"),
    merchantTenantId: "tnt_merchant",
    merchantId: "m-1",
    transactionId: uid("txn"),
    receiptId: uid("R"),
    gateway: "gateway_a",
    status: "succeeded",
    amount: 12_345,
    currency: "EUR",
    orderId: uid("ord"),
    clientSecretHash: hex64(),
    createdAt: at(0),
    ...overrides,
  };
}

/** A grant for `userId`, granted at `grantedAt` and valid 180 s. */
export function grant(userId: string, grantedAt: Date, overrides: Partial<GrantRecord> = {}): GrantRecord {
  return {
    tokenHash: hex64(),
    tenantId: "tnt_issuer",
    userId,
    keyId: randomUUID(),
    purpose: "decrypt",
    grantedAt,
    expiresAt: new Date(grantedAt.getTime() + 180_000),
    sourceIp: "203.0.113.7",
    ...overrides,
  };
}

export function auditEvent(overrides: Partial<AuditEvent> = {}): AuditEvent {
  return {
    at: at(0),
    action: "grant.created",
    tenantId: "tnt_issuer",
    requestId: uid("req"),
    sourceIp: "203.0.113.7",
    ...overrides,
  };
}

/** The query of every escrowed receipt of a card that a registration of `tnt_issuer` may release. */
export function escrowQuery(panHash: string): EscrowQuery {
  return { panHash, ownerTenantId: "tnt_issuer", includeUnowned: true };
}

/** Every page of {@link escrowQuery} at `now`, oldest first. */
export async function allEscrowed(store: Store, panHash: string, now: Date): Promise<ReceiptRecord[]> {
  const all: ReceiptRecord[] = [];
  let cursor: string | undefined;
  do {
    const page = await store.receipts.findEscrowed(escrowQuery(panHash), now, ESCROW_PAGE_MAX, cursor);
    all.push(...page.receipts);
    cursor = page.nextCursor;
  } while (cursor !== undefined);
  return all;
}
