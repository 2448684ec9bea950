import { createHash } from "node:crypto";
import { KT_TIMES } from "../../config-kt.js";
import { AppError } from "../../errors.js";
import { base64, base64url, bytesEqual, fromBase64Strict } from "../../kt/bytes.js";
import {
  type EscrowKeyStatement,
  isCurrent,
  type KeyBinding,
  parseTime,
  withoutCardRef,
} from "../../kt/statements.js";
import { erasedStatementSha256 } from "../../store/kt-sequence.js";
import type { CardRefKind, KtPendingStatement, KtSequenceState } from "../../store/kt-types.js";
import type { DomainDeps } from "../deps.js";
import { type KtAnswerFields, registeredFields, rootRotationOf } from "./answers.js";
import {
  checkOrder,
  decodeSigned,
  expectMember,
  fieldError,
  type SignedInput,
  storeSigningKeys,
  type VerifiedStatement,
  verifySigned,
} from "./signed.js";
import { orderOf } from "./statement-check.js";

/**
 * Key bindings on `register` (docs/key-transparency.md): an issuer's `receipts.v1/key-binding`
 * statement, signed by a current signing key of the caller's tenant, that says which key a card is
 * sealed to; and on `POST /issuers/escrow-keys` its `receipts.v1/escrow-key` statement. The service checks the signature (`signed.ts`) and every member against the request,
 * and hands the pending record to the registration's store step, which writes both or neither; the
 * sequencer appends its leaf. With `requireBindings` a tenant's unsigned registrations are refused.
 */

/** What the request says, which the binding must say too. */
export interface BindingExpectation {
  tenantId: string;
  /** The card: its kind (the leaf), the reference the request gave, and its keyed reference. */
  card: { kind: CardRefKind; ref: string; key: string };
  keyId: string;
  algorithm: string;
  /** Base64 SPKI DER of the key being registered. */
  spki: string;
  /** The request's `cardBin`, when it gave one. */
  cardBin: string | undefined;
  /** The user the registration is for (the existing user of the card, or the one it creates). */
  userId: string;
  /** The request's field that carries the binding (`binding`, or `parBinding` for a card's PAR). */
  field?: string;
}

/** The unpadded base64url SHA-256 of a base64 SPKI, as statements write `spkiSha256`. */
export function spkiSha256Of(spkiBase64: string): string {
  return base64url(new Uint8Array(createHash("sha256").update(Buffer.from(spkiBase64, "base64")).digest()));
}

/** `forbidden` when the tenant requires bindings and `binding` is absent. */
export async function requireBindingIfSet(
  deps: Pick<DomainDeps, "store">,
  tenantId: string,
  binding: SignedInput | undefined,
  what: string,
): Promise<void> {
  if (binding !== undefined) return;
  if ((await deps.store.ktIssuers.get(tenantId))?.requireBindings === true) {
    throw new AppError("forbidden", `This issuer requires a signed binding with every ${what}.`, {
      violations: [{ field: "binding", description: "is required: the issuer set requireBindings" }],
    });
  }
}

/**
 * The same statement as one the card's sequence took before (same bytes, signature and signing key):
 * a register sent again after its first call gave up waiting for the leaf (`service_unavailable`).
 * `logged`: its leaf is appended (the retry waits for a checkpoint over it and answers its proofs);
 * `queued`: the sequence took this version for this key and its leaf is not appended yet.
 */
export type BindingTakenBefore = { kind: "logged"; pendingId: string; opening: string } | { kind: "queued" };

/** A binding checked against its register request: a new statement to log, or one the log took before. */
export type CheckedBinding = {
  statement: KeyBinding;
  bytes: Uint8Array;
  signature: Uint8Array;
  signingKeyId: string;
} & (
  | { pending: KtPendingStatement; before?: undefined }
  | { pending?: undefined; before: BindingTakenBefore }
);

/**
 * Checks a register request's `binding` against the request, and answers its pending record (for the
 * store step) and the statement; or, when the card's sequence took exactly this statement before (a
 * retry), where it is ({@link BindingTakenBefore}). Refusals: see `signed.ts`; a member that does not
 * say what the request says is `invalid_request` naming `binding.statement.<member>`.
 */
export async function checkKeyBinding(
  deps: DomainDeps,
  binding: SignedInput,
  expected: BindingExpectation,
): Promise<CheckedBinding> {
  const name = expected.field ?? "binding";
  const decoded = decodeSigned(binding, name);
  const checked = await verifySigned(
    expected.tenantId,
    decoded,
    storeSigningKeys(deps.store),
    name,
    deps.kt.maxBindingDays,
  );
  const statement = expectBinding(checked, expected, deps.clock.now().getTime());
  const order = orderOf(statement, expected.card);
  const state = await deps.store.ktLog.sequenceState(order.sequence);
  const { bytes, signature, signingKeyId } = checked;
  const signed = { statement, bytes, signature, signingKeyId };
  const before = await takenBefore(deps, state, order.sequence, { ...signed, expected });
  if (before !== undefined) return { ...signed, before };
  await refuseErased(deps, bytes, name);
  checkOrder(state, order, `${name}.statement.version`);
  const pending = deps.kt.pendingStatement({
    tenantId: expected.tenantId,
    statement,
    bytes: checked.bytes,
    signature: checked.signature,
    signingKeyId: checked.signingKeyId,
    card: expected.card,
    userId: expected.userId,
  });
  return { ...signed, pending };
}

/**
 * Whether the card's sequence took this very statement before ({@link BindingTakenBefore}): its last
 * accepted version is this one, for this key, and its leaf (once appended) holds the same bytes,
 * signature and signing key, from this tenant. Anything else is a new statement, checked in order.
 */
async function takenBefore(
  deps: Pick<DomainDeps, "store">,
  state: KtSequenceState | undefined,
  sequence: string,
  signed: { statement: KeyBinding; bytes: Uint8Array; signature: Uint8Array; signingKeyId: string } & {
    expected: BindingExpectation;
  },
): Promise<BindingTakenBefore | undefined> {
  const { statement } = signed;
  const active = state?.active ?? null;
  if (state?.version !== statement.version || active?.keyId !== statement.keyId) return undefined;
  if (active.spkiSha256 !== statement.spkiSha256) return undefined;
  const leaf = await deps.store.ktLog.lastOfSequence(sequence);
  if (leaf === undefined || (leaf.version ?? 0) < statement.version) return { kind: "queued" };
  const stored = leaf.signature === undefined ? undefined : fromBase64Strict(leaf.signature);
  const same =
    leaf.version === statement.version &&
    leaf.tenantId === signed.expected.tenantId &&
    leaf.signingKeyId === signed.signingKeyId &&
    leaf.statement === withoutCardRef(signed.bytes) &&
    stored !== undefined &&
    bytesEqual(stored, signed.signature);
  if (!same || leaf.pendingId === undefined || leaf.opening === undefined) return undefined;
  return { kind: "logged", pendingId: leaf.pendingId, opening: leaf.opening };
}

/** The binding as a register answer carries it: the verified bytes and signature, in base64. */
export function answeredBinding(checked: CheckedBinding): {
  statement: string;
  signature: string;
  signingKeyId: string;
} {
  const { bytes, signature, signingKeyId } = checked;
  return { statement: base64(bytes), signature: base64(signature), signingKeyId };
}

/** What an escrow-key request says, which its binding must say too. */
export interface EscrowKeyExpectation {
  tenantId: string;
  algorithm: string;
  /** Base64 SPKI DER of the escrow key being registered. */
  spki: string;
  /** The tenant's current escrow key, which the statement supersedes (null for none). */
  current: string | null;
}

/**
 * The escrowKeyId a statement may name: "iek_" and 8 to 64 letters, digits, '_' or '-' (the service's
 * own escrow keys are "esc_", so an issuer's statement can never name one of them).
 */
export const STATEMENT_ESCROW_KEY_ID = /^iek_[A-Za-z0-9_-]{8,64}$/;

/**
 * Checks a `POST /issuers/escrow-keys` request's `binding` (a `receipts.v1/escrow-key` statement)
 * against the request, as {@link checkKeyBinding} does a register's: the statement's `keyId` becomes
 * the escrowKeyId. Answers its pending record (for the key's store step) and the statement.
 */
export async function checkEscrowKeyBinding(
  deps: DomainDeps,
  binding: SignedInput,
  expected: EscrowKeyExpectation,
): Promise<{ pending: KtPendingStatement; statement: EscrowKeyStatement }> {
  const decoded = decodeSigned(binding, "binding");
  const checked = await verifySigned(
    expected.tenantId,
    decoded,
    storeSigningKeys(deps.store),
    "binding",
    deps.kt.maxBindingDays,
  );
  const statement = expectEscrowKey(checked, expected, deps.clock.now().getTime());
  const order = orderOf(statement);
  checkOrder(await deps.store.ktLog.sequenceState(order.sequence), order, "binding.statement.version");
  const pending = deps.kt.pendingStatement({
    tenantId: expected.tenantId,
    statement,
    bytes: checked.bytes,
    signature: checked.signature,
    signingKeyId: checked.signingKeyId,
  });
  return { pending, statement };
}

/** The statement as an escrow key of exactly the request's key, superseding the current one, current at `now`. */
function expectEscrowKey(
  checked: VerifiedStatement,
  expected: EscrowKeyExpectation,
  now: number,
): EscrowKeyStatement {
  const field = (member: string) => `binding.statement.${member}`;
  expectMember(field("type"), checked.statement.type, "receipts.v1/escrow-key", '"receipts.v1/escrow-key"');
  const statement = checked.statement as EscrowKeyStatement;
  if (!STATEMENT_ESCROW_KEY_ID.test(statement.keyId)) {
    throw fieldError(field("keyId"), "must be iek_ and 8 to 64 letters, digits, '_' or '-'");
  }
  expectMember(field("algorithm"), statement.algorithm, expected.algorithm, "the algorithm of publicKey");
  expectMember(
    field("spkiSha256"),
    statement.spkiSha256,
    spkiSha256Of(expected.spki),
    "the SHA-256 of publicKey",
  );
  expectMember(
    field("supersedes"),
    statement.supersedes,
    expected.current,
    expected.current === null ? "null: the tenant has no current escrow key" : "the current escrowKeyId",
  );
  checkWindow(statement, now, field);
  return statement;
}

/** `invalid_request` naming `notBefore` or `notAfter` unless the statement's window holds at `now`. */
function checkWindow(
  statement: { notBefore: string; notAfter: string },
  now: number,
  field: (member: string) => string,
): void {
  if (isCurrent(statement, now)) return;
  const early = (parseTime(statement.notBefore) ?? 0) > now;
  throw fieldError(field(early ? "notBefore" : "notAfter"), early ? "is still to come" : "has passed");
}

/** The statement as a key binding of exactly the request's card and key, current at `now`. */
function expectBinding(checked: VerifiedStatement, expected: BindingExpectation, now: number): KeyBinding {
  const field = (member: string) => `${expected.field ?? "binding"}.statement.${member}`;
  expectMember(field("type"), checked.statement.type, "receipts.v1/key-binding", '"receipts.v1/key-binding"');
  const statement = checked.statement as KeyBinding;
  const cardField = expected.card.kind === "par" ? "par" : "hashedPan";
  expectMember(field("cardRef"), statement.cardRef, expected.card.ref, `the request's ${cardField}`);
  expectMember(field("keyId"), statement.keyId, expected.keyId, "the request's keyId");
  expectMember(field("algorithm"), statement.algorithm, expected.algorithm, "the algorithm of publicKey");
  expectMember(
    field("spkiSha256"),
    statement.spkiSha256,
    spkiSha256Of(expected.spki),
    "the SHA-256 of publicKey",
  );
  if (expected.cardBin !== undefined) {
    expectMember(field("bin"), statement.bin, expected.cardBin, "the request's cardBin");
  }
  checkWindow(statement, now, field);
  return statement;
}

/**
 * Refuses a binding that an erasure removed from the log (`invalid_request` naming
 * `<field>.statement`). An erasure deletes the card's statements with its sequence, so the card's
 * next binding is version 1 again (nothing may keep a keyed reference of an erased card); without
 * this, whoever holds the issuer's API key could register a binding the issuer signed before the
 * erasure, still in its window, and merchants would seal to that old key.
 */
async function refuseErased(deps: DomainDeps, bytes: Uint8Array, field: string): Promise<void> {
  if (await deps.store.ktLog.statementErased(erasedStatementSha256(withoutCardRef(bytes)))) {
    throw fieldError(
      `${field}.statement`,
      "is a statement about a card that was erased since: the issuer signs a new binding to register the card again",
    );
  }
}

/**
 * What a register answer carries about its binding once the log holds it: the binding, its opening
 * and its proofs under a checkpoint the log signed (`KtLog.waitForLeaf`; a retry's leaf too). The
 * registration is stored before this runs, so a log that is slow to append it (longer than
 * `KT_LOG_WAIT_MS`), or a retry whose statement is still queued, is `service_unavailable` with a
 * Retry-After: the same request again (same binding) answers the proofs once the leaf is appended.
 */
export async function registeredAnswer(deps: DomainDeps, checked: CheckedBinding): Promise<KtAnswerFields> {
  const logged =
    checked.pending !== undefined
      ? { pendingId: checked.pending.id, opening: checked.pending.opening }
      : checked.before.kind === "logged"
        ? checked.before
        : undefined;
  if (logged === undefined) throw notLoggedYet();
  try {
    const proofs = await deps.kt.waitForLeaf(logged.pendingId, {
      witnessGraceMs: KT_TIMES.answerWitnessGraceMs,
    });
    return {
      ...registeredFields(answeredBinding(checked), logged.opening, proofs),
      ...(await rootRotationOf(deps.store, checked.statement.issuer)),
    };
  } catch (err) {
    if (err instanceof AppError && err.code === "service_unavailable") throw notLoggedYet(err);
    throw err;
  }
}

function notLoggedYet(cause?: AppError): AppError {
  return new AppError(
    "service_unavailable",
    "The registration is stored, but the key log has not logged its binding under a checkpoint yet. Send the same request again, with the same binding, for its proofs.",
    { retryAfterSeconds: cause?.retryAfterSeconds ?? 5, ...(cause === undefined ? {} : { cause }) },
  );
}
