import { AppError } from "../../errors.js";
import { fromBase64Strict } from "../../kt/bytes.js";
import { nodeEngine, nodeSha256 } from "../../kt/node-engine.js";
import { parseVkey } from "../../kt/note.js";
import type { ParsedPolicy } from "../../kt/policy.js";
import { type KnownCard, VerifierCache, verifyUnderCheckpoint } from "../../kt/verify.js";
import type { KtLookupAnswer } from "../../kt/wire.js";
import { sequenceName } from "../../store/kt-sequence.js";
import type { DomainDeps } from "../deps.js";
import { answerOf, type CardRef, cardKeyOfRef, type LookedUpKey, type Recipient } from "../routing.js";
import { spkiSha256Of } from "./bindings.js";

/**
 * Server-side sealing's check of the key it seals to (docs/key-transparency.md, "Server-side
 * sealing"): for a card whose issuer (or, for escrow, whose BIN owner) set `requireBindings`, encrypt
 * and create seal only to a key the key log vouches for, checked by the merchant's own verifier
 * (`verifyUnderCheckpoint`) against the service's latest checkpoint and the snapshot under it: the
 * issuer's signed binding of exactly this card and key (or its signed escrow key), its rebuilt leaf
 * included, its window current, its signer current for the owner of the card's BIN. A key row
 * changed in the store behind the log's back is refused with `integrity_failure`, before anything
 * is sealed or written. The witnesses are the merchant's business: the service trusts its own log
 * key (the checkpoint's signature is still checked, so a store writer cannot forge a checkpoint).
 */

/** What the service's own trust is made of, per key log: its log key, and the verifier's caches. */
interface ServiceTrust {
  policy: ParsedPolicy;
  cache: VerifierCache;
}

const trusts = new WeakMap<object, ServiceTrust>();

function trustOf(kt: DomainDeps["kt"]): ServiceTrust {
  const known = trusts.get(kt);
  if (known !== undefined) return known;
  const logKey = parseVkey(kt.vkey);
  if (logKey === undefined) throw new AppError("internal_server_error", "The key log's vkey does not parse.");
  const trust: ServiceTrust = {
    policy: {
      // The service's own escrow key is its own: it is checked against the snapshot, never refused as such.
      policy: {
        origin: kt.origin,
        logKey: kt.vkey,
        operator: "",
        witnesses: [],
        quorum: 0,
        allowServiceEscrow: true,
        maxBindingDays: kt.maxBindingDays,
        // The root delay guards a merchant against roots the operator slips in; the service checking
        // its own log against store writers has no such wait (the operator confirmed the root).
        rootDelaySeconds: 0,
      },
      logKey,
      witnesses: [],
    },
    cache: new VerifierCache(),
  };
  trusts.set(kt, trust);
  return trust;
}

/** The tenant whose `requireBindings` decides: the card's issuer, or the owner of the escrow. */
function tenantOf(recipient: Recipient): string | undefined {
  return recipient.kind === "user" ? recipient.user.tenantId : recipient.ownerTenantId;
}

/**
 * Refuses with `integrity_failure` (nothing sealed, nothing written) when the tenant of `recipient`
 * set `requireBindings` and its key does not verify against the key log; does nothing otherwise.
 */
export async function checkSealingKey(deps: DomainDeps, card: CardRef, recipient: Recipient): Promise<void> {
  const tenant = tenantOf(recipient);
  if (tenant === undefined) return;
  if ((await deps.store.ktIssuers.get(tenant))?.requireBindings !== true) return;
  const problem = await sealingKeyProblem(deps, card, recipient);
  if (problem === undefined) return;
  if (await awaitingCheckpoint(deps, card, recipient, problem.answered)) {
    throw new AppError(
      "service_unavailable",
      "The recipient's key was registered moments ago and the key log has not put its binding under a checkpoint yet; nothing was sealed. Send the request again shortly.",
      { retryAfterSeconds: 2, metadata: { check: problem.check } },
    );
  }
  throw new AppError(
    "integrity_failure",
    `The recipient's key does not verify against the key directory (${problem.check}: ${problem.reason}); nothing was sealed.`,
    { metadata: { check: problem.check } },
  );
}

/**
 * Whether a refused key is one the log will vouch for once its sequencer has run (the window between
 * a registration's store step and the checkpoint over its leaf, which waiting closes): the sequence
 * of the key (the card's, or the escrow owner's) took a statement newer than the one the answer
 * proved (`answered`, 0 for none), and for a card that statement binds exactly this key (keyId and
 * SPKI hash). A key row swapped behind the log's back matches no statement the sequence took, so it
 * stays `integrity_failure`; a store writer who also rewrote the sequence gets a refusal all the same.
 */
async function awaitingCheckpoint(
  deps: DomainDeps,
  card: CardRef,
  recipient: Recipient,
  answered: number,
): Promise<boolean> {
  if (recipient.kind === "user") {
    const state = await deps.store.ktLog.sequenceState(sequenceName.card(cardKeyOfRef(deps, card)));
    const active = state?.active ?? null;
    return (
      state !== undefined &&
      state.version > answered &&
      active?.keyId === recipient.key.keyId &&
      active.spkiSha256 === spkiSha256Of(recipient.key.spki)
    );
  }
  const owner = recipient.ownerTenantId;
  if (owner === undefined || deps.escrowKeys.some((k) => k.keyId === recipient.key.keyId)) return false;
  const state = await deps.store.ktLog.sequenceState(sequenceName.escrow(owner));
  return state !== undefined && state.version > answered;
}

/** The `version` of an answer's statement (base64 JSON), 0 without one or when it does not parse. */
function versionOf(statement: string | undefined): number {
  const version = memberOf(statement, "version");
  return typeof version === "number" ? version : 0;
}

/**
 * Why the key of `recipient` does not verify, or undefined when it does; `answered` is the version of
 * the statement the answer carried (0 for none).
 */
async function sealingKeyProblem(
  deps: DomainDeps,
  card: CardRef,
  recipient: Recipient,
): Promise<{ check: string; reason: string; answered: number } | undefined> {
  const problem = await verifyAnswer(deps, card, recipient);
  return problem === undefined ? undefined : { ...problem.failure, answered: versionOf(problem.statement) };
}

/** The verifier's refusal of the answer look-up would give for `recipient`, with that answer's statement. */
async function verifyAnswer(
  deps: DomainDeps,
  card: CardRef,
  recipient: Recipient,
): Promise<{ failure: { check: string; reason: string }; statement: string | undefined } | undefined> {
  const answer = wireOf(await answerOf(deps, card, recipient));
  const failure = await verdictOf(deps, card, recipient, answer);
  return failure === undefined ? undefined : { failure, statement: answer?.binding?.statement };
}

/** Why `answer` does not vouch for the key of `recipient`, or undefined when it does. */
async function verdictOf(
  deps: DomainDeps,
  card: CardRef,
  recipient: Recipient,
  answer: KtLookupAnswer | undefined,
): Promise<{ check: string; reason: string } | undefined> {
  const note = answer?.proof?.checkpoint ?? answer?.checkpoint;
  if (answer === undefined || note === undefined) {
    return { check: "checkpoint", reason: "no checkpoint of the key log covers the key yet" };
  }
  const directory = await deps.store.ktLog.directory(answer.directory.sha256);
  if (directory === undefined) return { check: "directory", reason: "the snapshot is not stored" };
  const { policy, cache } = trustOf(deps.kt);
  const signed = cache.checkpoint(policy, note, nodeEngine);
  if (!signed.ok) return { check: "checkpoint", reason: signed.reason };
  const spki = fromBase64Strict(recipient.key.spki);
  if (spki === undefined) return { check: "key", reason: "the key is not base64" };
  const verdict = verifyUnderCheckpoint(
    policy,
    { checkpoint: signed.value.checkpoint, text: signed.value.text, witnessedAt: 0 },
    {
      answer,
      card: knownCardOf(card, recipient, answer),
      sealTo: { keyId: recipient.key.keyId, algorithm: recipient.key.algorithm, spki },
      directoryJson: directory.json,
      now: deps.clock.now().getTime(),
    },
    { engine: nodeEngine, sha256: nodeSha256, cache },
  );
  return verdict.ok ? undefined : { check: verdict.check, reason: verdict.reason };
}

/** A look-up answer in the verifier's wire shape (indexes as numbers), or undefined without a snapshot. */
function wireOf(key: LookedUpKey): KtLookupAnswer | undefined {
  if (key.directory === undefined) return undefined;
  const answer: KtLookupAnswer = {
    keyId: key.keyId,
    algorithm: key.algorithm,
    publicKey: key.publicKey,
    isEscrowed: key.isEscrowed,
    directory: { ...key.directory, index: Number(key.directory.index) },
  };
  if (key.binding !== undefined) answer.binding = key.binding;
  if (key.opening !== undefined) answer.opening = key.opening;
  if (key.checkpoint !== undefined) answer.checkpoint = key.checkpoint;
  if (key.proof !== undefined) {
    answer.proof = {
      ...key.proof,
      leafIndex: Number(key.proof.leafIndex),
      treeSize: Number(key.proof.treeSize),
    };
  }
  return answer;
}

/**
 * The card as the verifier takes it: the reference the request named, and its BIN: the request's
 * `cardBin`, else the one the issuer's signed binding names (whose owner the snapshot must then be
 * the signer; a store writer cannot change what the issuer signed).
 */
function knownCardOf(card: CardRef, recipient: Recipient, answer: KtLookupAnswer): KnownCard {
  const par = card.recipientPar ?? "";
  const cardRef = par === "" ? { hashedPan: card.recipientHashedPan.toLowerCase() } : { par };
  const digits =
    card.cardBin ?? (recipient.kind === "user" ? binOfStatement(answer.binding?.statement) : undefined);
  return digits === undefined ? { cardRef } : { cardRef, bin: { digits, kind: "bin" } };
}

function binOfStatement(statement: string | undefined): string | undefined {
  const bin = memberOf(statement, "bin");
  return typeof bin === "string" ? bin : undefined;
}

/** One member of a statement given as base64 JSON, or undefined. */
function memberOf(statement: string | undefined, member: string): unknown {
  if (statement === undefined) return undefined;
  try {
    return (JSON.parse(Buffer.from(statement, "base64").toString("utf8")) as Record<string, unknown>)[member];
  } catch {
    return undefined;
  }
}
