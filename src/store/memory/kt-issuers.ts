import type { KtIssuerPutOutcome, KtIssuerRecord, KtIssuerStore } from "../kt-issuers.js";
import type { KtPendingInput } from "../kt-types.js";
import { copy } from "./copy.js";
import type { MemoryKtLog } from "./kt-log.js";

/** Issuer tenants' signing keys and settings in memory; `put` checks and writes in one synchronous step. */
export class MemoryKtIssuers implements KtIssuerStore {
  private readonly byTenant = new Map<string, KtIssuerRecord>();

  constructor(private readonly ktLog: MemoryKtLog) {}

  async get(tenantId: string): Promise<KtIssuerRecord | undefined> {
    return copy(this.byTenant.get(tenantId));
  }

  async list(): Promise<KtIssuerRecord[]> {
    return copy([...this.byTenant.values()].sort((a, b) => (a.tenantId < b.tenantId ? -1 : 1)));
  }

  async withBinMovesBefore(at: Date): Promise<KtIssuerRecord[]> {
    const due = (r: KtIssuerRecord) => (r.binMoves ?? []).some((m) => m.requestedAt <= at);
    return (await this.list()).filter(due);
  }

  async tenantOfSigningKey(signingKeyId: string): Promise<string | undefined> {
    for (const record of this.byTenant.values()) {
      if (record.signingKeys.some((k) => k.signingKeyId === signingKeyId)) return record.tenantId;
    }
    return undefined;
  }

  async put(record: KtIssuerRecord, kt?: readonly KtPendingInput[]): Promise<KtIssuerPutOutcome> {
    const stored = this.byTenant.get(record.tenantId)?.revision ?? 0;
    if (stored !== record.revision - 1) return { kind: "moved" };
    const intake = this.ktLog.intake(kt);
    if ("kind" in intake) return intake;
    intake.commit();
    this.byTenant.set(record.tenantId, copy(record));
    return { kind: "stored" };
  }
}
