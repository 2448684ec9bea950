import { createHash } from "node:crypto";
import { nextCardState, nextInSequence } from "../kt/card-rules.js";
import type { Checked } from "../kt/json.js";
import type { KtOrder, KtPendingInput, KtPendingStatement, KtSequenceState } from "./kt-types.js";

/**
 * The order of a statement in its sequence, one rule for the store at intake (both stores run it in
 * the atomic step that writes the change) and for the sequencer at append: a card's statements by
 * `card-rules.ts` (version last + 1, refresh, rotation, revocation, a retired key never again), an
 * issuer's escrow keys and tenant statements by version last + 1.
 */
export function advanceSequence(
  state: KtSequenceState | undefined,
  order: KtOrder,
): Checked<KtSequenceState> {
  if (
    order.type === "receipts.v1/key-binding" ||
    order.type === "receipts.v1/key-revocation" ||
    order.type === "receipts.v1/card-transfer"
  ) {
    return nextCardState(state, order);
  }
  const next = nextInSequence(state?.version ?? 0, order);
  if (!next.ok) return next;
  return { ok: true, value: { version: next.value, active: null, retired: [] } };
}

/** The sequence names of the key log's three kinds of sequence. */
export const sequenceName = {
  card: (cardKey: string) => `card:${cardKey}`,
  escrow: (tenantId: string) => `escrow:${tenantId}`,
  tenant: (tenantId: string) => `tenant:${tenantId}`,
};

/**
 * Checks a change's pending statements, in order, against the sequence states `read` gives (the
 * state as the caller's atomic step sees it), and returns the states to write, or the first refusal
 * (with the pending id of the statement refused). Several statements of one sequence in one change
 * follow each other. Synchronous, so the memory store checks and writes with no `await` between;
 * the MongoDB store reads the states in its transaction first ({@link sequencesOf}).
 */
export function planIntake(
  pending: readonly KtPendingInput[],
  read: (sequence: string) => KtSequenceState | undefined,
): { ok: true; states: Map<string, KtSequenceState> } | { ok: false; pendingId: string; reason: string } {
  const states = new Map<string, KtSequenceState>();
  for (const record of pending) {
    if (record.kind === "directory") continue;
    const sequence = record.order.sequence;
    const before = states.has(sequence) ? states.get(sequence) : read(sequence);
    const next = advanceSequence(before, record.order);
    if (!next.ok) return { ok: false, pendingId: record.id, reason: next.reason };
    states.set(sequence, next.value);
  }
  return { ok: true, states };
}

/** The distinct sequences the statements among `pending` belong to. */
export function sequencesOf(pending: readonly KtPendingInput[]): string[] {
  const ordered = pending.filter((p) => p.kind !== "directory");
  return [...new Set(ordered.map((p) => p.order.sequence))];
}

/** The statements among pending records. */
export function statementsOf(pending: readonly KtPendingInput[]): KtPendingStatement[] {
  return pending.filter((p): p is KtPendingStatement => p.kind === "statement");
}

/**
 * Why a record is refused that waited in a sequence behind one the sequencer refused: it was accepted
 * at intake on top of the refused one, so it can never follow the log (the store resets the sequence).
 */
export function followerReason(refusedId: string): string {
  return `queued behind ${refusedId}, which the key log refused`;
}

/**
 * What erasure keeps of a statement it removes (`KtLeafRecord.erasedStatementSha256`): the lower-case
 * hex SHA-256 of the statement as stored, without `cardRef` (UTF-8). It names no card (the statement
 * without its card reference is gone with it), and lets intake refuse that statement sent again: an
 * erased card's sequence starts over at version 1, where an old signed binding would otherwise fit.
 */
export function erasedStatementSha256(storedStatement: string): string {
  return createHash("sha256").update(storedStatement, "utf8").digest("hex");
}
