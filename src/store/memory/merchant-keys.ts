import {
  MERCHANT_KEY_HISTORY,
  type MerchantKeyPutOutcome,
  type MerchantKeyRecord,
  type MerchantKeyStore,
} from "../types.js";
import { copy } from "./copy.js";

/** Merchant signing keys held in memory, one record per merchantId. */
export class MemoryMerchantKeys implements MerchantKeyStore {
  private readonly byMerchantId = new Map<string, MerchantKeyRecord>();

  async put(key: Omit<MerchantKeyRecord, "previousKeys">): Promise<MerchantKeyPutOutcome> {
    const current = this.byMerchantId.get(key.merchantId);
    if (current === undefined) {
      this.byMerchantId.set(key.merchantId, copy({ ...key, previousKeys: [] }));
      return { kind: "created" };
    }
    if (current.tenantId !== key.tenantId) return { kind: "taken" };
    const replaced = {
      merchantKeyId: current.merchantKeyId,
      publicKey: current.publicKey,
      registeredAt: current.registeredAt,
      replacedAt: new Date(key.registeredAt),
    };
    const previousKeys = [...current.previousKeys, replaced].slice(-MERCHANT_KEY_HISTORY);
    this.byMerchantId.set(key.merchantId, copy({ ...key, previousKeys }));
    return { kind: "replaced", previousKeyId: current.merchantKeyId };
  }

  async removeUnlessOwnedBy(merchantId: string, keepTenantId: string): Promise<boolean> {
    const current = this.byMerchantId.get(merchantId);
    if (current === undefined || current.tenantId === keepTenantId) return false;
    return this.byMerchantId.delete(merchantId);
  }

  async findByMerchantId(merchantId: string): Promise<MerchantKeyRecord | undefined> {
    return copy(this.byMerchantId.get(merchantId));
  }
}
