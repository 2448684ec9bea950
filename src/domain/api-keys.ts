import { sha256Hex } from "../crypto/digest.js";
import { AppError } from "../errors.js";
import { randomId } from "../ids.js";
import type { ApiKeyRecord, Environment, Role, Store, Tier } from "../store/types.js";

/** What an operator chooses when creating an API key. */
export interface NewApiKey {
  role: Role;
  tier: Tier;
  tenantId: string;
  merchantIds?: string[];
  name?: string;
}

/** SHA-256 of an API key, lower-case hex: the only form in which keys are stored. */
export function hashApiKey(key: string): string {
  return sha256Hex(key);
}

/**
 * Creates an API key `rk_<env>_<random>` (256 bits) and stores its hash. The key itself is returned
 * once, here, and cannot be recovered later. `given` stores a key generated elsewhere instead (the
 * cluster primary hands its development keys to every worker); it must have the same format.
 */
export async function createApiKey(
  store: Store,
  env: Environment,
  input: NewApiKey,
  now: Date,
  given?: string,
): Promise<{ key: string; record: ApiKeyRecord }> {
  if (given !== undefined && KEY_FORMAT.exec(given)?.[1] !== env) {
    throw new AppError("invalid_request", `A given API key must look like rk_${env}_<random>.`);
  }
  const key = given ?? randomId(`rk_${env}`, 32);
  const record: ApiKeyRecord = {
    id: randomId("key", 8),
    keyHash: hashApiKey(key),
    prefix: key.slice(0, 11),
    env,
    tenantId: input.tenantId,
    role: input.role,
    tier: input.tier,
    merchantIds: input.merchantIds ?? [],
    name: input.name ?? "",
    createdAt: now,
  };
  if (!(await store.apiKeys.insert(record)))
    throw new AppError("conflict", "An API key with this id exists.");
  return { key, record };
}

const KEY_FORMAT = /^rk_(live|test|dev)_[A-Za-z0-9_-]{20,100}$/;

/**
 * Resolves the `X-API-Key` of a call to its record, or throws `unauthorized`. Keys are looked up by
 * their SHA-256, so the comparison never touches the stored secret byte by byte.
 */
export async function authenticate(
  store: Store,
  serverEnv: Environment,
  key: string | null,
): Promise<ApiKeyRecord> {
  const hash = apiKeyHashOf(serverEnv, key);
  if (hash instanceof AppError) throw hash;
  const record = await store.apiKeys.findByHash(hash);
  const refusal = keyRecordRefusal(record);
  if (refusal !== undefined) throw refusal;
  return record as ApiKeyRecord;
}

/**
 * The first half of {@link authenticate}, before the store is asked: the SHA-256 a well-formed key of
 * this server's environment is stored by, or the `unauthorized` error for a missing, malformed or
 * other-environment key (returned, not thrown, so that a caller that counts refused calls too need
 * not catch it).
 */
export function apiKeyHashOf(serverEnv: Environment, key: string | null): string | AppError {
  if (key === null || key === "") {
    return new AppError("unauthorized", "Missing API key: send it in the X-API-Key header.");
  }
  const match = KEY_FORMAT.exec(key);
  if (match === null) return new AppError("unauthorized", "Invalid API key.");
  if (match[1] !== serverEnv) {
    return new AppError(
      "unauthorized",
      `This API key is for the "${match[1]}" environment; this server runs "${serverEnv}".`,
    );
  }
  return hashApiKey(key);
}

/** The second half of {@link authenticate}: `unauthorized` for no record or a revoked one, else nothing. */
export function keyRecordRefusal(record: ApiKeyRecord | undefined): AppError | undefined {
  if (record === undefined) return new AppError("unauthorized", "Invalid API key.");
  if (record.revokedAt !== undefined) return new AppError("unauthorized", "This API key has been revoked.");
  return undefined;
}

/** Throws `forbidden` unless a merchant key may act for `merchantId` (an empty allow-list allows any). */
export function assertMerchantAllowed(principal: ApiKeyRecord, merchantId: string): void {
  if (principal.merchantIds.length > 0 && !principal.merchantIds.includes(merchantId)) {
    throw new AppError("forbidden", "This API key may not act for this merchantId.");
  }
}
