import { randomInt } from "node:crypto";
import { describe, expect, it } from "vitest";
import { fromBase64Strict } from "../../src/kt/bytes.js";
import { leafHash, MemoryTree, verifyConsistency, verifyInclusion } from "../../src/kt/merkle.js";
import { checkNoteSignature, NOTE_ED25519, parseCheckpoint, parseNote } from "../../src/kt/note.js";
import { formatNoteSkey, generateNoteSigner } from "../../src/kt/note-keys.js";
import { consistencyProofFromTiles } from "../../src/kt/tiles.js";
import { createMemoryStore } from "../../src/store/memory/index.js";
import { createMongoStore } from "../../src/store/mongo/index.js";
import type { Store } from "../../src/store/types.js";
import { makeIssuer } from "../kt/world.js";
import { FakeMongo } from "../store/fake-mongo/index.js";
import { startService, type TestService } from "../support/harness.js";
import {
  ORIGIN,
  PEPPER,
  pendingOf,
  signedBinding,
  TestSigningKeys,
  testCard,
  userKey,
} from "../support/kt.js";

/**
 * Key transparency (docs/key-transparency.md): one total order with several instances on one store. Three
 * service instances (each its own app, its own store client on the shared database, its own sequencer loop)
 * register cards concurrently, each registration writing its statement in the registration's store step and
 * waiting for its leaf; the instance that leads is stopped half-way, so another takes over. Then: no
 * gap and no duplicate in the leaves, each statement in exactly one leaf, every proof a caller got
 * verifies under its checkpoint, every checkpoint signed by the log and consistent with the last (no
 * fork), and the final root is the root of the leaves.
 */

const seed = Number(process.env.MONGO_FAKE_SEED ?? randomInt(2 ** 31));
const fromB64 = (text: string) => fromBase64Strict(text) as Uint8Array;

async function run(makeStore: () => Promise<Store>, perInstance: number): Promise<void> {
  const logSigner = generateNoteSigner(ORIGIN, NOTE_ED25519);
  const keys = new TestSigningKeys();
  const bank = makeIssuer("issuer-1");
  keys.add(bank);
  const env = {
    KT_LOG_PRIVATE_KEY: formatNoteSkey(logSigner),
    HASHED_PAN_PEPPER: PEPPER,
    KT_SEQUENCER_POLL_MS: "10",
    KT_LOG_WAIT_MS: "60000",
  };
  const services: TestService[] = [];
  for (let i = 0; i < 3; i++) {
    services.push(
      await startService({
        store: await makeStore(),
        env,
        kt: { signingKeys: keys, holder: `instance-${i}` },
      }),
    );
  }
  // A client of its own on the shared store, to read what the instances wrote once they are gone.
  const store = await makeStore();
  try {
    const results: Array<{
      id: string;
      proof: Awaited<ReturnType<TestService["app"]["domain"]["kt"]["waitForLeaf"]>>;
    }> = [];
    const register = async (svc: TestService, i: number) => {
      const card = testCard();
      const pending = pendingOf(
        { log: svc.app.domain.kt } as never,
        bank,
        card,
        signedBinding(bank, card, userKey()),
      );
      const outcome = await svc.app.domain.store.users.register({
        panHash: card.cardKey,
        tenantId: "issuer-1",
        newUserId: `usr_${i}_${pending.id}`,
        key: {
          keyId: crypto.randomUUID(),
          tenantId: "issuer-1",
          publicKey: `k${i}`,
          algorithm: "HPKE-P256-SHA256-A256GCM",
          status: "active",
          createdAt: new Date(),
        },
        now: new Date(),
        kt: [pending],
      });
      expect(outcome.kind).toBe("created");
      svc.app.domain.kt.notify();
      results.push({ id: pending.id, proof: await svc.app.domain.kt.waitForLeaf(pending.id) });
    };
    const half = Math.floor(perInstance / 2);
    const waves = async (from: number, to: number, who: TestService[]) =>
      Promise.all(
        who.flatMap((svc, s) =>
          Array.from({ length: to - from }, (_, k) => register(svc, s * 1000 + from + k)),
        ),
      );
    await waves(0, half, services);
    // The instance holding the lease stops; another takes over within the lease's time.
    const leader = services.find((s) => s.app.kt.sequencer.leading) as TestService;
    expect(leader).toBeDefined();
    await leader.close();
    const rest = services.filter((s) => s !== leader);
    await waves(half, perInstance, rest);
    expect(rest.some((s) => s.app.kt.sequencer.leading)).toBe(true);

    const latest = await store.ktLog.latestCheckpoint();
    const head = await store.ktLog.head();
    const finalSize = latest?.size as number;
    expect(finalSize).toBe(head.size);
    const leaves = await store.ktLog.leaves(0, finalSize);
    expect(leaves.map((l) => l.index)).toEqual(Array.from({ length: finalSize }, (_, i) => i));
    // Each registration's statement is in exactly one leaf.
    const byPending = leaves.filter((l) => l.pendingId !== undefined).map((l) => l.pendingId);
    expect(new Set(byPending).size).toBe(byPending.length);
    expect(results.map((r) => r.id).sort()).toEqual([...byPending].sort());
    // The final root is the root of the leaves, rebuilt here from their bytes.
    const hashes = await Promise.all(
      leaves.map(async (l) =>
        leafHash(
          l.leaf ??
            new Uint8Array([
              3,
              ...new TextEncoder().encode((await store.ktLog.directory(l.directorySha256 as string))?.json),
            ]),
        ),
      ),
    );
    expect(new MemoryTree(hashes).root()).toEqual(latest?.root);
    for (const { id, proof } of results) {
      const note = parseNote(proof.checkpoint);
      expect(note && checkNoteSignature(note, logSigner.key).status).toBe("good");
      const checkpoint = parseCheckpoint(note?.text ?? "");
      const size = checkpoint?.size as number;
      const index =
        byPending.indexOf(id) >= 0 ? (leaves.find((l) => l.pendingId === id)?.index as number) : -1;
      expect(proof.proof.leafIndex).toBe(index);
      const inclusion = proof.proof.inclusion.map(fromB64);
      expect(
        verifyInclusion(index, size, hashes[index] as Uint8Array, inclusion, checkpoint?.root as Uint8Array),
      ).toBe(true);
      // No fork: the checkpoint the caller got is a prefix of the final one.
      if (size < finalSize) {
        const consistency = await consistencyProofFromTiles(store.ktLog, size, finalSize);
        expect(
          verifyConsistency(
            size,
            finalSize,
            checkpoint?.root as Uint8Array,
            latest?.root as Uint8Array,
            consistency,
          ),
        ).toBe(true);
      }
    }
  } finally {
    for (const svc of services) await svc.close().catch(() => undefined);
    await store.close();
  }
}

describe("one total order with several instances on one store", { timeout: 180_000 }, () => {
  it("memory store shared by three instances", async () => {
    const shared = createMemoryStore();
    await run(async () => shared, 20);
  });

  it(`MongoDB adapter on the fake driver with random latency (MONGO_FAKE_SEED=${seed})`, async () => {
    const fake = new FakeMongo({ seed, maxLatencyMs: 4 });
    await run(
      () =>
        createMongoStore({
          uri: "mongodb://fake.invalid/",
          dbName: "kt_order",
          createClient: fake.createClient,
        }),
      12,
    );
  });
});
