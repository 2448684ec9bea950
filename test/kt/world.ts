import { generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { base64, base64url, toHex } from "../../src/kt/bytes.js";
import type { DirectorySnapshot } from "../../src/kt/directory.js";
import { canonicalJson, type Json } from "../../src/kt/json.js";
import { directoryLeaf, statementLeaf } from "../../src/kt/leaves.js";
import { leafHash, MemoryTree } from "../../src/kt/merkle.js";
import {
  COSIGNATURE_ED25519,
  cosignLine,
  formatCheckpoint,
  formatNote,
  formatVkey,
  NOTE_ED25519,
  type NoteSigner,
  noteSigner,
  signNoteLine,
} from "../../src/kt/note.js";
import { parsePolicy, type TrustPolicy } from "../../src/kt/policy.js";
import { signingKeyIdOf } from "../../src/kt/signatures.js";
import { formatTime } from "../../src/kt/statements.js";
import type { KtLookupAnswer } from "../../src/kt/wire.js";
import { nodeSha256 } from "./support.js";

/**
 * A small honest log for verifier tests: a log key, three witnesses of two organisations, issuers
 * with Ed25519 signing keys and BINs, a directory snapshot, and statements appended as leaves. Each
 * test bends one thing and expects the one check that should catch it.
 */

export const NOW = Date.parse("2026-11-25T12:00:00Z");
export const ORIGIN = "kt.example.com/receipts/kt/v1";
const seconds = (ms: number) => Math.floor(ms / 1000);

export interface Issuer {
  tenant: string;
  spki: Uint8Array;
  signingKeyId: string;
  sign(data: Uint8Array): Uint8Array;
}

export function makeIssuer(tenant: string): Issuer {
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const spki = new Uint8Array(publicKey.export({ format: "der", type: "spki" }));
  return {
    tenant,
    spki,
    signingKeyId: signingKeyIdOf(spki),
    sign: (data) => new Uint8Array(sign(null, data, privateKey)),
  };
}

export function makeUserKey(): { keyId: string; spki: Uint8Array; spkiSha256: string } {
  const spki = new Uint8Array(
    generateKeyPairSync("ec", { namedCurve: "P-256" }).publicKey.export({ format: "der", type: "spki" }),
  );
  const h = randomBytes(16).toString("hex");
  const keyId = `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20, 32)}`;
  return { keyId, spki, spkiSha256: base64url(nodeSha256(spki)) };
}

export class World {
  readonly log: NoteSigner = noteSigner(ORIGIN, NOTE_ED25519, randomBytes(32));
  readonly witnesses = [
    { signer: noteSigner("w1.bank-a.example", COSIGNATURE_ED25519, randomBytes(32)), organisation: "bank-a" },
    { signer: noteSigner("w2.bank-a.example", COSIGNATURE_ED25519, randomBytes(32)), organisation: "bank-a" },
    { signer: noteSigner("w3.ngo.example", COSIGNATURE_ED25519, randomBytes(32)), organisation: "ngo" },
  ];
  readonly tree = new MemoryTree([], nodeSha256);
  readonly leaves: Uint8Array[] = [];
  readonly policyJson: TrustPolicy = {
    origin: ORIGIN,
    logKey: formatVkey(this.log.key),
    operator: "operator",
    witnesses: this.witnesses.map((w) => ({ vkey: formatVkey(w.signer.key), organisation: w.organisation })),
    quorum: 2,
    // As against a development service: the root delay has tests of its own (root-delay.test.ts).
    rootDelaySeconds: 0,
  };

  policy(changes: Partial<TrustPolicy> = {}) {
    return parsePolicy({ ...this.policyJson, ...changes });
  }

  append(leaf: Uint8Array): number {
    this.leaves.push(leaf);
    this.tree.append(leafHash(leaf, nodeSha256));
    return this.tree.size - 1;
  }

  /** The checkpoint of the tree now, signed by the log and cosigned by the given witnesses at `at` (ms). */
  checkpoint(options: { cosigners?: number[]; at?: number; size?: number; root?: Uint8Array } = {}): string {
    const size = options.size ?? this.tree.size;
    const text = formatCheckpoint({
      origin: ORIGIN,
      size,
      root: options.root ?? this.tree.root(size),
      extensions: [],
    });
    const at = seconds(options.at ?? NOW - 60_000);
    const lines = [signNoteLine(this.log, text)];
    for (const i of options.cosigners ?? [0, 2])
      lines.push(cosignLine((this.witnesses[i] as (typeof this.witnesses)[0]).signer, text, at));
    return formatNote(text, lines);
  }
}

export function snapshotOf(
  issuers: Array<{ issuer: Issuer; bins: string[]; escrowKey?: DirectorySnapshot["serviceEscrowKey"] }>,
  changes: Partial<DirectorySnapshot> = {},
): string {
  const snapshot: DirectorySnapshot = {
    v: 1,
    type: "receipts.v1/directory",
    issuedAt: formatTime(NOW - 3_600_000),
    notAfter: formatTime(NOW + 40 * 3_600_000),
    previous: null,
    issuers: issuers.map(({ issuer, bins, escrowKey }) => ({
      issuer: issuer.tenant,
      version: 1,
      requireBindings: true,
      plaintextIntake: "refuse",
      signingKeys: [
        {
          signingKeyId: issuer.signingKeyId,
          algorithm: issuer.spki.length === 44 ? "Ed25519" : "ECDSA-P256-SHA256",
          spki: base64(issuer.spki),
          role: "root",
          status: "current",
          effectiveFrom: formatTime(NOW - 10 * 86_400_000),
        },
      ],
      prefixes: bins.map((prefix) => ({
        prefix,
        kind: "bin",
        effectiveFrom: formatTime(NOW - 86_400_000),
        effectiveUntil: null,
      })),
      escrowKey: escrowKey ?? null,
    })),
    serviceEscrowKey: null,
    ...changes,
  };
  return canonicalJson(snapshot as unknown as Json);
}

export function bindingOf(
  issuer: Issuer,
  key: { keyId: string; spkiSha256: string },
  cardRef: string,
  changes: Record<string, Json> = {},
): string {
  return canonicalJson({
    v: 1,
    type: "receipts.v1/key-binding",
    issuer: issuer.tenant,
    cardRef,
    bin: "41111111",
    keyId: key.keyId,
    algorithm: "HPKE-P256-SHA256-A256GCM",
    spkiSha256: key.spkiSha256,
    version: 1,
    supersedes: null,
    notBefore: formatTime(NOW - 86_400_000),
    notAfter: formatTime(NOW + 30 * 86_400_000),
    ...changes,
  });
}

/** Appends a statement's leaf (and the snapshot's) and builds the lookup answer for them. */
export function answerFor(
  world: World,
  input: {
    statement: string;
    signer: Issuer;
    signWith?: Issuer;
    key: { keyId: string; spki: Uint8Array };
    par?: string;
    snapshot: string;
    isEscrowed?: boolean;
    /** Append the statement before the snapshot, then this many filler leaves. */
    statementFirst?: number;
  },
): KtLookupAnswer {
  const bytes = new TextEncoder().encode(input.statement);
  const opening = new Uint8Array(randomBytes(16));
  const statementLeafBytes = statementLeaf(
    { signerSpki: input.signer.spki, opening, statement: bytes, par: input.par },
    nodeSha256,
  );
  const first = input.statementFirst !== undefined;
  const leafIndex = first ? world.append(statementLeafBytes) : -1;
  const directoryIndex = world.append(directoryLeaf(input.snapshot));
  for (let i = 0; i < (input.statementFirst ?? 0); i++) world.append(new Uint8Array([9, i]));
  const statementIndex = first ? leafIndex : world.append(statementLeafBytes);
  const checkpoint = world.checkpoint();
  const size = world.tree.size;
  return {
    keyId: input.key.keyId,
    algorithm: "HPKE-P256-SHA256-A256GCM",
    publicKey: base64(input.key.spki),
    isEscrowed: input.isEscrowed ?? false,
    binding: {
      statement: base64(bytes),
      signature: base64((input.signWith ?? input.signer).sign(bytes)),
      signingKeyId: input.signer.signingKeyId,
    },
    opening: base64(opening),
    proof: {
      leafIndex: statementIndex,
      treeSize: size,
      inclusion: world.tree.inclusionProof(statementIndex, size).map(base64),
      checkpoint,
    },
    directory: {
      index: directoryIndex,
      inclusion: world.tree.inclusionProof(directoryIndex, size).map(base64),
      sha256: toHex(nodeSha256(new TextEncoder().encode(input.snapshot))),
    },
  };
}
