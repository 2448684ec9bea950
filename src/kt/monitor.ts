import { bytesEqual, fromBase64Strict, toHex } from "./bytes.js";
import { type CardState, nextCardState } from "./card-rules.js";
import { type DirectorySnapshot, type IssuerEntry, parseDirectory } from "./directory.js";
import { defaultSha256, type Sha256 } from "./hash.js";
import { type Checked, canonicalJson, type Json } from "./json.js";
import { commitmentOf, parseLeaf, parTagOf } from "./leaves.js";
import { signerHashOf } from "./signatures.js";
import { parseStatement, type Statement } from "./statements.js";
import { type CardTransferEntry, parseTransferEntry } from "./transfer.js";

/**
 * The core of an issuer's monitor (docs/key-transparency.md, "The issuer's monitor"), as a pure function: the
 * previous state, the new leaves, what the issuer's feed opened, what its own records say, and the
 * checkpoints seen at witnesses in; the next state and one alert per finding out. The command line around it
 * downloads, verifies the leaves against a trusted checkpoint, keeps the state between runs, prints one
 * line per alert and exits non-zero when there is any. A `0x03` leaf is a snapshot or the operator's card
 * transfer (`transfer.ts`): a transfer of one of the issuer's cards is an alert.
 */

/** What the issuer knows from its own records. */
export interface MonitorConfig {
  issuer: string;
  /** Hex `signerHash` of each of its signing keys. */
  signerHashes: string[];
  /** The PARs of its cards (their tags are computed here). */
  pars: string[];
  /** Card references (hashed PAN or PAR) its records show as enrolled. */
  enrolled: string[];
  /** Hex SHA-256 of every statement it signed. */
  signed: string[];
  /** Its own directory entry as its records say it should read (canonical JSON), if it keeps one. */
  expectedEntry?: string;
  /**
   * The escrowKeyIds it registered, if it keeps them: another escrow key in its directory entry is
   * an alarm (merchants would seal its cards' escrow to it).
   */
  escrowKeyIds?: string[];
  /** Its BIN and token-BIN prefixes. */
  prefixes: string[];
  /**
   * The cards it erased, each with the version of the last statement it signed about the card (the
   * erasure's revocation, or the last binding when it erased unrevoked): an erasure deletes the
   * card's statements and openings, so up to that many leaves under its keys that the feed reports
   * erased, less those it read opened before, are the card's and no alarm. Any further erased leaf
   * is one (the feed could be hiding a statement behind "erased").
   */
  erased?: Array<{ cardRef: string; version: number }>;
}

/** What a monitor keeps between runs. */
export interface MonitorState {
  /** Index of the next leaf to read. */
  next: number;
  /** Per card reference, what its statements so far say. */
  cards: Record<string, CardState>;
  /** Per witness, per tree size, the root it cosigned (hex). */
  witnessRoots: Record<string, Record<string, string>>;
  /** Erased leaves under its keys still accounted for by its erasures (see {@link MonitorConfig.erased}). */
  erasedBudget?: number;
  /** The erasures already counted into the budget (`cardRef:version`). */
  erasures?: string[];
  /**
   * The issuer's current root as the last snapshot listed it (id and hex signerHash; empty strings
   * for none); absent until the first snapshot is read.
   */
  root?: { id: string; hash: string };
  /** Roots the issuer retired by statements it signed (rotations and its root's own revocation). */
  retiredRoots?: string[];
}

export const EMPTY_MONITOR_STATE: MonitorState = { next: 0, cards: {}, witnessRoots: {} };

/** One run's input: leaves from `state.next` on, in order; the feed's openings; checkpoints seen at witnesses. */
export interface MonitorInput {
  leaves: Uint8Array[];
  /** Index -> the full statement (cardRef added back by the issuer) and its opening, as the feed opened it. */
  opened: ReadonlyMap<number, { statement: Uint8Array; opening: Uint8Array }>;
  witnessCheckpoints: Array<{ witness: string; size: number; root: Uint8Array }>;
  /** Indexes of the issuer's leaves its feed reports erased (statement and opening deleted). */
  erased?: ReadonlySet<number>;
}

export interface MonitorAlert {
  index?: number;
  message: string;
}

interface Run {
  config: MonitorConfig;
  state: MonitorState;
  alerts: MonitorAlert[];
  parTags: Set<string>;
  /** Transfer ids already reported in this run. */
  transfers: Set<string>;
  sha256: Sha256;
}

/** Reads new leaves and checkpoints; see the module comment. */
export function monitor(
  config: MonitorConfig,
  previous: MonitorState,
  input: MonitorInput,
  sha256: Sha256 = defaultSha256,
): { state: MonitorState; alerts: MonitorAlert[] } {
  const state = JSON.parse(JSON.stringify(previous)) as MonitorState;
  const run: Run = {
    config,
    state,
    alerts: [],
    parTags: new Set(config.pars.map((p) => toHex(parTagOf(p, sha256)))),
    transfers: new Set(),
    sha256,
  };
  countErasures(run);
  for (const [offset, leaf] of input.leaves.entries()) readLeaf(run, previous.next + offset, leaf, input);
  state.next = previous.next + input.leaves.length;
  for (const seen of input.witnessCheckpoints) {
    const roots = state.witnessRoots[seen.witness] ?? {};
    const known = roots[String(seen.size)];
    const root = toHex(seen.root);
    if (known !== undefined && known !== root) {
      run.alerts.push({ message: `witness ${seen.witness} cosigned two roots for tree size ${seen.size}` });
    }
    state.witnessRoots[seen.witness] = { ...roots, [String(seen.size)]: known ?? root };
  }
  return { state, alerts: run.alerts };
}

/**
 * Adds each erasure of the records not counted yet to the budget of erased leaves: the statements it
 * signed about the card, less those read opened before (the card's state, dropped here, so that the
 * card enrolled again starts at version 1 as the log's sequence does).
 */
function countErasures(run: Run): void {
  const counted = new Set(run.state.erasures ?? []);
  for (const { cardRef, version } of run.config.erased ?? []) {
    const key = `${cardRef}:${version}`;
    if (counted.has(key)) continue;
    counted.add(key);
    const seen = run.state.cards[cardRef]?.version ?? 0;
    run.state.erasedBudget = (run.state.erasedBudget ?? 0) + Math.max(0, version - seen);
    delete run.state.cards[cardRef];
  }
  if (counted.size > 0) run.state.erasures = [...counted];
}

function readLeaf(run: Run, index: number, leaf: Uint8Array, input: MonitorInput): void {
  const opened = input.opened;
  const parsed = parseLeaf(leaf);
  if (parsed === undefined) {
    run.alerts.push({ index, message: "a leaf that is not of this log's formats" });
    return;
  }
  if (parsed.kind === "directory") {
    const transfer = parseTransferEntry(parsed.json);
    if (transfer === undefined) readSnapshot(run, index, parsed.json);
    else readTransfer(run, index, transfer);
    return;
  }
  const mine = run.config.signerHashes.includes(toHex(parsed.signerHash));
  if (parsed.kind === "par-statement" && !mine && run.parTags.has(toHex(parsed.parTag))) {
    run.alerts.push({
      index,
      message: "a statement about one of your PAR cards signed by another issuer's key",
    });
  }
  if (!mine) return;
  const entry = opened.get(index);
  if (entry === undefined && input.erased?.has(index) === true && (run.state.erasedBudget ?? 0) > 0) {
    run.state.erasedBudget = (run.state.erasedBudget ?? 0) - 1;
    return;
  }
  if (
    entry === undefined ||
    entry.opening.length !== 16 ||
    !bytesEqual(commitmentOf(entry.opening, entry.statement, run.sha256), parsed.commitment)
  ) {
    run.alerts.push({ index, message: "a leaf under your signing key that your feed does not open" });
    return;
  }
  if (!run.config.signed.includes(toHex(run.sha256(entry.statement)))) {
    run.alerts.push({ index, message: "a statement under your signing key that you did not sign" });
  }
  readStatement(run, index, entry.statement, toHex(parsed.signerHash));
}

function readStatement(run: Run, index: number, bytes: Uint8Array, signerHash: string): void {
  const statement = parseStatement(bytes);
  if (!statement.ok) {
    run.alerts.push({ index, message: `a statement under your key that is not valid: ${statement.reason}` });
    return;
  }
  const s = statement.value;
  noteRetiredRoot(run, s, signerHash);
  if (s.type !== "receipts.v1/key-binding" && s.type !== "receipts.v1/key-revocation") return;
  const before = run.state.cards[s.cardRef];
  if (before === undefined && !run.config.enrolled.includes(s.cardRef)) {
    run.alerts.push({ index, message: "a binding for a card your records show as not enrolled" });
  }
  const next = nextCardState(before, s);
  if (!next.ok) {
    run.alerts.push({
      index,
      message: `a card statement out of order (a second unrevoked binding?): ${next.reason}`,
    });
    return;
  }
  run.state.cards[s.cardRef] = next.value;
}

/**
 * Remembers a root the issuer retired itself: the signer of its rotation (a `signing-key` statement
 * of role `root` introducing another key, signed by the root then current), or the key its
 * `signing-key-revocation` names.
 */
function noteRetiredRoot(run: Run, s: Statement, signerHash: string): void {
  let retired: string | undefined;
  if (s.type === "receipts.v1/signing-key-revocation") retired = s.signingKeyId as string;
  if (s.type === "receipts.v1/signing-key" && s.role === "root" && run.state.root?.hash === signerHash) {
    if (s.signingKeyId !== run.state.root.id) retired = run.state.root.id;
  }
  if (retired !== undefined) run.state.retiredRoots = [...(run.state.retiredRoots ?? []), retired];
}

/**
 * One alert per change of the issuer's current root it did not make: the new root (if any) must be
 * one of its keys, and the old one (if any) retired by a statement it signed. The operator confirming
 * a recovery root while the old one is live, or a store writer swapping the root, is this alert.
 */
function readRoot(run: Run, index: number, own: IssuerEntry | undefined): void {
  const live = own?.signingKeys.find((k) => k.role === "root" && k.status === "current");
  const spki = live === undefined ? undefined : fromBase64Strict(live.spki);
  const now = {
    id: live?.signingKeyId ?? "",
    hash: spki === undefined ? "" : toHex(signerHashOf(spki, run.sha256)),
  };
  const before = run.state.root;
  run.state.root = now;
  if (before === undefined || before.id === now.id) return;
  const mine = now.id === "" || run.config.signerHashes.includes(now.hash);
  const retiredByYou = before.id === "" || (run.state.retiredRoots ?? []).includes(before.id);
  if (mine && retiredByYou) return;
  run.alerts.push({
    index,
    message: `your root changed from ${before.id || "none"} to ${now.id || "none"}, a change you did not sign`,
  });
}

/**
 * The operator's card transfer (`transfer.ts`): a card taken from this issuer is one alert, whatever
 * number of card references the transfer's entries name (one transfer id, one line).
 */
function readTransfer(run: Run, index: number, entry: Checked<CardTransferEntry>): void {
  if (!entry.ok) {
    run.alerts.push({ index, message: `a card transfer entry that is not valid: ${entry.reason}` });
    return;
  }
  const t = entry.value;
  if (t.from !== run.config.issuer || run.transfers.has(t.transfer)) return;
  run.transfers.add(t.transfer);
  run.alerts.push({
    index,
    message: `the operator transferred one of your cards to ${t.to} (${t.transfer}, ${t.transferredAt}): your key for it is retired`,
  });
}

function readSnapshot(run: Run, index: number, json: Uint8Array): void {
  const parsed = parseDirectory(json);
  if (!parsed.ok) {
    run.alerts.push({ index, message: `a directory snapshot that is not valid: ${parsed.reason}` });
    return;
  }
  const own = parsed.value.issuers.find((entry) => entry.issuer === run.config.issuer);
  readRoot(run, index, own);
  const text = own === undefined ? undefined : canonicalJson(own as unknown as Json);
  if (run.config.expectedEntry !== undefined && text !== run.config.expectedEntry) {
    run.alerts.push({ index, message: "the directory's entry for you is not what your records say" });
  }
  // Merchants take an issuer's current signing keys and escrow key from the snapshot: a key that is
  // not the issuer's own, listed there, lets whoever holds it sign bindings merchants accept.
  for (const key of own?.signingKeys ?? []) {
    const spki = fromBase64Strict(key.spki);
    const hash = spki === undefined ? "" : toHex(signerHashOf(spki, run.sha256));
    if (key.status !== "revoked" && !run.config.signerHashes.includes(hash)) {
      run.alerts.push({
        index,
        message: `the directory lists a signing key for you that is not yours (${key.signingKeyId})`,
      });
    }
  }
  const escrow = own?.escrowKey;
  if (escrow && run.config.escrowKeyIds !== undefined && !run.config.escrowKeyIds.includes(escrow.keyId)) {
    run.alerts.push({
      index,
      message: `the directory lists an escrow key for you that is not yours (${escrow.keyId})`,
    });
  }
  for (const taken of foreignPrefixes(parsed.value, run.config)) {
    run.alerts.push({ index, message: `the directory gives your prefix ${taken.prefix} to ${taken.issuer}` });
  }
}

function foreignPrefixes(
  snapshot: DirectorySnapshot,
  config: MonitorConfig,
): Array<{ prefix: string; issuer: string }> {
  const out: Array<{ prefix: string; issuer: string }> = [];
  for (const entry of snapshot.issuers) {
    if (entry.issuer === config.issuer) continue;
    for (const p of entry.prefixes) {
      const clash = config.prefixes.some((mine) => mine.startsWith(p.prefix) || p.prefix.startsWith(mine));
      if (clash) out.push({ prefix: p.prefix, issuer: entry.issuer });
    }
  }
  return out;
}
