import type { EventRecord } from "./event-types.js";
import type { KtPendingInput } from "./kt-types.js";
import { type KeyRecord, type RegisterOutcome, SUPERSEDED_PAN_PREFIX, type UserRecord } from "./types.js";

/** The arguments of `UserStore.register`. */
export interface RegisterInput {
  panHash: string;
  tenantId: string;
  newUserId: string;
  key: KeyRecord;
  now: Date;
  /**
   * The statements of the key log that the registration records, written with it (docs/key-transparency.md).
   */
  kt?: readonly KtPendingInput[];
  /** The caller owns the card's BIN: a registration of the card by another tenant is superseded. */
  ownsBin?: boolean;
  /** The events of the outcome, written with it (the outbox). */
  events?: (outcome: RegisterOutcome) => EventRecord[];
}

/** What `register` found, read in one consistent view (a synchronous read or a transaction). */
export interface RegisterState {
  /** The user registered under the panHash, if any. */
  user: UserRecord | undefined;
  /** The stored key with the requested keyId, if any. */
  key: KeyRecord | undefined;
  /** The user's current active key, when it is not the requested one. */
  activeKey: KeyRecord | undefined;
}

/**
 * The decision of a `register` call: its outcome and the records to write. Both stores use this one
 * function, so they cannot disagree on the rules; each only differs in how it reads and writes
 * atomically.
 */
export interface RegisterPlan {
  outcome: RegisterOutcome;
  /**
   * The users to store, in this order: a superseded user (which frees the panHash) before the new
   * one; a new user, or one with a new active key. Empty when no user changes.
   */
  users: UserRecord[];
  /** Keys to store: the newly active key, and the previously active one marked `rotated`. */
  keys: KeyRecord[];
}

/** Decides what a `register` call does, following the rules of `UserStore.register`. */
export function planRegister(input: RegisterInput, state: RegisterState): RegisterPlan {
  const { key: existing, activeKey } = state;
  const other = state.user !== undefined && state.user.tenantId !== input.tenantId ? state.user : undefined;
  if (other !== undefined && input.ownsBin !== true) return refused("pan_taken");
  // The caller's own user of the card, if any (never the other tenant's, which a BIN owner supersedes).
  const user = other === undefined ? state.user : undefined;
  if (existing !== undefined) {
    const takenByOther =
      existing.userId === undefined ? existing.tenantId !== input.tenantId : existing.userId !== user?.userId;
    if (takenByOther) return refused("key_taken");
    // Checked here, before anything is written: a refused call must change nothing (it once made the
    // old key active again and then answered 409).
    if (existing.publicKey !== input.key.publicKey) return refused("key_mismatch");
  }

  const keyId = input.key.keyId;
  if (user === undefined) {
    const created: UserRecord = {
      userId: input.newUserId,
      tenantId: input.tenantId,
      panHash: input.panHash,
      activeKeyId: keyId,
      keyVersion: 1,
      createdAt: input.now,
      updatedAt: input.now,
    };
    const key = activate(existing ?? input.key, created.userId, input);
    if (other === undefined) {
      return { outcome: { kind: "created", user: created, key }, users: [created], keys: [key] };
    }
    const previous: UserRecord = {
      ...other,
      panHash: `${SUPERSEDED_PAN_PREFIX}${other.userId}`,
      formerPanHash: other.panHash,
      supersededAt: input.now,
      updatedAt: input.now,
    };
    return {
      outcome: { kind: "superseded", user: created, key, previous },
      users: [previous, created],
      keys: [key],
    };
  }

  if (user.activeKeyId === keyId) {
    if (existing !== undefined) {
      return { outcome: { kind: "unchanged", user, key: existing }, users: [], keys: [] };
    }
    // The user names a key record that is missing: store it, so the state is whole again.
    const key = activate(input.key, user.userId, input);
    return { outcome: { kind: "unchanged", user, key }, users: [], keys: [key] };
  }

  const updated: UserRecord = {
    ...user,
    activeKeyId: keyId,
    keyVersion: (user.keyVersion ?? 1) + 1,
    updatedAt: input.now,
  };
  const key = activate(existing ?? input.key, user.userId, input);
  const keys = [key];
  if (activeKey !== undefined) keys.push({ ...activeKey, status: "rotated", rotatedAt: input.now });
  return {
    outcome: { kind: "rotated", user: updated, key, previousKeyId: user.activeKeyId },
    users: [updated],
    keys,
  };
}

/** A refusal: nothing is written. */
function refused(kind: "pan_taken" | "key_taken" | "key_mismatch"): RegisterPlan {
  return { outcome: { kind }, users: [], keys: [] };
}

/**
 * The key made active for `userId`. A pending or rotated key keeps its stored creation time (the plan
 * has checked that its public key is the given one); a new key is taken as given.
 */
function activate(base: KeyRecord, userId: string, input: RegisterInput): KeyRecord {
  const { rotatedAt: _rotatedAt, ...rest } = base;
  // The domain checked that a stored key is the given one, so the given key's suite is its suite.
  return {
    ...rest,
    algorithm: input.key.algorithm,
    tenantId: input.tenantId,
    userId,
    status: "active",
    registeredAt: input.now,
  };
}
