import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { leafHash, verifyConsistency, verifyInclusion } from "../../src/kt/merkle.js";
import {
  appendToTiles,
  consistencyProofFromTiles,
  inclusionProofFromTiles,
  rootFromTiles,
} from "../../src/kt/tiles.js";
import { erasedStatementSha256, sequenceName } from "../../src/store/kt-sequence.js";
import type {
  KtAppendBatch,
  KtLeafRecord,
  KtLogStore,
  KtOrder,
  KtPendingStatement,
} from "../../src/store/kt-types.js";
import type { Store } from "../../src/store/types.js";
import { at, hex64, pendingKey, uid } from "./fixtures.js";

/** A pending binding of `keyId` at `version` for the card `cardKey` (the bytes are stand-ins). */
export function pendingBinding(
  cardKey: string,
  version: number,
  keyId: string,
  options: { supersedes?: string | null; createdAt?: Date; tenantId?: string } = {},
): KtPendingStatement {
  const order: KtOrder = {
    sequence: sequenceName.card(cardKey),
    type: "receipts.v1/key-binding",
    version,
    keyId,
    algorithm: "HPKE-P256-SHA256-A256GCM",
    spkiSha256: keyId.replaceAll("-", "").padEnd(43, "A").slice(0, 43),
    supersedes: options.supersedes ?? null,
  };
  return {
    kind: "statement",
    id: uid("ktp"),
    tenantId: options.tenantId ?? "tnt_issuer",
    order,
    statement: `{"version":${version}}`,
    signature: randomBytes(64).toString("base64"),
    signingKeyId: `sk_${randomBytes(16).toString("hex")}`,
    opening: randomBytes(16).toString("base64"),
    card: { kind: "hashed-pan", key: cardKey, sealedRef: randomBytes(60).toString("base64") },
    createdAt: options.createdAt ?? at(0),
  };
}

const KEY_A = "11111111-1111-4111-a111-111111111111";
const KEY_B = "22222222-2222-4222-a222-222222222222";

/** The leaf record of a pending statement at `index`, as the sequencer makes it. */
function leafOf(pending: KtPendingStatement, index: number): KtLeafRecord {
  return {
    index,
    kind: "statement",
    leaf: new Uint8Array(randomBytes(41)),
    appendedAt: at(1),
    pendingId: pending.id,
    tenantId: pending.tenantId,
    type: "receipts.v1/key-binding",
    sequence: pending.order.sequence,
    version: pending.order.version,
    statement: pending.statement,
    signature: pending.signature,
    signingKeyId: pending.signingKeyId,
    opening: pending.opening,
    cardKind: "hashed-pan",
    cardKey: pending.card?.key as string,
  };
}

/** An append batch of `pending` at the store's head, built as the sequencer builds it (tiles from the store). */
async function batchOf(log: KtLogStore, pending: KtPendingStatement[]): Promise<KtAppendBatch> {
  const head = await log.head();
  const leaves = pending.map((p, i) => leafOf(p, head.size + i));
  const appended = await appendToTiles(
    log,
    head.size,
    leaves.map((l) => leafHash(l.leaf as Uint8Array)),
  );
  const logged = await log.loggedStates(pending.map((p) => p.order.sequence));
  return {
    oldSize: head.size,
    newSize: appended.size,
    root: await rootAfter(appended.tiles, head.size, appended.size, log),
    tiles: appended.tiles,
    leaves,
    consumed: pending.map((p) => p.id),
    refused: [],
    sequences: pending.map((p) => ({
      sequence: p.order.sequence,
      before: logged.get(p.order.sequence)?.version ?? 0,
      after: { version: p.order.version, active: null, retired: [] },
    })),
  };
}

/** The root of the tree after writing `tiles`, read through a reader that sees them over the store's. */
async function rootAfter(tiles: KtAppendBatch["tiles"], _old: number, size: number, log: KtLogStore) {
  const overlay = new Map(tiles.map((t) => [`${t.level}/${t.index}`, t.hashes]));
  return rootFromTiles(
    {
      readTiles: async (requests) => {
        const fromStore = requests.filter((r) => !overlay.has(`${r.level}/${r.index}`));
        const stored = fromStore.length > 0 ? await log.readTiles(fromStore) : [];
        return requests.map((r) => {
          const own = overlay.get(`${r.level}/${r.index}`);
          return own !== undefined ? own.subarray(0, r.width * 32) : (stored.shift() as Uint8Array);
        });
      },
    },
    size,
  );
}

/** The rules of `KtLogStore` (src/store/kt-types.ts). */
export function ktLogContract(store: () => Store): void {
  describe("ktLog: intake", () => {
    it("enqueues statements that follow their sequence, and refuses one that does not, writing nothing", async () => {
      const log = store().ktLog;
      const card = hex64();
      const first = pendingBinding(card, 1, KEY_A);
      expect(await log.enqueue([first])).toEqual({ kind: "enqueued" });
      expect(await log.sequenceState(sequenceName.card(card))).toMatchObject({
        version: 1,
        active: { keyId: KEY_A },
      });
      const skipped = pendingBinding(card, 4, KEY_B);
      const next = pendingBinding(card, 2, KEY_B, { supersedes: KEY_A });
      expect(await log.enqueue([next, skipped])).toEqual({
        kind: "log_refused",
        pendingId: skipped.id,
        reason: "version must be 3, the last + 1",
      });
      expect(await log.findPending(next.id)).toBeUndefined();
      expect(await log.sequenceState(sequenceName.card(card))).toMatchObject({ version: 1 });
      expect(await log.pending(10)).toEqual([first]);
    });

    it("lets exactly one of 12 concurrent intakes take a version", async () => {
      const card = hex64();
      const outcomes = await Promise.all(
        Array.from({ length: 12 }, () => store().ktLog.enqueue([pendingBinding(card, 1, KEY_A)])),
      );
      expect(outcomes.filter((o) => o.kind === "enqueued")).toHaveLength(1);
      expect(await store().ktLog.pending(20)).toHaveLength(1);
    });

    it("registers a card and enqueues its statement in one step, or neither", async () => {
      const panHash = hex64();
      const key = pendingKey();
      const binding = pendingBinding(panHash, 1, KEY_A);
      const input = { panHash, tenantId: "tnt_issuer", newUserId: uid("usr"), key, now: at(0) };
      const created = await store().users.register({ ...input, kt: [binding] });
      expect(created.kind).toBe("created");
      expect(await store().ktLog.findPending(binding.id)).toEqual(binding);
      const rotated = pendingKey();
      const stale = pendingBinding(panHash, 1, KEY_B);
      const refused = await store().users.register({ ...input, key: rotated, kt: [stale] });
      expect(refused).toEqual({
        kind: "log_refused",
        pendingId: stale.id,
        reason: "version must be 2, the last + 1",
      });
      expect((await store().users.findByPanHash(panHash))?.activeKeyId).toBe(key.keyId);
      expect(await store().users.findKey(rotated.keyId)).toBeUndefined();
      expect(await store().ktLog.findPending(stale.id)).toBeUndefined();
    });

    it("lists waiting records oldest first, at most `limit`", async () => {
      const log = store().ktLog;
      const [late, early, middle] = [at(30), at(10), at(20)].map((t) =>
        pendingBinding(hex64(), 1, KEY_A, { createdAt: t }),
      );
      for (const p of [late, early, middle]) await log.enqueue([p as KtPendingStatement]);
      expect(await log.pending(2)).toEqual([early, middle]);
      const change = { kind: "directory" as const, id: uid("ktp"), reason: "bins.set", createdAt: at(5) };
      await log.enqueue([change]);
      expect((await log.pending(1))[0]).toEqual(change);
    });
  });

  describe("ktLog: appending", () => {
    it("appends a batch whole: tiles, leaves, head, consumed records, logged states; proofs verify", async () => {
      const log = store().ktLog;
      const pending = Array.from({ length: 5 }, () => pendingBinding(hex64(), 1, KEY_A));
      await log.enqueue(pending);
      const first = await batchOf(log, pending.slice(0, 2));
      expect(await log.append({ token: 1 }, first)).toEqual({ kind: "appended" });
      const second = await batchOf(log, pending.slice(2));
      expect(await log.append({ token: 1 }, second)).toEqual({ kind: "appended" });
      const head = await log.head();
      expect(head).toMatchObject({ size: 5, fence: 1 });
      expect(head.root).toEqual(second.root);
      expect(await log.pending(10)).toEqual([]);
      const third = pending[2] as KtPendingStatement;
      expect(await log.leafByPending(third.id)).toEqual(second.leaves[0]);
      expect(await log.lastOfSequence(third.order.sequence)).toEqual(second.leaves[0]);
      expect(await log.leaves(1, 4)).toEqual([first.leaves[1], ...second.leaves.slice(0, 2)]);
      expect((await log.loggedStates([third.order.sequence])).get(third.order.sequence)).toMatchObject({
        version: 1,
      });
      const leaf = second.leaves[1]?.leaf as Uint8Array;
      const proof = await inclusionProofFromTiles(log, 3, 5);
      expect(verifyInclusion(3, 5, leafHash(leaf), proof, head.root)).toBe(true);
      expect(verifyConsistency(2, 5, first.root, head.root, await consistencyProofFromTiles(log, 2, 5))).toBe(
        true,
      );
    });

    it("refuses an older fencing token and a batch built on another head, writing nothing", async () => {
      const log = store().ktLog;
      const pending = [pendingBinding(hex64(), 1, KEY_A), pendingBinding(hex64(), 1, KEY_A)];
      await log.enqueue(pending);
      const stale = await batchOf(log, pending.slice(0, 1));
      expect(await log.append({ token: 5 }, await batchOf(log, pending.slice(1)))).toEqual({
        kind: "appended",
      });
      expect(await log.append({ token: 4 }, await batchOf(log, pending.slice(0, 1)))).toEqual({
        kind: "fenced_out",
      });
      expect(await log.append({ token: 5 }, stale)).toEqual({ kind: "moved" });
      expect((await log.head()).size).toBe(1);
      expect(await log.pending(10)).toEqual([pending[0]]);
    });

    it("fails a whole batch that would rewrite a tile, reuse a version, or consume a record twice", async () => {
      const log = store().ktLog;
      const card = hex64();
      const [a, b] = [pendingBinding(card, 1, KEY_A), pendingBinding(hex64(), 1, KEY_A)];
      await log.enqueue([a, b]);
      await log.append({ token: 1 }, await batchOf(log, [a]));
      const rewrite = await batchOf(log, [b]);
      const tile = rewrite.tiles[0] as KtAppendBatch["tiles"][0];
      const flipped = new Uint8Array(tile.hashes);
      flipped[0] = (flipped[0] as number) ^ 1;
      tile.hashes = flipped;
      await expect(log.append({ token: 1 }, rewrite)).rejects.toThrow();
      const again = pendingBinding(card, 1, KEY_A);
      const replay = await batchOf(log, [b]);
      replay.leaves[0] = { ...leafOf(again, 1) };
      await expect(log.append({ token: 1 }, replay)).rejects.toThrow();
      const twice = await batchOf(log, [b]);
      twice.consumed.push(a.id);
      await expect(log.append({ token: 1 }, twice)).rejects.toThrow();
      expect((await log.head()).size).toBe(1);
      expect(await log.pending(10)).toEqual([b]);
      expect(await log.leaf(1)).toBeUndefined();
      expect(await log.append({ token: 1 }, await batchOf(log, [b]))).toEqual({ kind: "appended" });
    });

    it("marks refused records with their reason and lists them no more", async () => {
      const log = store().ktLog;
      const bad = pendingBinding(hex64(), 1, KEY_A);
      await log.enqueue([bad]);
      const batch: KtAppendBatch = {
        ...(await batchOf(log, [])),
        refused: [{ id: bad.id, reason: "the signature does not verify" }],
      };
      expect(await log.append({ token: 1 }, batch)).toEqual({ kind: "appended" });
      expect(await log.pending(10)).toEqual([]);
      expect(await log.findPending(bad.id)).toEqual({ ...bad, refused: "the signature does not verify" });
    });

    it("after a refusal, resets the sequence to the log and refuses what waited behind it, nothing else", async () => {
      const log = store().ktLog;
      const card = hex64();
      const seq = sequenceName.card(card);
      const one = pendingBinding(card, 1, KEY_A);
      await log.enqueue([one]);
      await log.append({ token: 1 }, await batchOf(log, [one]));
      const bad = pendingBinding(card, 2, KEY_B, { supersedes: KEY_A, createdAt: at(2) });
      const behind = pendingBinding(card, 3, KEY_B, { createdAt: at(3) });
      const elsewhere = pendingBinding(hex64(), 1, KEY_A, { createdAt: at(4) });
      expect(await log.enqueue([bad, behind, elsewhere])).toEqual({ kind: "enqueued" });
      const batch: KtAppendBatch = { ...(await batchOf(log, [])), refused: [{ id: bad.id, reason: "no" }] };
      const reason = `queued behind ${bad.id}, which the key log refused`;
      expect(await log.append({ token: 1 }, batch)).toEqual({
        kind: "appended",
        followers: [{ id: behind.id, reason }],
      });
      expect(await log.findPending(behind.id)).toEqual({ ...behind, refused: reason });
      expect(await log.pending(10)).toEqual([elsewhere]);
      expect(await log.sequenceState(seq)).toEqual((await log.loggedStates([seq])).get(seq));
      // The card's next statement follows the log, not the refused one.
      expect(await log.enqueue([pendingBinding(card, 2, KEY_B)])).toEqual({ kind: "enqueued" });
      // A card whose first statement was refused starts again at version 1.
      const fresh = hex64();
      const first = pendingBinding(fresh, 1, KEY_A);
      await log.enqueue([first]);
      await log.append(
        { token: 1 },
        { ...(await batchOf(log, [])), refused: [{ id: first.id, reason: "no" }] },
      );
      expect(await log.sequenceState(sequenceName.card(fresh))).toBeUndefined();
      expect(await log.enqueue([pendingBinding(fresh, 1, KEY_B)])).toEqual({ kind: "enqueued" });
    });

    it("deletes a card's refused records when it erases the card, and keeps other cards' records", async () => {
      const log = store().ktLog;
      const [card, other] = [hex64(), hex64()];
      const mine = pendingBinding(card, 1, KEY_A);
      const theirs = pendingBinding(other, 1, KEY_A);
      const waiting = pendingBinding(hex64(), 1, KEY_A);
      await log.enqueue([mine, theirs, waiting]);
      const refused = [mine, theirs].map((p) => ({ id: p.id, reason: "no" }));
      await log.append({ token: 1 }, { ...(await batchOf(log, [])), refused });
      await log.eraseCard(card, at(9));
      expect(await log.findPending(mine.id)).toBeUndefined();
      expect(await log.findPending(theirs.id)).toEqual({ ...theirs, refused: "no" });
      expect(await log.pending(10)).toEqual([waiting]);
    });

    it("reads tiles cut to the width asked for, and fails for a tile it does not hold", async () => {
      const log = store().ktLog;
      const pending = Array.from({ length: 3 }, () => pendingBinding(hex64(), 1, KEY_A));
      await log.enqueue(pending);
      const batch = await batchOf(log, pending);
      await log.append({ token: 1 }, batch);
      const [two] = await log.readTiles([{ level: 0, index: 0, width: 2 }]);
      expect(two).toEqual((batch.tiles[0] as KtAppendBatch["tiles"][0]).hashes.subarray(0, 64));
      await expect(log.readTiles([{ level: 0, index: 0, width: 4 }])).rejects.toThrow(/missing or short/);
      await expect(log.readTiles([{ level: 1, index: 0, width: 1 }])).rejects.toThrow(/missing or short/);
    });

    it("keeps a tenant's statement leaves in order for its feed", async () => {
      const log = store().ktLog;
      const mine = [pendingBinding(hex64(), 1, KEY_A), pendingBinding(hex64(), 1, KEY_A)];
      const other = pendingBinding(hex64(), 1, KEY_A, { tenantId: "tnt_other" });
      await log.enqueue([mine[0] as KtPendingStatement, other, mine[1] as KtPendingStatement]);
      await log.append(
        { token: 1 },
        await batchOf(log, [mine[0] as KtPendingStatement, other, mine[1] as KtPendingStatement]),
      );
      expect((await log.leavesOfTenant("tnt_issuer", -1, 10)).map((l) => l.index)).toEqual([0, 2]);
      expect((await log.leavesOfTenant("tnt_issuer", 0, 10)).map((l) => l.index)).toEqual([2]);
      expect((await log.leavesOfTenant("tnt_issuer", -1, 1)).map((l) => l.index)).toEqual([0]);
    });
  });

  describe("ktLog: checkpoints, witnesses, directories, erasure, auditors", () => {
    const checkpoint = (size: number, note = `note ${size}`) => ({
      size,
      root: new Uint8Array(randomBytes(32)),
      note,
      signedAt: at(size),
      cosignatures: {},
    });

    it("keeps one checkpoint per size, the largest as the latest, with each witness's newest cosignature", async () => {
      const log = store().ktLog;
      expect(await log.latestCheckpoint()).toBeUndefined();
      const five = checkpoint(5);
      expect(await log.putCheckpoint({ token: 1 }, five)).toBe("stored");
      await log.putCheckpoint({ token: 1 }, checkpoint(3));
      await log.putCheckpoint({ token: 1 }, checkpoint(5, "second"));
      expect(await log.latestCheckpoint()).toEqual(five);
      expect((await log.checkpointAt(3))?.note).toBe("note 3");
      await log.addCosignature(5, "w1.bank-a.example", { line: "— w1 AAAA\n", timestamp: 100 });
      await log.addCosignature(5, "w2.ngo.example", { line: "— w2 BBBB\n", timestamp: 101 });
      await log.addCosignature(5, "w1.bank-a.example", { line: "— w1 CCCC\n", timestamp: 102 });
      expect((await log.latestCheckpoint())?.cosignatures).toEqual({
        "w1.bank-a.example": { line: "— w1 CCCC\n", timestamp: 102 },
        "w2.ngo.example": { line: "— w2 BBBB\n", timestamp: 101 },
      });
    });

    it("refuses a checkpoint from a holder whose token was superseded", async () => {
      const log = store().ktLog;
      const pending = pendingBinding(hex64(), 1, KEY_A);
      await log.enqueue([pending]);
      await log.append({ token: 7 }, await batchOf(log, [pending]));
      expect(await log.putCheckpoint({ token: 6 }, checkpoint(1))).toBe("fenced_out");
      expect(await log.latestCheckpoint()).toBeUndefined();
    });

    it("records what each witness last cosigned", async () => {
      const log = store().ktLog;
      const root = new Uint8Array(randomBytes(32));
      await log.putWitnessState({ name: "w1.bank-a.example", size: 4, root, updatedAt: at(1) });
      await log.putWitnessState({ name: "w1.bank-a.example", size: 9, root, updatedAt: at(2) });
      expect(await log.witnessStates()).toEqual([
        { name: "w1.bank-a.example", size: 9, root, updatedAt: at(2) },
      ]);
    });

    it("stores snapshots by SHA-256 and finds the one in force below a size", async () => {
      const log = store().ktLog;
      const snapshots = [];
      for (let i = 0; i < 3; i++) {
        const head = await log.head();
        const json = `{"n":${i}}`;
        const directory = { sha256: hex64(), index: head.size, json, issuedAt: at(i), notAfter: at(i + 10) };
        const leaf: KtLeafRecord = {
          index: head.size,
          kind: "directory",
          directorySha256: directory.sha256,
          appendedAt: at(i),
        };
        const tiles = await appendToTiles(log, head.size, [leafHash(new Uint8Array([3, i]))]);
        const batch: KtAppendBatch = {
          oldSize: head.size,
          newSize: tiles.size,
          root: new Uint8Array(32),
          tiles: tiles.tiles,
          leaves: [leaf],
          directory,
          consumed: [],
          refused: [],
          sequences: [],
        };
        expect(await log.append({ token: 1 }, batch)).toEqual({ kind: "appended" });
        snapshots.push(directory);
      }
      expect(await log.directory(snapshots[1]?.sha256 as string)).toEqual(snapshots[1]);
      expect(await log.directory(hex64())).toBeUndefined();
      expect(await log.directoryBefore(2)).toEqual(snapshots[1]);
      expect(await log.directoryBefore(3)).toEqual(snapshots[2]);
      expect(await log.directoryBefore(0)).toBeUndefined();
      expect((await log.leaf(1))?.directorySha256).toBe(snapshots[1]?.sha256);
    });

    it("erases what identifies a card from its leaf records and forgets its sequence; the leaves stay", async () => {
      const log = store().ktLog;
      const card = hex64();
      const mine = [pendingBinding(card, 1, KEY_A), pendingBinding(card, 2, KEY_B, { supersedes: KEY_A })];
      const other = pendingBinding(hex64(), 1, KEY_A);
      await log.enqueue([...mine, other]);
      await log.append({ token: 1 }, await batchOf(log, [...mine, other]));
      expect(await log.eraseCard(card, at(50))).toBe(2);
      for (const index of [0, 1]) {
        const leaf = (await log.leaf(index)) as KtLeafRecord;
        expect(leaf.leaf).toHaveLength(41);
        expect(leaf).toMatchObject({ kind: "statement", tenantId: "tnt_issuer", erasedAt: at(50) });
        for (const member of [
          "statement",
          "signature",
          "opening",
          "cardKey",
          "sequence",
          "version",
          "userId",
        ]) {
          expect(leaf).not.toHaveProperty(member);
        }
      }
      expect(await log.lastOfSequence(sequenceName.card(card))).toBeUndefined();
      expect(await log.sequenceState(sequenceName.card(card))).toBeUndefined();
      expect(await log.leaf(2)).toMatchObject({ cardKey: other.card?.key, statement: other.statement });
      // Each erased record keeps its statement's SHA-256 (nothing of the card), so intake can refuse
      // that statement sent again once the card's sequence has restarted; a second erasure changes nothing.
      for (const [index, pending] of mine.entries()) {
        expect((await log.leaf(index))?.erasedStatementSha256).toBe(erasedStatementSha256(pending.statement));
      }
      expect(await log.leaf(2)).not.toHaveProperty("erasedStatementSha256");
      expect(await log.eraseCard(card, at(60))).toBe(0);
      expect(await log.statementErased(erasedStatementSha256(mine[1]?.statement as string))).toBe(true);
      expect(await log.statementErased(erasedStatementSha256('{"version":3}'))).toBe(false);
    });

    it("registers auditors by token hash, lists and revokes them", async () => {
      const log = store().ktLog;
      const auditor = { id: uid("aud"), name: "Bank A monitor", tokenHash: hex64(), createdAt: at(0) };
      await log.insertAuditor(auditor);
      expect(await log.findAuditorByTokenHash(auditor.tokenHash)).toEqual(auditor);
      expect(await log.findAuditorByTokenHash(hex64())).toBeUndefined();
      expect(await log.revokeAuditor(auditor.id, at(5))).toBe(true);
      expect(await log.revokeAuditor(auditor.id, at(9))).toBe(true);
      expect(await log.listAuditors()).toEqual([{ ...auditor, revokedAt: at(5) }]);
      expect(await log.revokeAuditor(uid("aud"), at(5))).toBe(false);
    });

    it("returns copies: changing a returned record changes nothing stored", async () => {
      const log = store().ktLog;
      const pending = pendingBinding(hex64(), 1, KEY_A);
      await log.enqueue([pending]);
      const found = (await log.findPending(pending.id)) as KtPendingStatement;
      found.order.version = 9;
      expect(await log.findPending(pending.id)).toEqual(pending);
      await log.append({ token: 1 }, await batchOf(log, [pending]));
      const leaf = (await log.leaf(0)) as KtLeafRecord;
      const bytes = leaf.leaf as Uint8Array;
      bytes[0] = (bytes[0] as number) ^ 1;
      expect((await log.leaf(0))?.leaf).not.toEqual(bytes);
    });
  });
}
