import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fromBase64Strict } from "../../../src/kt/bytes.js";
import { leafHash, verifyInclusion } from "../../../src/kt/merkle.js";
import { checkNoteSignature, parseCheckpoint, parseNote, parseVkey } from "../../../src/kt/note.js";
import { onboard } from "../../hardening/support.js";
import { makeIssuer } from "../../kt/world.js";
import { type Envelope, hashPan, post, startService, type TestService } from "../../support/harness.js";
import { PEPPER, pendingOf, signedBinding, TestSigningKeys, userKey } from "../../support/kt.js";

/**
 * Erasure and the key log (docs/key-transparency.md): deleting a user removes its card's statements,
 * signatures, openings and keyed card reference from the log's records; the leaves stay, so the tree,
 * its checkpoints and every proof, the erased leaf's included, still verify, and the leaf bytes left
 * (a signer hash and a commitment) say nothing of the card.
 */
describe("erasure in the key log", () => {
  let svc: TestService;
  const keys = new TestSigningKeys();
  const bank = makeIssuer("issuer-1");
  keys.add(bank);

  beforeAll(async () => {
    svc = await startService({
      env: { HASHED_PAN_PEPPER: PEPPER, KT_SEQUENCER_POLL_MS: "20" },
      kt: { signingKeys: keys },
    });
  });
  afterAll(() => svc.close());

  /** Registers a card over REST and logs a binding of it, as register will; its leaf record and index. */
  async function registeredAndLogged(pan: string) {
    const holder = await onboard(svc, pan);
    const user = await svc.store.users.findById(holder.userId);
    const card = { hashedPan: holder.hashedPan, cardKey: user?.panHash as string };
    const pending = pendingOf(
      { log: svc.app.domain.kt } as never,
      bank,
      card,
      signedBinding(bank, card, userKey()),
    );
    expect(await svc.store.ktLog.enqueue([pending])).toEqual({ kind: "enqueued" });
    svc.app.domain.kt.notify();
    const { proof } = await svc.app.domain.kt.waitForLeaf(pending.id);
    return { holder, card, index: proof.leafIndex };
  }

  it("deletes the statement and opening, keeps the leaf, and every proof still verifies", async () => {
    const erased = await registeredAndLogged("4111111111111111");
    const kept = await registeredAndLogged("4111111111111129");
    const before = await svc.store.ktLog.leaf(erased.index);
    expect(before).toMatchObject({ cardKey: erased.card.cardKey });
    expect(before?.statement).toBeDefined();
    expect(before?.opening).toBeDefined();

    const res = await fetch(`${svc.baseUrl}/api/v1/users/${erased.holder.userId}`, {
      method: "DELETE",
      headers: { "x-api-key": svc.issuerKey },
    });
    expect(res.status, JSON.stringify(await res.clone().json())).toBe(200);
    expect(((await res.json()) as Envelope).success).toBe(true);

    const after = await svc.store.ktLog.leaf(erased.index);
    expect(after?.leaf).toEqual(before?.leaf);
    expect(after?.erasedAt).toBeInstanceOf(Date);
    for (const member of ["statement", "signature", "opening", "cardKey", "sequence"] as const) {
      expect(after?.[member], member).toBeUndefined();
    }
    expect(await svc.store.ktLog.lastOfSequence(`card:${erased.card.cardKey}`)).toBeUndefined();
    // The other card's records are untouched.
    const other = await svc.store.ktLog.leaf(kept.index);
    expect(other?.opening).toBeDefined();
    expect(await svc.store.ktLog.lastOfSequence(`card:${kept.card.cardKey}`)).toMatchObject({
      index: kept.index,
    });

    // A new checkpoint after the erasure: both leaves proven under it, served by /kt/v1.
    await registeredAndLogged("4111111111111137");
    const note = await (await fetch(`${svc.baseUrl}/kt/v1/checkpoint`)).text();
    const parsed = parseNote(note);
    const key = parseVkey(svc.app.domain.kt.vkey);
    expect(parsed && key && checkNoteSignature(parsed, key).status).toBe("good");
    const checkpoint = parseCheckpoint(parsed?.text ?? "");
    for (const index of [erased.index, kept.index]) {
      const proof = await fetch(
        `${svc.baseUrl}/kt/v1/proof/inclusion?index=${index}&size=${checkpoint?.size}`,
      );
      const inclusion = ((await proof.json()) as Envelope).data.inclusion.map((h: string) =>
        fromBase64Strict(h),
      );
      const leaf = (await svc.store.ktLog.leaf(index))?.leaf as Uint8Array;
      expect(
        verifyInclusion(
          index,
          checkpoint?.size as number,
          leafHash(leaf),
          inclusion,
          checkpoint?.root as Uint8Array,
        ),
      ).toBe(true);
    }
  });

  it("leaves the card's statements when the erased user was superseded by the BIN's owner", async () => {
    const pan = "4111111111111145";
    const first = await onboard(svc, pan);
    const owner = await svc.newKey({ role: "issuer", tier: "standard", tenantId: "issuer-2" });
    expect((await svc.store.bins.set("issuer-2", ["411111"], new Date())).kind).toBe("set");
    const keys2 = await post(svc, "/api/v1/onboarding/generate-keys", owner, {});
    const { keyId, publicKey } = keys2.body.data as Record<string, string>;
    const reg = await post(svc, "/api/v1/onboarding/register", owner, {
      hashedPan: hashPan(pan),
      publicKey,
      keyId,
      cardBin: "411111",
    });
    expect(reg.status, JSON.stringify(reg.body)).toBe(200);
    const holder = await svc.store.users.findById(reg.body.data.userId);
    const card = { hashedPan: hashPan(pan), cardKey: holder?.panHash as string };
    const pending = pendingOf(
      { log: svc.app.domain.kt } as never,
      bank,
      card,
      signedBinding(bank, card, userKey()),
    );
    await svc.store.ktLog.enqueue([pending]);
    svc.app.domain.kt.notify();
    const { proof } = await svc.app.domain.kt.waitForLeaf(pending.id);

    const res = await fetch(`${svc.baseUrl}/api/v1/users/${first.userId}`, {
      method: "DELETE",
      headers: { "x-api-key": svc.issuerKey },
    });
    expect(res.status).toBe(200);
    const leaf = await svc.store.ktLog.leaf(proof.leafIndex);
    expect(leaf?.erasedAt).toBeUndefined();
    expect(leaf?.opening).toBeDefined();
  });
});
