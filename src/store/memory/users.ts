import type { EventRecord } from "../event-types.js";
import type { KtIntakeRefusal, KtPendingInput } from "../kt-types.js";
import {
  cardRefsOf,
  ownUserOf,
  planRegister,
  planTransfer,
  type RegisterInput,
  type TransferInput,
  type TransferOutcome,
} from "../register.js";
import type { KeyRecord, RegisterOutcome, UserRecord, UserStore } from "../types.js";
import { copy } from "./copy.js";
import type { MemoryEvents } from "./events.js";
import type { MemoryKtLog } from "./kt-log.js";

/** Users and their keys held in memory. `register` reads, decides and writes in one synchronous step. */
export class MemoryUsers implements UserStore {
  private readonly users = new Map<string, UserRecord>();
  private readonly userIdByPan = new Map<string, string>();
  private readonly keys = new Map<string, KeyRecord>();

  /**
   * `events`: the outbox, written in the same synchronous step as the registration or erasure;
   * `ktLog`: the key log, whose statements a registration writes in that step too.
   */
  constructor(
    private readonly events: MemoryEvents,
    private readonly ktLog: MemoryKtLog,
  ) {}

  async findById(userId: string): Promise<UserRecord | undefined> {
    const user = this.users.get(userId);
    return user === undefined ? undefined : userCopy(user);
  }

  async findByPanHash(panHash: string): Promise<UserRecord | undefined> {
    const user = this.holderOf(panHash);
    return user === undefined ? undefined : userCopy(user);
  }

  async insertPendingKey(key: KeyRecord): Promise<boolean> {
    if (this.keys.has(key.keyId)) return false;
    this.keys.set(key.keyId, copy(key));
    return true;
  }

  async findKey(keyId: string): Promise<KeyRecord | undefined> {
    const key = this.keys.get(keyId);
    return key === undefined ? undefined : keyCopy(key);
  }

  async register(input: RegisterInput): Promise<RegisterOutcome> {
    const user = this.holderOf(input.panHash);
    const aliasUser = input.aliasPanHash === undefined ? undefined : this.holderOf(input.aliasPanHash);
    const kept = ownUserOf(input, [user, aliasUser]);
    const activeKey =
      kept !== undefined && kept.activeKeyId !== input.key.keyId
        ? this.keys.get(kept.activeKeyId)
        : undefined;
    const plan = planRegister(input, { user, aliasUser, key: this.keys.get(input.key.keyId), activeKey });
    const writes =
      plan.outcome.kind === "created" ||
      plan.outcome.kind === "superseded" ||
      plan.outcome.kind === "rotated" ||
      plan.outcome.kind === "unchanged";
    const intake = writes ? this.ktLog.intake(input.kt) : undefined;
    if (intake !== undefined && "kind" in intake) return copy(intake);
    intake?.commit();
    for (const user of plan.users) this.store(user);
    for (const key of plan.keys) this.keys.set(key.keyId, copy(key));
    this.events.write(input.events?.(plan.outcome));
    return copy(plan.outcome);
  }

  async transfer(input: TransferInput): Promise<TransferOutcome> {
    const plan = planTransfer(input, this.users.get(input.userId));
    const intake = plan.outcome.kind === "transferred" ? this.ktLog.intake(input.kt) : undefined;
    if (intake !== undefined && "kind" in intake) return copy(intake);
    intake?.commit();
    for (const user of plan.users) this.store(user);
    this.events.write(input.events?.(plan.outcome));
    return copy(plan.outcome);
  }

  async listKeys(userId: string): Promise<KeyRecord[]> {
    return copy(this.keysOf(userId));
  }

  async erase(
    userId: string,
    events?: readonly EventRecord[],
    kt?: readonly KtPendingInput[],
  ): Promise<{ user: UserRecord; deletedKeys: number } | KtIntakeRefusal | undefined> {
    const user = this.users.get(userId);
    if (user === undefined) return undefined;
    const intake = this.ktLog.intake(kt);
    if ("kind" in intake) return copy(intake);
    intake.commit();
    const keys = this.keysOf(userId);
    for (const key of keys) this.keys.delete(key.keyId);
    this.users.delete(userId);
    this.forgetRefs(user);
    this.events.write(events);
    return { user: copy(user), deletedKeys: keys.length };
  }

  /** Stores `user`, moving the card references it holds to it (and freeing those it gave up). */
  private store(user: UserRecord): void {
    const stored = this.users.get(user.userId);
    if (stored !== undefined) this.forgetRefs(stored);
    this.users.set(user.userId, copy(user));
    for (const ref of cardRefsOf(user)) this.userIdByPan.set(ref, user.userId);
  }

  /** The user holding the card reference `ref` (as its panHash or its alias), as stored. */
  private holderOf(ref: string): UserRecord | undefined {
    const userId = this.userIdByPan.get(ref);
    return userId === undefined ? undefined : this.users.get(userId);
  }

  /** Frees the card references `user` holds (those still pointing at it). */
  private forgetRefs(user: UserRecord): void {
    for (const ref of cardRefsOf(user)) {
      if (this.userIdByPan.get(ref) === user.userId) this.userIdByPan.delete(ref);
    }
  }

  /**
   * A user's keys, first registered first (then by creation, then keyId), as the Mongo store sorts
   * them. A scan: only erasure and key listings ask, never a receipt's path.
   */
  private keysOf(userId: string): KeyRecord[] {
    const time = (d: Date | undefined) => d?.getTime() ?? 0;
    return [...this.keys.values()]
      .filter((k) => k.userId === userId)
      .sort(
        (a, b) =>
          time(a.registeredAt) - time(b.registeredAt) ||
          time(a.createdAt) - time(b.createdAt) ||
          (a.keyId < b.keyId ? -1 : a.keyId > b.keyId ? 1 : 0),
      );
  }
}

/*
 * Copies of the records every receipt's routing reads (a card's user, its key), member by member and
 * sharing nothing: what the generic deep copy (`copy.ts`) gives, which walks every member to find the
 * dates. test/store/memory-record-copies.test.ts holds both to the generic copy.
 */

/** A copy of a user record. */
export function userCopy(user: UserRecord): UserRecord {
  const copied = {
    ...user,
    createdAt: new Date(user.createdAt.getTime()),
    updatedAt: new Date(user.updatedAt.getTime()),
  };
  if (user.supersededAt !== undefined) copied.supersededAt = new Date(user.supersededAt.getTime());
  return copied;
}

/** A copy of a key record. */
export function keyCopy(key: KeyRecord): KeyRecord {
  const copied = { ...key, createdAt: new Date(key.createdAt.getTime()) };
  if (key.registeredAt !== undefined) copied.registeredAt = new Date(key.registeredAt.getTime());
  if (key.rotatedAt !== undefined) copied.rotatedAt = new Date(key.rotatedAt.getTime());
  return copied;
}
