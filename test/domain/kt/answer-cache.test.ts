import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fromBase64Strict } from "../../../src/kt/bytes.js";
import { leafHash, verifyInclusion } from "../../../src/kt/merkle.js";
import { makeIssuer } from "../../kt/world.js";
import { startService, type TestService } from "../../support/harness.js";
import { pendingOf, signedBinding, TestSigningKeys, testCard, userKey } from "../../support/kt.js";

/**
 * The answers' proofs are kept between answers (a leaf's inclusion proof per tree size, the checkpoint
 * note, the statement rebuilt per card reference): what is kept must stay exactly what a fresh
 * computation gives, under the old size and after the log grew.
 */
describe("kept proofs in answers", () => {
  let svc: TestService;
  const keys = new TestSigningKeys();
  const bank = makeIssuer("issuer-1");
  keys.add(bank);

  async function append(n: number): Promise<void> {
    for (let i = 0; i < n; i++) {
      const card = testCard();
      const pending = pendingOf(
        { log: svc.app.domain.kt } as never,
        bank,
        card,
        signedBinding(bank, card, userKey()),
      );
      expect(await svc.store.ktLog.enqueue([pending])).toEqual({ kind: "enqueued" });
      svc.app.domain.kt.notify();
      await svc.app.domain.kt.waitForLeaf(pending.id);
    }
  }

  async function leafHashAt(index: number): Promise<Uint8Array> {
    const leaf = await svc.store.ktLog.leaf(index);
    return leaf?.leaf === undefined
      ? leafHash(
          new Uint8Array([
            3,
            ...new TextEncoder().encode(
              (await svc.store.ktLog.directory(leaf?.directorySha256 as string))?.json as string,
            ),
          ]),
        )
      : leafHash(leaf.leaf);
  }

  async function verifies(index: number, proof: { treeSize: number; inclusion: string[] }): Promise<boolean> {
    const checkpoint = await svc.store.ktLog.checkpointAt(proof.treeSize);
    const path = proof.inclusion.map((h) => fromBase64Strict(h) as Uint8Array);
    return verifyInclusion(
      index,
      proof.treeSize,
      await leafHashAt(index),
      path,
      checkpoint?.root as Uint8Array,
    );
  }

  beforeAll(async () => {
    svc = await startService({ env: { KT_SEQUENCER_POLL_MS: "20" }, kt: { signingKeys: keys } });
    await append(5);
  });
  afterAll(() => svc.close());

  it("answers the same proof again under one size, and a new one that verifies after the log grew", async () => {
    const kt = svc.app.domain.kt;
    const first = await kt.proofs({ leafIndex: 2 });
    const again = await kt.proofs({ leafIndex: 2 });
    expect(again.proof).toEqual(first.proof);
    expect(again.checkpoint).toBe(first.checkpoint);
    expect(await verifies(2, first.proof as { treeSize: number; inclusion: string[] })).toBe(true);

    await append(7);
    const later = await kt.proofs({ leafIndex: 2 });
    expect(later.proof?.treeSize).toBeGreaterThan(first.proof?.treeSize as number);
    expect(later.proof?.inclusion).not.toEqual(first.proof?.inclusion);
    expect(await verifies(2, later.proof as { treeSize: number; inclusion: string[] })).toBe(true);
    // The older answer still verifies under its own checkpoint, and every leaf's proof under the new size.
    expect(await verifies(2, first.proof as { treeSize: number; inclusion: string[] })).toBe(true);
    for (let index = 0; index < (later.proof?.treeSize as number); index++) {
      const p = await kt.proofs({ leafIndex: index });
      expect(
        await verifies(index, p.proof as { treeSize: number; inclusion: string[] }),
        `leaf ${index}`,
      ).toBe(true);
      expect((await kt.proofs({ leafIndex: index })).proof).toEqual(p.proof);
    }
  });

  it("shares a kept proof that no answer can change", async () => {
    const kt = svc.app.domain.kt;
    const inclusion = (await kt.proofs({ leafIndex: 1 })).proof?.inclusion ?? [];
    expect(inclusion.length).toBeGreaterThan(0);
    expect(() => inclusion.push("x")).toThrow();
    expect((await kt.proofs({ leafIndex: 1 })).proof?.inclusion).toEqual(inclusion);
  });
});
