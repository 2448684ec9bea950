import { generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { base64, base64url, toHex } from "../src/kt/bytes.js";
import { canonicalJson, type Json } from "../src/kt/json.js";
import { directoryLeaf, statementLeaf } from "../src/kt/leaves.js";
import { leafHash } from "../src/kt/merkle.js";
import { nodeSha256 } from "../src/kt/node-engine.js";
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
import { appendToTiles, inclusionProofFromTiles, MemoryTiles, rootFromTiles } from "../src/kt/tiles.js";
import type { VerifyLookupInput } from "../src/kt/verify.js";
import type { KtLookupAnswer } from "../src/kt/wire.js";

/**
 * The key-transparency benches' shared parts: a rate comparison per CPU-second, and a log of a given
 * size (tiled) with a lookup answer for its newest leaf, its policy and the verifier's input.
 */

/**
 * Runs each variant in turn, a slice of `sliceMs` each, for `rounds` rounds, and prints each one's rate
 * per second of CPU time of this process (every thread: WebCrypto's work on libuv's pool counts too)
 * and its ratio to the first. CPU time rather than wall time, and interleaving, keep the figures
 * meaningful on a shared machine whose load changes while the bench runs. A variant returns how many
 * operations it did (a promise of it for async ones, awaited one at a time).
 */
export async function compare(
  title: string,
  variants: Array<[string, () => number | Promise<number>]>,
  rounds = 12,
  sliceMs = 250,
): Promise<number[]> {
  const counts = variants.map(() => 0);
  const times = variants.map(() => 0);
  for (let round = 0; round < rounds; round++) {
    for (const [i, [, run]] of variants.entries()) {
      const start = performance.now();
      const cpu = process.cpuUsage();
      let count = 0;
      while (performance.now() - start < sliceMs) {
        const done = run();
        count += typeof done === "number" ? done : await done;
      }
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

export const NOW = Date.now();

export async function world(size: number) {
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
    // The world is made in one go, so its roots have no 72 h of history: they count at once.
    rootDelaySeconds: 0,
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
