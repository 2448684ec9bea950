/* Over 400 lines on purpose: the key log's whole store contract in one read, as types.ts is for the
 * rest; both stores and the contract suite (test/store/contract-kt-log.ts) implement it together. */
import type { CardState } from "../kt/card-rules.js";
import type { StatementType } from "../kt/statements.js";
import type { Tile, TileReader } from "../kt/tiles.js";

/**
 * The repository of the key-transparency log (docs/key-transparency.md, "The log
 * inside the service"): statements waiting to be logged, the tree as tiles, the leaves' records,
 * checkpoints with their cosignatures, what each witness last cosigned, the directory snapshots'
 * bodies and the auditors allowed to read leaf data.
 *
 * How a change enters the log. A change that a statement records (a registration, an escrow key, a
 * signing key, an erasure's revocation, a BIN claim) hands its {@link KtPendingInput}s to the store
 * method that writes the change (`users.register({..., kt})`, `users.erase(userId, {kt})`, ...), which
 * writes them into the pending collection in the SAME atomic step as the change, after checking and
 * advancing the statement's sequence ({@link KtSequenceState}): so the change and its statement are
 * stored together or not at all, and two changes racing on one card cannot both take the same
 * version. A change with no other write uses {@link KtLogStore.enqueue}. The sequencer (one instance
 * at a time, under a fenced lease) then appends pending statements to the tree in order.
 *
 * What is stored: a statement with `cardRef` removed, its signature, signing key id, opening, the
 * keyed card reference (the HMAC the service keys the card by), the tenant, and, while pending only,
 * the card reference sealed under a key derived from the service's pepper so that the sequencer can
 * rebuild the signed bytes and check the signature; it is deleted with the pending record when the
 * leaf is appended. A card reference is never stored in the clear.
 */

/** The kind of card reference a statement names: it decides the leaf (0x01 hashed PAN, 0x02 PAR). */
export type CardRefKind = "hashed-pan" | "par";

/** A statement's card, as a pending record carries it. */
export interface KtCard {
  kind: CardRefKind;
  /**
   * The keyed card reference: for a hashed PAN the `panHash` the users collection keys the card by
   * (HMAC under the pepper); for a PAR, the same HMAC of the PAR. Names the card's sequence.
   */
  key: string;
  /** The card reference (hashed PAN or PAR) sealed for the sequencer (base64); pending records only. */
  sealedRef: string;
}

/**
 * The order facts of a statement: what the store checks at intake and the sequencer again at append
 * (`advanceSequence` in `kt-sequence.ts`, on `card-rules.ts`). `sequence` names the sequence:
 * `card:<cardKey>` for a card's statements, `escrow:<tenant>` for an issuer's escrow keys,
 * `tenant:<tenant>` for its root-signed tenant statements.
 */
export type KtOrder =
  | {
      sequence: string;
      type: "receipts.v1/key-binding";
      version: number;
      keyId: string;
      algorithm: string;
      spkiSha256: string;
      supersedes: string | null;
    }
  | { sequence: string; type: "receipts.v1/key-revocation"; version: number; keyId: string }
  /** The operator's card transfer: a step of the card's sequence (`kt/transfer.ts`). */
  | { sequence: string; type: "receipts.v1/card-transfer"; version: number }
  | {
      sequence: string;
      type: Exclude<StatementType, "receipts.v1/key-binding" | "receipts.v1/key-revocation">;
      version: number;
    };

/**
 * The state of one sequence after its statements so far: for a card, the card-rules state (version,
 * active key, retired keys); for an issuer sequence only `version` counts (active null, retired []).
 */
export type KtSequenceState = CardState;

/** A signed statement to log, as the change that it records writes it. */
export interface KtPendingStatement {
  kind: "statement";
  /** `ktp_<random>`: the caller keeps it to wait for the leaf (`KtLog.waitForLeaf`). */
  id: string;
  tenantId: string;
  order: KtOrder;
  /** The statement's canonical JSON without `cardRef` (`withoutCardRef`); the whole JSON when it has none. */
  statement: string;
  /** Base64 of the 64-byte signature. */
  signature: string;
  signingKeyId: string;
  /** Base64 of the 16-byte opening of the leaf's commitment (random, made at intake). */
  opening: string;
  /** The card, for card statements (binding, revocation); absent for issuer statements. */
  card?: KtCard;
  /** The cardholder the statement is about, when there is one (the issuer's feed names it). */
  userId?: string;
  createdAt: Date;
}

/**
 * A directory change without a statement of its own (the operator's BIN change before a tenant has a
 * root, a root confirmed, the service escrow key rotated): it makes the sequencer append a new
 * directory snapshot. Statements that change the directory (signing keys, BIN claims, escrow keys,
 * requireBindings, plaintextIntake) need none: the sequencer snapshots after appending them.
 */
export interface KtPendingDirectoryChange {
  kind: "directory";
  /** `ktp_<random>`. */
  id: string;
  /** The tenant whose entry changed, or absent for a service-wide change. */
  tenantId?: string;
  /** What changed, for logs (`bins.set`, `root.confirmed`): never a secret. */
  reason: string;
  createdAt: Date;
}

/**
 * The operator's transfer of a card to another issuer, for one card reference (`kt/transfer.ts`): the
 * sequencer appends it as a `0x03` transfer entry, a step of the card's sequence that retires its
 * active key. Written in the transfer's store step.
 */
export interface KtPendingTransfer {
  kind: "transfer";
  /** `ktp_<random>`. */
  id: string;
  order: { sequence: string; type: "receipts.v1/card-transfer"; version: number };
  /** One id for the entries of one transfer (`trf_<random>`). */
  transfer: string;
  fromTenant: string;
  toTenant: string;
  /** The keyed card reference (never the reference itself). */
  cardKey: string;
  /** Base64 of 16 random bytes: the opening of the entry's card commitment. */
  opening: string;
  /** The card's new user. */
  userId: string;
  createdAt: Date;
}

/** What a change hands to the store method that writes it. */
export type KtPendingInput = KtPendingStatement | KtPendingDirectoryChange | KtPendingTransfer;

/** A pending record as the sequencer reads it: the input plus its state. */
export type KtPendingRecord = KtPendingInput & {
  /** Set when the sequencer refused the statement (bad signature, wrong version): the reason. */
  refused?: string;
};

/** Why a change's statements were refused at intake: nothing of the change was written. */
export interface KtIntakeRefusal {
  kind: "log_refused";
  /** Which statement (its pending id) and why, e.g. "version must be 3, the last + 1". */
  pendingId: string;
  reason: string;
}

/** The outcome of {@link KtLogStore.enqueue}. */
export type KtEnqueueOutcome = { kind: "enqueued" } | KtIntakeRefusal;

/** The tree's head as the store holds it: what the last append left. */
export interface KtHead {
  size: number;
  /** The root of the tree of `size` leaves (32 bytes). */
  root: Uint8Array;
  /** The largest fencing token that appended; an append with a smaller one is refused. */
  fence: number;
}

/** A leaf of the log, as stored beside the tree (the tree itself holds only its hash). */
export interface KtLeafRecord {
  index: number;
  /** `transfer`: the operator's card transfer (a 0x03 entry, `kt/transfer.ts`), with its leaf bytes. */
  kind: "statement" | "directory" | "transfer";
  /** The leaf bytes (0x01, 0x02 and transfer leaves); absent for a snapshot, rebuilt from its body. */
  leaf?: Uint8Array;
  /** For a directory leaf: the lower-case hex SHA-256 of its snapshot JSON (see {@link KtDirectoryRecord}). */
  directorySha256?: string;
  appendedAt: Date;
  /** Statement leaves: the pending record it came from (what `waitForLeaf` looks for). */
  pendingId?: string;
  tenantId?: string;
  type?: StatementType;
  /** The statement's sequence and version; removed by erasure for a card's statements. */
  sequence?: string;
  version?: number;
  /** The statement without `cardRef`, its signature, signing key id and opening: removed by erasure. */
  statement?: string;
  signature?: string;
  signingKeyId?: string;
  opening?: string;
  cardKind?: CardRefKind;
  /** The keyed card reference; removed by erasure. */
  cardKey?: string;
  userId?: string;
  /** When erasure removed what identified the card (the leaf stays). */
  erasedAt?: Date;
  /**
   * Set by erasure: {@link erasedStatementSha256} of the statement it removed, so that the statement,
   * signed before the erasure, is never taken again once the card's sequence has restarted.
   */
  erasedStatementSha256?: string;
}

/** A directory snapshot's body, stored by its SHA-256 (served at `GET /kt/v1/directory/{sha256}`). */
export interface KtDirectoryRecord {
  /** Lower-case hex SHA-256 of `json`. */
  sha256: string;
  /** The leaf index of the snapshot. */
  index: number;
  /** The snapshot's RFC 8785 JSON (the leaf is 0x03 || its UTF-8 bytes). */
  json: string;
  issuedAt: Date;
  notAfter: Date;
}

/** What one append writes, all or nothing. */
export interface KtAppendBatch {
  /** The head the batch was built on; refused ("moved") when the store's head is another. */
  oldSize: number;
  newSize: number;
  root: Uint8Array;
  /** The tiles `appendToTiles` returned: each written whole, and only if it extends what is stored. */
  tiles: Tile[];
  /** The new leaves, indexes oldSize .. newSize-1 in order. */
  leaves: KtLeafRecord[];
  /** A directory snapshot appended in this batch (its leaf is among `leaves`). */
  directory?: KtDirectoryRecord;
  /** Pending records consumed: deleted (their leaves are appended, or they were directory changes). */
  consumed: string[];
  /** Pending statements refused, with the reason: kept, marked, so their waiters learn why. */
  refused: Array<{ id: string; reason: string }>;
  /** Each sequence's state after this batch, and the version it had before (compare-and-swap). */
  sequences: Array<{ sequence: string; before: number; after: KtSequenceState }>;
}

/** The outcome of an append. */
export type KtAppendOutcome =
  /**
   * `followers`: records the store refused with the batch's refusals (those still waiting in the
   * sequence of a refused one), with their reason; absent when none.
   */
  | { kind: "appended"; followers?: Array<{ id: string; reason: string }> }
  /** A holder with a larger fencing token appended since: this holder lost its lease. */
  | { kind: "fenced_out" }
  /** The head is not `oldSize` any more (another holder appended): rebuild from the new head. */
  | { kind: "moved" };

/** A checkpoint the log signed, with the cosignatures witnesses gave it. */
export interface KtCheckpointRecord {
  size: number;
  root: Uint8Array;
  /** The signed note: the checkpoint text, a blank line, the log's signature line. */
  note: string;
  signedAt: Date;
  /** The cosignature lines (each with its newline), by witness key name. */
  cosignatures: Record<string, KtCosignature>;
}

/** One witness's cosignature of a checkpoint. */
export interface KtCosignature {
  /** The signature line as the witness sent it, with its newline. */
  line: string;
  /** The cosignature's timestamp (seconds since the epoch). */
  timestamp: number;
}

/** What a witness last cosigned, as the log knows it: the checkpoint it must stay consistent with. */
export interface KtWitnessState {
  /** The witness's key name (from its vkey). */
  name: string;
  size: number;
  root: Uint8Array;
  updatedAt: Date;
}

/** An auditor the operator registered to read leaf data (`GET /kt/v1/entries`). */
export interface KtAuditorRecord {
  /** `aud_<random>`. */
  id: string;
  name: string;
  /** Lower-case hex SHA-256 of its token; the token itself is shown once. */
  tokenHash: string;
  createdAt: Date;
  revokedAt?: Date;
}

/** A fencing token's holder (the sequencer's lease). */
export interface KtFence {
  token: number;
}

/**
 * The key log's repository. Everything the sequencer writes is fenced: refused once a holder with a
 * larger token has written, so a holder that paused past its lease cannot overwrite its successor.
 * Tiles are read through {@link TileReader.readTiles} (every tile a proof needs in one query).
 */
export interface KtLogStore extends TileReader {
  /**
   * Writes pending records for a change that writes nothing else, checking and advancing each
   * statement's sequence in the same atomic step: refused, with nothing written, when one does not
   * follow its sequence.
   */
  enqueue(pending: readonly KtPendingInput[]): Promise<KtEnqueueOutcome>;
  /** A sequence's intake state (what the statements accepted so far say), undefined before the first. */
  sequenceState(sequence: string): Promise<KtSequenceState | undefined>;
  /** Pending records not refused, oldest first (createdAt, then id), at most `limit`. */
  pending(limit: number): Promise<KtPendingRecord[]>;
  /** A pending record by id (refused ones too); undefined once its leaf is appended, or unknown. */
  findPending(id: string): Promise<KtPendingRecord | undefined>;

  /** The tree's head; size 0 (the empty root, fence 0) before the first append. */
  head(): Promise<KtHead>;
  /** The state the log's appended statements left in each of `sequences` (absent: none appended). */
  loggedStates(sequences: readonly string[]): Promise<Map<string, KtSequenceState>>;
  /**
   * Appends a batch, fenced; see {@link KtAppendBatch}. For each refused statement or transfer, in the
   * same step, its sequence's intake state goes back to the state the log holds after the batch, and
   * every other record of that sequence still waiting (accepted at intake on top of the refused one,
   * so it can never follow the log) is refused too: a refusal never leaves a sequence that later
   * statements cannot follow, nor records that wait for ever.
   */
  append(fence: KtFence, batch: KtAppendBatch): Promise<KtAppendOutcome>;

  /** Stores a checkpoint the log signed, fenced; one per size (a second signing of a size keeps the first). */
  putCheckpoint(fence: KtFence, checkpoint: KtCheckpointRecord): Promise<"stored" | "fenced_out">;
  /** The checkpoint of the largest size, with its cosignatures. */
  latestCheckpoint(): Promise<KtCheckpointRecord | undefined>;
  checkpointAt(size: number): Promise<KtCheckpointRecord | undefined>;
  /** Adds a witness's cosignature to the checkpoint of `size` (a newer one of the same witness replaces it). */
  addCosignature(size: number, witness: string, cosignature: KtCosignature): Promise<void>;

  /** What each witness last cosigned, as the log recorded it. */
  witnessStates(): Promise<KtWitnessState[]>;
  /** Records what a witness cosigned (or says it holds), replacing the older record of that witness. */
  putWitnessState(state: KtWitnessState): Promise<void>;

  leaf(index: number): Promise<KtLeafRecord | undefined>;
  /** Leaves with index in [start, end), in order. */
  leaves(start: number, end: number): Promise<KtLeafRecord[]>;
  /** The leaf appended from a pending statement. */
  leafByPending(pendingId: string): Promise<KtLeafRecord | undefined>;
  /** The last appended leaf of a sequence (a card's latest statement, an issuer's escrow key). */
  lastOfSequence(sequence: string): Promise<KtLeafRecord | undefined>;
  /** A tenant's statement leaves with index above `afterIndex`, in order, at most `limit` (the issuer's feed). */
  leavesOfTenant(tenantId: string, afterIndex: number, limit: number): Promise<KtLeafRecord[]>;
  /**
   * Erasure of a card: removes from every leaf record of the card its statement,
   * signature, opening, sequence and keyed card reference (the leaves stay in the tree), and the
   * card's sequence states, and deletes the card's refused pending records (an erasure's refused
   * revocation among them: they hold the keyed card reference). Each changed record keeps the
   * {@link erasedStatementSha256} of the statement it held. Returns how many leaf records it changed.
   */
  eraseCard(cardKey: string, at: Date): Promise<number>;
  /** Whether erasure removed a statement of this {@link erasedStatementSha256} from a leaf record. */
  statementErased(sha256: string): Promise<boolean>;

  /** A directory snapshot's body by SHA-256. */
  directory(sha256: string): Promise<KtDirectoryRecord | undefined>;
  /** The snapshot with the largest index below `size` (the one in force under a checkpoint of that size). */
  directoryBefore(size: number): Promise<KtDirectoryRecord | undefined>;

  insertAuditor(auditor: KtAuditorRecord): Promise<void>;
  findAuditorByTokenHash(tokenHash: string): Promise<KtAuditorRecord | undefined>;
  listAuditors(): Promise<KtAuditorRecord[]>;
  /** Marks an auditor revoked; false when no auditor has that id. */
  revokeAuditor(id: string, at: Date): Promise<boolean>;
}
