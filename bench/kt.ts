import { generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { base64, base64url, toHex } from "../src/kt/bytes.js";
import { defaultSha256, type Sha256 } from "../src/kt/hash.js";
import { canonicalJson, type Json } from "../src/kt/json.js";
import { directoryLeaf, statementLeaf } from "../src/kt/leaves.js";
import { leafHash, MemoryTree } from "../src/kt/merkle.js";
import { nodeEngine, nodeSha256 } from "../src/kt/node-engine.js";
import {
  COSIGNATURE_ED25519,
  cosignLine,
  formatCheckpoint,
  formatNote,
  formatVkey,
  NOTE_ED25519,
  noteSigner,
  signNoteLine,
} from "../src/kt/note.js";
import { parsePolicy } from "../src/kt/policy.js";
import { signingKeyIdOf } from "../src/kt/signatures.js";
import { formatTime } from "../src/kt/statements.js";
import {
  appendToTiles,
  inclusionProofFromTiles,
  MemoryTiles,
  rootFromTiles,
  type TileReader,
} from "../src/kt/tiles.js";
import { VerifierCache, type VerifyLookupInput, verifyLookup } from "../src/kt/verify.js";
import type { KtLookupAnswer } from "../src/kt/wire.js";

/**
 * Key-transparency figures, on one core: Merkle hashing throughput (noble against Node's native
 * SHA-256, a ratio in the same run), proof sizes at 10^3 and 10^6 leaves (10^6 simulated through the
 * tiled store), the cost of a proof served from tiles, and the merchant's verification of one lookup
 * answer per second with each engine. `npm run bench:kt`.
 */

/**
 * Runs each variant in turn, a slice of `sliceMs` each, for `rounds` rounds, and prints each one's rate
 * per second of CPU time of this process (one core: everything here runs on the main thread) and its
 * ratio to the first. CPU time rather than wall time, and interleaving, keep the figures meaningful on
 * a shared machine whose load changes while the bench runs.
 */
function compare(
  title: string,
  variants: Array<[string, () => number]>,
  rounds = 12,
  sliceMs = 250,
): number[] {
  const counts = variants.map(() => 0);
  const times = variants.map(() => 0);
  for (let round = 0; round < rounds; round++) {
    for (const [i, [, run]] of variants.entries()) {
      const start = performance.now();
      const cpu = process.cpuUsage();
      let count = 0;
      while (performance.now() - start < sliceMs) count += run();
      const used = process.cpuUsage(cpu);
      times[i] = (times[i] as number) + (used.user + used.system) / 1000;
      counts[i] = (counts[i] as number) + count;
    }
  }
  const rates = counts.map((c, i) => c / ((times[i] as number) / 1000));
  console.log(title);
  for (const [i, [label]] of variants.entries()) {
    const ratio = i === 0 ? "" : ` (${((rates[i] as number) / (rates[0] as number)).toFixed(2)}x)`;
    console.log(`  ${label}: ${Math.round(rates[i] as number).toLocaleString("en")}/s${ratio}`);
  }
  return rates;
}

function hashing(): void {
  const leaves = Array.from({ length: 20_000 }, () => new Uint8Array(randomBytes(41)));
  const build = (sha256: Sha256) => () => {
    const tree = new MemoryTree([], sha256);
    for (const leaf of leaves) tree.append(leafHash(leaf, sha256));
    return 2 * leaves.length - 1;
  };
  compare(
    "Merkle hashes (leaf + node) per second, building a 20,000-leaf tree",
    [
      ["@noble/hashes", build(defaultSha256)],
      ["node:crypto", build(nodeSha256)],
    ],
    6,
    1000,
  );
}

/** A tree of `size` leaves in tiles (random leaf hashes, then `tail` real leaves at the end). */
async function tiledTree(size: number, tail: Uint8Array[]): Promise<MemoryTiles> {
  const tiles = new MemoryTiles();
  let at = 0;
  const fill = size - tail.length;
  while (at < fill) {
    const batch = Math.min(65_536, fill - at);
    const hashes = Array.from({ length: batch }, () => nodeSha256(randomBytes(8)));
    const result = await appendToTiles(tiles, at, hashes, nodeSha256);
    tiles.write(result.tiles);
    at = result.size;
  }
  const result = await appendToTiles(
    tiles,
    at,
    tail.map((leaf) => leafHash(leaf, nodeSha256)),
    nodeSha256,
  );
  tiles.write(result.tiles);
  return tiles;
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

const NOW = Date.now();

async function world(size: number) {
  const log = noteSigner("kt.example.com/receipts/kt/v1", NOTE_ED25519, randomBytes(32));
  const witnesses = ["a", "b", "c"].map((o) => ({
    signer: noteSigner(`w.${o}.example`, COSIGNATURE_ED25519, randomBytes(32)),
    organisation: o,
  }));
  const issuerPair = generateKeyPairSync("ed25519");
  const issuerSpki = new Uint8Array(issuerPair.publicKey.export({ format: "der", type: "spki" }));
  const userSpki = new Uint8Array(
    generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey.export({ format: "der", type: "spki" }),
  );
  const keyId = "11111111-1111-4111-a111-111111111111";
  const snapshot = canonicalJson({
    v: 1,
    type: "receipts.v1/directory",
    issuedAt: formatTime(NOW - 3_600_000),
    notAfter: formatTime(NOW + 40 * 3_600_000),
    previous: null,
    issuers: [
      {
        issuer: "bank-a",
        version: 1,
        requireBindings: true,
        plaintextIntake: "accept",
        signingKeys: [
          {
            signingKeyId: signingKeyIdOf(issuerSpki),
            algorithm: "Ed25519",
            spki: base64(issuerSpki),
            role: "root",
            status: "current",
            effectiveFrom: formatTime(NOW - 86_400_000 * 10),
          },
        ],
        prefixes: [
          {
            prefix: "411111",
            kind: "bin",
            effectiveFrom: formatTime(NOW - 86_400_000 * 10),
            effectiveUntil: null,
          },
        ],
        escrowKey: null,
      },
    ],
    serviceEscrowKey: null,
  } as Json);
  const statement = new TextEncoder().encode(
    canonicalJson({
      v: 1,
      type: "receipts.v1/key-binding",
      issuer: "bank-a",
      cardRef: "a".repeat(64),
      bin: "41111111",
      keyId,
      algorithm: "HPKE-P256-SHA256-A256GCM",
      spkiSha256: base64url(nodeSha256(userSpki)),
      version: 1,
      supersedes: null,
      notBefore: formatTime(NOW - 86_400_000),
      notAfter: formatTime(NOW + 30 * 86_400_000),
    }),
  );
  const opening = new Uint8Array(randomBytes(16));
  const leaves = [
    directoryLeaf(snapshot),
    statementLeaf({ signerSpki: issuerSpki, opening, statement }, nodeSha256),
  ];
  const tiles = await tiledTree(size, leaves);
  const [dirIndex, leafIndex] = [size - 2, size - 1];
  const root = await rootFromTiles(tiles, size, nodeSha256);
  const text = formatCheckpoint({ origin: "kt.example.com/receipts/kt/v1", size, root, extensions: [] });
  const lines = [
    signNoteLine(log, text),
    ...witnesses.map((w) => cosignLine(w.signer, text, Math.floor(NOW / 1000) - 30)),
  ];
  const checkpoint = formatNote(text, lines);
  const proof = await inclusionProofFromTiles(tiles, leafIndex, size, nodeSha256);
  const dirProof = await inclusionProofFromTiles(tiles, dirIndex, size, nodeSha256);
  const answer: KtLookupAnswer = {
    keyId,
    algorithm: "HPKE-P256-SHA256-A256GCM",
    publicKey: base64(userSpki),
    isEscrowed: false,
    binding: {
      statement: base64(statement),
      signature: base64(new Uint8Array(sign(null, statement, issuerPair.privateKey))),
      signingKeyId: signingKeyIdOf(issuerSpki),
    },
    opening: base64(opening),
    proof: { leafIndex, treeSize: size, inclusion: proof.map(base64), checkpoint },
    directory: {
      index: dirIndex,
      inclusion: dirProof.map(base64),
      sha256: toHex(nodeSha256(new TextEncoder().encode(snapshot))),
    },
  };
  const policy = parsePolicy({
    origin: "kt.example.com/receipts/kt/v1",
    logKey: formatVkey(log.key),
    operator: "op",
    witnesses: witnesses.map((w) => ({ vkey: formatVkey(w.signer.key), organisation: w.organisation })),
    quorum: 2,
  });
  const input: VerifyLookupInput = {
    answer,
    card: { cardRef: { hashedPan: "a".repeat(64) }, bin: { digits: "41111111", kind: "bin" } },
    sealTo: { keyId, algorithm: "HPKE-P256-SHA256-A256GCM", spki: userSpki },
    directoryJson: snapshot,
    now: NOW,
  };
  return { tiles, answer, policy, input, proofHashes: proof.length };
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
    compare(`  verifyLookup per CPU-second at ${size.toLocaleString("en")} leaves`, [
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
if (process.env.KT_BENCH_SKIP_HASHING === undefined) hashing();
await sizes();
