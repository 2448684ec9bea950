import type { Checked } from "./json.js";
import type { CardStatement, KeyBinding, KeyRevocation } from "./statements.js";

/**
 * The order of statements about one card (docs/key-transparency.md), as pure functions the service (before it
 * accepts a statement), the sequencer (before it appends one) and a monitor (reading the log) all run.
 *
 * `version` counts every statement about the card, starts at 1, never restarts: each must be the last
 * + 1. A binding for the active key with the same key is a refresh (`supersedes` null); a binding for
 * another key while one is active is a rotation and must name the active key in `supersedes`; with
 * no active key (a first binding, or after a revocation) `supersedes` is null. A revocation names the
 * active key. A key once rotated away or revoked is never active again on that card. The operator's
 * transfer of the card to another issuer is a step of the card's sequence too (version last + 1): it
 * retires the active key, so the new issuer's first binding supersedes nothing.
 */

/** What the statements so far say about a card. */
export interface CardState {
  /** Version of the last statement. */
  version: number;
  /** The active key, or null (never bound, or revoked). */
  active: { keyId: string; algorithm: string; spkiSha256: string } | null;
  /** Keys rotated away or revoked: never active again. */
  retired: string[];
}

/**
 * The members of a card statement that its order depends on: what the service keeps of a statement
 * to check the next one (the card reference and the times play no part).
 */
export type CardStep =
  | Pick<KeyBinding, "type" | "version" | "keyId" | "algorithm" | "spkiSha256" | "supersedes">
  | Pick<KeyRevocation, "type" | "version" | "keyId">
  /** The operator's transfer of the card to another issuer (`transfer.ts`): it retires the active key. */
  | { type: "receipts.v1/card-transfer"; version: number };

/** Whether `next` may follow the card's statements so far (`state`, undefined for none), and the state after. */
export function nextCardState(state: CardState | undefined, next: CardStep): Checked<CardState> {
  const expected = (state?.version ?? 0) + 1;
  if (next.version !== expected) return { ok: false, reason: `version must be ${expected}, the last + 1` };
  const active = state?.active ?? null;
  const retired = state?.retired ?? [];
  if (next.type === "receipts.v1/card-transfer") {
    // The card's new issuer binds it with supersedes null; the old issuer's key is never active again.
    const gone = active === null ? retired : [...retired, active.keyId];
    return { ok: true, value: { version: next.version, active: null, retired: gone } };
  }
  if (next.type === "receipts.v1/key-revocation") {
    if (active === null || active.keyId !== next.keyId) {
      return { ok: false, reason: "a revocation must name the card's active key" };
    }
    return { ok: true, value: { version: next.version, active: null, retired: [...retired, next.keyId] } };
  }
  if (retired.includes(next.keyId))
    return { ok: false, reason: "a rotated or revoked key is never active again" };
  const key = { keyId: next.keyId, algorithm: next.algorithm, spkiSha256: next.spkiSha256 };
  if (active !== null && active.keyId === next.keyId) {
    if (active.algorithm !== next.algorithm || active.spkiSha256 !== next.spkiSha256) {
      return { ok: false, reason: "a refresh must bind the same key (algorithm and spkiSha256)" };
    }
    if (next.supersedes !== null) return { ok: false, reason: "a refresh supersedes nothing (null)" };
    return { ok: true, value: { version: next.version, active: key, retired } };
  }
  if (active !== null) {
    if (next.supersedes !== active.keyId)
      return { ok: false, reason: "a rotation must supersede the active key" };
    return { ok: true, value: { version: next.version, active: key, retired: [...retired, active.keyId] } };
  }
  if (next.supersedes !== null) return { ok: false, reason: "with no active key, supersedes must be null" };
  return { ok: true, value: { version: next.version, active: key, retired } };
}

/** The state after a whole sequence of a card's statements, or why the sequence is not valid. */
export function cardStateOf(statements: CardStatement[]): Checked<CardState | undefined> {
  let state: CardState | undefined;
  for (const [i, statement] of statements.entries()) {
    const next = nextCardState(state, statement);
    if (!next.ok) return { ok: false, reason: `statement ${i + 1}: ${next.reason}` };
    state = next.value;
  }
  return { ok: true, value: state };
}

/**
 * Whether a statement of a per-issuer sequence (escrow keys; tenant statements) may follow the last
 * one: version the last + 1 (0 when there is none), so an old root-signed statement cannot be replayed.
 */
export function nextInSequence(lastVersion: number, next: { version: number }): Checked<number> {
  if (next.version !== lastVersion + 1)
    return { ok: false, reason: `version must be ${lastVersion + 1}, the last + 1` };
  return { ok: true, value: next.version };
}
