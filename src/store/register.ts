import type { EventRecord } from "./event-types.js";
import type { KtIntakeRefusal, KtPendingInput } from "./kt-types.js";
import { type KeyRecord, type RegisterOutcome, SUPERSEDED_PAN_PREFIX, type UserRecord } from "./types.js";

/** The arguments of `UserStore.register`. */
export interface RegisterInput {
  panHash: string;
  /**
   * The card's second reference (keyed like `panHash`), when the issuer names the card by both its
   * hashed PAN and its PAR: the user holds both, and a receipt routed by either reaches it.
   */
  aliasPanHash?: string | undefined;
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
  /** The user holding the panHash (as its own or as its alias), if any. */
  user: UserRecord | undefined;
  /** The user holding the input's `aliasPanHash` (as its own or as its alias), if any. */
  aliasUser?: UserRecord | undefined;
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
   * one; a new user, or one with a new active key or a new alias. Empty when no user changes.
   */
  users: UserRecord[];
  /** Keys to store: the newly active key, and the previously active one marked `rotated`. */
  keys: KeyRecord[];
}

/**
 * The `activeKeyId` of a user that holds a card but has no key yet: the card was moved to its tenant
 * by the operator (`UserStore.transfer`), and its receipts are escrowed for that tenant until it
 * registers. No key has this id (keyIds are UUIDs).
 */
export const RESERVED_KEY_ID = "";

/** The card references of a user: its panHash, and its alias if any. */
export function cardRefsOf(user: Pick<UserRecord, "panHash" | "aliasPanHash">): string[] {
  return user.aliasPanHash === undefined ? [user.panHash] : [user.panHash, user.aliasPanHash];
}

/** The card references a register call names: its panHash, and its alias if any. */
export function inputRefsOf(input: Pick<RegisterInput, "panHash" | "aliasPanHash">): string[] {
  return input.aliasPanHash === undefined ? [input.panHash] : [input.panHash, input.aliasPanHash];
}

/** The caller tenant's user among those holding the input's references: the one whose key may rotate. */
export function ownUserOf(
  input: Pick<RegisterInput, "tenantId">,
  holders: readonly (UserRecord | undefined)[],
): UserRecord | undefined {
  return holders.find((u) => u !== undefined && u.tenantId === input.tenantId);
}

/** The distinct users holding the input's references, split into the caller tenant's and the others'. */
function holdersOf(input: RegisterInput, state: RegisterState): { own: UserRecord[]; others: UserRecord[] } {
  const holders = new Map<string, UserRecord>();
  for (const u of [state.user, state.aliasUser]) if (u !== undefined) holders.set(u.userId, u);
  const all = [...holders.values()];
  return {
    own: all.filter((u) => u.tenantId === input.tenantId),
    others: all.filter((u) => u.tenantId !== input.tenantId),
  };
}

/**
 * Decides what a `register` call does, following the rules of `UserStore.register`. A card named by
 * two references must stay one user holding at most two: two users holding them, or a user holding
 * a third reference beside one of them, is `card_split` (nothing written).
 */
export function planRegister(input: RegisterInput, state: RegisterState): RegisterPlan {
  const { key: existing, activeKey } = state;
  const { own, others } = holdersOf(input, state);
  if (others.length > 0 && input.ownsBin !== true) return refused("pan_taken");
  if (own.length + others.length > 1) return refused("card_split");
  // The caller's own user of the card, if any (never the other tenant's, which a BIN owner supersedes).
  const user = own[0];
  const other = others[0];
  const refs = new Set([...(user === undefined ? [] : cardRefsOf(user)), ...inputRefsOf(input)]);
  if (refs.size > 2) return refused("card_split");
  if (existing !== undefined) {
    const takenByOther =
      existing.userId === undefined ? existing.tenantId !== input.tenantId : existing.userId !== user?.userId;
    if (takenByOther) return refused("key_taken");
    // Checked here, before anything is written: a refused call must change nothing (it once made the
    // old key active again and then answered 409).
    if (existing.publicKey !== input.key.publicKey) return refused("key_mismatch");
    // A key the card rotated away from stays retired: it may be the lost device's.
    if (existing.status === "rotated") return refused("key_rotated");
  }
  if (user === undefined) return planCreate(input, existing, other);
  return planExisting(input, user, { existing, activeKey });
}

/** A new user of the caller holding the input's references; `other` (another tenant's) superseded. */
function planCreate(
  input: RegisterInput,
  existing: KeyRecord | undefined,
  other: UserRecord | undefined,
): RegisterPlan {
  const created: UserRecord = {
    userId: input.newUserId,
    tenantId: input.tenantId,
    panHash: input.panHash,
    ...(input.aliasPanHash === undefined ? {} : { aliasPanHash: input.aliasPanHash }),
    activeKeyId: input.key.keyId,
    keyVersion: 1,
    createdAt: input.now,
    updatedAt: input.now,
  };
  const key = activate(existing ?? input.key, created.userId, input);
  if (other === undefined) {
    return { outcome: { kind: "created", user: created, key }, users: [created], keys: [key] };
  }
  const { aliasPanHash: otherAlias, ...rest } = other;
  const previous: UserRecord = {
    ...rest,
    panHash: `${SUPERSEDED_PAN_PREFIX}${other.userId}`,
    formerPanHash: other.panHash,
    ...(otherAlias === undefined ? {} : { formerAliasPanHash: otherAlias }),
    supersededAt: input.now,
    updatedAt: input.now,
  };
  return {
    outcome: { kind: "superseded", user: created, key, previous },
    users: [previous, created],
    keys: [key],
  };
}

/**
 * The caller's own user of the card: the same key (unchanged) or a rotation; a missing alias added. A
 * user reserved by an operator's transfer ({@link RESERVED_KEY_ID}) gets its first key: `created`.
 */
function planExisting(
  input: RegisterInput,
  user: UserRecord,
  found: { existing: KeyRecord | undefined; activeKey: KeyRecord | undefined },
): RegisterPlan {
  const { existing, activeKey } = found;
  const keyId = input.key.keyId;
  const added = inputRefsOf(input).find((ref) => !cardRefsOf(user).includes(ref));
  const withAlias: UserRecord =
    added === undefined ? user : { ...user, aliasPanHash: added, updatedAt: input.now };
  const aliasAdded = added === undefined ? {} : { aliasAdded: true as const };
  if (user.activeKeyId === keyId) {
    const users = added === undefined ? [] : [withAlias];
    if (existing !== undefined) {
      return {
        outcome: { kind: "unchanged", user: withAlias, key: existing, ...aliasAdded },
        users,
        keys: [],
      };
    }
    // The user names a key record that is missing: store it, so the state is whole again.
    const key = activate(input.key, user.userId, input);
    return { outcome: { kind: "unchanged", user: withAlias, key, ...aliasAdded }, users, keys: [key] };
  }

  const updated: UserRecord = {
    ...withAlias,
    activeKeyId: keyId,
    keyVersion: (user.keyVersion ?? 1) + 1,
    updatedAt: input.now,
  };
  const key = activate(existing ?? input.key, user.userId, input);
  if (user.activeKeyId === RESERVED_KEY_ID) {
    return { outcome: { kind: "created", user: updated, key }, users: [updated], keys: [key] };
  }
  const keys = [key];
  if (activeKey !== undefined) keys.push({ ...activeKey, status: "rotated", rotatedAt: input.now });
  return {
    outcome: { kind: "rotated", user: updated, key, previousKeyId: user.activeKeyId, ...aliasAdded },
    users: [updated],
    keys,
  };
}

/** A refusal: nothing is written. */
function refused(
  kind: "pan_taken" | "key_taken" | "key_mismatch" | "key_rotated" | "card_split",
): RegisterPlan {
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

/** The arguments of `UserStore.transfer`. */
export interface TransferInput {
  /** The user holding the card now. */
  userId: string;
  /** The issuer tenant the card moves to. */
  toTenantId: string;
  /** The id of the card's new user, reserved for `toTenantId` until it registers a key. */
  newUserId: string;
  now: Date;
  /** The events of the outcome, written with it (the outbox). */
  events?: (outcome: TransferOutcome) => EventRecord[];
  /**
   * The transfer's key-log entries (docs/key-transparency.md: one per card reference), written in the
   * same atomic step after their sequences are checked: `log_refused`, nothing written, when one does
   * not follow or when they do not name exactly the user's references.
   */
  kt?: readonly KtPendingInput[];
}

/** What `UserStore.transfer` did. */
export type TransferOutcome =
  /** `previous` no longer holds the card (superseded, keeping its keys and receipts); `user` does. */
  | { kind: "transferred"; previous: UserRecord; user: UserRecord }
  /** No such user, or one that holds no card (superseded already). */
  | { kind: "not_found" }
  /** The user is already `toTenantId`'s. */
  | { kind: "same_tenant" }
  /** An entry of `kt` does not follow its sequence, or names another card: nothing was written. */
  | KtIntakeRefusal;

/**
 * Decides an operator's transfer of the card `user` holds to another tenant: the user is superseded
 * (as by a BIN owner's registration: it keeps its keys, grants and receipts, and no longer holds
 * either reference), and a new user of the tenant holds both references with no key yet (a
 * reservation): the card's receipts wait in escrow for that tenant until it registers the card, which
 * activates that user's first key. No key moves: the previous issuer's key never receives the card's
 * receipts again.
 */
export function planTransfer(
  input: TransferInput,
  user: UserRecord | undefined,
): { outcome: TransferOutcome; users: UserRecord[] } {
  if (user === undefined || user.supersededAt !== undefined)
    return { outcome: { kind: "not_found" }, users: [] };
  if (user.tenantId === input.toTenantId) return { outcome: { kind: "same_tenant" }, users: [] };
  const refs = [user.panHash, ...(user.aliasPanHash === undefined ? [] : [user.aliasPanHash])];
  const logged = (input.kt ?? []).flatMap((p) => (p.kind === "transfer" ? [p.cardKey] : []));
  if (input.kt !== undefined && (logged.length !== refs.length || refs.some((r) => !logged.includes(r)))) {
    // The card's references changed since the caller read them: its log entries would name another card.
    const pendingId = input.kt[0]?.id ?? "";
    return {
      outcome: { kind: "log_refused", pendingId, reason: "the card's references changed" },
      users: [],
    };
  }
  const reserved: UserRecord = {
    userId: input.newUserId,
    tenantId: input.toTenantId,
    panHash: user.panHash,
    ...(user.aliasPanHash === undefined ? {} : { aliasPanHash: user.aliasPanHash }),
    activeKeyId: RESERVED_KEY_ID,
    keyVersion: 0,
    createdAt: input.now,
    updatedAt: input.now,
  };
  const { aliasPanHash, ...rest } = user;
  const previous: UserRecord = {
    ...rest,
    panHash: `${SUPERSEDED_PAN_PREFIX}${user.userId}`,
    formerPanHash: user.panHash,
    ...(aliasPanHash === undefined ? {} : { formerAliasPanHash: aliasPanHash }),
    supersededAt: input.now,
    updatedAt: input.now,
  };
  return { outcome: { kind: "transferred", previous, user: reserved }, users: [previous, reserved] };
}
