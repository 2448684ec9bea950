import { base64, bytesEqual, fromBase64Strict, fromUtf8, toHex } from "../kt/bytes.js";
import { CompactRange } from "../kt/compact-range.js";
import type { Sha256 } from "../kt/hash.js";
import { parseCanonicalObject } from "../kt/json.js";
import { commitmentOf, parseLeaf } from "../kt/leaves.js";
import { emptyRoot, leafHash, verifyConsistency } from "../kt/merkle.js";
import {
  EMPTY_MONITOR_STATE,
  type MonitorAlert,
  type MonitorConfig,
  type MonitorState,
  monitor,
} from "../kt/monitor.js";
import { nodeEngine, nodeSha256 } from "../kt/node-engine.js";
import { checkNoteSignature, parseNote } from "../kt/note.js";
import { checkCheckpointSignatures, checkFreshness, type ParsedPolicy } from "../kt/policy.js";
import { signerHashOf } from "../kt/signatures.js";
import { withCardRef } from "../kt/statements.js";
import type { KtOpenedEntry } from "../kt/wire.js";

/**
 * An issuer's monitor of the key log (docs/key-transparency.md, "The issuer's monitor"), one run: read the
 * log's newest checkpoint and trust it only under the issuer's policy (the log's key and a fresh witness
 * quorum); prove it consistent with the checkpoint of the last run; read every leaf added since, proving they
 * are exactly that tree's leaves (the compact range of the last run, grown by them, has the new root);
 * open the issuer's own leaves through its feed, with card references from its own records; and hand
 * all of it to the pure core (`src/kt/monitor.ts`), which says what is wrong. The run's alerts are
 * its output; the next state is kept only when the log itself checked out, so a fork or a rewrite is
 * reported on every run until someone looks.
 */

/** Where the monitor reads the log (HTTP in the command line, an in-memory log in tests). */
export interface MonitorSource {
  /** The newest checkpoint note, with every cosignature. */
  checkpoint(): Promise<string>;
  /** The consistency proof between two tree sizes. */
  consistency(from: number, to: number): Promise<Uint8Array[]>;
  /** Leaves from `start` (inclusive) towards `end` (exclusive), in order; a page may hold fewer. */
  leaves(start: number, end: number): Promise<Uint8Array[]>;
  /** The issuer's opened leaves with index at least `from`, in index order (every page). */
  feed(from: number): Promise<KtOpenedEntry[]>;
}

/** What the issuer's own records say (the monitor's `--records` file). */
export interface IssuerRecords {
  issuer: string;
  /** Base64 SPKI of each of the issuer's signing keys, current or past. */
  signingKeys: string[];
  /** Its BIN and token-BIN prefixes. */
  prefixes: string[];
  /**
   * Its cards: the card reference (hashed PAN or PAR), the userId the service gave it, and whether it
   * is enrolled (default true). A card it knows but never enrolled is listed with `enrolled: false`, so
   * a binding someone else made for it is recognised as such.
   */
  cards: Array<{ cardRef: string; userId?: string; enrolled?: boolean }>;
  /** Hex SHA-256 of every statement it signed. */
  signed: string[];
  /** Its own directory entry as it should read (canonical JSON), when it keeps one. */
  expectedEntry?: string;
  /** The escrowKeyIds it registered: any other escrow key listed for it is an alert. */
  escrowKeyIds?: string[];
  /**
   * The cards it erased, with the version of the last statement it signed about each (the erasure's
   * revocation; the last binding when it erased unrevoked): their erased leaves are no alarm.
   */
  erased?: Array<{ cardRef: string; version: number }>;
}

/** What the monitor keeps between runs (the `--state` file). */
export interface MonitorFileState {
  v: 1;
  /** The last checkpoint that checked out: size and base64 root. */
  checkpoint: { size: number; root: string } | null;
  /** The compact range of its tree (see `compact-range.ts`). */
  range: { size: number; nodes: string[] };
  /** The pure core's state. */
  core: MonitorState;
}

export const EMPTY_STATE: MonitorFileState = {
  v: 1,
  checkpoint: null,
  range: { size: 0, nodes: [] },
  core: EMPTY_MONITOR_STATE,
};

/** One run's outcome. */
export interface MonitorRun {
  alerts: MonitorAlert[];
  /** The state to keep (the old one when the log did not check out). */
  state: MonitorFileState;
  /** The checkpoint read, and how many leaves were read. */
  treeSize: number;
  leavesRead: number;
}

/** Runs the monitor once; see the module comment. Network failures throw (the run is retried later). */
export async function runMonitor(
  source: MonitorSource,
  policy: ParsedPolicy,
  records: IssuerRecords,
  previous: MonitorFileState,
  now: number,
  sha256: Sha256 = nodeSha256,
): Promise<MonitorRun> {
  const note = await source.checkpoint();
  const signed = checkCheckpointSignatures(policy, note, nodeEngine);
  if (!signed.ok) return refused(previous, `the log's checkpoint does not verify: ${signed.reason}`);
  const { size, root } = signed.value.checkpoint;
  const fresh = checkFreshness(policy, signed.value, Math.floor(now / 1000));
  const alerts: MonitorAlert[] = fresh.ok
    ? []
    : [{ message: `the log's checkpoint is not freshly witnessed: ${fresh.reason}` }];
  const old = previous.checkpoint;
  if (old !== null) {
    const oldRoot = fromBase64Strict(old.root) as Uint8Array;
    if (size < old.size)
      return refused(previous, `the log shrank from ${old.size} to ${size} leaves`, alerts);
    // Every tree extends the empty one (whose root is fixed); there is no proof from size 0 to ask for.
    const extendsEmpty = old.size === 0 && toHex(oldRoot) === toHex(emptyRoot(sha256));
    const proof = size === old.size || old.size === 0 ? [] : await source.consistency(old.size, size);
    if (!extendsEmpty && !verifyConsistency(old.size, size, oldRoot, root, proof, sha256)) {
      return refused(
        previous,
        `the log's tree of ${size} leaves is not an extension of the one of ${old.size}`,
        alerts,
      );
    }
  }
  const range = CompactRange.fromJson(previous.range, sha256);
  if (range === undefined || range.size !== previous.core.next)
    throw new Error("the monitor's state file is damaged (its range does not fit its place)");
  const leaves = await readLeaves(source, range, size, sha256);
  if (toHex(range.root()) !== toHex(root)) {
    return refused(previous, `the leaves the log serves are not those of its checkpoint of ${size}`, alerts);
  }
  const { opened, erased } = await openOwn(source, records, leaves, previous.core.next, sha256);
  const result = monitor(
    monitorConfig(records, sha256),
    previous.core,
    { leaves, opened, erased, witnessCheckpoints: witnessRoots(policy, note, size, root) },
    sha256,
  );
  return {
    alerts: [...alerts, ...result.alerts],
    state: { v: 1, checkpoint: { size, root: base64(root) }, range: range.toJson(), core: result.state },
    treeSize: size,
    leavesRead: leaves.length,
  };
}

function refused(previous: MonitorFileState, message: string, alerts: MonitorAlert[] = []): MonitorRun {
  return {
    alerts: [...alerts, { message }],
    state: previous,
    treeSize: previous.checkpoint?.size ?? 0,
    leavesRead: 0,
  };
}

/** Reads leaves `[range.size, size)` page by page, growing `range` with their hashes. */
async function readLeaves(
  source: MonitorSource,
  range: CompactRange,
  size: number,
  sha256: Sha256,
): Promise<Uint8Array[]> {
  const leaves: Uint8Array[] = [];
  while (range.size < size) {
    const page = await source.leaves(range.size, size);
    if (page.length === 0 || page.length > size - range.size)
      throw new Error(`the log served ${page.length} leaves from index ${range.size}`);
    for (const leaf of page) {
      range.append(leafHash(leaf, sha256));
      leaves.push(leaf);
    }
  }
  return leaves;
}

/**
 * The issuer's own leaves among `leaves` (from index `from`), opened by its feed: each statement rebuilt
 * with the card reference its records give for the entry's userId (statements about no card need none;
 * for a userId its records lack, each card it knows but never enrolled is tried). An entry it cannot
 * rebuild is left out: the core then alerts on a leaf under its key that its feed does not open.
 */
async function openOwn(
  source: MonitorSource,
  records: IssuerRecords,
  leaves: Uint8Array[],
  from: number,
  sha256: Sha256,
): Promise<{ opened: Map<number, { statement: Uint8Array; opening: Uint8Array }>; erased: Set<number> }> {
  const cards = new Map(
    records.cards.flatMap((c) => (c.userId === undefined ? [] : [[c.userId, c.cardRef]])),
  );
  const strangers = records.cards.filter((c) => c.enrolled === false).map((c) => c.cardRef);
  const opened = new Map<number, { statement: Uint8Array; opening: Uint8Array }>();
  const erased = new Set<number>();
  // The feed is asked only when a new leaf is under one of the issuer's keys: nothing else is its to
  // open, and an issuer with no statements of its own still monitors the directory.
  const own = new Set(monitorConfig(records, sha256).signerHashes);
  const mine = leaves.some((bytes) => {
    const leaf = parseLeaf(bytes);
    return leaf !== undefined && leaf.kind !== "directory" && own.has(toHex(leaf.signerHash));
  });
  if (!mine) return { opened, erased };
  for (const entry of await source.feed(from)) {
    if (entry.erased === true) erased.add(entry.index);
    const leaf = parseLeaf(leaves[entry.index - from] ?? new Uint8Array());
    const stored = fromBase64Strict(entry.statementWithoutCardRef);
    const opening = fromBase64Strict(entry.opening, 16);
    const text = stored === undefined ? undefined : fromUtf8(stored);
    const parsed = text === undefined ? undefined : parseCanonicalObject(text);
    if (leaf === undefined || leaf.kind === "directory" || opening === undefined || text === undefined)
      continue;
    if (parsed === undefined || !parsed.ok) continue;
    const aboutCard =
      parsed.value.type === "receipts.v1/key-binding" || parsed.value.type === "receipts.v1/key-revocation";
    const known = entry.userId === "" ? undefined : cards.get(entry.userId);
    const candidates = !aboutCard ? [undefined] : known !== undefined ? [known] : strangers;
    for (const cardRef of candidates) {
      const statement = cardRef === undefined ? (stored as Uint8Array) : withCardRef(text, cardRef);
      if (bytesEqual(commitmentOf(opening, statement, sha256), leaf.commitment)) {
        opened.set(entry.index, { statement, opening });
        break;
      }
    }
  }
  return { opened, erased };
}

/** The pure core's configuration from the issuer's records. */
export function monitorConfig(records: IssuerRecords, sha256: Sha256 = nodeSha256): MonitorConfig {
  const signerHashes = records.signingKeys.map((spki) => {
    const bytes = fromBase64Strict(spki);
    if (bytes === undefined) throw new TypeError("records.signingKeys must be base64 SPKI DER");
    return toHex(signerHashOf(bytes, sha256));
  });
  const config: MonitorConfig = {
    issuer: records.issuer,
    signerHashes,
    pars: records.cards.map((c) => c.cardRef).filter((ref) => /^[0-9A-Z]{29}$/.test(ref)),
    enrolled: records.cards.filter((c) => c.enrolled !== false).map((c) => c.cardRef),
    signed: records.signed,
    prefixes: records.prefixes,
  };
  if (records.expectedEntry !== undefined) config.expectedEntry = records.expectedEntry;
  if (records.escrowKeyIds !== undefined) config.escrowKeyIds = records.escrowKeyIds;
  if (records.erased !== undefined) config.erased = records.erased;
  return config;
}

/** The (size, root) each of the policy's witnesses cosigned in this checkpoint. */
function witnessRoots(
  policy: ParsedPolicy,
  noteText: string,
  size: number,
  root: Uint8Array,
): Array<{ witness: string; size: number; root: Uint8Array }> {
  const note = parseNote(noteText);
  if (note === undefined) return [];
  return policy.witnesses
    .filter((w) => checkNoteSignature(note, w.key, nodeEngine).status === "good")
    .map((w) => ({ witness: w.key.name, size, root }));
}
