import { describe, expect, it } from "vitest";
import { FakeClock } from "../../../src/clock.js";
import { base64, fromBase64Strict } from "../../../src/kt/bytes.js";
import { parseDirectory } from "../../../src/kt/directory.js";
import { directoryLeaf, statementLeaf } from "../../../src/kt/leaves.js";
import { leafHash, verifyInclusion } from "../../../src/kt/merkle.js";
import { checkNoteSignature, parseCheckpoint, parseNote } from "../../../src/kt/note.js";
import { withCardRef } from "../../../src/kt/statements.js";
import type { KtPendingStatement } from "../../../src/store/kt-types.js";
import { makeIssuer } from "../../kt/world.js";
import { ktRig, pendingOf, signedBinding, testCard, userKey } from "../../support/kt.js";

const fromB64 = (text: string) => fromBase64Strict(text) as Uint8Array;

describe("the key log's sequencer", () => {
  it("appends a statement after the first snapshot and signs a checkpoint whose proofs verify", async () => {
    const rig = ktRig();
    const bank = makeIssuer("bank-a");
    rig.keys.add(bank);
    const card = testCard();
    const pending = pendingOf(rig.runtime, bank, card, signedBinding(bank, card, userKey()));
    expect(await rig.store.ktLog.enqueue([pending])).toEqual({ kind: "enqueued" });
    expect(await rig.runtime.sequencer.round()).toBe("appended");
    const answer = await rig.runtime.log.waitForLeaf(pending.id);
    // The first round appends the statement, then the log's first snapshot.
    expect(answer.proof).toMatchObject({ leafIndex: 0, treeSize: 2 });
    expect(answer.directory.index).toBe(1);
    const note = parseNote(answer.checkpoint);
    const checkpoint = parseCheckpoint(note?.text ?? "");
    expect(checkpoint).toMatchObject({ origin: rig.signer.key.name, size: 2 });
    expect(note && checkNoteSignature(note, rig.signer.key).status).toBe("good");
    // The verifier rebuilds the leaf from what it checked: the statement with the card, the opening.
    const leaf = await rig.store.ktLog.leafByPending(pending.id);
    const rebuilt = statementLeaf({
      signerSpki: bank.spki,
      opening: fromB64(leaf?.opening as string),
      statement: withCardRef(leaf?.statement as string, card.hashedPan),
    });
    const root = checkpoint?.root as Uint8Array;
    expect(verifyInclusion(0, 2, leafHash(rebuilt), answer.proof.inclusion.map(fromB64), root)).toBe(true);
    const snapshot = await rig.store.ktLog.directory(answer.directory.sha256);
    expect(parseDirectory(snapshot?.json as string).ok).toBe(true);
    const snapshotLeaf = leafHash(directoryLeaf(snapshot?.json as string));
    expect(verifyInclusion(1, 2, snapshotLeaf, answer.directory.inclusion.map(fromB64), root)).toBe(true);
    // Nothing left pending, and the card reference is nowhere in what is stored about the leaf.
    expect(await rig.store.ktLog.pending(10)).toEqual([]);
    expect(JSON.stringify(leaf)).not.toContain(card.hashedPan);
  });

  it("refuses a statement whose signature, signer, sealed card or order facts are not right", async () => {
    const rig = ktRig();
    const bank = makeIssuer("bank-a");
    const stranger = makeIssuer("bank-a");
    rig.keys.add(bank);
    const make = () => {
      const card = testCard();
      return pendingOf(rig.runtime, bank, card, signedBinding(bank, card, userKey()));
    };
    const badSignature = { ...make(), signature: base64(stranger.sign(new Uint8Array([1]))) };
    const unknownSigner = { ...make(), signingKeyId: stranger.signingKeyId };
    const other = make();
    const swappedCard = { ...make(), card: other.card } as KtPendingStatement;
    const wrongOrder = make();
    wrongOrder.order = { ...wrongOrder.order, keyId: userKey().keyId } as KtPendingStatement["order"];
    const good = make();
    const all = [badSignature, unknownSigner, swappedCard, wrongOrder, good];
    for (const p of all) await rig.store.ktLog.enqueue([p]);
    await rig.runtime.sequencer.round();
    const reasons = await Promise.all(
      all.slice(0, 4).map(async (p) => (await rig.store.ktLog.findPending(p.id))?.refused),
    );
    expect(reasons[0]).toMatch(/^signature:/);
    expect(reasons[1]).toMatch(/^signer: no signing key/);
    expect(reasons[2]).toMatch(/sealed card reference does not open/);
    expect(reasons[3]).toMatch(/order facts/);
    expect(await rig.store.ktLog.leafByPending(good.id)).toMatchObject({ index: 0 });
    await expect(rig.runtime.log.waitForLeaf(badSignature.id)).rejects.toMatchObject({
      code: "internal_server_error",
    });
  });

  it("holds a statement whose version is ahead of the log until the one before it arrives", async () => {
    const rig = ktRig();
    const bank = makeIssuer("bank-a");
    rig.keys.add(bank);
    const card = testCard();
    const [first, second] = [userKey(), userKey()];
    const one = pendingOf(rig.runtime, bank, card, signedBinding(bank, card, first));
    const two = pendingOf(
      rig.runtime,
      bank,
      card,
      signedBinding(bank, card, second, { version: 2, supersedes: first.keyId }),
    );
    // Version 2 dated before version 1 (two instances' clocks apart): the sequencer reads it first.
    two.createdAt = new Date(one.createdAt.getTime() - 1_000);
    await rig.store.ktLog.enqueue([one, two]);
    expect((await rig.store.ktLog.pending(10)).map((r) => r.id)).toEqual([two.id, one.id]);
    await rig.runtime.sequencer.round();
    const [a, b] = [await rig.store.ktLog.leafByPending(one.id), await rig.store.ktLog.leafByPending(two.id)];
    expect((a?.index as number) < (b?.index as number)).toBe(true);
    expect((await rig.store.ktLog.loggedStates([one.order.sequence])).get(one.order.sequence)).toMatchObject({
      version: 2,
      active: { keyId: second.keyId },
      retired: [first.keyId],
    });
  });

  it("refuses what waited behind a refused statement, audits each, and lets the card's next statement follow the log", async () => {
    const rig = ktRig();
    const bank = makeIssuer("bank-a");
    rig.keys.add(bank);
    const card = testCard();
    const [first, second, third] = [userKey(), userKey(), userKey()];
    const one = pendingOf(rig.runtime, bank, card, signedBinding(bank, card, first));
    await rig.store.ktLog.enqueue([one]);
    await rig.runtime.sequencer.round();
    const rotation = { version: 2, supersedes: first.keyId };
    const bad = {
      ...pendingOf(rig.runtime, bank, card, signedBinding(bank, card, second, rotation)),
      signature: base64(makeIssuer("bank-a").sign(new Uint8Array([1]))),
    };
    const behind = pendingOf(rig.runtime, bank, card, signedBinding(bank, card, second, { version: 3 }));
    expect(await rig.store.ktLog.enqueue([bad, behind])).toEqual({ kind: "enqueued" });
    expect(await rig.runtime.sequencer.round()).toBe("appended");
    expect((await rig.store.ktLog.findPending(bad.id))?.refused).toMatch(/^signature:/);
    expect((await rig.store.ktLog.findPending(behind.id))?.refused).toBe(
      `queued behind ${bad.id}, which the key log refused`,
    );
    expect(await rig.store.ktLog.pending(10)).toEqual([]);
    const audited = await rig.store.audit.list(10, { tenantId: bank.tenant });
    expect(audited.map((e) => [e.action, e.subject?.split(":")[0]])).toEqual([
      ["kt.statement_refused", behind.id],
      ["kt.statement_refused", bad.id],
    ]);
    // The card's intake is the log's again: a new rotation at version 2 is taken and appended.
    const again = pendingOf(rig.runtime, bank, card, signedBinding(bank, card, third, rotation));
    expect(await rig.store.ktLog.enqueue([again])).toEqual({ kind: "enqueued" });
    await rig.runtime.sequencer.round();
    expect(await rig.store.ktLog.leafByPending(again.id)).toMatchObject({ version: 2 });
  });

  it("refuses a replayed statement that the log already holds", async () => {
    const rig = ktRig();
    const bank = makeIssuer("bank-a");
    rig.keys.add(bank);
    const card = testCard();
    const signed = signedBinding(bank, card, userKey());
    await rig.store.ktLog.enqueue([pendingOf(rig.runtime, bank, card, signed)]);
    await rig.runtime.sequencer.round();
    // A store writer puts the same signed statement back, past the intake (the memory store's own map).
    const replay = pendingOf(rig.runtime, bank, card, signed);
    (rig.store.ktLog as unknown as { pendingById: Map<string, unknown> }).pendingById.set(replay.id, replay);
    await rig.runtime.sequencer.round();
    expect((await rig.store.ktLog.findPending(replay.id))?.refused).toMatch(
      /out of order in the log: version must be 2/,
    );
  });

  it("snapshots the directory after a directory change, and again when the last is a day old", async () => {
    const rig = ktRig();
    await rig.runtime.sequencer.round();
    const first = await rig.store.ktLog.directoryBefore(Number.MAX_SAFE_INTEGER);
    expect(first?.index).toBe(0);
    await rig.store.bins.set("bank-a", ["411111"], rig.clock.now());
    await rig.store.apiKeys.insert({
      id: "key_1",
      keyHash: "a".repeat(64),
      prefix: "rk_dev_x",
      env: "dev",
      tenantId: "bank-a",
      role: "issuer",
      tier: "standard",
      merchantIds: [],
      name: "",
      createdAt: rig.clock.now(),
    });
    await rig.store.ktLog.enqueue([rig.runtime.log.pendingDirectoryChange("bins.set", "bank-a")]);
    rig.clock.advance(1_000);
    expect(await rig.runtime.sequencer.round()).toBe("appended");
    const second = await rig.store.ktLog.directoryBefore(Number.MAX_SAFE_INTEGER);
    const parsed = parseDirectory(second?.json as string);
    expect(parsed.ok && parsed.value).toMatchObject({
      previous: 0,
      issuers: [{ issuer: "bank-a", prefixes: [{ prefix: "411111", kind: "bin" }] }],
    });
    expect(await rig.runtime.sequencer.round()).toBe("idle");
    rig.clock.advance(24 * 3_600_000);
    expect(await rig.runtime.sequencer.round()).toBe("appended");
    const third = parseDirectory(
      (await rig.store.ktLog.directoryBefore(Number.MAX_SAFE_INTEGER))?.json as string,
    );
    // The prefix keeps the time it first counted from.
    expect(third.ok && third.value.issuers[0]?.prefixes[0]?.effectiveFrom).toBe(
      parsed.ok && parsed.value.issuers[0]?.prefixes[0]?.effectiveFrom,
    );
    expect(third.ok && third.value.previous).toBe(1);
  });

  it("gives a signing key the issuedAt of the first snapshot listing it with its status, kept after", async () => {
    // A clock that moves a second at every reading: any second reading of it during a snapshot shows.
    const clock = new FakeClock("2026-11-25T12:00:00Z");
    const ticking = Object.assign(Object.create(clock) as FakeClock, {
      now: () => {
        clock.advance(1_000);
        return clock.now();
      },
    });
    const rig = ktRig({ clock: ticking });
    const root = {
      signingKeyId: `sk_${"ab".repeat(16)}`,
      algorithm: "Ed25519" as const,
      spki: base64(new Uint8Array(44)),
      role: "root" as const,
      status: "pending" as const,
      createdAt: clock.now(),
    };
    const record = {
      tenantId: "bank-r",
      signingKeys: [root],
      requireBindings: false,
      revision: 1,
      updatedAt: clock.now(),
    };
    const snapshot = async () => {
      expect(await rig.runtime.sequencer.round()).toBe("appended");
      const parsed = parseDirectory(
        (await rig.store.ktLog.directoryBefore(Number.MAX_SAFE_INTEGER))?.json as string,
      );
      if (!parsed.ok) throw new Error(parsed.reason);
      const key = parsed.value.issuers.find((i) => i.issuer === "bank-r")?.signingKeys[0];
      return { issuedAt: parsed.value.issuedAt, status: key?.status, effectiveFrom: key?.effectiveFrom };
    };
    const change = () => [rig.runtime.log.pendingDirectoryChange("kt.test", "bank-r")];
    expect(await rig.store.ktIssuers.put(record, change())).toEqual({ kind: "stored" });
    const pending = await snapshot();
    expect(pending).toEqual({
      issuedAt: pending.issuedAt,
      status: "pending",
      effectiveFrom: pending.issuedAt,
    });
    const confirmed = { ...record, revision: 2, signingKeys: [{ ...root, status: "current" as const }] };
    expect(await rig.store.ktIssuers.put(confirmed, change())).toEqual({ kind: "stored" });
    const current = await snapshot();
    expect(current).toEqual({
      issuedAt: current.issuedAt,
      status: "current",
      effectiveFrom: current.issuedAt,
    });
    expect(current.issuedAt > pending.issuedAt).toBe(true);
    // A later snapshot keeps the time it first counted from.
    await rig.store.ktLog.enqueue(change());
    const later = await snapshot();
    expect(later.issuedAt > current.issuedAt).toBe(true);
    expect(later.effectiveFrom).toBe(current.issuedAt);
  });

  it("lets one instance work at a time, and a paused holder's append is fenced out after a takeover", async () => {
    const rig = ktRig();
    const bank = makeIssuer("bank-a");
    rig.keys.add(bank);
    const second = rig.instance();
    expect(await rig.runtime.sequencer.round()).toBe("appended");
    expect(await second.sequencer.round()).toBe("standby");
    // The holder pauses past its lease; the second instance takes over and appends.
    rig.clock.advance(11_000);
    const card = testCard();
    await rig.store.ktLog.enqueue([pendingOf(second, bank, card, signedBinding(bank, card, userKey()))]);
    expect(await second.sequencer.round()).toBe("appended");
    // The first wakes with a lease it still believes is valid: the store refuses what it writes.
    rig.clock.advance(-11_000);
    const card2 = testCard();
    await rig.store.ktLog.enqueue([pendingOf(second, bank, card2, signedBinding(bank, card2, userKey()))]);
    expect(await rig.runtime.sequencer.round()).toBe("fenced_out");
    const head = await rig.store.ktLog.head();
    expect(head.size).toBe(2);
  });
});
