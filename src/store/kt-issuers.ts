import type { KtIntakeRefusal, KtPendingInput } from "./kt-types.js";

/**
 * What the key directory holds of an issuer tenant beyond its BINs and escrow keys
 * (docs/key-transparency.md): its signing keys (the first is its root) and its `requireBindings` and
 * `plaintextIntake` settings. One record per tenant, replaced whole by a compare-and-set on
 * `revision`, so that two changes racing on one tenant (two first keys, each wanting to be the root) cannot both win; the
 * statement that records a change is written in the same atomic step (the key log's intake).
 */

/** One signing key of an issuer tenant. */
export interface KtSigningKeyRecord {
  /** `sk_` + the first 16 bytes of SHA-256 of `spki`, in hex (`signingKeyIdOf`). */
  signingKeyId: string;
  algorithm: "Ed25519" | "ECDSA-P256-SHA256";
  /** Base64 SubjectPublicKeyInfo DER, checked by `parseSigningKey` before it was stored. */
  spki: string;
  /** The tenant's first key is its root; every later key is a signer the root endorsed. */
  role: "root" | "signer";
  /** A root is `pending` until the operator confirms it; a signer is `current` at once; `revoked` for good. */
  status: "pending" | "current" | "revoked";
  createdAt: Date;
  confirmedAt?: Date;
  revokedAt?: Date;
  /**
   * A root retired by a rotation or by its own revocation: the tenant-statement version of the
   * statement that retired it. The sequencer still takes the root's statements up to that version
   * (they were signed while it was the root); nothing later.
   */
  revokedAtVersion?: number;
  /**
   * A root introduced by a rotation: the `receipts.v1/signing-key` statement (role `root`) by which
   * the root then current introduced it, base64 of its exact bytes and signature, and that root's id.
   * Written in the rotation's store step; lookup and register answers carry it as `rootRotation`, so
   * that a merchant counting the previous root counts this one at once (`kt/root-delay.ts`). Absent
   * for a first or recovery root. A tenant statement: it names no card.
   */
  introduction?: { statement: string; signature: string; signingKeyId: string };
}

/**
 * A BIN or token-BIN prefix announced as moving to the tenant from another whose root did not release
 * it: it takes effect 7 days after the first directory snapshot that shows it (`kt/bin-moves.ts`).
 */
export interface KtBinMove {
  prefix: string;
  kind: "bin" | "token-bin";
  /** The tenant that owns it until the move takes effect. */
  from: string;
  requestedAt: Date;
}

/** Whether the service takes receipts for a tenant's cards in the clear. */
export type PlaintextIntake = "accept" | "refuse";

/** An issuer tenant's signing keys and settings. */
export interface KtIssuerRecord {
  tenantId: string;
  /** In the order added (the root first). */
  signingKeys: KtSigningKeyRecord[];
  /** Unsigned registrations and escrow keys of the tenant are refused. */
  requireBindings: boolean;
  /**
   * `"refuse"`: receipts for the tenant's cards are not taken in the clear (encrypt, create and refund
   * with receipt fields are `forbidden`); merchants seal them on their side. Absent: `"accept"`.
   */
  plaintextIntake?: "refuse";
  /** Prefixes announced as moving to the tenant, not yet in effect (routing keeps their old owner). */
  binMoves?: KtBinMove[];
  /** 1 for the first record; each change is the last + 1. */
  revision: number;
  updatedAt: Date;
}

/** The outcome of {@link KtIssuerStore.put}: `moved` when the stored revision is not the expected one. */
export type KtIssuerPutOutcome = { kind: "stored" } | { kind: "moved" } | KtIntakeRefusal;

/** Issuer tenants' signing keys and settings. */
export interface KtIssuerStore {
  /** A tenant's record; undefined before its first signing key or setting. */
  get(tenantId: string): Promise<KtIssuerRecord | undefined>;
  /** Every tenant's record, by tenant id (the directory snapshot lists them). */
  list(): Promise<KtIssuerRecord[]>;
  /**
   * The records holding a BIN move requested at or before `at`, by tenant: the only ones whose moves
   * can be due (a move takes effect 7 days after the first snapshot showing it, so never before
   * `requestedAt` + 7 days). An indexed query, not a read of every tenant (the sequencer asks each round).
   */
  withBinMovesBefore(at: Date): Promise<KtIssuerRecord[]>;
  /** The tenant holding a signing key of that id, if any (a key belongs to one tenant). */
  tenantOfSigningKey(signingKeyId: string): Promise<string | undefined>;
  /**
   * Stores `record` if the stored one has revision `record.revision - 1` (none for revision 1),
   * with `kt` (the change's statement, or a directory change) in the same atomic step: `moved` (a
   * concurrent change won: read again) or the intake's refusal, with nothing written.
   */
  put(record: KtIssuerRecord, kt?: readonly KtPendingInput[]): Promise<KtIssuerPutOutcome>;
}
