import { randomId } from "../../ids.js";
import type { KtPendingDirectoryChange } from "../../store/kt-types.js";

/**
 * The pending record of a directory change that has no statement of its own (the operator's BINs
 * before a tenant has a root, an escrow key registered without a statement, a root confirmed): written
 * in the store step of the change, it makes the sequencer append a new directory snapshot.
 */
export function directoryChange(reason: string, now: Date, tenantId?: string): KtPendingDirectoryChange {
  const record: KtPendingDirectoryChange = {
    kind: "directory",
    id: randomId("ktp", 16),
    reason,
    createdAt: now,
  };
  if (tenantId !== undefined) record.tenantId = tenantId;
  return record;
}
