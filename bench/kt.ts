import { randomBytes } from "node:crypto";
import { defaultSha256, type Sha256 } from "../src/kt/hash.js";
import { leafHash, MemoryTree } from "../src/kt/merkle.js";
import { nodeEngine, nodeSha256 } from "../src/kt/node-engine.js";
import { inclusionProofFromTiles, type TileReader } from "../src/kt/tiles.js";
import { VerifierCache, verifyLookup } from "../src/kt/verify.js";
import { compare, world } from "./kt-world.js";

/**
 * Key-transparency figures, on one core: Merkle hashing throughput (noble against Node's native
 * SHA-256, a ratio in the same run), proof sizes at 10^3 and 10^6 leaves (10^6 simulated through the
 * tiled store), the cost of a proof served from tiles, and the merchant's verification of one lookup
 * answer per second with each engine. `npm run bench:kt`.
 */

async function hashing(): Promise<void> {
  const leaves = Array.from({ length: 20_000 }, () => new Uint8Array(randomBytes(41)));
  const build = (sha256: Sha256) => () => {
    const tree = new MemoryTree([], sha256);
    for (const leaf of leaves) tree.append(leafHash(leaf, sha256));
    return 2 * leaves.length - 1;
  };
  await compare(
    "Merkle hashes (leaf + node) per second, building a 20,000-leaf tree",
    [
      ["@noble/hashes", build(defaultSha256)],
      ["node:crypto", build(nodeSha256)],
    ],
    6,
    1000,
  );
}

/** Counts the tiles and bytes a proof reads. */
class CountingReader implements TileReader {
  tiles = 0;
  bytes = 0;
  constructor(private readonly inner: TileReader) {}
  async readTiles(requests: Parameters<TileReader["readTiles"]>[0]): Promise<Uint8Array[]> {
    const out = await this.inner.readTiles(requests);
    this.tiles += requests.length;
    for (const t of out) this.bytes += t.length;
    return out;
  }
}

async function sizes(): Promise<void> {
  const only = process.env.KT_BENCH_SIZES;
  for (const size of only === undefined ? [1_000, 1_000_000] : only.split(",").map(Number)) {
    const started = performance.now();
    const w = await world(size);
    const built = (performance.now() - started) / 1000;
    const ktJson = JSON.stringify({
      binding: w.answer.binding,
      opening: w.answer.opening,
      proof: w.answer.proof,
      directory: w.answer.directory,
    });
    console.log(
      `${size.toLocaleString("en")} leaves (built in ${built.toFixed(1)} s): inclusion proof ${w.proofHashes} hashes = ${w.proofHashes * 32} bytes; ` +
        `kt members of a lookup answer (JSON, 3 cosignatures) ${ktJson.length} bytes`,
    );
    const deepest = Math.ceil(Math.log2(size));
    console.log(
      `  a proof of an older leaf has up to ${deepest} hashes = ${deepest * 32} bytes (each of the two proofs of an answer)`,
    );
    const counting = new CountingReader(w.tiles);
    const n = 200;
    const cpu = process.cpuUsage();
    for (let i = 0; i < n; i++)
      await inclusionProofFromTiles(counting, Math.floor(Math.random() * size), size, nodeSha256);
    const used = process.cpuUsage(cpu);
    const ms = (used.user + used.system) / 1000 / n;
    console.log(
      `  inclusion proof from tiles (Node SHA-256, random leaf): ${ms.toFixed(3)} ms CPU, ${(counting.tiles / n).toFixed(1)} tiles, ${Math.round(counting.bytes / n)} bytes read per proof`,
    );
    if (!verifyLookup(w.policy, w.input).ok) throw new Error("the bench's answer does not verify");
    const [cache, nodeCache] = [new VerifierCache(), new VerifierCache()];
    const node = { engine: nodeEngine, sha256: nodeSha256 };
    await compare(`  verifyLookup per CPU-second at ${size.toLocaleString("en")} leaves`, [
      ["pure JS (noble)", () => (verifyLookup(w.policy, w.input).ok ? 1 : 0)],
      ["Node engine", () => (verifyLookup(w.policy, w.input, node).ok ? 1 : 0)],
      [
        "pure JS, checkpoint and snapshot cached",
        () => (verifyLookup(w.policy, w.input, { cache }).ok ? 1 : 0),
      ],
      [
        "Node engine, cached",
        () => (verifyLookup(w.policy, w.input, { ...node, cache: nodeCache }).ok ? 1 : 0),
      ],
    ]);
  }
}

// KT_BENCH_SIZES=1000 (comma-separated sizes) and KT_BENCH_SKIP_HASHING=1 narrow a run, for profiling.
if (process.env.KT_BENCH_SKIP_HASHING === undefined) await hashing();
await sizes();
