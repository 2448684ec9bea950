import type { Statement } from "../../kt/statements.js";
import type { KtDirectoryProof, KtProof } from "../../kt/wire.js";
import type { CardRefKind, KtPendingDirectoryChange, KtPendingStatement } from "../../store/kt-types.js";

/**
 * The key log as the rest of the service uses it (docs/key-transparency.md, "The log
 * inside the service"). A change that a statement records goes through three steps:
 *
 * 1. check the statement (`checkStatement` in `statement-check.ts`), refusing the call if it fails;
 * 2. make its pending record ({@link KtLog.pendingStatement}) and hand it to the store method that
 *    writes the change (`users.register({..., kt: [pending]})` and the like): the store writes both in
 *    one atomic step, after checking the statement's version against its sequence, and answers
 *    `log_refused` (nothing written) when it does not follow;
 * 3. call {@link KtLog.notify}, then {@link KtLog.waitForLeaf}: it resolves once the sequencer has
 *    appended the leaf and signed a checkpoint that covers it, with the proofs the answer carries.
 *
 * Lookups use {@link KtLog.proofs} with the leaf index the store's leaf record gives
 * (`store.ktLog.lastOfSequence(...)`). A directory change with no statement of its own hands
 * {@link KtLog.pendingDirectoryChange} to its store write the same way; the sequencer then appends a
 * new snapshot.
 */
export interface KtLog {
  /** The log's origin, `<host>/receipts/kt/v1`: the first line of every checkpoint. */
  readonly origin: string;
  /** The log's verifier key (C2SP vkey, type 0x01), for trust policies and witnesses. */
  readonly vkey: string;
  /** `KT_MAX_BINDING_DAYS`: the longest validity window of a binding or escrow-key statement. */
  readonly maxBindingDays: number;

  /**
   * The pending record of a statement that passed `checkStatement`, with a fresh random opening and,
   * for a card statement, the card reference sealed for the sequencer (it is never stored in the
   * clear). Pure apart from the random opening: nothing is written until the store write.
   */
  pendingStatement(input: StatementToLog): KtPendingStatement;
  /** The pending record of a directory change with no statement (`reason` is for logs). */
  pendingDirectoryChange(reason: string, tenantId?: string): KtPendingDirectoryChange;
  /** Wakes this process's sequencer at once; another instance's finds the record within its poll interval. */
  notify(): void;

  /**
   * Waits until the leaf of pending statement `pendingId` is under a checkpoint the log signed, and
   * answers its proofs under the answer checkpoint ({@link KtLog.proofs}; one covering the leaf).
   * Bounded: after `timeoutMs` (default `KT_LOG_WAIT_MS`, 10 s) it throws `service_unavailable`
   * with a Retry-After; the statement stays queued, and the leaf is appended once a sequencer runs.
   * A statement the sequencer refused throws `internal_server_error` (it passed intake: a bug or a
   * tampered store, logged with the reason). With `witnessGraceMs`, once the leaf is under a
   * checkpoint that lacks `KT_ANSWER_COSIGNATURES` cosignatures, it waits up to that long more (within
   * the timeout) for a cosigned one, then answers the log-signed one.
   */
  waitForLeaf(
    pendingId: string,
    options?: { timeoutMs?: number; witnessGraceMs?: number },
  ): Promise<KtAnswerProofs & { proof: KtProof }>;

  /**
   * The proofs an answer carries, all under one checkpoint (the answer checkpoint: the newest one
   * with at least `KT_ANSWER_COSIGNATURES` witness cosignatures, else the newest one): the inclusion
   * of leaf `leafIndex` when given (it must be under that checkpoint), and the directory snapshot in
   * force there (the one with the largest index below its size). Throws `service_unavailable` when the
   * log has no checkpoint yet.
   */
  proofs(input?: { leafIndex?: number }): Promise<KtAnswerProofs>;
}

/** A checked statement to log with the change it records. */
export interface StatementToLog {
  tenantId: string;
  /** The statement as `checkStatement` parsed it. */
  statement: Statement;
  /** Its exact bytes (canonical JSON, `cardRef` included). */
  bytes: Uint8Array;
  signature: Uint8Array;
  signingKeyId: string;
  /**
   * For a card statement: the kind of card reference (which leaf it gets), the reference itself
   * (`recipientHashedPan` or the PAR, sealed at once and never stored), and the keyed reference the
   * service stores the card by (the users' `panHash` for a hashed PAN).
   */
  card?: { kind: CardRefKind; ref: string; key: string };
  /** The cardholder, when the statement is about a registered user (the issuer's feed names it). */
  userId?: string;
  /**
   * The pending record's id when the caller must find it again without keeping it (an erasure's
   * revocation, which its retry looks for): `ktp_` and letters, digits or `_`. Default: random.
   */
  id?: string;
}

/** The key-transparency members of an answer (`wire.ts`), under one checkpoint. */
export interface KtAnswerProofs {
  /** The statement's leaf, when one was asked for. */
  proof?: KtProof;
  directory: KtDirectoryProof;
  /** The checkpoint note (with every cosignature it has) that both proofs are under. */
  checkpoint: string;
  /** Its tree size. */
  treeSize: number;
}
