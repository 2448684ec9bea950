import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { startWitnessServer } from "../../../src/cli/witness-server.js";
import { FakeClock } from "../../../src/clock.js";
import { base64 } from "../../../src/kt/bytes.js";
import { leafHash, MemoryTree } from "../../../src/kt/merkle.js";
import {
  COSIGNATURE_ED25519,
  checkNoteSignature,
  formatCheckpoint,
  formatNote,
  formatVkey,
  NOTE_ED25519,
  type NoteSigner,
  parseNote,
  signNoteLine,
} from "../../../src/kt/note.js";
import { generateNoteSigner } from "../../../src/kt/note-keys.js";
import { formatAddCheckpoint } from "../../../src/kt/witness.js";
import { MemoryKtLog } from "../../../src/store/memory/kt-log.js";
import { MemoryLeases } from "../../../src/store/memory/leases.js";
import type { Store } from "../../../src/store/types.js";
import { makeIssuer } from "../../kt/world.js";
import {
  ktConfig,
  ktRig,
  ORIGIN,
  pendingOf,
  type Rig,
  signedBinding,
  testCard,
  userKey,
} from "../../support/kt.js";

const dirs: string[] = [];
const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A witness process's server on port 0, following the log of `logKey`, with its state in a temp dir. */
async function witness(name: string, logSigner: NoteSigner, statePath?: string) {
  const dir = mkdtempSync(join(tmpdir(), "kt-witness-"));
  dirs.push(dir);
  const signer = generateNoteSigner(name, COSIGNATURE_ED25519);
  const path = statePath ?? join(dir, "state.json");
  const running = await startWitnessServer({
    config: { signers: [signer], logs: { [logSigner.key.name]: [logSigner.key] } },
    statePath: path,
    port: 0,
  });
  closers.push(() => running.close());
  return { signer, url: running.url, statePath: path, close: () => running.close() };
}

/** A rig whose log asks three witnesses. */
async function witnessedRig(): Promise<{ rig: Rig; witnesses: Awaited<ReturnType<typeof witness>>[] }> {
  const logSigner = generateNoteSigner(ORIGIN, NOTE_ED25519);
  const witnesses = await Promise.all(
    ["w1.bank-a.example", "w2.bank-b.example", "w3.ngo.example"].map((n) => witness(n, logSigner)),
  );
  const config = ktConfig({
    witnesses: witnesses.map((w) => ({ url: w.url, vkey: formatVkey(w.signer.key) })),
    answerCosignatures: 2,
  });
  // The witnesses date their cosignatures by the real clock; the log refuses ones from its future.
  return { rig: ktRig({ signer: logSigner, config, clock: new FakeClock(new Date()) }), witnesses };
}

/** Runs rounds until the witnesses cosigned the newest checkpoint (their requests run beside the rounds). */
async function settle(rig: Rig, store: Store = rig.store, runtime = rig.runtime): Promise<void> {
  for (let i = 0; i < 200; i++) {
    await runtime.sequencer.round();
    const latest = await store.ktLog.latestCheckpoint();
    const head = await store.ktLog.head();
    if (latest?.size === head.size && Object.keys(latest.cosignatures).length === 3) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error("the witnesses did not cosign");
}

async function appendOne(rig: Rig, store: Store = rig.store, runtime = rig.runtime) {
  const bank = makeIssuer("bank-a");
  rig.keys.add(bank);
  const card = testCard();
  await store.ktLog.enqueue([pendingOf(runtime, bank, card, signedBinding(bank, card, userKey()))]);
}

/** A copy of a memory store's key log as it is now: a backup to restore later. */
function backupOf(store: Store): MemoryKtLog {
  return Object.assign(
    Object.create(MemoryKtLog.prototype),
    structuredClone({ ...store.ktLog }),
  ) as MemoryKtLog;
}

describe("the log and its witnesses", () => {
  it("has every checkpoint cosigned by every witness, checked and served with it", async () => {
    const { rig, witnesses } = await witnessedRig();
    await appendOne(rig);
    await settle(rig);
    const answer = await rig.runtime.log.proofs({ leafIndex: 0 });
    const note = parseNote(answer.checkpoint);
    expect(note?.signatures).toHaveLength(4);
    for (const w of witnesses) {
      const check = note === undefined ? undefined : checkNoteSignature(note, w.signer.key);
      expect(check).toMatchObject({ status: "good", timestamp: expect.any(Number) });
    }
    // What each witness stored is the log's newest checkpoint.
    const head = await rig.store.ktLog.head();
    for (const w of witnesses) {
      const state = JSON.parse(readFileSync(w.statePath, "utf8"));
      expect(state[ORIGIN]).toEqual({ size: head.size, root: base64(head.root) });
    }
    await rig.runtime.stop();
  });

  it("does not fork when its store is restored from a backup the witnesses have moved past", async () => {
    const { rig, witnesses } = await witnessedRig();
    await appendOne(rig);
    await settle(rig);
    const backup = backupOf(rig.store);
    const backedUp = (await backup.head()).size;
    await appendOne(rig);
    await settle(rig);
    const witnessed = await rig.store.ktLog.head();
    await rig.runtime.stop();

    // The operator restores the backup; an instance starts on it and gets new registrations.
    const restored: Store = { ...rig.store, ktLog: backup };
    const instance = rig.instance({ store: restored, leases: new MemoryLeases() });
    await appendOne(rig, restored, instance);
    await appendOne(rig, restored, instance);
    expect(await instance.sequencer.round()).toBe("halted");
    expect(instance.sequencer.halted).toMatch(/holds size \d+, larger than the log's newest checkpoint/);
    // Nothing was signed past the backup, and every witness still holds the checkpoint it cosigned.
    expect((await backup.latestCheckpoint())?.size).toBe(backedUp);
    for (const w of witnesses) {
      const state = JSON.parse(readFileSync(w.statePath, "utf8"));
      expect(state[ORIGIN]).toEqual({ size: witnessed.size, root: base64(witnessed.root) });
    }
    await instance.stop();
  });

  it("signs nothing that contradicts what it recorded a witness cosigned", async () => {
    const rig = ktRig();
    await appendOne(rig);
    await rig.runtime.sequencer.round();
    const head = await rig.store.ktLog.head();
    await appendOne(rig);
    // The record says a witness cosigned another root at this size: the next checkpoint would fork.
    await rig.store.ktLog.putWitnessState({
      name: "w1",
      size: head.size,
      root: new Uint8Array(32),
      updatedAt: new Date(),
    });
    expect(await rig.runtime.sequencer.round()).toBe("halted");
    expect(rig.runtime.sequencer.halted).toMatch(/is not the one witness w1 cosigned/);
    expect((await rig.store.ktLog.latestCheckpoint())?.size).toBe(head.size);

    const ahead = ktRig();
    await ahead.store.ktLog.putWitnessState({
      name: "w1",
      size: 99,
      root: new Uint8Array(32),
      updatedAt: new Date(),
    });
    expect(await ahead.runtime.sequencer.round()).toBe("halted");
    expect(ahead.runtime.sequencer.halted).toMatch(/cosigned size 99, larger than the log's/);
    expect(await ahead.store.ktLog.latestCheckpoint()).toBeUndefined();
  });

  it("has a witness that refuses a second root for a size it cosigned, also after a restart", async () => {
    const logSigner = generateNoteSigner(ORIGIN, NOTE_ED25519);
    const w = await witness("w1.bank-a.example", logSigner);
    const post = (url: string, body: string) =>
      fetch(`${url}/add-checkpoint`, { method: "POST", body }).then(async (r) => ({
        status: r.status,
        body: await r.text(),
      }));
    const checkpointOf = (leaves: number[]) => {
      const tree = new MemoryTree(leaves.map((l) => leafHash(new Uint8Array([l]))));
      const text = formatCheckpoint({ origin: ORIGIN, size: tree.size, root: tree.root(), extensions: [] });
      return formatNote(text, [signNoteLine(logSigner, text)]);
    };
    expect(
      (await post(w.url, formatAddCheckpoint({ oldSize: 0, proof: [], checkpoint: checkpointOf([1, 2, 3]) })))
        .status,
    ).toBe(200);
    const fork = formatAddCheckpoint({ oldSize: 3, proof: [], checkpoint: checkpointOf([1, 2, 4]) });
    expect(await post(w.url, fork)).toEqual({
      status: 422,
      body: "a second root for a size already cosigned\n",
    });
    await w.close();
    const again = await startWitnessServer({
      config: { signers: [w.signer], logs: { [ORIGIN]: [logSigner.key] } },
      statePath: w.statePath,
      port: 0,
    });
    closers.push(() => again.close());
    expect((await post(again.url, fork)).status).toBe(422);
    expect((await post(again.url, "nonsense")).status).toBe(400);
    // A body over the limit is answered 413 (read and dropped), not a reset connection.
    expect(await post(again.url, `old 0\n${"A".repeat(200_000)}`)).toEqual({
      status: 413,
      body: "bad body\n",
    });
    expect((await post(again.url, fork)).status).toBe(422);
  });

  it("stores no cosignature that does not verify under the witness's key", async () => {
    const logSigner = generateNoteSigner(ORIGIN, NOTE_ED25519);
    const [honest, real] = [
      await witness("w0.ngo.example", logSigner),
      await witness("w1.bank-a.example", logSigner),
    ];
    const impostor = generateNoteSigner("w1.bank-a.example", COSIGNATURE_ED25519);
    // The configuration names the impostor's key for w1: the real w1's lines do not verify under it.
    const rig = ktRig({
      signer: logSigner,
      clock: new FakeClock(new Date()),
      config: ktConfig({
        witnesses: [
          { url: honest.url, vkey: formatVkey(honest.signer.key) },
          { url: real.url, vkey: formatVkey(impostor.key) },
        ],
      }),
    });
    await appendOne(rig);
    await rig.runtime.sequencer.round();
    await rig.runtime.stop();
    const latest = await rig.store.ktLog.latestCheckpoint();
    expect(latest?.size).toBeGreaterThan(0);
    expect(Object.keys(latest?.cosignatures ?? {})).toEqual(["w0.ngo.example"]);
  });
});
