import type { ErasureRecord, ErasureStore } from "../types.js";
import { copy } from "./copy.js";

/** Erasures in progress, held in memory. */
export class MemoryErasures implements ErasureStore {
  private readonly byUser = new Map<string, ErasureRecord>();

  async begin(record: ErasureRecord): Promise<ErasureRecord> {
    const kept = this.byUser.get(record.userId);
    if (kept !== undefined) return copy(kept);
    this.byUser.set(record.userId, copy(record));
    return copy(record);
  }

  async find(userId: string): Promise<ErasureRecord | undefined> {
    return copy(this.byUser.get(userId));
  }

  async finish(userId: string): Promise<void> {
    this.byUser.delete(userId);
  }
}
