import { concat, utf8 } from "./bytes.js";
import { defaultSha256, type Sha256 } from "./hash.js";
import { signerHashOf } from "./signatures.js";

/**
 * The log's leaf bytes (docs/key-transparency.md). A verifier always rebuilds them from what it checked (the
 * statement, the opening, the signing key, the card reference) and never takes them from the service:
 *
 * - `0x01 || signerHash || commitment`: a statement about a hashed-PAN card, or about no card;
 * - `0x02 || signerHash || commitment || parTag`: a statement whose `cardRef` is a PAR;
 * - `0x03 || RFC 8785 JSON`: a directory snapshot;
 *
 * with `signerHash` the first 8 bytes of SHA-256 of the signing key's SPKI, `commitment` =
 * SHA-256("receipts.v1 kt commit" || opening || statement) over a 16-byte random opening (so the leaf
 * says nothing about the statement to whoever lacks the opening), and `parTag` = SHA-256("receipts.v1
 * par tag" || PAR) (so an issuer's monitor can find every leaf about its PAR cards, whoever signed).
 */

export const LEAF_STATEMENT = 0x01;
export const LEAF_PAR_STATEMENT = 0x02;
export const LEAF_DIRECTORY = 0x03;

/** Bytes of an opening. */
export const OPENING_BYTES = 16;

const COMMIT_LABEL = utf8("receipts.v1 kt commit");
const PAR_TAG_LABEL = utf8("receipts.v1 par tag");

/** The commitment to a statement's bytes under a 16-byte opening. */
export function commitmentOf(
  opening: Uint8Array,
  statement: Uint8Array,
  sha256: Sha256 = defaultSha256,
): Uint8Array {
  if (opening.length !== OPENING_BYTES) throw new RangeError(`an opening is ${OPENING_BYTES} bytes`);
  return sha256(concat(COMMIT_LABEL, opening, statement));
}

/** The tag of a PAR (its ASCII bytes). */
export function parTagOf(par: string, sha256: Sha256 = defaultSha256): Uint8Array {
  return sha256(concat(PAR_TAG_LABEL, utf8(par)));
}

/** What a statement's leaf is made of. */
export interface StatementLeafInput {
  /** SPKI DER of the key that signed the statement. */
  signerSpki: Uint8Array;
  opening: Uint8Array;
  /** The statement's exact bytes (its canonical JSON in UTF-8). */
  statement: Uint8Array;
  /** The PAR, when the statement's `cardRef` is one. */
  par?: string | undefined;
}

/** The leaf bytes of a signed statement. */
export function statementLeaf(input: StatementLeafInput, sha256: Sha256 = defaultSha256): Uint8Array {
  const signerHash = signerHashOf(input.signerSpki, sha256);
  const commitment = commitmentOf(input.opening, input.statement, sha256);
  if (input.par === undefined) return concat(new Uint8Array([LEAF_STATEMENT]), signerHash, commitment);
  return concat(new Uint8Array([LEAF_PAR_STATEMENT]), signerHash, commitment, parTagOf(input.par, sha256));
}

/** The leaf bytes of a directory snapshot, from its canonical JSON. */
export function directoryLeaf(snapshotJson: string): Uint8Array {
  return concat(new Uint8Array([LEAF_DIRECTORY]), utf8(snapshotJson));
}

/** A leaf taken apart (for monitors), or undefined when the bytes are no leaf of ours. */
export type ParsedLeaf =
  | { kind: "statement"; signerHash: Uint8Array; commitment: Uint8Array }
  | { kind: "par-statement"; signerHash: Uint8Array; commitment: Uint8Array; parTag: Uint8Array }
  | { kind: "directory"; json: Uint8Array };

/** Takes leaf bytes apart by their first byte and length. */
export function parseLeaf(leaf: Uint8Array): ParsedLeaf | undefined {
  if (leaf[0] === LEAF_STATEMENT && leaf.length === 41) {
    return { kind: "statement", signerHash: leaf.slice(1, 9), commitment: leaf.slice(9, 41) };
  }
  if (leaf[0] === LEAF_PAR_STATEMENT && leaf.length === 73) {
    return {
      kind: "par-statement",
      signerHash: leaf.slice(1, 9),
      commitment: leaf.slice(9, 41),
      parTag: leaf.slice(41),
    };
  }
  if (leaf[0] === LEAF_DIRECTORY && leaf.length > 1) return { kind: "directory", json: leaf.slice(1) };
  return undefined;
}
