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
    return id === undefined ? undefined : copy(this.byId.get(id));
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
