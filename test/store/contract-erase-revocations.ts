import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { sequenceName } from "../../src/store/kt-sequence.js";
import type { KtPendingStatement } from "../../src/store/kt-types.js";
import type { Store } from "../../src/store/types.js";
import { pendingBinding } from "./contract-kt-log.js";
import { at, hex64, pendingKey, uid } from "./fixtures.js";

/** A write of `users.erase` that a store with fault injection can make fail. */
export type EraseStep = "pending insert" | "user delete" | "keys delete";

/**
 * Fault injection, for a store whose erase does I/O inside its step (MongoDB: a transaction). The
 * memory store has none: its erase checks and writes with no `await` in between, so nothing can fail
 * half-way, and the failure tests are skipped there.
 */
export interface StoreFaults {
  /** Makes the next write of `step` fail, as a dropped connection would; `fired` tells whether it did. */
  failNext(step: EraseStep): { fired: () => boolean };
  /** Disarms any failure not yet fired. */
  clear(): void;
  /**
   * Calls `see` before each operation the store sends, with what is committed then (user ids, pending
   * ids), until the returned stop is called: what any other reader could see in the middle of a call.
   */
  watch(see: (committed: { userIds: Set<string>; pendingIds: Set<string> }) => void): () => void;
}

/** The issuer's `receipts.v1/key-revocation` of `keyId` for `cardKey`, as an erasure queues it. */
function pendingRevocation(
  cardKey: string,
  version: number,
  keyId: string,
  userId: string,
): KtPendingStatement {
  return {
    kind: "statement",
    id: `ktp_erasure_0_${userId}`,
    tenantId: "tnt_issuer",
    order: { sequence: sequenceName.card(cardKey), type: "receipts.v1/key-revocation", version, keyId },
    statement: `{"version":${version},"reason":"erased"}`,
    signature: randomBytes(64).toString("base64"),
    signingKeyId: `sk_${randomBytes(16).toString("hex")}`,
    opening: randomBytes(16).toString("base64"),
    card: { kind: "hashed-pan", key: cardKey, sealedRef: randomBytes(60).toString("base64") },
    userId,
    createdAt: at(120),
  };
}

/** A user of tnt_issuer with two keys (k1 rotated, k2 active), whose card the key log binds to k2. */
async function boundUser(store: Store) {
  const panHash = hex64();
  const [k1, k2] = [pendingKey(), pendingKey()];
  let userId = "";
  for (const [i, key] of [k1, k2].entries()) {
    const input = { panHash, tenantId: "tnt_issuer", newUserId: uid("usr"), key, now: at(i * 60) };
    const outcome = await store.users.register(input);
    if (outcome.kind !== "created" && outcome.kind !== "rotated") throw new Error(outcome.kind);
    userId = outcome.user.userId;
  }
  const binding = pendingBinding(panHash, 1, k2.keyId);
  expect(await store.ktLog.enqueue([binding])).toEqual({ kind: "enqueued" });
  const revocation = pendingRevocation(panHash, 2, k2.keyId, userId);
  const user = await store.users.findById(userId);
  return { panHash, keys: [k1, k2], userId, user, binding, revocation };
}

type BoundUser = Awaited<ReturnType<typeof boundUser>>;

/** Everything an erase may touch: the user, its keys, the pending records and the card's sequence. */
async function stateOf(store: Store, u: BoundUser) {
  return {
    user: await store.users.findById(u.userId),
    holder: (await store.users.findByPanHash(u.panHash))?.userId,
    keys: await store.users.listKeys(u.userId),
    byId: await Promise.all(u.keys.map((k) => store.users.findKey(k.keyId))),
    // The card's pending records (another user's are not this erase's).
    pending: (await store.ktLog.pending(100))
      .filter((p) => p.kind === "statement" && p.card?.key === u.panHash)
      .map((p) => p.id),
    sequence: await store.ktLog.sequenceState(sequenceName.card(u.panHash)),
  };
}

const ERASED = { user: undefined, holder: undefined, keys: [], byId: [undefined, undefined] };

/** The state after the erase of `u` with its revocation: user and keys gone, the revocation queued once. */
async function expectErasedAndRevoked(store: Store, u: BoundUser): Promise<void> {
  const after = await stateOf(store, u);
  expect(after).toMatchObject(ERASED);
  expect(after.pending).toEqual([u.binding.id, u.revocation.id]);
  expect(after.sequence).toMatchObject({ version: 2, active: null });
  expect(await store.ktLog.findPending(u.revocation.id)).toMatchObject(u.revocation);
}

/**
 * `users.erase(userId, events, kt)` (`src/store/types.ts`): the card's revocations are written with the
 * user's deletion (and its keys') in one step, or nothing is; without `kt` erase is as it was.
 * `faults` (when the store has it) proves the "or nothing": a write that fails inside the step.
 */
export function eraseRevocationsContract(store: () => Store, faults?: () => StoreFaults): void {
  describe("erasure with the card's revocations", () => {
    withRevocations(store, faults);
    failingInside(store, faults);
    withoutRevocations(store, faults);
  });
}

function withRevocations(store: () => Store, faults: (() => StoreFaults) | undefined): void {
  it("writes the revocation and deletes the user and its keys in one call; a second call writes nothing", async () => {
    const u = await boundUser(store());
    const bystander = await boundUser(store());
    // Seen between the erase's operations (where the store has a view of them): the user, or the revocation.
    const seen = new Set<string>();
    const stop = faults?.().watch(({ userIds, pendingIds }) => {
      seen.add(
        `user ${userIds.has(u.userId) ? "kept" : "gone"}, revocation ${pendingIds.has(u.revocation.id) ? "queued" : "absent"}`,
      );
    });
    const erased = await store().users.erase(u.userId, undefined, [u.revocation]);
    stop?.();
    expect(erased).toEqual({ user: u.user, deletedKeys: 2 });
    if (faults !== undefined) expect([...seen]).toEqual(["user kept, revocation absent"]);
    await expectErasedAndRevoked(store(), u);
    // The erasure's retry finds no user and queues nothing twice.
    expect(await store().users.erase(u.userId, undefined, [u.revocation])).toBeUndefined();
    expect((await store().ktLog.pending(100)).filter((p) => p.id === u.revocation.id)).toHaveLength(1);
    // The other user's card, keys and binding are untouched.
    const other = await stateOf(store(), bystander);
    expect(other.keys).toHaveLength(2);
    expect(other.sequence).toMatchObject({ version: 1, active: { keyId: bystander.keys[1]?.keyId } });
  });

  it("refuses a revocation that does not follow the card's sequence, and writes nothing", async () => {
    const u = await boundUser(store());
    const before = await stateOf(store(), u);
    const stale = { ...u.revocation, order: { ...u.revocation.order, version: 1 } };
    expect(await store().users.erase(u.userId, undefined, [stale])).toMatchObject({
      kind: "log_refused",
      pendingId: u.revocation.id,
    });
    expect(await stateOf(store(), u)).toEqual(before);
  });
}

function failingInside(store: () => Store, faults: (() => StoreFaults) | undefined): void {
  const steps: EraseStep[] = ["pending insert", "user delete", "keys delete"];
  it.runIf(faults !== undefined).each(steps)(
    "leaves user, keys and log as they were when the %s fails, and a retry writes the revocation once",
    async (step) => {
      const u = await boundUser(store());
      const before = await stateOf(store(), u);
      const injected = faults?.().failNext(step);
      await expect(store().users.erase(u.userId, undefined, [u.revocation])).rejects.toThrow(/injected/);
      expect(injected?.fired()).toBe(true);
      expect(await stateOf(store(), u)).toEqual(before);
      expect(await store().ktLog.findPending(u.revocation.id)).toBeUndefined();
      faults?.().clear();
      expect(await store().users.erase(u.userId, undefined, [u.revocation])).toEqual({
        user: u.user,
        deletedKeys: 2,
      });
      await expectErasedAndRevoked(store(), u);
    },
  );
}

function withoutRevocations(store: () => Store, faults: (() => StoreFaults) | undefined): void {
  it("without revocations erases user and keys as before, and leaves the key log alone", async () => {
    const u = await boundUser(store());
    const before = await stateOf(store(), u);
    expect(await store().users.erase(u.userId)).toEqual({ user: u.user, deletedKeys: 2 });
    const after = await stateOf(store(), u);
    expect(after).toMatchObject(ERASED);
    expect(after.pending).toEqual(before.pending);
    expect(after.sequence).toEqual(before.sequence);
    expect(await store().users.erase(u.userId)).toBeUndefined();
  });

  it.runIf(faults !== undefined)(
    "without revocations keeps the user when its delete fails, and a retry finishes",
    async () => {
      const u = await boundUser(store());
      const before = await stateOf(store(), u);
      const injected = faults?.().failNext("user delete");
      await expect(store().users.erase(u.userId)).rejects.toThrow(/injected/);
      expect(injected?.fired()).toBe(true);
      expect((await stateOf(store(), u)).user).toEqual(u.user);
      faults?.().clear();
      expect(await store().users.erase(u.userId)).toMatchObject({ user: u.user });
      const after = await stateOf(store(), u);
      expect(after).toMatchObject(ERASED);
      expect(after.pending).toEqual(before.pending);
      expect(after.sequence).toEqual(before.sequence);
    },
  );
}
