/**
 * The JSON shapes of the key-transparency parts of answers (docs/key-transparency.md), as the server writes
 * them and the client library reads them; docs/key-transparency.md describes each member. Bytes are
 * standard padded base64 unless said otherwise; sizes and indexes are JSON numbers.
 */

/** An issuer's signed statement, as `register` and `POST /issuers/escrow-keys` take it and lookup answers it. */
export interface KtBinding {
  /** Base64 of the statement's exact bytes (RFC 8785 canonical JSON, UTF-8). */
  statement: string;
  /** Base64 of the 64-byte signature (Ed25519, or P-256 raw r || s). */
  signature: string;
  /** The signing key, `sk_` + 32 hex digits (see `signingKeyIdOf`). */
  signingKeyId: string;
}

/** Where the statement's leaf is in the log. */
export interface KtProof {
  leafIndex: number;
  /** Equals the checkpoint's size. */
  treeSize: number;
  /** Base64 hashes, RFC 9162 inclusion proof order. */
  inclusion: string[];
  /** The signed checkpoint note (C2SP), with the log's signature and every cosignature. */
  checkpoint: string;
}

/** The directory snapshot the answer was made under, proven under the same checkpoint. */
export interface KtDirectoryProof {
  /** Leaf index of the snapshot. */
  index: number;
  /** Base64 hashes of its inclusion proof in the checkpoint's tree. */
  inclusion: string[];
  /** Lower-case hex SHA-256 of the snapshot's JSON: `GET /kt/v1/directory/{sha256}` serves it (immutable). */
  sha256: string;
}

/**
 * What `POST /api/v1/keys/lookup` answers (and `register`, about the registered key), the
 * key-transparency members beside `keyId`, `algorithm`, `publicKey`, `isEscrowed`. `binding`,
 * `opening` and `proof` are absent only for the service's own escrow key, which nobody signs.
 */
export interface KtLookupAnswer {
  keyId: string;
  algorithm: string;
  /** Base64 SPKI DER of the key to seal to. */
  publicKey: string;
  isEscrowed: boolean;
  binding?: KtBinding;
  /** Base64 of the 16-byte opening of the statement's commitment. */
  opening?: string;
  proof?: KtProof;
  directory: KtDirectoryProof;
  /** The checkpoint note, when there is no `proof` (service escrow); otherwise `proof.checkpoint`. */
  checkpoint?: string;
  /**
   * The `receipts.v1/signing-key` statement (role `root`) by which the issuer's previous root
   * introduced its current one, signed by that previous root: a verifier that already counts the
   * previous root counts the new one at once (`kt/root-delay.ts`). Absent for a first or recovery root.
   */
  rootRotation?: KtBinding;
}

/** One leaf as `GET /kt/v1/entries` serves it to issuers and auditors: base64 of its bytes. */
export interface KtEntry {
  index: number;
  leaf: string;
}

/** One of its own leaves as `GET /api/v1/kt/entries` (ListKtEntries) opens it to an issuer. */
export interface KtOpenedEntry {
  index: number;
  /** Base64 of the statement without `cardRef` (the issuer adds its own card reference back); "" when erased. */
  statementWithoutCardRef: string;
  /** Base64 of the 16-byte opening; "" when erased. */
  opening: string;
  signingKeyId: string;
  /** The user it was registered for; "" for a statement about no card (and when erased). */
  userId: string;
  /** An erasure removed the statement and opening; the leaf stays. */
  erased?: boolean;
}
