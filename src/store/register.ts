import type { EventRecord } from "./event-types.js";
import type { KeyRecord, RegisterOutcome, UserRecord } from "./types.js";

/** The arguments of `UserStore.register`. */
export interface RegisterInput {
  panHash: string;
  tenantId: string;
  newUserId: string;
  key: KeyRecord;
  now: Date;
  /** The events of the outcome, written with it (section 22's outbox). */
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
  /** The user to store (new, or with a new active key); absent when no user changes. */
  user?: UserRecord;
  /** Keys to store: the newly active key, and the previously active one marked `rotated`. */
  keys: KeyRecord[];
}

/** Decides what a `register` call does, following the rules of `UserStore.register`. */
export function planRegister(input: RegisterInput, state: RegisterState): RegisterPlan {
  const { user, key: existing, activeKey } = state;
  if (user !== undefined && user.tenantId !== input.tenantId) {
    return { outcome: { kind: "pan_taken" }, keys: [] };
  }
  if (existing !== undefined) {
    const takenByOther =
      existing.userId === undefined ? existing.tenantId !== input.tenantId : existing.userId !== user?.userId;
    if (takenByOther) return { outcome: { kind: "key_taken" }, keys: [] };
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
    return { outcome: { kind: "created", user: created, key }, user: created, keys: [key] };
  }

  if (user.activeKeyId === keyId) {
    if (existing !== undefined) return { outcome: { kind: "unchanged", user, key: existing }, keys: [] };
    // The user names a key record that is missing: store it, so the state is whole again.
    const key = activate(input.key, user.userId, input);
    return { outcome: { kind: "unchanged", user, key }, keys: [key] };
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
    user: updated,
    keys,
  };
}

/**
 * The key made active for `userId`. A pending or rotated key keeps its stored public key and creation
 * time (the domain has checked that the public key matches); a new key is taken as given.
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
