import { parsePublicKey } from "../crypto/keys.js";
import { AppError, Violations } from "../errors.js";
import { isUuidV4, randomId, uuid } from "../ids.js";
import type { ApiKeyRecord, KeyRecord } from "../store/types.js";
import type { DomainDeps } from "./deps.js";
import { releaseEscrow } from "./escrow.js";
import { checkHashedPan, panHashOf } from "./pan.js";

/** The algorithm label of every key pair and key bundle (RSA-OAEP with SHA-256, as in JOSE). */
export const KEY_ALGORITHM = "RSA-OAEP-256";

/** A generated key pair; the private key is returned to the caller once and never kept. */
export interface GeneratedKeys {
  keyId: string;
  publicKey: string;
  privateKey: string;
  algorithm: typeof KEY_ALGORITHM;
}

/**
 * Generates an RSA-2048 key pair off the event loop (on the pool's key-generation workers, which yield
 * the CPU to the event loop) and remembers only its public key (as a pending key of the caller's
 * tenant), so that `register` can check the pair it is given.
 */
export async function generateKeys(deps: DomainDeps, principal: ApiKeyRecord): Promise<GeneratedKeys> {
  const pair = await deps.pool.generateKeyPair();
  const keyId = uuid();
  const stored = await deps.store.users.insertPendingKey({
    keyId,
    tenantId: principal.tenantId,
    publicKey: pair.publicKey,
    status: "pending",
    createdAt: deps.clock.now(),
  });
  if (!stored) throw new AppError("internal_server_error", "Could not allocate a key id.");
  return { keyId, publicKey: pair.publicKey, privateKey: pair.privateKey, algorithm: KEY_ALGORITHM };
}

/** A register request after transport decoding. */
export interface RegisterInput {
  hashedPan: string;
  publicKey: string;
  keyId: string;
}

/** The outcome of a registration, as returned to the issuer. */
export interface Registration {
  userId: string;
  keyId: string;
  status: "active";
  registeredAt: Date;
  releasedReceipts: number;
}

/**
 * Registers a cardholder's public key under a hashed PAN (section 8): creates the user, or rotates the
 * key of a card the same tenant registered before, then releases the card's escrowed receipts.
 */
export async function register(
  deps: DomainDeps,
  principal: ApiKeyRecord,
  input: RegisterInput,
): Promise<Registration> {
  const violations = new Violations();
  checkHashedPan(input.hashedPan, "hashedPan", violations);
  if (input.keyId === "") violations.add("keyId", "is required");
  else if (!isUuidV4(input.keyId)) violations.add("keyId", "must be a UUID v4");
  let spki = "";
  if (input.publicKey === "") violations.add("publicKey", "is required");
  else {
    try {
      spki = parsePublicKey(input.publicKey, "publicKey").spki;
    } catch (err) {
      if (!(err instanceof AppError)) throw err;
      for (const v of err.violations) violations.add(v.field, v.description);
    }
  }
  violations.throwIfAny();

  const keyId = input.keyId.toLowerCase();
  const existing = await deps.store.users.findKey(keyId);
  if (existing && existing.tenantId !== principal.tenantId) {
    throw new AppError("conflict", "This keyId is already in use.");
  }
  if (existing?.status === "pending" && existing.publicKey !== spki) {
    throw new AppError("forbidden", "The public key does not match the key generated for this keyId.");
  }

  const now = deps.clock.now();
  const panHash = panHashOf(deps.pepper, input.hashedPan);
  const key: KeyRecord = {
    keyId,
    tenantId: principal.tenantId,
    publicKey: spki,
    status: "active",
    createdAt: existing?.createdAt ?? now,
    registeredAt: now,
  };
  const outcome = await deps.store.users.register({
    panHash,
    tenantId: principal.tenantId,
    newUserId: randomId("usr", 12),
    key,
    now,
  });
  if (outcome.kind === "pan_taken") {
    throw new AppError("conflict", "This card is registered by another issuer.");
  }
  if (outcome.kind === "key_taken") throw new AppError("conflict", "This keyId is already in use.");
  if (outcome.key.publicKey !== spki) {
    throw new AppError("conflict", "This keyId is registered with another public key.");
  }

  const releasedReceipts = await releaseEscrow(deps, {
    panHash,
    userId: outcome.user.userId,
    issuerTenantId: principal.tenantId,
    keyId,
    spki,
  });
  return {
    userId: outcome.user.userId,
    keyId,
    status: "active",
    registeredAt: outcome.key.registeredAt ?? now,
    releasedReceipts,
  };
}
