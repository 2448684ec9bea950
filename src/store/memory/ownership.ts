import { binsOverlapping } from "../bins.js";
import type { KtIntakeRefusal, KtPendingInput } from "../kt-types.js";
import type {
  BinStore,
  IssuerEscrowKeyRecord,
  IssuerEscrowKeyStore,
  MerchantOwnerRecord,
  MerchantOwnerStore,
  SetBinsOutcome,
} from "../types.js";
import { copy } from "./copy.js";
import type { MemoryKtLog } from "./kt-log.js";

/** Issuer escrow keys held in memory, per tenant in the order registered. */
export class MemoryIssuerEscrowKeys implements IssuerEscrowKeyStore {
  private readonly byTenant = new Map<string, IssuerEscrowKeyRecord[]>();

  constructor(private readonly ktLog: MemoryKtLog) {}

  async insert(
    key: IssuerEscrowKeyRecord,
    kt?: readonly KtPendingInput[],
  ): Promise<KtIntakeRefusal | { kind: "id_taken" } | undefined> {
    for (const keys of this.byTenant.values())
      if (keys.some((k) => k.escrowKeyId === key.escrowKeyId)) return { kind: "id_taken" };
    const intake = this.ktLog.intake(kt);
    if ("kind" in intake) return intake;
    intake.commit();
    const keys = this.byTenant.get(key.tenantId) ?? [];
    keys.push(copy(key));
    this.byTenant.set(key.tenantId, keys);
    return undefined;
  }

  async current(tenantId: string): Promise<IssuerEscrowKeyRecord | undefined> {
    return copy(this.byTenant.get(tenantId)?.findLast((key) => key.revokedAt === undefined));
  }

  async list(tenantId: string): Promise<IssuerEscrowKeyRecord[]> {
    return copy([...(this.byTenant.get(tenantId) ?? [])].reverse());
  }

  async revoke(tenantId: string, escrowKeyId: string, at: Date): Promise<IssuerEscrowKeyRecord | undefined> {
    const key = this.byTenant.get(tenantId)?.find((k) => k.escrowKeyId === escrowKeyId);
    if (key === undefined) return undefined;
    key.revokedAt ??= new Date(at);
    return copy(key);
  }
}

/** BIN prefixes held in memory; `set` checks and writes in one synchronous step. */
export class MemoryBins implements BinStore {
  private readonly owners = new Map<string, string>();

  constructor(private readonly ktLog: MemoryKtLog) {}

  async set(
    tenantId: string,
    bins: readonly string[],
    _now: Date,
    kt?: readonly KtPendingInput[],
  ): Promise<SetBinsOutcome | KtIntakeRefusal> {
    for (const bin of bins) {
      for (const other of binsOverlapping(bin)) {
        const owner = this.owners.get(other);
        if (owner !== undefined && owner !== tenantId) return { kind: "conflict", bin };
      }
      // An 8-digit prefix of another tenant under this 6-digit one.
      if (bin.length === 6) {
        for (const [other, owner] of this.owners) {
          if (owner !== tenantId && other.startsWith(bin)) return { kind: "conflict", bin };
        }
      }
    }
    const intake = this.ktLog.intake(kt);
    if ("kind" in intake) return intake;
    intake.commit();
    for (const [bin, owner] of this.owners) if (owner === tenantId) this.owners.delete(bin);
    for (const bin of bins) this.owners.set(bin, tenantId);
    return { kind: "set" };
  }

  async list(tenantId: string): Promise<string[]> {
    return [...this.owners]
      .filter(([, owner]) => owner === tenantId)
      .map(([bin]) => bin)
      .sort();
  }

  async ownerOf(cardBin: string): Promise<string | undefined> {
    for (const prefix of binsOverlapping(cardBin)) {
      const owner = this.owners.get(prefix);
      if (owner !== undefined) return owner;
    }
    return undefined;
  }

  async hasOwnedPrefixUnder(bin: string): Promise<boolean> {
    if (bin.length !== 6) return false;
    for (const prefix of this.owners.keys()) if (prefix.length === 8 && prefix.startsWith(bin)) return true;
    return false;
  }
}

/** MerchantId owners held in memory. */
export class MemoryMerchantOwners implements MerchantOwnerStore {
  private readonly byMerchantId = new Map<string, MerchantOwnerRecord>();

  async claim(merchantId: string, tenantId: string, now: Date): Promise<MerchantOwnerRecord> {
    const current = this.byMerchantId.get(merchantId);
    if (current !== undefined) return copy(current);
    const record: MerchantOwnerRecord = { merchantId, tenantId, source: "first_use", at: now };
    this.byMerchantId.set(merchantId, copy(record));
    return record;
  }

  async assign(
    merchantId: string,
    tenantId: string,
    now: Date,
  ): Promise<{ record: MerchantOwnerRecord; previousTenantId?: string }> {
    const previous = this.byMerchantId.get(merchantId);
    const record: MerchantOwnerRecord = { merchantId, tenantId, source: "operator", at: now };
    this.byMerchantId.set(merchantId, copy(record));
    return previous === undefined
      ? { record: copy(record) }
      : { record: copy(record), previousTenantId: previous.tenantId };
  }

  async find(merchantId: string): Promise<MerchantOwnerRecord | undefined> {
    return copy(this.byMerchantId.get(merchantId));
  }
}
