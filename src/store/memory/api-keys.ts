import type { ApiKeyRecord, ApiKeyStore } from "../types.js";
import { copy } from "./copy.js";
import { compare } from "./listing.js";

/** API keys held in memory, unique by id and by hash. */
export class MemoryApiKeys implements ApiKeyStore {
  private readonly byId = new Map<string, ApiKeyRecord>();
  private readonly idByHash = new Map<string, string>();

  async insert(record: ApiKeyRecord): Promise<boolean> {
    if (this.byId.has(record.id) || this.idByHash.has(record.keyHash)) return false;
    this.byId.set(record.id, copy(record));
    this.idByHash.set(record.keyHash, record.id);
    return true;
  }

  async findByHash(keyHash: string): Promise<ApiKeyRecord | undefined> {
    const id = this.idByHash.get(keyHash);
    const record = id === undefined ? undefined : this.byId.get(id);
    return record === undefined ? undefined : apiKeyCopy(record);
  }

  /** Every key, oldest first (then by id), as the Mongo store lists them. */
  async list(tenantId?: string): Promise<ApiKeyRecord[]> {
    return copy(
      [...this.byId.values()]
        .filter((k) => tenantId === undefined || k.tenantId === tenantId)
        .sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime() || compare(a.id, b.id)),
    );
  }

  async revoke(id: string, at: Date): Promise<boolean> {
    const record = this.byId.get(id);
    if (record === undefined) return false;
    record.revokedAt ??= new Date(at);
    return true;
  }
}

/**
 * A copy of an API key record sharing nothing with it, member by member: what the generic deep copy
 * (`copy.ts`) gives, which walks every member to find the one array and the dates. Every API call
 * reads its key (`findByHash`). test/store/memory-record-copies.test.ts holds it to the generic copy.
 */
export function apiKeyCopy(record: ApiKeyRecord): ApiKeyRecord {
  const copied = {
    ...record,
    merchantIds: [...record.merchantIds],
    createdAt: new Date(record.createdAt.getTime()),
  };
  if (record.revokedAt !== undefined) copied.revokedAt = new Date(record.revokedAt.getTime());
  return copied;
}
