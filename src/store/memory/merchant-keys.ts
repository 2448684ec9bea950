import {
  MERCHANT_KEY_HISTORY,
  type MerchantKeyPutOutcome,
  type MerchantKeyRecord,
  type MerchantKeyStore,
  type PreviousMerchantKey,
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
    const replaced: PreviousMerchantKey = {
      merchantKeyId: current.merchantKeyId,
      publicKey: current.publicKey,
      registeredAt: current.registeredAt,
      replacedAt: new Date(key.registeredAt),
    };
    if (current.allReceiptsSigned !== undefined) replaced.allReceiptsSigned = current.allReceiptsSigned;
    if (current.revokedAt !== undefined) replaced.revokedAt = current.revokedAt;
    const previousKeys = [...current.previousKeys, replaced].slice(-MERCHANT_KEY_HISTORY);
    this.byMerchantId.set(key.merchantId, copy({ ...key, previousKeys }));
    return { kind: "replaced", previousKeyId: current.merchantKeyId };
  }

  async removeUnlessOwnedBy(merchantId: string, keepTenantId: string): Promise<boolean> {
    const current = this.byMerchantId.get(merchantId);
    if (current === undefined || current.tenantId === keepTenantId) return false;
    return this.byMerchantId.delete(merchantId);
  }

  async revoke(
    tenantId: string,
    merchantId: string,
    merchantKeyId: string,
    at: Date,
  ): Promise<MerchantKeyRecord | undefined> {
    const record = this.byMerchantId.get(merchantId);
    if (record === undefined || record.tenantId !== tenantId) return undefined;
    const key =
      record.merchantKeyId === merchantKeyId
        ? record
        : record.previousKeys.find((k) => k.merchantKeyId === merchantKeyId);
    if (key === undefined) return undefined;
    key.revokedAt ??= new Date(at);
    return copy(record);
  }

  async findByMerchantId(merchantId: string): Promise<MerchantKeyRecord | undefined> {
    return copy(this.byMerchantId.get(merchantId));
  }
}
