import { secureRandomBytes } from "../../crypto/random.js";
import { randomId } from "../../ids.js";
import { base64 } from "../../kt/bytes.js";
import { sequenceName } from "../../store/kt-sequence.js";
import type { KtLogStore, KtPendingTransfer } from "../../store/kt-types.js";
import type { UserRecord } from "../../store/types.js";

/**
 * The key-log entries of the operator's card transfer (docs/key-transparency.md, "The card transfer in
 * the log"): one per card reference the user holds, each the next step of that reference's sequence
 * (version the last + 1 as the store's intake holds it), written in the transfer's store step. The
 * sequencer appends each as a `0x03` entry naming the issuers from and to and a commitment to the
 * keyed card reference (`kt/transfer.ts`), never the reference.
 */
/** A new transfer's id (`trf_` and 32 hex digits): one id for its entries, its answer and its audit. */
export function newTransferId(): string {
  return `trf_${secureRandomBytes(16).toString("hex")}`;
}

export async function transferEntries(
  log: Pick<KtLogStore, "sequenceState">,
  user: UserRecord,
  move: { transfer: string; toTenant: string; newUserId: string; now: Date },
): Promise<KtPendingTransfer[]> {
  const keys = [user.panHash, ...(user.aliasPanHash === undefined ? [] : [user.aliasPanHash])];
  const entries: KtPendingTransfer[] = [];
  for (const cardKey of keys) {
    const sequence = sequenceName.card(cardKey);
    const state = await log.sequenceState(sequence);
    entries.push({
      kind: "transfer",
      id: randomId("ktp", 16),
      order: { sequence, type: "receipts.v1/card-transfer", version: (state?.version ?? 0) + 1 },
      transfer: move.transfer,
      fromTenant: user.tenantId,
      toTenant: move.toTenant,
      cardKey,
      opening: base64(secureRandomBytes(16)),
      userId: move.newUserId,
      createdAt: move.now,
    });
  }
  return entries;
}
