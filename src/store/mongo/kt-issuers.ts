import type { KtIssuerPutOutcome, KtIssuerRecord, KtIssuerStore } from "../kt-issuers.js";
import type { KtPendingInput } from "../kt-types.js";
import { declareCollection } from "./collection.js";
import type { MongoContext } from "./connection.js";
import { ktIntakeIn } from "./kt-log.js";

type IssuerDoc = KtIssuerRecord & { _id: string };

/** Issuer tenants' signing keys and settings, `_id` the tenant. */
export const KT_ISSUERS = declareCollection({
  name: "ktIssuers",
  indexes: [
    { key: { "signingKeys.signingKeyId": 1 }, name: "bySigningKeyId" },
    // The sequencer's settle step, each round: the tenants with a BIN move old enough to be due.
    { key: { "binMoves.requestedAt": 1 }, name: "byBinMoveRequestedAt" },
  ],
  shardKey: { key: "unsharded", why: "One small document per issuer tenant with a signing key." },
});

/**
 * Issuer tenants' signing keys and settings in `ktIssuers`, one document per tenant (`_id` the tenant).
 * `put` replaces it by compare-and-set on `revision` in one transaction with the key log's intake.
 */
export class MongoKtIssuers implements KtIssuerStore {
  /** The collections it reads and writes, for `init` and docs/scaling.md. */
  static readonly collections = [KT_ISSUERS] as const;

  constructor(private readonly ctx: MongoContext) {}

  private get collection() {
    return this.ctx.collection<IssuerDoc>(KT_ISSUERS.name);
  }

  get(tenantId: string): Promise<KtIssuerRecord | undefined> {
    return this.ctx.run(
      async () =>
        (await this.collection.findOne<KtIssuerRecord>({ _id: tenantId }, this.ctx.read)) ?? undefined,
    );
  }

  list(): Promise<KtIssuerRecord[]> {
    return this.ctx.run(() =>
      this.collection.find<KtIssuerRecord>({}, this.ctx.read).sort({ _id: 1 }).toArray(),
    );
  }

  /** Served by the `byBinMoveRequestedAt` index (multikey over the moves' times). */
  withBinMovesBefore(at: Date): Promise<KtIssuerRecord[]> {
    return this.ctx.run(() =>
      this.collection
        .find<KtIssuerRecord>({ "binMoves.requestedAt": { $lte: at } }, this.ctx.read)
        .sort({ _id: 1 })
        .toArray(),
    );
  }

  tenantOfSigningKey(signingKeyId: string): Promise<string | undefined> {
    return this.ctx.run(async () => {
      const doc = await this.collection.findOne<{ tenantId: string }>(
        { "signingKeys.signingKeyId": signingKeyId },
        { ...this.ctx.limit, projection: { _id: 0, tenantId: 1 } },
      );
      return doc?.tenantId;
    });
  }

  put(record: KtIssuerRecord, kt?: readonly KtPendingInput[]): Promise<KtIssuerPutOutcome> {
    return this.ctx.run(() =>
      this.ctx.transaction("ktIssuers.put", async (session): Promise<KtIssuerPutOutcome> => {
        const intake = await ktIntakeIn(this.ctx, session, kt);
        if ("kind" in intake) return intake;
        const stored = await this.collection.findOne<{ revision: number }>(
          { _id: record.tenantId },
          { ...this.ctx.readIn(session), projection: { _id: 0, revision: 1 } },
        );
        if ((stored?.revision ?? 0) !== record.revision - 1) return { kind: "moved" };
        // A concurrent transaction writing the same document conflicts: the runner retries, and the
        // read above then sees its revision.
        await this.collection.replaceOne(
          { _id: record.tenantId },
          { ...record },
          { ...this.ctx.writeIn(session), upsert: true },
        );
        await intake.write();
        return { kind: "stored" };
      }),
    );
  }
}
