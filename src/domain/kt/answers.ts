import { AppError } from "../../errors.js";
import { base64, utf8 } from "../../kt/bytes.js";
import { withCardRef } from "../../kt/statements.js";
import type { KtLeafRecord } from "../../store/kt-types.js";
import type { DomainDeps } from "../deps.js";
import type { KtAnswerProofs } from "./log.js";
import { Lru } from "./tile-cache.js";

/**
 * The key-directory members of a lookup, self-check or register answer (docs/key-transparency.md,
 * "Answers on the wire"), in the shape of the generated messages (`KtBinding`, `KtLeafProof`,
 * `KtDirectoryProof`): bytes in base64 as the log keeps them (no decoding and encoding again per
 * answer), indexes as int64. The merchant rebuilds and checks all of it;
 * nothing here is trusted by anyone but the service's own callers.
 */
export interface KtAnswerFields {
  /** Base64 of the statement's bytes and of the signature, as register takes a binding. */
  binding?: { statement: string; signature: string; signingKeyId: string };
  /** Base64 of the opening. */
  opening?: string;
  /** Inclusion hashes in base64, as the log serves them. */
  proof?: { leafIndex: bigint; treeSize: bigint; inclusion: string[]; checkpoint: string };
  directory?: { index: bigint; inclusion: string[]; sha256: string };
  checkpoint?: string;
  /**
   * With `binding`, when the signing issuer's current root was introduced by a rotation: the
   * statement by which its previous root introduced it (`KtSigningKeyRecord.introduction`), so that a
   * merchant counting the previous root counts the new one at once (`kt/root-delay.ts`).
   */
  rootRotation?: { statement: string; signature: string; signingKeyId: string };
}

/** The key an answer names, and where its logged statement would be. */
export type AnswerSubject =
  /** A cardholder's key: the card's latest statement, rebuilt with the card reference asked for. */
  | { kind: "card"; cardKey: string; cardRef: string; keyId: string }
  /** An issuer escrow key: the tenant's latest escrow-key statement. */
  | { kind: "escrow"; tenantId: string; keyId: string }
  /** The service's own escrow key: nobody signs it; the snapshot lists it. */
  | { kind: "service-escrow" };

/**
 * The members for `subject`, all under one checkpoint: its statement when the log holds one for
 * exactly this key (else none, and a merchant's trust refuses the key), and for escrow the snapshot
 * and checkpoint alone. An empty object when there is nothing to prove, or when the log has no
 * checkpoint covering the statement yet (a lookup never fails on the log's account).
 */
export async function ktAnswerFields(
  deps: Pick<DomainDeps, "kt" | "store">,
  subject: AnswerSubject,
): Promise<KtAnswerFields> {
  if (subject.kind === "service-escrow") return directoryOnly(deps);
  const sequence = subject.kind === "card" ? `card:${subject.cardKey}` : `escrow:${subject.tenantId}`;
  const leaf = await deps.store.ktLog.lastOfSequence(sequence);
  const statement = leaf === undefined ? undefined : statementOf(leaf, subject);
  if (leaf === undefined || statement === undefined) {
    return subject.kind === "escrow" ? directoryOnly(deps) : {};
  }
  const proofs = await proofsOrNone(deps, leaf.index);
  if (proofs?.proof === undefined) return {};
  const tenantId = subject.kind === "card" ? leaf.tenantId : subject.tenantId;
  return { ...statement, ...proofFields(proofs), ...(await rootRotationOf(deps.store, tenantId)) };
}

/**
 * `rootRotation` for an answer about a statement of `tenantId`: the introduction its current root
 * keeps when a rotation introduced it; nothing for a first or recovery root (or no tenant).
 */
export async function rootRotationOf(
  store: Pick<DomainDeps["store"], "ktIssuers">,
  tenantId: string | undefined,
): Promise<Pick<KtAnswerFields, "rootRotation">> {
  if (tenantId === undefined) return {};
  const record = await store.ktIssuers.get(tenantId);
  const root = record?.signingKeys.find((k) => k.role === "root" && k.status === "current");
  return root?.introduction === undefined ? {} : { rootRotation: { ...root.introduction } };
}

/** The members of an answer from the proofs `KtLog.waitForLeaf` gave (register), about `binding`. */
export function registeredFields(
  binding: { statement: string; signature: string; signingKeyId: string },
  opening: string,
  proofs: KtAnswerProofs,
): KtAnswerFields {
  return { binding, opening, ...proofFields(proofs) };
}

/**
 * The statement of `leaf` when it is a statement of `subject`'s kind about exactly its key: a card's
 * key binding (an erasure, a revocation or a binding of another key give none), or an escrow key's.
 */
function statementOf(
  leaf: KtLeafRecord,
  subject: Exclude<AnswerSubject, { kind: "service-escrow" }>,
): Pick<KtAnswerFields, "binding" | "opening"> | undefined {
  const wanted = subject.kind === "card" ? "receipts.v1/key-binding" : "receipts.v1/escrow-key";
  if (leaf.type !== wanted || leaf.statement === undefined || leaf.signingKeyId === undefined) {
    return undefined;
  }
  if (leaf.signature === undefined || leaf.opening === undefined) return undefined;
  const cardRef = subject.kind === "card" ? subject.cardRef : "";
  const key = `${leaf.index}/${subject.kind}/${cardRef}`;
  const kept = statements.get(key);
  // The leaf record is read fresh each time: an erased leaf has no statement and never gets here,
  // and an entry is used only for the very statement, signature and opening it was made from.
  if (
    kept !== undefined &&
    kept.statement === leaf.statement &&
    kept.keyId === subject.keyId &&
    // secret-compare: a published statement signature, checked to match the cache entry, not a secret.
    kept.fields.binding?.signature === leaf.signature &&
    kept.fields.binding.signingKeyId === leaf.signingKeyId &&
    kept.fields.opening === leaf.opening
  ) {
    return kept.fields;
  }
  let keyId: unknown;
  try {
    keyId = (JSON.parse(leaf.statement) as { keyId?: unknown }).keyId;
  } catch {
    return undefined;
  }
  if (keyId !== subject.keyId) return undefined;
  const statement =
    subject.kind === "card" ? withCardRef(leaf.statement, subject.cardRef) : utf8(leaf.statement);
  // Frozen: answers share them.
  const fields = Object.freeze({
    binding: Object.freeze({
      statement: base64(statement),
      signature: leaf.signature,
      signingKeyId: leaf.signingKeyId,
    }),
    opening: leaf.opening,
  });
  statements.set(key, { statement: leaf.statement, keyId, fields });
  return fields;
}

/**
 * Statements rebuilt for answers (with the card reference asked for, in base64), by leaf, kind and card
 * reference: a pure function of the leaf's stored statement, signature and opening, checked on every
 * use, so one bounded map serves every service in the process.
 */
const statements = new Lru<
  string,
  { statement: string; keyId: string; fields: Required<Pick<KtAnswerFields, "binding" | "opening">> }
>(4_096);

/** The snapshot and checkpoint alone (escrow answers), or nothing while the log has no checkpoint. */
async function directoryOnly(deps: Pick<DomainDeps, "kt">): Promise<KtAnswerFields> {
  const proofs = await proofsOrNone(deps, undefined);
  return proofs === undefined ? {} : proofFields(proofs);
}

async function proofsOrNone(
  deps: Pick<DomainDeps, "kt">,
  leafIndex: number | undefined,
): Promise<KtAnswerProofs | undefined> {
  try {
    return await deps.kt.proofs(leafIndex === undefined ? {} : { leafIndex });
  } catch (err) {
    if (err instanceof AppError && err.code === "service_unavailable") return undefined;
    throw err;
  }
}

function proofFields(proofs: KtAnswerProofs): KtAnswerFields {
  const fields: KtAnswerFields = {
    directory: {
      index: BigInt(proofs.directory.index),
      inclusion: proofs.directory.inclusion,
      sha256: proofs.directory.sha256,
    },
  };
  if (proofs.proof === undefined) fields.checkpoint = proofs.checkpoint;
  else {
    fields.proof = {
      leafIndex: BigInt(proofs.proof.leafIndex),
      treeSize: BigInt(proofs.proof.treeSize),
      inclusion: proofs.proof.inclusion,
      checkpoint: proofs.proof.checkpoint,
    };
  }
  return fields;
}
