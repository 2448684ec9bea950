import { createHmac, generateKeyPairSync, randomBytes, randomUUID, sign } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { systemClock } from "../src/clock.js";
import type { KtConfig } from "../src/config-kt.js";
import { createKtRuntime, type KtRuntime } from "../src/domain/kt/runtime.js";
import { noteWithCosignatures } from "../src/domain/kt/service.js";
import type { KtSigningKeyInfo } from "../src/domain/kt/statement-check.js";
import { CachedTiles } from "../src/domain/kt/tile-cache.js";
import { base64, utf8 } from "../src/kt/bytes.js";
import { canonicalJson } from "../src/kt/json.js";
import { leafHash } from "../src/kt/merkle.js";
import { nodeSha256 } from "../src/kt/node-engine.js";
import { NOTE_ED25519 } from "../src/kt/note.js";
import { generateNoteSigner } from "../src/kt/note-keys.js";
import { signingKeyIdOf } from "../src/kt/signatures.js";
import { formatTime, parseStatement, type Statement } from "../src/kt/statements.js";
import { appendToTiles, inclusionProofFromTiles } from "../src/kt/tiles.js";
import { createLogger } from "../src/logging.js";
import type { KtCheckpointRecord, KtDirectoryRecord, KtPendingStatement } from "../src/store/kt-types.js";
import { createMemoryStore } from "../src/store/memory/index.js";
import type { Store } from "../src/store/types.js";
import { compare } from "./kt-world.js";

/**
 * The key log's service-side figures (`npm run bench:kt-log`), on the memory store in this process:
 *
 * - append throughput: statements per second through the sequencer (each checked again: card
 *   reference unsealed, signature, order; leaf built, tiles and leaf records written), per second of
 *   wall time and of this process's CPU time, against appending the same number of ready-made leaves
 *   with no checks (the store and tree work alone), in the same run;
 * - checkpoint latency: from a statement's enqueue (and the wake-up its intake sends) to the proof of
 *   its leaf under a signed checkpoint, p50 and p99, at a steady arrival rate with the loop running:
 *   this is the time `register` waits for its leaf;
 * - proof serving: the proofs a lookup answer carries (`KtLog.proofs`: leaf inclusion, snapshot
 *   inclusion, checkpoint), per CPU-second, at 10^3 and 10^5 leaves, against rebuilding both proofs
 *   from the tiles for every answer (as before the proof cache), interleaved in the same run.
 *
 * The MongoDB adapter adds its round trips to each of these; its figures need a server (not here).
 */

const PEPPER = "bench-pepper-bench-pepper-bench-pepper";
const ORIGIN = "bench.example/receipts/kt/v1";

function config(): KtConfig {
  return {
    logPrivateKey: undefined,
    witnesses: [],
    waitMs: 30_000,
    answerCosignatures: 0,
    sequencer: true,
    sequencerPollMs: 100,
    readsPerMinute: 600,
    maxBindingDays: 35,
    witnessTimeoutMs: 5_000,
  };
}

/** An issuer with an Ed25519 key the log knows as current. */
function issuer() {
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const spki = new Uint8Array(publicKey.export({ format: "der", type: "spki" }));
  const info: KtSigningKeyInfo = {
    tenantId: "bank-a",
    signingKeyId: signingKeyIdOf(spki),
    spki,
    role: "root",
    status: "current",
  };
  return { info, sign: (data: Uint8Array) => new Uint8Array(sign(null, data, privateKey)) };
}

function runtimeOver(store: Store, signer: ReturnType<typeof issuer>): KtRuntime {
  return createKtRuntime({
    store,
    clock: systemClock,
    logger: createLogger("silent"),
    pepper: PEPPER,
    config: config(),
    signer: generateNoteSigner(ORIGIN, NOTE_ED25519),
    leases: store.leases,
    signingKeys: { find: async (_t, id) => (id === signer.info.signingKeyId ? signer.info : undefined) },
  });
}

/** `count` pending bindings of fresh cards, signed. */
function pendings(
  runtime: KtRuntime,
  signer: ReturnType<typeof issuer>,
  count: number,
): KtPendingStatement[] {
  const now = Date.now();
  return Array.from({ length: count }, () => {
    const hashedPan = randomBytes(32).toString("hex");
    const text = canonicalJson({
      v: 1,
      type: "receipts.v1/key-binding",
      issuer: "bank-a",
      cardRef: hashedPan,
      bin: "41111111",
      keyId: randomUUID(),
      algorithm: "HPKE-P256-SHA256-A256GCM",
      spkiSha256: randomBytes(32).toString("base64url"),
      version: 1,
      supersedes: null,
      notBefore: formatTime(now - 86_400_000),
      notAfter: formatTime(now + 30 * 86_400_000),
    });
    const bytes = utf8(text);
    const parsed = parseStatement(text);
    if (!parsed.ok) throw new Error(parsed.reason);
    return runtime.log.pendingStatement({
      tenantId: "bank-a",
      statement: parsed.value as Statement,
      bytes,
      signature: signer.sign(bytes),
      signingKeyId: signer.info.signingKeyId,
      card: {
        kind: "hashed-pan",
        ref: hashedPan,
        key: createHmac("sha256", PEPPER).update(hashedPan).digest("hex"),
      },
    });
  });
}

async function timed<T>(work: () => Promise<T>): Promise<{ value: T; wallMs: number; cpuMs: number }> {
  const cpu = process.cpuUsage();
  const start = performance.now();
  const value = await work();
  const used = process.cpuUsage(cpu);
  return { value, wallMs: performance.now() - start, cpuMs: (used.user + used.system) / 1000 };
}

async function appendThroughput(count: number): Promise<void> {
  const signer = issuer();
  const store = createMemoryStore();
  const runtime = runtimeOver(store, signer);
  const records = pendings(runtime, signer, count);
  for (let i = 0; i < records.length; i += 500) await store.ktLog.enqueue(records.slice(i, i + 500));
  const sequenced = await timed(async () => {
    while ((await store.ktLog.pending(1)).length > 0) await runtime.sequencer.round();
  });
  // The same number of leaves, ready-made, appended in batches of 256 with no checks.
  const bare = createMemoryStore();
  const leaves = records.map(() => new Uint8Array(randomBytes(41)));
  const raw = await timed(async () => {
    for (let i = 0; i < leaves.length; i += 256) {
      const head = await bare.ktLog.head();
      const batch = leaves.slice(i, i + 256);
      const appended = await appendToTiles(
        bare.ktLog,
        head.size,
        batch.map((l) => leafHash(l, nodeSha256)),
        nodeSha256,
      );
      await bare.ktLog.append(
        { token: 1 },
        {
          oldSize: head.size,
          newSize: appended.size,
          root: new Uint8Array(32),
          tiles: appended.tiles,
          leaves: batch.map((leaf, k) => ({
            index: head.size + k,
            kind: "statement",
            leaf,
            appendedAt: new Date(),
          })),
          consumed: [],
          refused: [],
          sequences: [],
        },
      );
    }
  });
  const rate = (n: number, ms: number) => Math.round((n / ms) * 1000).toLocaleString("en");
  console.log(
    `Append throughput, ${count.toLocaleString("en")} statements through the sequencer (memory store)`,
  );
  console.log(
    `  sequencer (checked): ${rate(count, sequenced.wallMs)}/s wall, ${rate(count, sequenced.cpuMs)}/CPU-s`,
  );
  console.log(
    `  bare appends (no checks): ${rate(count, raw.wallMs)}/s wall, ${rate(count, raw.cpuMs)}/CPU-s`,
  );
  console.log(`  ratio checked / bare, per CPU-s: ${(raw.cpuMs / sequenced.cpuMs).toFixed(3)}`);
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] as number;
}

async function checkpointLatency(perSecond: number, seconds: number): Promise<void> {
  const signer = issuer();
  const store = createMemoryStore();
  const runtime = runtimeOver(store, signer);
  runtime.start();
  const records = pendings(runtime, signer, perSecond * seconds);
  const waits: Promise<number>[] = [];
  const gap = 1000 / perSecond;
  const begin = performance.now();
  for (const [i, record] of records.entries()) {
    const due = begin + i * gap;
    if (due > performance.now()) await sleep(due - performance.now());
    const start = performance.now();
    await store.ktLog.enqueue([record]);
    runtime.log.notify();
    waits.push(runtime.log.waitForLeaf(record.id).then(() => performance.now() - start));
  }
  const times = (await Promise.all(waits)).sort((a, b) => a - b);
  await runtime.stop();
  const checkpoints = (await store.ktLog.latestCheckpoint())?.size ?? 0;
  console.log(
    `Enqueue to proof under a signed checkpoint (what register waits), ${perSecond}/s for ${seconds} s`,
  );
  console.log(
    `  p50 ${percentile(times, 50).toFixed(1)} ms, p99 ${percentile(times, 99).toFixed(1)} ms, max ${(times.at(-1) as number).toFixed(1)} ms (tree ${checkpoints})`,
  );
}

async function proofServing(leaves: number): Promise<void> {
  const signer = issuer();
  const store = createMemoryStore();
  const runtime = runtimeOver(store, signer);
  const records = pendings(runtime, signer, leaves);
  for (let i = 0; i < records.length; i += 500) await store.ktLog.enqueue(records.slice(i, i + 500));
  while ((await store.ktLog.pending(1)).length > 0) await runtime.sequencer.round();
  const size = (await store.ktLog.head()).size;
  // Before the proof cache: every answer rebuilt both proofs from (cached) tiles.
  const tiles = new CachedTiles(store.ktLog);
  let before = 0;
  const rebuilt = async () => {
    const checkpoint = (await store.ktLog.latestCheckpoint()) as KtCheckpointRecord;
    const directory = (await store.ktLog.directoryBefore(checkpoint.size)) as KtDirectoryRecord;
    const leaf = before++ % (size - 1);
    const proofs = [leaf, directory.index].map(async (i) =>
      (await inclusionProofFromTiles(tiles, i, checkpoint.size, nodeSha256)).map(base64),
    );
    await Promise.all([...proofs, noteWithCosignatures(checkpoint)]);
    return 1;
  };
  let after = 0;
  const cached = async () => {
    await runtime.log.proofs({ leafIndex: after++ % (size - 1) });
    return 1;
  };
  const [old, now] = await compare(
    `Answer proofs (leaf + snapshot inclusion, checkpoint) at ${size.toLocaleString("en")} leaves, per CPU-s`,
    [
      ["rebuilt from tiles (before the proof cache)", rebuilt],
      ["KtLog.proofs (subtree memo, snapshot proof kept per checkpoint)", cached],
    ],
    6,
  );
  const bytes = JSON.stringify(await runtime.log.proofs({ leafIndex: 0 })).length;
  console.log(`  ${((now as number) / (old as number)).toFixed(1)}x; ${bytes} bytes of JSON`);
}

await appendThroughput(5_000);
await checkpointLatency(200, 5);
await proofServing(1_000);
await proofServing(100_000);
